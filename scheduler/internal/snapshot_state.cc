// The state behind an InventorySnapshot; see snapshot_state.h.
//
// Thread-safety: const methods only; see snapshot_state.h.
#include "scheduler/internal/snapshot_state.h"

#include "absl/hash/hash.h"
#include "scheduler/types.h"

namespace sliced::scheduler::internal {

int64_t SnapshotState::NodeIndex(absl::string_view node_id) const {
  const int64_t slot = NodeSlot(node_id);
  return slot < 0 ? int64_t{-1} : int64_t{index_of_slot_[slot]};
}

int64_t SnapshotState::NodeSlot(absl::string_view node_id) const {
  if (node_ids_.size() == 0) return -1;
  const uint64_t hash = IdHash(node_id);
  return node_ids_[IdShardOf(hash)]->Find(node_id, hash, [&](uint32_t s) {
    const NodeEntry* e = nodes_[s].get();
    return e == nullptr ? absl::string_view() : e->node.node_id;
  });
}

uint64_t SnapshotState::IdHash(absl::string_view name) {
  return absl::Hash<absl::string_view>()(name);
}

int64_t SnapshotState::SliceIndex(absl::string_view name) const {
  if (slice_ids_.size() == 0) return -1;
  const uint64_t hash = IdHash(name);
  const int64_t slot =
      slice_ids_[IdShardOf(hash)]->Find(name, hash, [&](uint32_t s) {
        const SliceEntry* e = slices_[s].get();
        return e == nullptr ? absl::string_view() : e->info.name;
      });
  return slot < 0 ? int64_t{-1} : int64_t{slice_index_of_slot_[slot]};
}

namespace {

// Consecutive counters that share a shard and a bucket: 2^kPgRunBits.
constexpr int kPgRunBits = 4;
// Fewer trailing hex digits than this is not a counter.
constexpr int kPgCounterDigits = 4;

int HexDigit(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  return -1;
}

}  // namespace

// A commit group creates groups with consecutive ids (the daemon's
// "pg-%012x" of a sequence). Hashed at random, each new group would copy a
// shard and a bucket of its own; an id that ends in a counter keeps runs of
// 2^kPgRunBits consecutive counters in one shard and one bucket instead, so a
// commit group copies one or two. Runs go round the shards in order; which
// bucket a run's lap takes, and where its prefix starts, is hashed.
size_t SnapshotState::PgHash(absl::string_view pg_id) {
  uint64_t counter = 0;
  int digits = 0;
  while (digits < 16 && digits < static_cast<int>(pg_id.size())) {
    const int d = HexDigit(pg_id[pg_id.size() - 1 - digits]);
    if (d < 0) break;
    counter |= static_cast<uint64_t>(d) << (4 * digits);
    ++digits;
  }
  if (digits < kPgCounterDigits) return absl::Hash<absl::string_view>()(pg_id);
  const uint64_t run = counter >> kPgRunBits;
  const size_t mix = absl::HashOf(pg_id.substr(0, pg_id.size() - digits),
                                  run >> kPgShardBits);
  return ((run + mix) & (kPgShards - 1)) | (mix << kPgShardBits);
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
