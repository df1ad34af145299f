// Free sub-slices per slice; see subslices.h.
#include "scheduler/subslices.h"

#include <array>
#include <string>
#include <vector>

#include "absl/strings/str_join.h"
#include "scheduler/internal/carver.h"
#include "scheduler/internal/resources.h"
#include "scheduler/internal/snapshot_state.h"
#include "scheduler/tpu.h"

namespace sliced::scheduler {

SubsliceCapacity FreeSubslices(const InventorySnapshot& snapshot,
                               absl::string_view name) {
  SubsliceCapacity out;
  const internal::SnapshotState& snap = internal::StateOf(snapshot);
  const int64_t index = snap.SliceIndex(name);
  if (index < 0) return out;
  const InventorySnapshot::SliceEntry& se = snap.slice(index);
  if (!se.info.intact || !se.shape_known) return out;
  const std::vector<int32_t> cells = internal::HostCells(se);
  const std::vector<int>& grid = se.shape.host_grid;
  // Free cells: ALIVE hosts holding no TPU work.
  std::vector<char> free(cells.size(), 0);
  for (size_t c = 0; c < cells.size(); ++c) {
    if (cells[c] < 0) continue;
    const InventorySnapshot::NodeEntry& e = snap.node(se.hosts[cells[c]]);
    free[c] = TakesPlacements(e.node) &&
              internal::Amount(e.free, internal::TpuName()) >=
                  internal::Amount(e.node.resources, internal::TpuName());
  }
  auto cell = [&](int x, int y, int z) {
    return x + grid[0] * (y + grid[1] * z);
  };
  int64_t largest_chips = 0;
  // Every host-grid box no larger than the slice, as a topology.
  for (int bz = 1; bz <= grid[2]; ++bz) {
    for (int by = 1; by <= grid[1]; ++by) {
      for (int bx = 1; bx <= grid[0]; ++bx) {
        std::vector<int> dims = {bx * se.shape.host_box[0],
                                 by * se.shape.host_box[1],
                                 bz * se.shape.host_box[2]};
        if (se.shape.dims.size() == 2) dims.pop_back();
        auto shape =
            ResolveTpuShape(se.shape.generation, absl::StrJoin(dims, "x"));
        if (!shape.ok() || shape->topology == se.shape.topology ||
            !internal::CanCarve(se.shape, *shape) ||
            shape->host_grid != std::vector<int>{bx, by, bz}) {
          continue;
        }
        int64_t count = 0;
        for (int oz = 0; oz + bz <= grid[2]; oz += bz) {
          for (int oy = 0; oy + by <= grid[1]; oy += by) {
            for (int ox = 0; ox + bx <= grid[0]; ox += bx) {
              bool all = true;
              for (int z = 0; z < bz && all; ++z) {
                for (int y = 0; y < by && all; ++y) {
                  for (int x = 0; x < bx && all; ++x) {
                    all = free[cell(ox + x, oy + y, oz + z)];
                  }
                }
              }
              count += all ? 1 : 0;
            }
          }
        }
        out.free_boxes[shape->topology] = count;
        if (count > 0 && (shape->chips > largest_chips ||
                          (shape->chips == largest_chips &&
                           shape->topology < out.largest_free))) {
          largest_chips = shape->chips;
          out.largest_free = shape->topology;
        }
      }
    }
  }
  return out;
}

}  // namespace sliced::scheduler
