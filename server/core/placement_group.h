// The domain model of placement: placement groups, compute classes, the
// JaxTrainer-style ScalingConfig a group may come from, and the per-worker
// result. No protobuf, no gRPC: server/api converts the wire types to these,
// storage/ maps them to its own records.
//
// Plain value types; no synchronisation of their own.
#ifndef SLICED_SERVER_CORE_PLACEMENT_GROUP_H_
#define SLICED_SERVER_CORE_PLACEMENT_GROUP_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/container/btree_map.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "scheduler/labels.h"
#include "scheduler/solver.h"
#include "scheduler/types.h"

namespace sliced::server {

// The life of a placement group (DESIGN §1):
// PENDING -> CREATED -> (RESCHEDULING -> CREATED)* -> REMOVED, or INFEASIBLE
// while no inventory of this cluster could ever hold it. A CREATED group
// chosen as a preemption victim goes PREEMPTING, then back to PENDING (or
// REMOVED) when its grace period ends (docs/preemption.md).
enum class PgState {
  kPending,       // queued: does not fit now
  kCreated,       // placed: every bundle holds its node's capacity
  kRescheduling,  // lost a node; being re-placed (keeps what survived)
  kInfeasible,    // can never fit the inventory as it is; re-checked
  kRemoved,       // gone (only ever seen by watchers)
  kPreempting,    // placed, told to leave: holds its capacity until
                  // preemption_deadline
};

absl::string_view PgStateName(PgState state);

// Queued groups: the ones the pending queue re-tries.
inline bool IsQueued(PgState s) {
  return s == PgState::kPending || s == PgState::kRescheduling ||
         s == PgState::kInfeasible;
}
// Groups that wait to be placed, and may starve.
inline bool Waits(PgState s) {
  return s == PgState::kPending || s == PgState::kRescheduling;
}
// Groups whose bundles hold capacity.
inline bool HoldsCapacity(PgState s) {
  return s == PgState::kCreated || s == PgState::kRescheduling ||
         s == PgState::kPreempting;
}

// Kubernetes' preemptionPolicy: whether a group that does not fit may take
// the capacity of running groups of lower priority, or waits.
enum class PreemptionPolicy { kPreemptLowerPriority, kNever };
// What becomes of a preempted group when its grace period ends.
enum class OnPreemption { kRequeue, kRemove };

// JaxTrainer / Ray Train v2 ScalingConfig, as given (validated by
// PlanScalingConfig). Wire values: resources are doubles here.
struct ScalingConfig {
  int num_workers = 0;
  bool use_tpu = false;
  bool use_gpu = false;
  std::string topology;
  std::string accelerator_type;
  std::string placement_strategy;
  absl::btree_map<std::string, double> resources_per_worker;
  absl::btree_map<std::string, std::string> label_selector;
  // TPU resources one chip counts for; 0 or 1 = one (v7x may use 2).
  int tpu_resource_per_chip = 0;
  // Sub-slices: true allowed, false never, unset only when no slice of the
  // exact shape exists (scheduler::Subslicing).
  std::optional<bool> allow_subslice;

  friend bool operator==(const ScalingConfig&, const ScalingConfig&) = default;
};

// One bundle of a group as it is placed.
struct PlacedBundle {
  scheduler::ResourceSet resources;
  scheduler::LabelSelector selector;
  std::string node_id;  // "" while not placed

  friend bool operator==(const PlacedBundle&, const PlacedBundle&) = default;
};

struct PlacementGroup {
  std::string id;  // "pg-<12 hex digits of sequence>"
  PgState state = PgState::kPending;
  // What was asked: bundles, strategy, slice requirement, fallbacks. Never
  // holds compute-class priorities (resolved at solve time) or pins.
  scheduler::PlacementRequest request;
  // The bundle list in use and where each bundle is: the request's bundles
  // (a slice requirement's expanded hosts, slice-major) or, once placed on
  // one, a fallback's. Empty for a slice group never placed.
  std::vector<PlacedBundle> bundles;
  std::vector<std::string> slice_names;  // per slice index, once placed

  // Owner and scheduling knobs.
  std::string job_id;
  std::string name;
  std::string request_id;  // idempotency key; "" for none
  std::string compute_class;
  // The priority class named at create ("" for none) and the priority it
  // resolved to (or the integer asked for without a class).
  std::string priority_class;
  int32_t priority = 0;
  PreemptionPolicy preemption_policy = PreemptionPolicy::kPreemptLowerPriority;
  OnPreemption on_preemption = OnPreemption::kRequeue;

  // Preemption (docs/preemption.md). A victim: the group that preempts it
  // (kept once it is requeued, so that it never preempts that group back).
  std::string preempted_by;
  // A preemptor, while it waits for them: its victims.
  std::vector<std::string> preempting;
  // PREEMPTING: when it leaves (the end of its grace period, or the time
  // its owner removed it). A preemptor: when its victims' grace ends.
  absl::Time preemption_deadline = absl::InfinitePast();
  // PREEMPTING: its owner removed it; it leaves, REMOVED, with its
  // preemptor's other victims.
  bool removed = false;
  // When it was last placed; the preemption cool-down counts from here.
  absl::Time placed_time = absl::UnixEpoch();

  // Which compute-class priority / fallback list holds it (-1: none/primary).
  int priority_index = -1;
  int fallback_index = -1;
  // Why it waits ("" once placed).
  std::string reason;
  // Placed: what its placement had to do that the engine's rules avoid
  // (Decision::placement_note, e.g. CPU-only bundles on whole free TPU
  // capacity); "" when nothing or while it waits.
  std::string placement_note;

  absl::Time create_time = absl::UnixEpoch();
  absl::Time update_time = absl::UnixEpoch();
  // When it (last) joined the queue: created, or lost a node.
  absl::Time queued_time = absl::UnixEpoch();
  // Arrival order in the queue.
  uint64_t sequence = 0;

  // Set for groups submitted as a ScalingConfig.
  std::optional<ScalingConfig> scaling_config;

  friend bool operator==(const PlacementGroup&,
                         const PlacementGroup&) = default;
};

// What a compute class does when no priority holds the whole gang.
enum class WhenUnsatisfiable { kWait, kFail };

// A GKE-style custom compute class: ordered priorities, each a label
// selector ANDed with every bundle's own.
struct ComputeClass {
  std::string name;
  std::vector<scheduler::LabelSelector> priorities;
  WhenUnsatisfiable when_unsatisfiable = WhenUnsatisfiable::kWait;

  friend bool operator==(const ComputeClass&, const ComputeClass&) = default;
};

// One worker of a placed ScalingConfig or slice group (see
// server/core/scaling_config.h for ranks and env).
struct Worker {
  int rank = 0;
  std::string node_id;
  std::string address;
  std::string slice_name;
  int slice_index = 0;
  int tpu_worker_id = 0;
  absl::btree_map<std::string, std::string> env;

  friend bool operator==(const Worker&, const Worker&) = default;
};

// A group as callers see it: the group and, when placed as a ScalingConfig
// or slice group, its workers.
struct PlacementGroupView {
  PlacementGroup group;
  std::vector<Worker> workers;
};

}  // namespace sliced::server

#endif  // SLICED_SERVER_CORE_PLACEMENT_GROUP_H_
