#include "server/api/convert_placement.h"

#include <algorithm>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "scheduler/tpu.h"
#include "server/api/convert_common.h"
#include "server/core/validation.h"

namespace sliced::server::api {
namespace {

using scheduler::PlacementRequest;

absl::StatusOr<std::vector<scheduler::Bundle>> BundlesFromProto(
    const google::protobuf::RepeatedPtrField<v1::Bundle>& bundles,
    absl::string_view field, const Limits& limits) {
  if (bundles.size() > limits.max_bundles_per_pg) {
    return absl::InvalidArgumentError(
        absl::StrCat(field, ": at most ", limits.max_bundles_per_pg,
                     " bundles, got ", bundles.size()));
  }
  std::vector<scheduler::Bundle> out;
  for (int i = 0; i < bundles.size(); ++i) {
    const std::string where = absl::StrCat(field, "[", i, "]");
    scheduler::Bundle b;
    ASSIGN_OR_RETURN(
        b.resources,
        ResourcesFromWire(ToBtree(bundles[i].resources()),
                          absl::StrCat(where, ".resources"), limits));
    bool any = false;
    for (const auto& [name, amount] : b.resources) any |= amount > 0;
    if (!any) {
      return absl::InvalidArgumentError(absl::StrCat(
          where, ".resources: a bundle needs at least one resource > 0"));
    }
    ASSIGN_OR_RETURN(
        b.selector,
        SelectorFromProto(bundles[i].label_selector(),
                          absl::StrCat(where, ".label_selector"), limits));
    out.push_back(std::move(b));
  }
  return out;
}

absl::StatusOr<scheduler::Strategy> StrategyFromProto(int number) {
  switch (number) {
    case v1::PLACEMENT_STRATEGY_UNSPECIFIED:
    case v1::PACK:
      return scheduler::Strategy::kPack;
    case v1::SPREAD:
      return scheduler::Strategy::kSpread;
    case v1::STRICT_PACK:
      return scheduler::Strategy::kStrictPack;
    case v1::STRICT_SPREAD:
      return scheduler::Strategy::kStrictSpread;
  }
  return absl::InvalidArgumentError(
      absl::StrCat("strategy: unknown value ", number,
                   "; use PACK, SPREAD, STRICT_PACK or STRICT_SPREAD"));
}

v1::PlacementStrategy StrategyToProto(scheduler::Strategy strategy) {
  switch (strategy) {
    case scheduler::Strategy::kPack:
      return v1::PACK;
    case scheduler::Strategy::kSpread:
      return v1::SPREAD;
    case scheduler::Strategy::kStrictPack:
      return v1::STRICT_PACK;
    case scheduler::Strategy::kStrictSpread:
      return v1::STRICT_SPREAD;
  }
  return v1::PACK;
}

absl::StatusOr<scheduler::SliceRequirement> SliceFromProto(
    const v1::SliceRequirement& s, const Limits& limits) {
  scheduler::SliceRequirement slice;
  auto generation = scheduler::ParseTpuGeneration(s.accelerator_type());
  if (!generation.ok()) {
    return WithFieldPrefix("slice.accelerator_type", generation.status());
  }
  slice.generation = *generation;
  auto shape = scheduler::ResolveTpuShape(*generation, s.topology());
  if (!shape.ok()) return WithFieldPrefix("slice.topology", shape.status());
  slice.topology = shape->topology;
  slice.num_slices = s.num_slices() == 0 ? 1 : s.num_slices();
  if (slice.num_slices < 1 || slice.num_slices > limits.max_slices_per_pg) {
    return absl::InvalidArgumentError(
        absl::StrCat("slice.num_slices: must be 1..", limits.max_slices_per_pg,
                     ", got ", s.num_slices()));
  }
  if (shape->hosts * slice.num_slices > limits.max_bundles_per_pg) {
    return absl::InvalidArgumentError(absl::StrCat(
        "slice: ", slice.num_slices, " x ", shape->pod_type, " is ",
        shape->hosts * slice.num_slices, " host bundles; at most ",
        limits.max_bundles_per_pg, " per placement group"));
  }
  ASSIGN_OR_RETURN(slice.resources_per_host,
                   ResourcesFromWire(ToBtree(s.resources_per_host()),
                                     "slice.resources_per_host", limits));
  // Empty: the default (the host's TPU); given, it must ask for something,
  // as a bundle must.
  if (!slice.resources_per_host.empty()) {
    bool any = false;
    for (const auto& [name, amount] : slice.resources_per_host) {
      any |= amount > 0;
    }
    if (!any) {
      return absl::InvalidArgumentError(
          "slice.resources_per_host: give at least one resource > 0, or "
          "none for the host's TPU");
    }
  }
  if (s.tpu_resource_per_chip() < 0) {
    return absl::InvalidArgumentError(
        "slice.tpu_resource_per_chip: `tpu_resource_per_chip` must be a "
        "positive integer.");
  }
  slice.tpu_resource_per_chip = std::max(1, s.tpu_resource_per_chip());
  slice.subslicing = s.allow_subslice() ? scheduler::Subslicing::kAllowed
                                        : scheduler::Subslicing::kNever;
  return slice;
}

// The reply detail a create or submit asks for, into its spec.
template <typename Request>
absl::StatusOr<PgSpec> WithReplyDetail(absl::StatusOr<PgSpec> spec,
                                       const Request& in) {
  if (!spec.ok()) return spec;
  switch (in.view()) {
    case v1::PLACEMENT_GROUP_VIEW_UNSPECIFIED:
    case v1::FULL:
      spec->reply = ReplyDetail::kFull;
      break;
    case v1::BASIC:
      spec->reply = ReplyDetail::kBasic;
      break;
    default:
      return absl::InvalidArgumentError(
          absl::StrCat("view: unknown value ", in.view(), " (FULL or BASIC)"));
  }
  return spec;
}

template <typename Request>
absl::StatusOr<PgOwner> OwnerOf(const Request& in) {
  PgOwner owner{in.job_id(),
                in.name(),
                in.request_id(),
                in.compute_class(),
                in.priority(),
                in.priority_class(),
                PreemptionPolicy::kPreemptLowerPriority,
                OnPreemption::kRequeue};
  switch (in.preemption_policy()) {
    case v1::PREEMPTION_POLICY_UNSPECIFIED:
    case v1::PREEMPT_LOWER_PRIORITY:
      break;
    case v1::NEVER:
      owner.preemption_policy = PreemptionPolicy::kNever;
      break;
    default:
      return absl::InvalidArgumentError(absl::StrCat(
          "preemption_policy: unknown value ", in.preemption_policy(),
          " (PREEMPT_LOWER_PRIORITY or NEVER)"));
  }
  switch (in.on_preemption()) {
    case v1::ON_PREEMPTION_UNSPECIFIED:
    case v1::REQUEUE:
      break;
    case v1::REMOVE:
      owner.on_preemption = OnPreemption::kRemove;
      break;
    default:
      return absl::InvalidArgumentError(
          absl::StrCat("on_preemption: unknown value ", in.on_preemption(),
                       " (REQUEUE or REMOVE)"));
  }
  return owner;
}

ScalingConfig ScalingConfigFromProto(const v1::ScalingConfig& c) {
  return ScalingConfig{c.num_workers(),
                       c.use_tpu(),
                       c.use_gpu(),
                       c.topology(),
                       c.accelerator_type(),
                       c.placement_strategy(),
                       ToBtree(c.resources_per_worker()),
                       ToBtree(c.label_selector()),
                       c.tpu_resource_per_chip(),
                       c.has_allow_subslice()
                           ? std::optional<bool>(c.allow_subslice())
                           : std::nullopt};
}

void ScalingConfigToProto(const ScalingConfig& c, v1::ScalingConfig* out) {
  out->set_num_workers(c.num_workers);
  out->set_use_tpu(c.use_tpu);
  out->set_use_gpu(c.use_gpu);
  out->set_topology(c.topology);
  out->set_accelerator_type(c.accelerator_type);
  out->set_placement_strategy(c.placement_strategy);
  out->mutable_resources_per_worker()->insert(c.resources_per_worker.begin(),
                                              c.resources_per_worker.end());
  out->mutable_label_selector()->insert(c.label_selector.begin(),
                                        c.label_selector.end());
  out->set_tpu_resource_per_chip(c.tpu_resource_per_chip);
  if (c.allow_subslice.has_value()) out->set_allow_subslice(*c.allow_subslice);
}

void WorkerToProto(const Worker& w, v1::Worker* out) {
  out->set_rank(w.rank);
  out->set_node_id(w.node_id);
  out->set_address(w.address);
  out->set_slice_name(w.slice_name);
  out->set_slice_index(w.slice_index);
  out->set_tpu_worker_id(w.tpu_worker_id);
  out->mutable_env()->insert(w.env.begin(), w.env.end());
}

// topology_strategy: the label levels, and the node level ("ray.io/node-id",
// last) as the request's strategy. As in Ray, `strategy` and
// `topology_strategy` are not given together.
absl::Status TopologyFromProto(const v1::CreatePlacementGroupRequest& in,
                               PlacementRequest& request) {
  const int n = in.topology_strategy_size();
  if (n == 0) return absl::OkStatus();
  if (in.strategy() != v1::PLACEMENT_STRATEGY_UNSPECIFIED) {
    return absl::InvalidArgumentError(absl::StrCat(
        "strategy: `strategy` and `topology_strategy` cannot both be "
        "specified; give the node level as topology_strategy {\"label\": \"",
        scheduler::kLabelNodeId, "\", \"strategy\": ...}"));
  }
  for (int i = 0; i < n; ++i) {
    const v1::TopologyLevel& in_level = in.topology_strategy(i);
    const std::string field = absl::StrCat("topology_strategy[", i, "]");
    if (in_level.strategy() == v1::PLACEMENT_STRATEGY_UNSPECIFIED) {
      return absl::InvalidArgumentError(absl::StrCat(
          field,
          ".strategy: required (PACK, SPREAD, STRICT_PACK or STRICT_SPREAD)"));
    }
    absl::StatusOr<scheduler::Strategy> strategy =
        StrategyFromProto(in_level.strategy());
    if (!strategy.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat(field, ".", strategy.status().message()));
    }
    if (in_level.label() == scheduler::kLabelNodeId) {
      if (i != n - 1) {
        return absl::InvalidArgumentError(absl::StrCat(
            field, ".label: ", scheduler::kLabelNodeId,
            " is the innermost level and must come last"));
      }
      if (in_level.bundles_per_domain() != 0) {
        return absl::InvalidArgumentError(absl::StrCat(
            field, ".bundles_per_domain: not allowed on the node level"));
      }
      request.strategy = *strategy;
      continue;
    }
    request.topology.push_back(
        {in_level.label(), *strategy, in_level.bundles_per_domain()});
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<PgSpec> PgSpecFromProto(
    const v1::CreatePlacementGroupRequest& in, const Limits& limits) {
  PlacementRequest request;
  ASSIGN_OR_RETURN(request.bundles,
                   BundlesFromProto(in.bundles(), "bundles", limits));
  ASSIGN_OR_RETURN(request.strategy, StrategyFromProto(in.strategy()));
  RETURN_IF_ERROR(TopologyFromProto(in, request));
  if (in.has_slice()) {
    ASSIGN_OR_RETURN(request.slice, SliceFromProto(in.slice(), limits));
  } else if (request.bundles.empty()) {
    return absl::InvalidArgumentError(
        "bundles: a placement group needs at least one bundle or a slice "
        "requirement");
  }
  if (in.fallback_strategy_size() > limits.max_fallback_lists) {
    return absl::InvalidArgumentError(
        absl::StrCat("fallback_strategy: at most ", limits.max_fallback_lists,
                     " lists, got ", in.fallback_strategy_size()));
  }
  for (int i = 0; i < in.fallback_strategy_size(); ++i) {
    ASSIGN_OR_RETURN(
        auto bundles,
        BundlesFromProto(in.fallback_strategy(i).bundles(),
                         absl::StrCat("fallback_strategy[", i, "].bundles"),
                         limits));
    request.fallbacks.push_back(std::move(bundles));
  }
  ASSIGN_OR_RETURN(PgOwner owner, OwnerOf(in));
  return WithReplyDetail(NewPgSpec(std::move(request), owner, limits), in);
}

absl::StatusOr<PgSpec> PgSpecFromProto(const v1::SubmitScalingConfigRequest& in,
                                       const Limits& limits) {
  ASSIGN_OR_RETURN(PgOwner owner, OwnerOf(in));
  return WithReplyDetail(
      PgSpecFromScalingConfig(ScalingConfigFromProto(in.scaling_config()),
                              owner, limits),
      in);
}

absl::StatusOr<PlacementManager::ListFilter> ListFilterFromProto(
    const v1::ListPlacementGroupsRequest& in) {
  PlacementManager::ListFilter filter;
  filter.job_id = in.job_id();
  switch (in.state()) {
    case v1::PLACEMENT_GROUP_STATE_UNSPECIFIED:
      break;
    case v1::PENDING:
      filter.state = PgState::kPending;
      break;
    case v1::CREATED:
      filter.state = PgState::kCreated;
      break;
    case v1::RESCHEDULING:
      filter.state = PgState::kRescheduling;
      break;
    case v1::INFEASIBLE:
      filter.state = PgState::kInfeasible;
      break;
    case v1::PREEMPTING:
      filter.state = PgState::kPreempting;
      break;
    case v1::REMOVED:
      return absl::InvalidArgumentError(
          "state: REMOVED groups are not kept (a removed group is deleted; "
          "WatchPlacementGroups shows its REMOVED event)");
    default:
      return absl::InvalidArgumentError(
          absl::StrCat("state: unknown value ", in.state()));
  }
  return filter;
}

v1::PlacementGroupState PgStateToProto(PgState state) {
  switch (state) {
    case PgState::kPending:
      return v1::PENDING;
    case PgState::kCreated:
      return v1::CREATED;
    case PgState::kRescheduling:
      return v1::RESCHEDULING;
    case PgState::kInfeasible:
      return v1::INFEASIBLE;
    case PgState::kRemoved:
      return v1::REMOVED;
    case PgState::kPreempting:
      return v1::PREEMPTING;
  }
  return v1::PLACEMENT_GROUP_STATE_UNSPECIFIED;
}

void PlacementGroupToProto(const PlacementGroupView& view,
                           v1::PlacementGroup* out) {
  const PlacementGroup& g = view.group;
  BasicPlacementGroupToProto(view, out);
  for (const PlacedBundle& b : g.bundles) {
    v1::Bundle* bundle = out->add_bundles();
    ResourcesToProto(b.resources, bundle->mutable_resources());
    SelectorToProto(b.selector, bundle->mutable_label_selector());
    bundle->set_node_id(b.node_id);
  }
  out->set_strategy(StrategyToProto(g.request.strategy));
  for (const scheduler::TopologyLevel& level : g.request.topology) {
    v1::TopologyLevel* t = out->add_topology_strategy();
    t->set_label(level.label);
    t->set_strategy(StrategyToProto(level.strategy));
    t->set_bundles_per_domain(level.bundles_per_domain);
  }
  if (const auto& slice = g.request.slice) {
    out->mutable_slice()->set_accelerator_type(
        std::string(scheduler::TpuAcceleratorType(slice->generation)));
    out->mutable_slice()->set_topology(slice->topology);
    out->mutable_slice()->set_num_slices(slice->num_slices);
    out->mutable_slice()->set_tpu_resource_per_chip(
        slice->tpu_resource_per_chip);
    out->mutable_slice()->set_allow_subslice(
        slice->subslicing != scheduler::Subslicing::kNever);
  }
  out->set_job_id(g.job_id);
  out->set_name(g.name);
  out->set_request_id(g.request_id);
  out->set_compute_class(g.compute_class);
  out->set_priority(g.priority);
  out->set_priority_class(g.priority_class);
  out->set_preemption_policy(g.preemption_policy == PreemptionPolicy::kNever
                                 ? v1::NEVER
                                 : v1::PREEMPT_LOWER_PRIORITY);
  out->set_on_preemption(
      g.on_preemption == OnPreemption::kRemove ? v1::REMOVE : v1::REQUEUE);
  out->set_preempted_by(g.preempted_by);
  out->mutable_preempting()->Assign(g.preempting.begin(), g.preempting.end());
  if (g.preemption_deadline != absl::InfinitePast()) {
    ToTimestamp(g.preemption_deadline, out->mutable_preemption_deadline());
  }
  out->set_placement_note(g.placement_note);
  out->mutable_slice_names()->Assign(g.slice_names.begin(),
                                     g.slice_names.end());
  if (g.state == PgState::kCreated || g.state == PgState::kPreempting) {
    // Which priority / fallback holds it; meaningless while it waits.
    out->set_priority_index(g.priority_index);
    out->set_fallback_index(g.fallback_index);
  }
  ToTimestamp(g.create_time, out->mutable_create_time());
  ToTimestamp(g.update_time, out->mutable_update_time());
  if (g.scaling_config) {
    ScalingConfigToProto(*g.scaling_config, out->mutable_scaling_config());
  }
  for (const Worker& w : view.workers) WorkerToProto(w, out->add_workers());
}

void BasicPlacementGroupToProto(const PlacementGroupView& view,
                                v1::PlacementGroup* out) {
  out->set_placement_group_id(view.group.id);
  out->set_state(PgStateToProto(view.group.state));
  out->set_pending_reason(view.group.reason);
}

void ExplanationToProto(const PlacementManager::Explanation& e,
                        v1::ExplainPlacementGroupResponse* out) {
  out->set_outcome(e.outcome);
  out->set_summary(e.summary);
  out->mutable_details()->Assign(e.details.begin(), e.details.end());
  for (const std::string& node : e.bundle_nodes) {
    out->add_bundles()->set_node_id(node);
  }
}

}  // namespace sliced::server::api
