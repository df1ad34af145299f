// The state behind an InventorySnapshot; see snapshot_state.h.
//
// Thread-safety: const methods only; see snapshot_state.h.
#include "scheduler/internal/snapshot_state.h"

#include "absl/hash/hash.h"
#include "scheduler/types.h"

namespace sliced::scheduler::internal {

int64_t SnapshotState::NodeIndex(absl::string_view node_id) const {
  if (node_ids_.size() == 0) return -1;
  const IdShard& shard = *node_ids_[IdShardOf(node_id)];
  auto it = shard.find(node_id);
  return it == shard.end() ? int64_t{-1} : int64_t{index_of_slot_[it->second]};
}

size_t SnapshotState::IdShardOf(absl::string_view node_id) {
  return absl::Hash<absl::string_view>()(node_id) % kIdShards;
}

int64_t SnapshotState::SliceIndex(absl::string_view name) const {
  if (slice_ids_.size() == 0) return -1;
  const IdShard& shard = *slice_ids_[IdShardOf(name)];
  auto it = shard.find(name);
  return it == shard.end() ? int64_t{-1}
                           : int64_t{slice_index_of_slot_[it->second]};
}

size_t SnapshotState::PgHash(absl::string_view pg_id) {
  return absl::Hash<absl::string_view>()(pg_id);
}

bool SnapshotState::SliceFreeIntact(int32_t s) const {
  return s >= 0 && slice(s).info.intact && slice(s).free();
}

int SnapshotState::Rank(BundleKind kind, uint32_t i) const {
  const NodeEntry& e = node(i);
  if (!TakesPlacements(e.node)) return kNumRanks;
  const bool used = !e.allocations.empty();
  const int32_t s_index = SliceOf(e);
  const bool whole = SliceFreeIntact(s_index);
  // Hosts of free intact multi-host slices come last, smallest slices first
  // (<= 4 hosts, <= 16, larger): breaking a small slice costs less.
  auto whole_multi = [&](int base) {
    const int64_t hosts = slice(s_index).shape.hosts;
    return base + (hosts <= 4 ? 0 : hosts <= 16 ? 1 : 2);
  };
  // An intact multi-host slice that only TPU work holds comes back whole
  // when that work ends, unless a CPU bundle is left on one of its hosts.
  auto held_by_tpu_alone = [&] {
    if (e.single_host || s_index < 0) return false;
    const SliceEntry& s = slice(s_index);
    return s.info.intact && s.tpu_held_hosts > 0 && s.cpu_held_hosts == 0;
  };
  // A node with nothing left of the bundle kind's main resource comes last
  // (still a candidate: a re-placed PG's own allocations count as free).
  auto free_of = [&](absl::string_view name) {
    auto it = e.free.find(name);
    return it == e.free.end() ? int64_t{0} : it->second;
  };
  if (free_of(kind == BundleKind::kTpu ? kResourceTpu : kResourceCpu) <= 0 &&
      (kind == BundleKind::kTpu ? e.tpu
                                : e.node.resources.contains(kResourceCpu))) {
    return kNumRanks - 1;
  }
  if (kind == BundleKind::kCpuOnly) {
    if (!e.tpu) return used ? 0 : 1;
    if (!whole) {
      if (held_by_tpu_alone()) return kCpuRankNoFreeMultiHost;
      return used ? 2 : 3;
    }
    return e.single_host ? kCpuRankNoFreeTpu
                         : whole_multi(kCpuRankNoWholeMultiHost);
  }
  if (!e.tpu) return kNumRanks;
  if (e.single_host) return used ? 0 : (whole ? 2 : 1);
  if (used) return 3;
  return whole ? whole_multi(5) : 4;
}

}  // namespace sliced::scheduler::internal
