// TPU slices derived from node labels (DESIGN §1): a slice is the set of nodes
// sharing `ray.io/tpu-slice-name`; it is never registered by itself.
//
// Pure functions; thread-safe.
#ifndef SLICED_SCHEDULER_SLICES_H_
#define SLICED_SCHEDULER_SLICES_H_

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "scheduler/tpu.h"
#include "scheduler/types.h"

namespace sliced::scheduler {

// A slice as seen in the inventory.
struct SliceInfo {
  std::string name;              // ray.io/tpu-slice-name
  std::string accelerator_type;  // as labelled, e.g. "TPU-V6E"
  std::string topology;          // as labelled, e.g. "4x4"
  std::string pod_type;          // derived, e.g. "v6e-16"; empty if unknown
  int64_t expected_hosts = 0;    // from generation + topology; 0 if unknown
  // Node ids in worker-id order. Position i holds the node with worker id i,
  // or "" when that worker is missing; nodes with out-of-range or duplicate
  // worker ids are appended after the expected positions.
  std::vector<std::string> node_ids;
  // Each host's position in the slice's host grid, "x-y-z", aligned with
  // node_ids ("" where unknown), from kLabelTpuHostCoords.
  std::vector<std::string> host_positions;
  // True unless every expected host reports a valid, distinct position:
  // worker-id order then stands in for the physical one (GKE and KubeRay
  // number workers in pod creation order, ray #66029).
  bool positions_assumed = true;
  bool intact = false;
  // Why the slice is not intact, e.g. "missing worker 2 of 4",
  // "duplicate worker id 1 (nodes a, b)", "node h3 is DEAD",
  // "TPU chips add up to 12, expected 16", "unknown topology 3x3 for v6e".
  std::string reason;

  friend bool operator==(const SliceInfo&, const SliceInfo&) = default;
};

// Groups nodes by slice name and checks each slice. Intact: generation and
// topology resolve (labels ray.io/accelerator-type and ray.io/tpu-topology,
// agreeing across hosts), all expected hosts present and ALIVE, worker ids
// exactly 0..hosts-1 without duplicates, and the hosts' "TPU" resources add
// up to the shape's chips. Nodes without a slice-name label are not in any
// slice. Result sorted by slice name.
//
// A node with TPU labels (accelerator type and topology) of a single-host shape
// (v5e/v6e 1x1, 2x2, 2x4; v4/v5p/v7x 2x2x1) and no slice-name label is its own
// slice, named after its node id, worker 0.
//
// The slices are checked on `threads` threads (<= 0: one per core, at least
// 2; a full snapshot build checks 25k slices at 100k nodes).
std::vector<SliceInfo> DeriveSlices(const std::vector<const Node*>& nodes,
                                    int threads = 1);

// Parses a kLabelTpuHostCoords value ("x-y-z", or "x-y" for z = 0) and
// checks it lies in `grid` ({x, y, z} hosts; REQUIRES: 3 entries).
// InvalidArgument says which rule it breaks.
absl::StatusOr<std::array<int, 3>> ParseHostCoords(
    absl::string_view value, const std::vector<int>& grid);

// The name of a sub-slice carved out of slice `parent` (issue 16):
// "<parent>/<topology>@<x>-<y>-<z>", the origin being the sub-slice's first
// host in the parent's host grid, e.g. "pod-a/2x2x2@0-0-2".
std::string FormatSubsliceName(absl::string_view parent,
                               absl::string_view topology,
                               const std::array<int, 3>& origin);

// The slice a (sub-)slice name belongs to: the part before '/', else the
// name itself.
absl::string_view ParentSliceName(absl::string_view name);

// True when `name` is FormatSubsliceName's (a box carved out of the slice
// ParentSliceName(name)), not a whole slice's or a stitched one's
// ("<block>/<topology>@<cube>+<cube>...", whose part before '/' is a
// topology block, not a slice).
bool IsCarvedSubsliceName(absl::string_view name);

// True when the node's accelerator-type and topology labels resolve to a
// single-host slice shape.
bool IsSingleHostTpuNode(const Node& node);

// The slice `node` belongs to: its ray.io/tpu-slice-name label, else its node
// id when it is a single-host TPU node, else "" (no slice).
std::string SliceNameOf(const Node& node);

}  // namespace sliced::scheduler

#endif  // SLICED_SCHEDULER_SLICES_H_
