// Building placement groups: a validated request with its owner (PgSpec),
// and what callers see of a group (its view, with workers).
//
// Pure functions; thread-safe.
#ifndef SLICED_SERVER_CORE_PG_SPEC_H_
#define SLICED_SERVER_CORE_PG_SPEC_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "scheduler/snapshot.h"
#include "scheduler/solver.h"
#include "server/core/limits.h"
#include "server/core/placement_group.h"

namespace sliced::server {

// Who asks, and how the queue should treat it.
struct PgOwner {
  std::string job_id;
  std::string name;
  std::string request_id;  // idempotency key; "" for none
  std::string compute_class;
  int32_t priority = 0;
  std::string priority_class;  // resolved at create (PriorityClasses)
  PreemptionPolicy preemption_policy = PreemptionPolicy::kPreemptLowerPriority;
  OnPreemption on_preemption = OnPreemption::kRequeue;
};

// How much of the group a create answers with.
enum class ReplyDetail {
  kFull,   // the view: the whole group and its workers
  kBasic,  // the group's id, state and reason only
};

// A validated request, not yet given an id, sequence or state.
struct PgSpec {
  PlacementGroup group;
  ReplyDetail reply = ReplyDetail::kFull;
};

// Checks the owner's fields (lengths, no control characters) and the
// request's shape (scheduler::ValidateRequest). InvalidArgument names the
// field.
absl::StatusOr<PgSpec> NewPgSpec(scheduler::PlacementRequest request,
                                 const PgOwner& owner, const Limits& limits);

// Validates a ScalingConfig (Ray's rules and messages, see
// server/core/scaling_config.h) and builds its spec.
absl::StatusOr<PgSpec> PgSpecFromScalingConfig(const ScalingConfig& config,
                                               const PgOwner& owner,
                                               const Limits& limits);

// The per-host bundles of a request: its bundles, or for a slice
// requirement without explicit bundles, one bundle per host, slice-major.
std::vector<scheduler::Bundle> ExpandSliceBundles(
    const scheduler::PlacementRequest& request);

// The least a request asks of any one node: each resource that every
// bundle it may place asks for (its per-host bundles and every fallback
// list's), at the smallest amount one asks. A node whose free capacity
// does not cover it can hold no bundle of the request.
scheduler::ResourceSet LeastAskOfANode(
    const scheduler::PlacementRequest& request);

// What callers see of `group`: the group and, when it is placed as a
// ScalingConfig or slice group, its workers (addresses from `snapshot`).
PlacementGroupView ViewOf(const PlacementGroup& group,
                          const scheduler::InventorySnapshot& snapshot);

}  // namespace sliced::server

#endif  // SLICED_SERVER_CORE_PG_SPEC_H_
