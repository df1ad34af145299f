#include "server/core/pg_spec.h"

#include <algorithm>
#include <optional>
#include <utility>

#include "base/status_macros.h"
#include "scheduler/slices.h"
#include "scheduler/tpu.h"
#include "server/core/scaling_config.h"
#include "server/core/validation.h"

namespace sliced::server {
namespace {

// The workers' plan of a placed group: a ScalingConfig's workers, or for a
// plain slice group one worker per host. Built from the parsed request, so
// nothing is re-validated or re-parsed. False when it has no workers.
bool WorkerPlan(const PlacementGroup& group, ScalingConfigPlan& plan) {
  const auto& slice = group.request.slice;
  if (group.scaling_config) {
    plan.use_tpu = group.scaling_config->use_tpu;
    plan.num_workers = group.scaling_config->num_workers;
  } else if (slice) {
    plan.use_tpu = true;
    plan.num_workers = static_cast<int>(group.bundles.size());
  } else {
    return false;
  }
  if (!slice) return true;
  auto shape = scheduler::ResolveTpuShape(slice->generation, slice->topology);
  if (!shape.ok()) return false;
  plan.shape = *shape;
  plan.hosts_per_slice = static_cast<int>(shape->hosts);
  plan.num_slices = slice->num_slices;
  plan.tpu_resource_per_chip = slice->tpu_resource_per_chip;
  LayoutTpuWorkers(plan);
  return true;
}

}  // namespace

absl::string_view PgStateName(PgState state) {
  switch (state) {
    case PgState::kPending:
      return "PENDING";
    case PgState::kCreated:
      return "CREATED";
    case PgState::kRescheduling:
      return "RESCHEDULING";
    case PgState::kInfeasible:
      return "INFEASIBLE";
    case PgState::kRemoved:
      return "REMOVED";
    case PgState::kPreempting:
      return "PREEMPTING";
  }
  return "UNKNOWN";
}

absl::StatusOr<PgSpec> NewPgSpec(scheduler::PlacementRequest request,
                                 const PgOwner& owner, const Limits& limits) {
  RETURN_IF_ERROR(ValidateName(owner.job_id, "job_id", limits));
  RETURN_IF_ERROR(ValidateName(owner.name, "name", limits));
  RETURN_IF_ERROR(ValidateName(owner.request_id, "request_id", limits));
  RETURN_IF_ERROR(ValidateName(owner.compute_class, "compute_class", limits));
  RETURN_IF_ERROR(ValidateName(owner.priority_class, "priority_class", limits));
  RETURN_IF_ERROR(scheduler::ValidateRequest(request));
  PgSpec spec;
  PlacementGroup& g = spec.group;
  g.job_id = owner.job_id;
  g.name = owner.name;
  g.request_id = owner.request_id;
  g.compute_class = owner.compute_class;
  g.priority = owner.priority;
  g.priority_class = owner.priority_class;
  g.preemption_policy = owner.preemption_policy;
  g.on_preemption = owner.on_preemption;
  for (const scheduler::Bundle& b : request.bundles) {
    g.bundles.push_back(PlacedBundle{b.resources, b.selector, ""});
  }
  g.request = std::move(request);
  return spec;
}

absl::StatusOr<PgSpec> PgSpecFromScalingConfig(const ScalingConfig& config,
                                               const PgOwner& owner,
                                               const Limits& limits) {
  ASSIGN_OR_RETURN(ScalingConfigPlan plan, PlanScalingConfig(config, limits));
  ASSIGN_OR_RETURN(PgSpec spec,
                   NewPgSpec(std::move(plan.request), owner, limits));
  spec.group.scaling_config = config;
  return spec;
}

namespace {

// The one bundle each host of a slice requirement gets when the request
// lists no bundles of its own; nullopt for an unknown shape.
std::optional<scheduler::Bundle> SliceHostBundle(
    const scheduler::SliceRequirement& slice, int64_t* hosts) {
  auto shape = scheduler::ResolveTpuShape(slice.generation, slice.topology);
  if (!shape.ok()) return std::nullopt;
  scheduler::Bundle host;
  host.resources = slice.resources_per_host;
  if (host.resources.empty()) {
    host.resources[std::string(scheduler::kResourceTpu)] =
        shape->chips_per_host * slice.tpu_resource_per_chip *
        scheduler::kResourceScale;
  }
  host.selector = slice.selector;
  if (hosts != nullptr) *hosts = shape->hosts;
  return host;
}

}  // namespace

std::vector<scheduler::Bundle> ExpandSliceBundles(
    const scheduler::PlacementRequest& request) {
  if (!request.bundles.empty() || !request.slice) return request.bundles;
  int64_t hosts = 0;
  std::optional<scheduler::Bundle> host =
      SliceHostBundle(*request.slice, &hosts);
  if (!host) return {};
  return std::vector<scheduler::Bundle>(
      static_cast<size_t>(hosts) * request.slice->num_slices, *host);
}

scheduler::ResourceSet LeastAskOfANode(
    const scheduler::PlacementRequest& request) {
  std::optional<scheduler::ResourceSet> least;
  auto take = [&](const scheduler::ResourceSet& asks) {
    if (!least) {
      least = asks;
      return;
    }
    scheduler::ResourceSet kept;  // filled in key order: appends
    for (const auto& [name, amount] : *least) {
      auto it = asks.find(name);
      if (it != asks.end()) kept[name] = std::min(amount, it->second);
    }
    least = std::move(kept);
  };
  if (!request.bundles.empty() || !request.slice) {
    for (const scheduler::Bundle& b : request.bundles) take(b.resources);
  } else if (auto host = SliceHostBundle(*request.slice, nullptr)) {
    take(host->resources);
  }
  for (const auto& list : request.fallbacks) {
    for (const scheduler::Bundle& b : list) take(b.resources);
  }
  if (!least) return {};
  scheduler::ResourceSet asked;
  for (const auto& [name, amount] : *least) {
    if (amount > 0) asked[name] = amount;
  }
  return asked;
}

PlacementGroupView ViewOf(const PlacementGroup& group,
                          const scheduler::InventorySnapshot& snapshot) {
  PlacementGroupView view{group, {}};
  ScalingConfigPlan plan;
  // A PREEMPTING group still runs until its grace period ends.
  if ((group.state != PgState::kCreated &&
       group.state != PgState::kPreempting) ||
      !WorkerPlan(group, plan)) {
    return view;
  }
  std::vector<PlacedNode> placed;
  placed.reserve(group.bundles.size());
  for (const PlacedBundle& b : group.bundles) {
    const scheduler::Node* node = snapshot.FindNode(b.node_id);
    placed.push_back(PlacedNode{b.node_id, node ? node->address : ""});
  }
  // The slices the group's sub-slices were carved from: their wrap-around
  // (none for whole or stitched slices: `parents` stays empty).
  std::vector<const scheduler::TpuShape*> parents;
  for (size_t i = 0; i < group.slice_names.size(); ++i) {
    const std::string& name = group.slice_names[i];
    if (!scheduler::IsCarvedSubsliceName(name)) continue;
    const int64_t s = snapshot.SliceIndex(scheduler::ParentSliceName(name));
    if (s < 0 || !snapshot.slice(s).shape_known) continue;
    parents.resize(group.slice_names.size(), nullptr);
    parents[i] = &snapshot.slice(s).shape;
  }
  view.workers = BuildWorkers(plan, placed, group.slice_names, parents);
  return view;
}

}  // namespace sliced::server
