// Free sub-slices per slice; see subslices.h.
#include "scheduler/subslices.h"

#include "scheduler/internal/carver.h"
#include "scheduler/internal/snapshot_state.h"

namespace sliced::scheduler {

SubsliceCapacity FreeSubslices(const InventorySnapshot& snapshot,
                               absl::string_view name) {
  const int64_t index = internal::StateOf(snapshot).SliceIndex(name);
  if (index < 0) return {};
  return FreeSubslices(snapshot, static_cast<uint32_t>(index));
}

SubsliceCapacity FreeSubslices(const InventorySnapshot& snapshot,
                               uint32_t slice) {
  const internal::SnapshotState& snap = internal::StateOf(snapshot);
  if (slice >= snap.num_slices()) return {};
  const InventorySnapshot::SliceEntry& se = snap.slice(slice);
  if (!se.info.intact || !se.shape_known) return {};
  return internal::CapacityOf(snap, se);
}

}  // namespace sliced::scheduler
