// What sub-slices the inventory could give now (issue 16): per intact slice,
// how many free aligned boxes of each smaller shape of its generation it
// holds. For ListSlices, the cluster summary and /metrics; the carver
// (scheduler/internal/carver.h) places them.
//
// Pure functions of an immutable snapshot; thread-safe.
#ifndef SLICED_SCHEDULER_SUBSLICES_H_
#define SLICED_SCHEDULER_SUBSLICES_H_

#include <cstdint>
#include <string>

#include "absl/container/btree_map.h"
#include "absl/strings/string_view.h"
#include "scheduler/snapshot.h"

namespace sliced::scheduler {

struct SubsliceCapacity {
  // Canonical topology -> free aligned boxes of it (hosts ALIVE, no TPU
  // work), for every valid shape smaller than the slice that can be carved
  // out of it; shapes with none are listed with 0.
  absl::btree_map<std::string, int64_t> free_boxes;
  // The largest of those shapes (most chips; ties by name) with a free box,
  // "" when there is none, and its chips (0 when none).
  std::string largest_free;
  int64_t largest_free_chips = 0;
};

// The sub-slice capacity of slice `name`; empty when the slice is unknown,
// not intact or of an unknown shape.
SubsliceCapacity FreeSubslices(const InventorySnapshot& snapshot,
                               absl::string_view name);
// The same by slice index (0 .. num_slices() - 1).
SubsliceCapacity FreeSubslices(const InventorySnapshot& snapshot,
                               uint32_t slice);

}  // namespace sliced::scheduler

#endif  // SLICED_SCHEDULER_SUBSLICES_H_
