// Free sub-slices per slice; see subslices.h.
#include "scheduler/subslices.h"

#include "scheduler/internal/carver.h"
#include "scheduler/internal/snapshot_state.h"

namespace sliced::scheduler {

SubsliceCapacity FreeSubslices(const InventorySnapshot& snapshot,
                               absl::string_view name) {
  const internal::SnapshotState& snap = internal::StateOf(snapshot);
  const int64_t index = snap.SliceIndex(name);
  if (index < 0) return {};
  const InventorySnapshot::SliceEntry& se = snap.slice(index);
  if (!se.info.intact || !se.shape_known) return {};
  return internal::CapacityOf(snap, se);
}

}  // namespace sliced::scheduler
