// InventorySnapshot: the immutable, indexed view of the cluster the solver
// reads (DESIGN §3), and SnapshotDelta, the change that derives the next one
// (leveldb Version + VersionEdit).
//
// A snapshot holds:
//   - nodes under dense indexes 0..n-1, sorted by node id;
//   - a label index key -> value -> sorted node indexes;
//   - per node: free capacity in fixed point (total minus allocations) and
//     the allocations held on it;
//   - slices (DeriveSlices) with intact/free state, free = no allocation on
//     any of its hosts;
//   - an index of free intact slices by (generation, topology, tier, zone), so
//     a slice request never scans the cluster;
//   - per-node placement ranks (which nodes a generic bundle should try
//     first, see solver.h) as bitsets.
//
// Everything lives in copy-on-write chunks shared between snapshots:
// Apply(delta) copies only the chunks the delta touches, so deriving the next
// snapshot after a placement costs O(k log n) for k touched nodes, not O(n).
// A delta that adds or removes nodes, or changes a node's slice membership
// labels, falls back to a full rebuild (O(n log n)); registrations come in
// batches, placements one by one.
//
// Thread-safety: immutable after Build()/Apply(); share freely through
// std::shared_ptr<const InventorySnapshot>. Apply() does not modify `this`.
#ifndef SLICED_SCHEDULER_SNAPSHOT_H_
#define SLICED_SCHEDULER_SNAPSHOT_H_

#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <tuple>
#include <vector>

#include "absl/container/btree_map.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "scheduler/labels.h"
#include "scheduler/slices.h"
#include "scheduler/tpu.h"
#include "scheduler/types.h"

namespace sliced::scheduler {

// One bundle of a placement group held on one node.
struct Allocation {
  std::string pg_id;
  int bundle_index = 0;
  std::string node_id;
  ResourceSet resources;

  friend bool operator==(const Allocation&, const Allocation&) = default;
};

// The change from one snapshot to the next. Applied in this order: node
// upserts, node removals, releases, then new allocations.
struct SnapshotDelta {
  std::vector<Node> upsert_nodes;            // insert or replace by node_id
  std::vector<std::string> remove_node_ids;  // REQUIRES: no allocations left
  std::vector<std::string> release_pg_ids;   // drop all of a PG's allocations
  std::vector<Allocation> add_allocations;
};

// A slice and whether it can be handed out now.
struct SliceState {
  SliceInfo info;
  bool free = false;  // no allocation on any of its hosts

  friend bool operator==(const SliceState&, const SliceState&) = default;
};

// Copy-on-write chunked array: chunks are shared between snapshots and copied
// only when written. A copy of the array owns none of its chunks: the first
// Mutable() of a chunk copies it (never reasoning from use_count(), which
// would race with another thread dropping the last reader). Engine-internal;
// exposed for the solver.
template <typename T, int kChunkShift>
class CowArray {
 public:
  static constexpr size_t kChunkSize = size_t{1} << kChunkShift;

  CowArray() = default;
  explicit CowArray(size_t n, const T& fill = T()) { Resize(n, fill); }
  CowArray(const CowArray& other)
      : chunks_(other.chunks_),
        owned_(other.chunks_.size(), false),
        size_(other.size_) {}
  CowArray& operator=(const CowArray& other) {
    chunks_ = other.chunks_;
    owned_.assign(chunks_.size(), false);
    size_ = other.size_;
    return *this;
  }
  CowArray(CowArray&&) = default;
  CowArray& operator=(CowArray&&) = default;

  size_t size() const { return size_; }
  const T& operator[](size_t i) const {
    return (*chunks_[i >> kChunkShift])[i & (kChunkSize - 1)];
  }
  // Only the single writer building a new, unpublished snapshot calls this.
  T& Mutable(size_t i) {
    const size_t c = i >> kChunkShift;
    if (!owned_[c]) {
      chunks_[c] = std::make_shared<std::vector<T>>(*chunks_[c]);
      owned_[c] = true;
    }
    return (*chunks_[c])[i & (kChunkSize - 1)];
  }
  void Resize(size_t n, const T& fill = T()) {
    size_ = n;
    chunks_.resize((n + kChunkSize - 1) >> kChunkShift);
    owned_.resize(chunks_.size(), false);
    for (size_t c = 0; c < chunks_.size(); ++c) {
      if (chunks_[c] == nullptr) {
        chunks_[c] = std::make_shared<std::vector<T>>(kChunkSize, fill);
        owned_[c] = true;
      }
    }
  }

 private:
  std::vector<std::shared_ptr<std::vector<T>>> chunks_;
  std::vector<bool> owned_;  // chunks this copy created or already copied
  size_t size_ = 0;
};

// A copy-on-write bitset over node (or slice) indexes.
class CowBitset {
 public:
  CowBitset() = default;
  explicit CowBitset(size_t bits) : words_((bits + 63) / 64, 0), bits_(bits) {}

  size_t bits() const { return bits_; }
  size_t num_words() const { return words_.size(); }
  uint64_t word(size_t w) const { return words_[w]; }
  bool Test(size_t i) const { return (words_[i >> 6] >> (i & 63)) & 1; }
  void Set(size_t i, bool value);
  int64_t count() const { return count_; }
  // Index of the first set bit >= from, or bits() when there is none.
  size_t NextSet(size_t from) const;

 private:
  CowArray<uint64_t, 6> words_;  // 64 words = 4096 bits per chunk
  size_t bits_ = 0;
  int64_t count_ = 0;
};

// How a generic bundle should rank a node (lower = try first; solver.h
// explains the order). kNumRanks means "never" (node not ALIVE, or no TPU for
// a TPU bundle).
enum class BundleKind { kCpuOnly = 0, kTpu = 1 };
inline constexpr int kNumRanks = 9;  // rank 8: no CPU (TPU) left at all

// Key of the free intact slice index.
struct SliceKey {
  TpuGeneration generation = TpuGeneration::kV6e;
  std::string topology;  // canonical
  std::string tier;      // sliced.io/capacity-tier of worker 0, "" if none
  std::string zone;      // ray.io/availability-zone of worker 0, "" if none

  friend auto operator<=>(const SliceKey& a, const SliceKey& b) {
    return std::tie(a.generation, a.topology, a.tier, a.zone) <=>
           std::tie(b.generation, b.topology, b.tier, b.zone);
  }
  friend bool operator==(const SliceKey&, const SliceKey&) = default;
};

class InventorySnapshot {
 public:
  // Per-node state. Engine-internal; exposed for the solver.
  struct NodeEntry {
    Node node;
    ResourceSet free;  // total - allocations; < 0 if over-committed
    std::vector<Allocation> allocations;  // sorted by (pg_id, bundle_index)
    int32_t slice = -1;                   // index into slices, -1 when none
    bool tpu = false;                     // has a "TPU" resource
    bool single_host = false;             // its slice has one host
  };
  // Per-slice state. Engine-internal; exposed for the solver.
  struct SliceEntry {
    SliceInfo info;
    bool shape_known = false;
    TpuShape shape;               // valid when shape_known
    std::vector<uint32_t> hosts;  // node indexes, worker-id order if intact
    std::string tier;
    std::string zone;
    int64_t allocated_hosts = 0;  // hosts holding any allocation
    bool free() const { return allocated_hosts == 0; }
  };
  using FreeSliceIndex =
      absl::btree_map<SliceKey, std::shared_ptr<const CowBitset>>;
  using PostingList = std::vector<uint32_t>;  // sorted node indexes
  using ValueIndex =
      absl::btree_map<std::string, std::shared_ptr<const PostingList>>;
  using LabelIndex =
      absl::btree_map<std::string, std::shared_ptr<const ValueIndex>>;

  // Builds a snapshot from scratch. Node ids must be unique and non-empty.
  // Returns InvalidArgument for duplicate/empty node ids, NotFound for an
  // allocation on an unknown node, InvalidArgument for a duplicate
  // (pg_id, bundle_index). Over-committed nodes are accepted here; see
  // CheckNotOverCommitted().
  static absl::StatusOr<std::shared_ptr<const InventorySnapshot>> Build(
      std::vector<Node> nodes, std::vector<Allocation> allocations);

  // An empty inventory.
  static std::shared_ptr<const InventorySnapshot> Empty();

  // Derives the next snapshot. Errors (nothing is applied): NotFound for an
  // allocation on an unknown node or removal of an unknown node;
  // InvalidArgument for a duplicate (pg_id, bundle_index) or empty node id;
  // FailedPrecondition when a new allocation does not fit the node's free
  // capacity or a removed node still holds allocations.
  absl::StatusOr<std::shared_ptr<const InventorySnapshot>> Apply(
      const SnapshotDelta& delta) const;

  // OK when no node holds more than its capacity of any resource (no chip is
  // held twice); otherwise FailedPrecondition naming the nodes, resources and
  // the PGs holding them. For use at recovery.
  absl::Status CheckNotOverCommitted() const;

  // --- Queries -------------------------------------------------------------
  size_t num_nodes() const { return nodes_.size(); }
  size_t num_slices() const { return slices_.size(); }
  // Nullptr when unknown.
  const Node* FindNode(absl::string_view node_id) const;
  // Free capacity of a node; NotFound when unknown.
  absl::StatusOr<ResourceSet> FreeResources(absl::string_view node_id) const;
  // All slices, sorted by name.
  std::vector<SliceState> ListSlices() const;
  // NotFound when unknown.
  absl::StatusOr<SliceState> GetSlice(absl::string_view name) const;
  // A PG's allocations sorted by bundle index; empty when it holds none.
  std::vector<Allocation> AllocationsOf(absl::string_view pg_id) const;
  // Indexes of the nodes matching `selector` (any state), ascending, i.e.
  // sorted by node id; uses the label index (for ListNodes' filter).
  std::vector<uint32_t> MatchingNodes(const LabelSelector& selector) const;
  int64_t num_allocations() const { return num_allocations_; }

  // --- Engine-internal accessors used by the solver
  // ---------------------------
  const NodeEntry& node(uint32_t i) const { return *nodes_[i]; }
  const SliceEntry& slice(uint32_t i) const { return *slices_[i]; }
  // -1 when unknown.
  int64_t NodeIndex(absl::string_view node_id) const;
  int64_t SliceIndex(absl::string_view name) const;
  const LabelIndex& label_index() const { return *label_index_; }
  const FreeSliceIndex& free_slices() const { return *free_slices_; }
  // Slice indexes (ascending) per (generation, topology, tier, zone), every
  // slice of a known shape whatever its state. A slice's key only changes
  // with labels that force a rebuild, so Apply() shares this map.
  using SliceKeyIndex = absl::btree_map<SliceKey, std::vector<uint32_t>>;
  const SliceKeyIndex& slices_by_key() const { return *slices_by_key_; }
  // Nodes of rank r for bundles of `kind` (ALIVE nodes only).
  const CowBitset& rank_set(BundleKind kind, int r) const {
    return rank_sets_[static_cast<int>(kind)][r];
  }
  // The rank of node i for a bundle kind; kNumRanks when it takes none.
  int Rank(BundleKind kind, uint32_t i) const;

 private:
  using PgIndex = absl::flat_hash_map<std::string, std::vector<Allocation>>;
  static constexpr int kPgShards = 4096;

  InventorySnapshot() = default;
  // Only Apply() copies a snapshot (to derive the next one).
  InventorySnapshot(const InventorySnapshot&) = default;
  InventorySnapshot& operator=(const InventorySnapshot&) = delete;
  friend class SnapshotWriter;
  // True when slice s exists, is intact and free.
  bool SliceFreeIntact(int32_t s) const;

  CowArray<std::shared_ptr<const NodeEntry>, 8> nodes_;
  CowArray<std::shared_ptr<const SliceEntry>, 8> slices_;
  std::shared_ptr<const absl::flat_hash_map<std::string, uint32_t>> node_ids_;
  std::shared_ptr<const absl::flat_hash_map<std::string, uint32_t>> slice_ids_;
  std::shared_ptr<const SliceKeyIndex> slices_by_key_;
  std::shared_ptr<const LabelIndex> label_index_;
  std::shared_ptr<const FreeSliceIndex> free_slices_;
  std::array<std::array<CowBitset, kNumRanks>, 2> rank_sets_;
  // PG id -> its allocations, sharded by hash; shards are copied on write.
  CowArray<std::shared_ptr<const PgIndex>, 6> pgs_;
  int64_t num_allocations_ = 0;
};

}  // namespace sliced::scheduler

#endif  // SLICED_SCHEDULER_SNAPSHOT_H_
