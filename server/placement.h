// Placement groups on top of the coordinator: create (with compute classes,
// idempotent by request_id), remove, the pending queue, rescheduling after
// node loss, and the conversion of PG records to API replies.
//
// Functions taking a Txn run on the coordinator's writer thread.
#ifndef SLICED_SERVER_PLACEMENT_H_
#define SLICED_SERVER_PLACEMENT_H_

#include <functional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "scheduler/snapshot.h"
#include "scheduler/solver.h"
#include "server/coordinator.h"
#include "server/limits.h"
#include "sliced/v1/sliced.pb.h"

namespace sliced::server {

// How the queue treats waiting groups. Plain values; default as documented.
struct PlacementPolicy {
  // Smaller groups may backfill around a blocked one, but once a group has
  // waited this long it blocks every group behind it in queue order (same or
  // lower priority, later arrival) until it is placed: it claims capacity as
  // it frees. Zero disables the bound. Default 5 minutes.
  absl::Duration starvation_bound = absl::Minutes(5);
  // Groups the queue may hold (Limits::max_pending_pgs).
  int max_pending = 100000;
  // Called after every solve with the decision and how long it took
  // (metrics). Optional.
  std::function<void(const scheduler::Decision&, absl::Duration)> on_decision;
};

// A validated request, not yet given an id, sequence or state.
struct PgSpec {
  PgEntry entry;
};

// Validates a CreatePlacementGroupRequest. InvalidArgument names the field.
absl::StatusOr<PgSpec> PgSpecFromCreate(
    const v1::CreatePlacementGroupRequest& request, const Limits& limits);
// Validates a SubmitScalingConfigRequest (Ray's rules and messages).
absl::StatusOr<PgSpec> PgSpecFromScalingConfig(
    const v1::SubmitScalingConfigRequest& request, const Limits& limits);

// Rebuilds the engine request from a stored record (recovery).
absl::StatusOr<scheduler::PlacementRequest> RequestFromRecord(
    const storage::PlacementGroupRecord& record);

// Creates the group in `txn` (or returns the existing one for a repeated
// request_id) and tries to place it at once. Fills `reply`.
// Errors: NotFound for an unknown compute class; FailedPrecondition when the
// class says FAIL and the gang does not fit now, or it can never fit.
absl::Status CreatePg(Txn& txn, PgSpec spec, const PlacementPolicy& policy,
                      v1::PlacementGroup* reply);

// Releases the group's capacity and forgets it. NotFound when unknown.
absl::Status RemovePg(Txn& txn, const std::string& pg_id);

// Re-tries the pending queue in order (priority, then arrival).
void RetryPending(Txn& txn, const PlacementPolicy& policy);

// Nodes turned DEAD (or were force-removed): their groups go RESCHEDULING
// and are re-placed where possible (slice groups whole, plain groups only
// the lost bundles).
absl::Status HandleNodesLost(Txn& txn, const std::vector<std::string>& node_ids,
                             const PlacementPolicy& policy);

// The engine decision for a waiting group or a dry run, on `snapshot`.
scheduler::Decision Explain(
    const scheduler::InventorySnapshot& snapshot, const PgEntry& entry,
    const std::vector<storage::ComputeClassRecord>& classes);

// The API view of a record; workers and addresses come from `snapshot`.
void PgToProto(const PgEntry& entry,
               const scheduler::InventorySnapshot& snapshot,
               v1::PlacementGroup* out);

}  // namespace sliced::server

#endif  // SLICED_SERVER_PLACEMENT_H_
