// Diagnosis of failed steps; see diagnosis.h.
//
// Thread-safety: pure functions (see diagnosis.h).
#include "scheduler/internal/diagnosis.h"

#include <algorithm>
#include <array>
#include <bit>
#include <utility>

#include "absl/container/btree_map.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "scheduler/internal/candidates.h"

namespace sliced::scheduler::internal {
namespace {

// The nodes matching an unplaced bundle's selector, by the first check each
// fails. Per resource (in the bundle's order): too small in total, or too
// little free.
struct NodeCounts {
  int64_t matched = 0;
  int64_t dead = 0;
  int64_t draining = 0;
  int64_t quarantined = 0;
  int64_t in_gang = 0;
  int64_t fit = 0;
  std::vector<int64_t> short_total;
  std::vector<int64_t> short_free;
};

NodeCounts CountNodes(const SnapshotState& snap, const Overlay& overlay,
                      const absl::flat_hash_set<uint32_t>& gang_nodes,
                      const UnplacedBundle& what) {
  const Bits candidates = CandidateBits(snap, *what.selector);
  std::vector<const std::string*> names;
  std::vector<int64_t> amounts;
  for (const auto& [name, amount] : *what.resources) {
    names.push_back(&name);
    amounts.push_back(amount);
  }
  NodeCounts counts;
  counts.short_total.resize(names.size());
  counts.short_free.resize(names.size());
  for (size_t w = 0; w < candidates.size(); ++w) {
    for (uint64_t word = candidates[w]; word != 0; word &= word - 1) {
      const uint32_t i = (w << 6) + std::countr_zero(word);
      const InventorySnapshot::NodeEntry& e = snap.node(i);
      ++counts.matched;
      size_t r = 0;
      while (r < names.size() &&
             Amount(e.node.resources, *names[r]) >= amounts[r])
        ++r;
      if (r < names.size()) {
        ++counts.short_total[r];
        continue;
      }
      if (e.node.state == NodeState::kDead) {
        ++counts.dead;
        continue;
      }
      if (e.node.state == NodeState::kDraining) {
        ++counts.draining;
        continue;
      }
      if (!e.node.quarantine_reason.empty()) {
        ++counts.quarantined;
        continue;
      }
      r = 0;
      while (r < names.size() &&
             (amounts[r] <= 0 || overlay.Free(i, *names[r]) >= amounts[r])) {
        ++r;
      }
      if (r < names.size()) {
        ++counts.short_free[r];
        continue;
      }
      if (what.distinct && gang_nodes.contains(i)) {
        ++counts.in_gang;
        continue;
      }
      ++counts.fit;
    }
  }
  return counts;
}

// What a slice of the shape is, for the diagnosis.
enum class SliceClass {
  kTooSmall,
  kOtherChipCount,  // its hosts count TPU per chip otherwise (v7x: 1 or 2)
  kBroken,
  kHeld,
  kFree,
  kExcluded
};
constexpr int kCountedClasses = 5;  // all but kExcluded (counted by zone)

// `fits_every_host`: request.FitsEveryHostOf(*se.host_min).
SliceClass ClassifySlice(const SnapshotState& snap, const SliceRequest& request,
                         const InventorySnapshot::SliceEntry& se,
                         bool fits_every_host) {
  if (!se.host_slots.empty() &&
      !request.CountsChipsAs(snap.node(snap.HostIndex(se, 0)).node)) {
    return SliceClass::kOtherChipCount;
  }
  bool ever = true;
  const int64_t present =
      fits_every_host
          ? 0  // nothing to learn from the hosts
          : std::min<int64_t>(request.hosts(), se.host_slots.size());
  for (int64_t w = 0; w < present; ++w) {
    const Node& host = snap.node(snap.HostIndex(se, w)).node;
    for (int64_t k = 0; k < request.rows(); ++k) {
      if (!request.HostMatches(host.labels, k, w)) return SliceClass::kExcluded;
      for (const auto& [name, amount] : request.resources(k, w)) {
        if (Amount(host.resources, name) < amount) ever = false;
      }
    }
  }
  if (!ever) return SliceClass::kTooSmall;
  if (!se.info.intact) return SliceClass::kBroken;
  return se.free() ? SliceClass::kFree : SliceClass::kHeld;
}

// Every slice of the request's shape, by class.
struct SliceCounts {
  int64_t considered = 0;
  std::array<int64_t, kCountedClasses> of_class = {};
  absl::btree_map<std::string, int64_t> excluded_in_zone;  // zone -> slices
  // The first slice that is not intact, and why ("v6e-a: node x is DEAD").
  std::string first_broken;

  int64_t of(SliceClass c) const { return of_class[static_cast<int>(c)]; }
  int64_t could_ever() const {
    return of(SliceClass::kFree) + of(SliceClass::kHeld) +
           of(SliceClass::kBroken);
  }
};

// Why a slice is not intact, e.g. "v6e-a: node x is DEAD".
std::string Why(const InventorySnapshot::SliceEntry& se) {
  return absl::StrCat(se.info.name, ": ", se.info.reason);
}

// Adds the `in_key` slices of `key` to `counts` by class, read from the
// per-key sets alone. REQUIRES: the request fits every host of the key and
// has no per-host selector, so that no slice is too small or excluded (what
// ClassifySlice() says when it need not read the hosts).
void CountKey(const SnapshotState& snap, const SliceKey& key, int64_t in_key,
              SliceCounts& counts) {
  const CowBitset* free = snap.free_slices().Find(key);
  const CowBitset* broken = snap.broken_slices().Find(key);
  const int64_t n_free = free == nullptr ? 0 : free->count();
  const int64_t n_broken = broken == nullptr ? 0 : broken->count();
  counts.of_class[static_cast<int>(SliceClass::kFree)] += n_free;
  counts.of_class[static_cast<int>(SliceClass::kBroken)] += n_broken;
  counts.of_class[static_cast<int>(SliceClass::kHeld)] +=
      in_key - n_free - n_broken;
  if (n_broken > 0 && counts.first_broken.empty()) {
    counts.first_broken = Why(snap.slice(broken->NextSet(0)));
  }
}

SliceCounts CountSlices(const SnapshotState& snap,
                        const SliceRequest& request) {
  SliceCounts counts;
  for (auto it = snap.slices_by_key().lower_bound(request.FirstKey());
       it != snap.slices_by_key().end() && request.SameShape(it->first); ++it) {
    const int64_t in_key = static_cast<int64_t>(it->second.size());
    counts.considered += in_key;
    if (!request.KeyMatches(it->first)) {
      counts.excluded_in_zone[it->first.zone] += in_key;
      continue;
    }
    // Every host of the key fits, and counts its chips as the request
    // does: the per-key sets count its slices.
    const KeyHosts* hosts = snap.key_hosts().Find(it->first);
    if (hosts != nullptr && request.FitsEveryHostOf(*hosts->least) &&
        request.CountsChipsAsEvery(*hosts)) {
      CountKey(snap, it->first, in_key, counts);
      continue;
    }
    // Slices mostly share their least-host set: each set is checked once.
    const ResourceSet* checked = nullptr;
    bool fits = false;
    for (uint32_t s : it->second) {
      const InventorySnapshot::SliceEntry& se = snap.slice(s);
      if (se.host_min.get() != checked) {
        checked = se.host_min.get();
        fits = request.FitsEveryHostOf(*checked);
      }
      const SliceClass c = ClassifySlice(snap, request, se, fits);
      if (c == SliceClass::kExcluded) {
        ++counts.excluded_in_zone[se.zone];
      } else {
        ++counts.of_class[static_cast<int>(c)];
      }
      if (c == SliceClass::kBroken && counts.first_broken.empty()) {
        counts.first_broken = Why(se);
      }
    }
  }
  return counts;
}

}  // namespace

void Tally::Add(const std::string& reason, int64_t n) {
  if (n == 0) return;
  for (Rejection& r : rejected_) {
    if (r.reason == reason) {
      r.count += n;
      return;
    }
  }
  rejected_.push_back({reason, n});
}

std::string JoinRejections(const std::vector<Rejection>& rejected) {
  std::vector<std::string> parts;
  for (const Rejection& r : rejected) {
    if (r.count > 0) parts.push_back(absl::StrCat(r.count, " ", r.reason));
  }
  return absl::StrJoin(parts, ", ");
}

Failure ExplainBundle(const SnapshotState& snap, const Overlay& overlay,
                      const absl::flat_hash_set<uint32_t>& gang_nodes,
                      absl::string_view label, const UnplacedBundle& what) {
  const LabelSelector& selector = *what.selector;
  const std::string name = absl::StrCat(
      what.index < 0 ? std::string("gang (STRICT_PACK)")
                     : absl::StrCat("bundle ", what.index),
      " ", ResourcesToString(*what.resources), selector.empty() ? "" : " on ",
      selector.empty() ? "" : SelectorToString(selector));
  const NodeCounts counts = CountNodes(snap, overlay, gang_nodes, what);
  DiagnosisStep step;
  step.step = absl::StrCat(label, name);
  step.accepted = counts.fit;
  step.considered = static_cast<int64_t>(snap.num_nodes());
  std::vector<std::string> names;
  for (const auto& [resource, amount] : *what.resources) {
    names.push_back(resource);
  }
  Tally tally;
  tally.Add("selector mismatch", step.considered - counts.matched);
  for (size_t r = 0; r < names.size(); ++r) {
    tally.Add(absl::StrCat("insufficient total ", names[r]),
              counts.short_total[r]);
  }
  tally.Add("DEAD", counts.dead);
  tally.Add("DRAINING", counts.draining);
  tally.Add("quarantined", counts.quarantined);
  for (size_t r = 0; r < names.size(); ++r) {
    tally.Add(absl::StrCat("insufficient free ", names[r]),
              counts.short_free[r]);
  }
  tally.Add("already used by this gang", counts.in_gang);
  step.rejected = tally.Take();
  int64_t ever = counts.matched;
  for (int64_t n : counts.short_total) ever -= n;
  Failure out;
  out.infeasible = ever == 0;
  const std::string detail = JoinRejections(step.rejected);
  out.summary = absl::StrCat(name, ": ", step.accepted, "/", step.considered,
                             " nodes fit", detail.empty() ? "" : ": ", detail);
  out.steps.push_back(std::move(step));
  return out;
}

Failure ExplainSlices(const SnapshotState& snap, const SliceRequest& request,
                      absl::string_view label) {
  const SliceRequirement& req = request.requirement();
  const TpuShape& shape = request.shape();
  const SliceCounts counts = CountSlices(snap, request);
  DiagnosisStep step;
  step.step =
      absl::StrCat(label, shape.pod_type, " slices (",
                   TpuGenerationName(req.generation), " ", shape.topology, ")");
  step.considered = counts.considered;
  step.accepted = counts.of(SliceClass::kFree);
  Tally tally;
  tally.Add("held", counts.of(SliceClass::kHeld));
  // The first broken slice says why, e.g. "not intact (v6e-a: node
  // v6e-a-w1 is quarantined (slice.error.detected.gauge=1))".
  tally.Add(counts.first_broken.empty()
                ? std::string("not intact")
                : absl::StrCat(
                      "not intact (", counts.first_broken,
                      counts.of(SliceClass::kBroken) > 1 ? "; ..." : "", ")"),
            counts.of(SliceClass::kBroken));
  tally.Add("with hosts too small for the bundles",
            counts.of(SliceClass::kTooSmall));
  tally.Add(absl::StrCat("whose hosts count TPU per chip otherwise (the "
                         "request counts ",
                         req.tpu_resource_per_chip, ": tpu_resource_per_chip)"),
            counts.of(SliceClass::kOtherChipCount));
  for (const auto& [zone, count] : counts.excluded_in_zone) {
    tally.Add(zone.empty()
                  ? std::string("excluded by selector")
                  : absl::StrCat("in zone ", zone, " excluded by selector"),
              count);
  }
  step.rejected = tally.Take();
  const int64_t needed = request.needed();
  const int64_t could_ever = counts.could_ever();
  Failure out;
  out.infeasible = could_ever < needed;
  const std::string detail = JoinRejections(step.rejected);
  out.summary = absl::StrCat(
      step.accepted, "/", step.considered, " ", shape.pod_type, " slices free",
      needed > 1 ? absl::StrCat(", ", needed, " needed") : "",
      detail.empty() ? "" : ": ", detail);
  if (step.considered == 0) {
    out.summary = absl::StrCat("no ", shape.pod_type, " slice (",
                               TpuGenerationName(req.generation), " ",
                               shape.topology, ") exists in this inventory");
  } else if (out.infeasible && could_ever > 0) {
    absl::StrAppend(&out.summary, "; only ", could_ever,
                    " could ever match this request");
  }
  out.steps.push_back(std::move(step));
  return out;
}

}  // namespace sliced::scheduler::internal
