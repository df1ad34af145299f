// The carver: places a slice request on aligned sub-boxes of larger intact
// slices of the same generation (sub-slices, issue 16). Engine-internal:
// include only from scheduler/ (and its tests).
//
// Thread-safety: CarveSlices() is a pure function of its arguments (it reads
// the snapshot and keeps its own overlay).
#ifndef SLICED_SCHEDULER_INTERNAL_CARVER_H_
#define SLICED_SCHEDULER_INTERNAL_CARVER_H_

#include <array>
#include <cstdint>
#include <vector>

#include "absl/strings/string_view.h"
#include "scheduler/internal/slice_placer.h"
#include "scheduler/internal/snapshot_state.h"
#include "scheduler/internal/solver_util.h"
#include "scheduler/subslices.h"

namespace sliced::scheduler::internal {

// The host of each cell of slice `se`'s host grid (x fastest, then y, then
// z), as an index into se.hosts, or -1 for an empty cell. Positions come
// from the hosts' reported coordinates, or from worker-id order when
// se.info.positions_assumed.
// REQUIRES: se.shape_known and se.info.intact.
std::vector<int32_t> HostCells(const InventorySnapshot::SliceEntry& se);

// What could be carved out of slice `se` now (scheduler/subslices.h): free
// aligned boxes per smaller valid shape, from the snapshot's free resources.
// REQUIRES: se.shape_known and se.info.intact.
SubsliceCapacity CapacityOf(const SnapshotState& snap,
                            const InventorySnapshot::SliceEntry& se);

// True when `request`'s shape can be carved out of a slice of `parent`'s
// shape: the same generation and chips per host, and a host grid no larger
// than the parent's on any axis (the same topology counts: the box is then
// the whole slice).
bool CanCarve(const TpuShape& parent, const TpuShape& request);

// Places request.needed() sub-slices, one at a time. Candidates: every
// aligned box of the request's host grid (origin a multiple of the box on
// every axis) inside an intact slice that CanCarve() admits, under index
// keys whose tier and zone the selectors admit, whose hosts hold no TPU
// work, match the selectors and have room for their bundles. The best
// candidate, compared in order:
//   1. a whole free slice of the exact shape, then a box in a parent already
//      carved (or holding other TPU work), then one in an untouched parent;
//   2. the smaller parent (keeps big pods whole);
//   3. buddy style, the smallest free block it splits: the largest free
//      aligned block holding the box, grown by doubling z, then y, then x
//      (the chain of valid shapes 2x2x1, 2x2x2, 2x2x4, 2x4x4, 4x4x4);
//      carving thus fills holes next to work first and leaves the largest
//      free aligned boxes whole;
//   4. the slice index (name order), then the box origin (x fastest).
// A multi-slice request whose boxes so chosen span zones is carved again
// within each of those zones (in the order taken), then within each other
// zone (by name); the first that places every slice wins, else the boxes
// across zones stand.
// Bundle k * hosts + i lands on the box's i-th host in physical order (x
// fastest), and the sub-slice is named FormatSubsliceName(parent,
// topology, origin) (the parent's own name for a whole slice).
// Not placed: Ray's message ("No subslice of '<topology>' is schedulable
// across any of the candidate parent topologies") with the parents counted
// per reason, how many are carved, and the largest free aligned box among
// them; infeasible when no slice of the generation could ever hold it.
//
// Cost: the admitted keys, the slices this request carved, the partly busy
// slices (some hosts have TPU work) and, per key, the idle ones up to the
// first that holds a box (SnapshotState::idle_slices()); every intact slice
// of the generation only when nothing was found (to explain why) or
// something is released (`scan` kFull: always, as tests compare).
enum class CarveScan { kIndexed, kFull };
Attempt CarveSlices(const SnapshotState& snap, const Released& released,
                    const SliceRequest& request, absl::string_view label,
                    CarveScan scan = CarveScan::kIndexed);

}  // namespace sliced::scheduler::internal

#endif  // SLICED_SCHEDULER_INTERNAL_CARVER_H_
