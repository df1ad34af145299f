// Building and editing an InventorySnapshot's state (SnapshotState). Steps of
// a full build: sort and check node ids, node entries and the label index,
// slices (DeriveSlices), allocations, then the free-slice index and the rank
// bitsets. An edit copies only the copy-on-write chunks the delta touches.
// Engine-internal: only snapshot.cc calls these.
//
// Thread-safety: each call owns the snapshot it is given until it returns
// it, published; not for concurrent use on one snapshot.
#ifndef SLICED_SCHEDULER_INTERNAL_SNAPSHOT_WRITER_H_
#define SLICED_SCHEDULER_INTERNAL_SNAPSHOT_WRITER_H_

#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "scheduler/snapshot.h"
#include "scheduler/types.h"

namespace sliced::scheduler::internal {

// Fills `empty` (a default-constructed snapshot) with `nodes` and
// `allocations` and publishes it. Errors as InventorySnapshot::Build().
absl::StatusOr<std::shared_ptr<const InventorySnapshot>> BuildSnapshot(
    std::unique_ptr<InventorySnapshot> empty, std::vector<Node> nodes,
    std::vector<Allocation> allocations);

// Edits `copy` (a copy of the source snapshot) by `delta` and publishes it.
// Placements, releases and node updates that keep every node's slice cost
// O(k log n) for k touched nodes; adding, removing or re-labelling nodes
// re-derives only the slices those nodes leave or join and renumbers the
// position indexes (integers and pointers; see ChangeNodeSet()). Errors as
// InventorySnapshot::Apply().
absl::StatusOr<std::shared_ptr<const InventorySnapshot>> ApplyInPlace(
    std::unique_ptr<InventorySnapshot> copy, const SnapshotDelta& delta);

}  // namespace sliced::scheduler::internal

#endif  // SLICED_SCHEDULER_INTERNAL_SNAPSHOT_WRITER_H_
