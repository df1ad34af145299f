// The stitcher (TPU7x dynamic slicing, issue 16): places a v7x slice
// request larger than one sub-block (a 4x4x4 cube of 16 hosts with no ICI
// of its own to other cubes) on whole free cubes of one block, which GKE's
// slice controller then connects. Engine-internal: include only from
// scheduler/ (and its tests).
//
// Thread-safety: StitchSlices() is a pure function of its arguments (it
// reads the snapshot and keeps its own overlay).
#ifndef SLICED_SCHEDULER_INTERNAL_STITCHER_H_
#define SLICED_SCHEDULER_INTERNAL_STITCHER_H_

#include "absl/strings/string_view.h"
#include "scheduler/internal/slice_placer.h"
#include "scheduler/internal/snapshot_state.h"
#include "scheduler/internal/solver_util.h"
#include "scheduler/tpu.h"

namespace sliced::scheduler::internal {

// The sub-block of TPU7x dynamic slicing.
inline constexpr absl::string_view kCubeTopology = "4x4x4";

// True for a v7x shape of more than one cube whose every dimension is a
// multiple of the cube's (4x4x8, 4x8x8, 8x8x8, ...).
bool Stitchable(const TpuShape& shape);

// Places each of request.needed() slices on cubes / 64 chips whole free
// intact v7x 4x4x4 slices (cubes) of one block (kLabelTpuBlock of the cube's
// worker 0), all or nothing. Steps, per slice:
//   1. Free cubes from the free-slice index, under keys whose tier and zone
//      the selectors admit, grouped by block; cubes without a block label
//      are never stitched.
//   2. Blocks best fit: the fewest free cubes that still hold the slice,
//      ties by block name.
//   3. Cubes in name order whose every host matches the selectors and has
//      room for its bundle. Cube i sits at (i % cx, i / cx % cy, i / (cx *
//      cy)) in the slice's grid of cubes; bundle b lands on the host whose
//      position in the stitched host grid (x fastest) is b, a host's place
//      in its cube coming from its coordinates (or worker id).
// Named "<block>/<topology>@<cube>+<cube>+...". Not placed: how many free
// cubes each block has (up to 5 blocks); infeasible when no block has
// enough cubes in any state.
Attempt StitchSlices(const SnapshotState& snap, const Released& released,
                     const SliceRequest& request, absl::string_view label);

}  // namespace sliced::scheduler::internal

#endif  // SLICED_SCHEDULER_INTERNAL_STITCHER_H_
