// Orchestration of the solver (solver.h): validation, the attempt order
// (bundle lists x priorities) and the Decision. The steps of one attempt live
// in scheduler/internal/: candidates, slice_placer, gang_placer, matching,
// domains and diagnosis.
//
// Thread-safety: Solve() and ValidateRequest() are pure functions; a
// SolveRun lives inside one Solve() call.
#include "scheduler/solver.h"

#include <algorithm>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "base/quote.h"
#include "scheduler/internal/domains.h"
#include "scheduler/internal/gang_placer.h"
#include "scheduler/internal/slice_placer.h"
#include "scheduler/internal/snapshot_state.h"
#include "scheduler/internal/solver_util.h"
#include "scheduler/internal/topology.h"

namespace sliced::scheduler {
namespace {

using internal::Attempt;

// Runs the attempts of one request. Steps, per attempt:
//   1. Slice requests: SliceRequest + SlicePlacer (slice_placer.h).
//   2. Generic requests: PlaceGeneric (domains.h), which calls the gang
//      placer (gang_placer.h) per domain; with label domains PlaceTopology
//      (topology.h) around it.
class SolveRun {
 public:
  // REQUIRES: ValidateRequest(request) is OK; both outlive the run.
  SolveRun(const InventorySnapshot& snap, const PlacementRequest& request)
      : snap_(internal::StateOf(snap)),
        request_(request),
        released_(internal::ReleasedBy(snap, request.replacing_pg_id)) {}

  // One attempt: `bundles` on `priority` (may be null); `label` prefixes
  // the diagnosis step names.
  Attempt Run(const std::vector<Bundle>& bundles, const LabelSelector* priority,
              const std::string& label) const {
    if (request_.slice.has_value()) {
      const internal::SliceRequest slice(*request_.slice, bundles, priority);
      return internal::SlicePlacer(snap_, released_).Place(slice, label);
    }
    const internal::GangContext ctx{&snap_, &released_, request_.strategy,
                                    label, internal::kNumRanks};
    if (!request_.topology.empty()) {
      return internal::PlaceTopology(ctx, bundles, priority,
                                     request_.topology);
    }
    return internal::PlaceGeneric(ctx, bundles, priority);
  }

 private:
  const internal::SnapshotState& snap_;
  const PlacementRequest& request_;
  const internal::Released released_;
};

// "primary, priority 0 {sel}: " (empty with one list and no priorities).
std::string AttemptLabel(int lists, int f, const LabelSelector* priority,
                         int p) {
  std::string label;
  if (lists > 1) {
    absl::StrAppend(&label,
                    f == 0 ? "primary" : absl::StrCat("fallback ", f - 1));
  }
  if (priority != nullptr) {
    absl::StrAppend(&label, label.empty() ? "" : ", ", "priority ", p, " ",
                    SelectorToString(*priority));
  }
  if (!label.empty()) label += ": ";
  return label;
}

absl::Status ValidateBundles(const std::vector<Bundle>& bundles,
                             absl::string_view field, bool slice) {
  for (size_t b = 0; b < bundles.size(); ++b) {
    if (!slice && bundles[b].resources.empty()) {
      return absl::InvalidArgumentError(
          absl::StrCat(field, "[", b, "].resources: must not be empty"));
    }
    for (const auto& [name, amount] : bundles[b].resources) {
      if (amount < 0) {
        return absl::InvalidArgumentError(absl::StrCat(
            field, "[", b, "].resources[", name, "]: must be >= 0"));
      }
    }
    if (slice && !bundles[b].pinned_node_id.empty()) {
      return absl::InvalidArgumentError(absl::StrCat(
          field, "[", b,
          "].pinned_node_id: not allowed with a slice requirement (slices are "
          "re-placed whole)"));
    }
  }
  return absl::OkStatus();
}

bool IsSpread(Strategy s) {
  return s == Strategy::kSpread || s == Strategy::kStrictSpread;
}

// The levels alone (labels, strategies, group sizes >= 0).
absl::Status ValidateTopologyLevels(const std::vector<TopologyLevel>& levels) {
  if (levels.size() > kMaxTopologyLevels) {
    return absl::InvalidArgumentError(
        absl::StrCat("topology_strategy: at most ", kMaxTopologyLevels,
                     " levels, got ", levels.size()));
  }
  for (size_t i = 0; i < levels.size(); ++i) {
    const TopologyLevel& level = levels[i];
    const std::string field = absl::StrCat("topology_strategy[", i, "]");
    if (level.label == kLabelNodeId) {
      return absl::InvalidArgumentError(absl::StrCat(
          field, ".label: ", kLabelNodeId,
          " is the node level; give its strategy as the group's strategy"));
    }
    absl::Status s = ValidateLabelKey(level.label);
    if (!s.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat(field, ".label: ", s.message()));
    }
    for (size_t j = 0; j < i; ++j) {
      if (levels[j].label == level.label) {
        return absl::InvalidArgumentError(
            absl::StrCat(field, ".label: \"", level.label,
                         "\" is already level ", j));
      }
    }
    if (level.bundles_per_domain < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat(field, ".bundles_per_domain: must be >= 0, got ",
                       level.bundles_per_domain));
    }
    if (level.bundles_per_domain > 0 && IsSpread(level.strategy)) {
      return absl::InvalidArgumentError(absl::StrCat(
          field, ".bundles_per_domain: only with PACK or STRICT_PACK (",
          StrategyName(level.strategy), " puts every bundle in its own domain)"));
    }
  }
  return absl::OkStatus();
}

// Every level's bundles_per_domain divides the bundles of each domain above
// it, for a list of `count` bundles.
absl::Status ValidateTopologyGroups(const std::vector<TopologyLevel>& levels,
                                    size_t count, absl::string_view list) {
  size_t above = count;
  for (size_t i = 0; i < levels.size(); ++i) {
    const int k = levels[i].bundles_per_domain;
    if (k > 0 && above % static_cast<size_t>(k) != 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          "topology_strategy[", i, "].bundles_per_domain: ", k,
          " does not divide the ", above, " bundles of each domain above it (",
          list, ")"));
    }
    if (k > 0) above = static_cast<size_t>(k);
    if (IsSpread(levels[i].strategy)) above = 1;
  }
  return absl::OkStatus();
}

}  // namespace

absl::string_view StrategyName(Strategy strategy) {
  switch (strategy) {
    case Strategy::kPack:
      return "PACK";
    case Strategy::kSpread:
      return "SPREAD";
    case Strategy::kStrictPack:
      return "STRICT_PACK";
    case Strategy::kStrictSpread:
      return "STRICT_SPREAD";
  }
  return "UNKNOWN";
}

absl::string_view SubslicingName(Subslicing subslicing) {
  switch (subslicing) {
    case Subslicing::kNever:
      return "NEVER";
    case Subslicing::kIfNoExactShape:
      return "IF_NO_EXACT_SHAPE";
    case Subslicing::kAllowed:
      return "ALLOWED";
  }
  return "UNKNOWN";
}

absl::string_view OutcomeName(Decision::Outcome outcome) {
  switch (outcome) {
    case Decision::kPlaced:
      return "PLACED";
    case Decision::kUnschedulable:
      return "UNSCHEDULABLE";
    case Decision::kInfeasible:
      return "INFEASIBLE";
  }
  return "UNKNOWN";
}

absl::Status ValidateRequest(const PlacementRequest& request) {
  const bool slice = request.slice.has_value();
  if (!slice && request.bundles.empty()) {
    return absl::InvalidArgumentError(
        "bundles: at least one bundle is required");
  }
  absl::Status s = ValidateBundles(request.bundles, "bundles", slice);
  if (!s.ok()) return s;
  for (size_t f = 0; f < request.fallbacks.size(); ++f) {
    // The API's field (sliced.v1 CreatePlacementGroupRequest).
    const std::string field =
        absl::StrCat("fallback_strategy[", f, "].bundles");
    // (A slice requirement's primary list may be empty: one default bundle
    // per host. A fallback is another list of bundles, never that again.)
    if (request.fallbacks[f].empty()) {
      return absl::InvalidArgumentError(absl::StrCat(
          field, ": at least one bundle is required",
          slice ? " (with a slice requirement, one per host)" : ""));
    }
    s = ValidateBundles(request.fallbacks[f], field, slice);
    if (!s.ok()) return s;
  }
  if (!request.topology.empty()) {
    if (slice) {
      return absl::InvalidArgumentError(
          "topology_strategy: not allowed with a slice requirement (a slice "
          "request already keeps each slice whole and its slices apart)");
    }
    s = ValidateTopologyLevels(request.topology);
    if (!s.ok()) return s;
    s = ValidateTopologyGroups(request.topology, request.bundles.size(),
                               "bundles");
    if (!s.ok()) return s;
    for (size_t f = 0; f < request.fallbacks.size(); ++f) {
      s = ValidateTopologyGroups(
          request.topology, request.fallbacks[f].size(),
          absl::StrCat("fallback_strategy[", f, "].bundles"));
      if (!s.ok()) return s;
    }
  }
  if (slice) {
    const SliceRequirement& req = *request.slice;
    if (req.num_slices < 1) {
      return absl::InvalidArgumentError(
          absl::StrCat("slice.num_slices: must be >= 1, got ", req.num_slices));
    }
    auto shape = ResolveTpuShape(req.generation, req.topology);
    if (!shape.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("slice.topology: ", shape.status().message()));
    }
    if (req.tpu_resource_per_chip < 1 ||
        req.tpu_resource_per_chip > MaxTpuResourcePerChip(req.generation)) {
      return absl::InvalidArgumentError(
          absl::StrCat("slice.tpu_resource_per_chip: must be 1",
                       MaxTpuResourcePerChip(req.generation) > 1 ? " or 2" : "",
                       " on ", TpuGenerationName(req.generation), ", got ",
                       req.tpu_resource_per_chip));
    }
    const int64_t want = shape->hosts * req.num_slices;
    auto check_count = [&](const std::vector<Bundle>& list,
                           const std::string& field) -> absl::Status {
      if (list.empty() || static_cast<int64_t>(list.size()) == want) {
        return absl::OkStatus();
      }
      return absl::InvalidArgumentError(
          absl::StrCat(field, ": a slice requirement of ", req.num_slices,
                       " x ", shape->pod_type, " needs one bundle per host (",
                       want, "), got ", list.size()));
    };
    s = check_count(request.bundles, "bundles");
    if (!s.ok()) return s;
    for (size_t f = 0; f < request.fallbacks.size(); ++f) {
      s = check_count(request.fallbacks[f],
                      absl::StrCat("fallback_strategy[", f, "].bundles"));
      if (!s.ok()) return s;
    }
    for (const auto& [name, amount] : req.resources_per_host) {
      if (amount < 0) {
        return absl::InvalidArgumentError(
            absl::StrCat("slice.resources_per_host[", name, "]: must be >= 0"));
      }
    }
  }
  return absl::OkStatus();
}

Decision Solve(const InventorySnapshot& snapshot,
               const PlacementRequest& request) {
  Decision decision;
  absl::Status valid = ValidateRequest(request);
  if (!valid.ok()) {
    decision.outcome = Decision::kInfeasible;
    decision.diagnosis.summary =
        absl::StrCat("invalid request: ", valid.message());
    return decision;
  }
  const SolveRun run(snapshot, request);
  const int lists = 1 + static_cast<int>(request.fallbacks.size());
  const int priorities = std::max<int>(1, request.priorities.size());
  bool all_infeasible = true;
  std::vector<std::string> summaries;
  for (int f = 0; f < lists; ++f) {
    const std::vector<Bundle>& bundles =
        f == 0 ? request.bundles : request.fallbacks[f - 1];
    for (int p = 0; p < priorities; ++p) {
      const LabelSelector* priority =
          request.priorities.empty() ? nullptr : &request.priorities[p];
      const std::string label = AttemptLabel(lists, f, priority, p);
      Attempt attempt = run.Run(bundles, priority, label);
      for (DiagnosisStep& step : attempt.steps) {
        decision.diagnosis.steps.push_back(std::move(step));
      }
      if (attempt.placed) {
        decision.outcome = Decision::kPlaced;
        decision.fallback_index = f - 1;
        decision.priority_index = priority == nullptr ? -1 : p;
        decision.bundle_nodes.reserve(attempt.nodes.size());
        for (uint32_t i : attempt.nodes) {
          decision.bundle_nodes.push_back(snapshot.node(i).node.node_id);
        }
        decision.slice_names = std::move(attempt.slices);
        decision.diagnosis.summary = label + attempt.summary;
        if (attempt.cpu_on_whole_tpu > 0) {
          decision.placement_note = absl::StrCat(
              attempt.cpu_on_whole_tpu,
              " CPU-only bundle(s) on whole free TPU capacity: no other node "
              "fits them");
          absl::StrAppend(&decision.diagnosis.summary, "; ",
                          decision.placement_note);
        }
        return decision;
      }
      all_infeasible = all_infeasible && attempt.infeasible;
      summaries.push_back(label + attempt.summary);
    }
  }
  decision.outcome =
      all_infeasible ? Decision::kInfeasible : Decision::kUnschedulable;
  std::string summary = absl::StrJoin(summaries, " | ");
  // It becomes the group's stored pending reason, in every reply and watch
  // event: bounded, whatever the lists and selectors (the steps keep all).
  if (summary.size() > kMaxSummaryBytes) {
    summary = absl::StrCat(CutUtf8(summary, kMaxSummaryBytes), "... (",
                           summary.size(), " bytes in all)");
  }
  decision.diagnosis.summary = std::move(summary);
  return decision;
}

}  // namespace sliced::scheduler
