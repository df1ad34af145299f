// The state behind an InventorySnapshot: the copy-on-write node and slice
// tables, the label index, the per-key slice indexes and the rank and label
// value bitsets the solver reads. InventorySnapshot (snapshot.h) shows users
// the queries they need; the solver and the snapshot writer reach this state
// through StateOf(). Engine-internal: include only from scheduler/ (and its
// tests).
//
// Thread-safety: immutable once its snapshot is published (Build()/Apply()
// returned); share freely. Only SnapshotWriter (snapshot.cc) writes it, while
// the snapshot is unpublished.
#ifndef SLICED_SCHEDULER_INTERNAL_SNAPSHOT_STATE_H_
#define SLICED_SCHEDULER_INTERNAL_SNAPSHOT_STATE_H_

#include <array>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/btree_map.h"
#include "absl/container/flat_hash_map.h"
#include "absl/strings/string_view.h"
#include "scheduler/internal/cow.h"
#include "scheduler/snapshot.h"

namespace sliced::scheduler {
class SnapshotWriter;
}  // namespace sliced::scheduler

namespace sliced::scheduler::internal {

// A value per slice key (generation, topology, tier, zone), in key order. A
// key gets a slot the first time it is set and keeps it (keys are few and
// rarely new: shapes x tiers x zones); the values live in a copy-on-write
// array by slot. So copying the map costs two pointers, and changing one
// key's value copies one chunk of the array, not the map (a busy fleet has a
// couple of hundred keys, and every slice taken or freed changes one).
// `V` is a shared pointer; a value that IsEmpty() is stored as null and
// skipped by iteration.
template <typename V>
class SliceKeyMap {
 public:
  // Over the keys with a value, in key order; `->first` is the key,
  // `->second` its value.
  class const_iterator {
   public:
    using Slots = absl::btree_map<SliceKey, uint32_t>;
    using value_type = std::pair<const SliceKey&, const V&>;

    const_iterator(typename Slots::const_iterator it,
                   typename Slots::const_iterator end,
                   const CowArray<V, 4>* values)
        : it_(it), end_(end), values_(values) {
      SkipEmpty();
    }
    value_type operator*() const {
      return {it_->first, (*values_)[it_->second]};
    }
    // The pair lives in the iterator: valid until it moves.
    const value_type* operator->() const {
      current_.emplace(**this);
      return &*current_;
    }
    const_iterator& operator++() {
      ++it_;
      SkipEmpty();
      return *this;
    }
    bool operator==(const const_iterator& o) const { return it_ == o.it_; }
    bool operator!=(const const_iterator& o) const { return it_ != o.it_; }

   private:
    void SkipEmpty() {
      while (it_ != end_ && (*values_)[it_->second] == nullptr) ++it_;
    }
    typename Slots::const_iterator it_, end_;
    const CowArray<V, 4>* values_;
    mutable std::optional<value_type> current_;
  };

  const_iterator begin() const { return At(slots_->begin()); }
  const_iterator end() const { return At(slots_->end()); }
  const_iterator lower_bound(const SliceKey& key) const {
    return At(slots_->lower_bound(key));
  }
  bool contains(const SliceKey& key) const { return Find(key) != nullptr; }
  // The key's value; nullptr when it has none.
  const typename V::element_type* Find(const SliceKey& key) const {
    auto it = slots_->find(key);
    return it == slots_->end() ? nullptr : values_[it->second].get();
  }

  // Only the snapshot writer calls these, on an unpublished snapshot.
  // Sets the key's value (null or empty: none).
  void Put(const SliceKey& key, V value) {
    if (IsEmpty(value)) value = nullptr;
    auto it = slots_->find(key);
    if (it == slots_->end()) {
      if (value == nullptr) return;
      // A new key: the one time the key map is copied.
      auto slots = std::make_shared<typename const_iterator::Slots>(*slots_);
      it = slots->emplace(key, static_cast<uint32_t>(values_.size())).first;
      values_.Resize(values_.size() + 1);
      slots_ = std::move(slots);
    }
    values_.Mutable(it->second) = std::move(value);
  }
  // Calls `fn(value)` on every value, which it may replace.
  void ForEachMutable(const std::function<void(V& value)>& fn) {
    for (size_t slot = 0; slot < values_.size(); ++slot) {
      if (values_[slot] == nullptr) continue;
      V& value = values_.Mutable(slot);
      fn(value);
      if (IsEmpty(value)) value = nullptr;
    }
  }

 private:
  static bool IsEmpty(const std::shared_ptr<const CowBitset>& set) {
    return set == nullptr || set->count() == 0;
  }
  template <typename T>
  static bool IsEmpty(const std::shared_ptr<const T>& value) {
    return value == nullptr;
  }
  const_iterator At(typename const_iterator::Slots::const_iterator it) const {
    return const_iterator(it, slots_->end(), &values_);
  }

  std::shared_ptr<const typename const_iterator::Slots> slots_ =
      std::make_shared<const typename const_iterator::Slots>();
  CowArray<V, 4> values_;  // by slot; null when none
};

// Slices per key as bitsets over slice indexes (each with its count), e.g.
// the free intact ones.
using SliceSets = SliceKeyMap<std::shared_ptr<const CowBitset>>;

// What the hosts of a key's slices have. A request that asks no more of a
// host than `least` fits every host of the key; one whose TPU per host is
// both the least's TPU and `most_tpu` counts its chips as every host does
// (v7x hosts count 1 or 2 per chip). The diagnosis then learns both without
// reading a slice.
struct KeyHosts {
  // The least of the slices' host_min: per resource, what the least host
  // has (a resource some host lacks is left out). Never null; shared with
  // the slices when they all have one set.
  std::shared_ptr<const ResourceSet> least;
  // The most of the slices' host_most_tpu.
  int64_t most_tpu = 0;
};

// How a generic bundle should rank a node (lower = try first; solver.h
// explains the order). kNumRanks means "never" (node not ALIVE, or no TPU for
// a TPU bundle).
enum class BundleKind { kCpuOnly = 0, kTpu = 1 };
inline constexpr int kNumRanks = 10;  // rank 9: no CPU (TPU) left at all
// CPU-only tiers. Below kCpuRankNoFreeTpu: CPU nodes and TPU nodes of
// slices already broken (0-3); then free single-host TPU nodes (4); then
// hosts of an intact multi-host slice held by TPU work alone (5), which is
// whole again when that work ends unless a CPU bundle stays; then hosts of
// free intact multi-host slices (6-8).
inline constexpr int kCpuRankNoFreeTpu = 4;
inline constexpr int kCpuRankNoFreeMultiHost = 5;
inline constexpr int kCpuRankNoWholeMultiHost = 6;

// The PG index is split into 2^kPgShardBits shards by the low bits of the
// id's hash; a shard spreads its groups over buckets by the next bits.
inline constexpr int kPgShardBits = 12;

// One shard of the PG index: PG id -> its allocations (sorted by bundle
// index). A write copies the shard's bucket pointers and the one bucket it
// changes, so its cost does not grow with the groups the cluster holds: the
// buckets double when they hold more than kBucketGroups groups on average
// (they never shrink). The lists are shared between snapshots.
class PgShard {
 public:
  using List = std::shared_ptr<const std::vector<Allocation>>;
  using Bucket = absl::flat_hash_map<std::string, List>;
  static constexpr size_t kBucketGroups = 8;

  PgShard() : buckets_(1, std::make_shared<const Bucket>()) {}

  // The allocations of `pg_id`, whose hash is `hash` (SnapshotState::PgHash);
  // null when the shard has none.
  const List* Find(absl::string_view pg_id, size_t hash) const {
    const Bucket& bucket = *buckets_[BucketOf(hash)];
    auto it = bucket.find(pg_id);
    return it == bucket.end() ? nullptr : &it->second;
  }
  size_t size() const { return size_; }
  size_t num_buckets() const { return buckets_.size(); }

 private:
  friend class sliced::scheduler::SnapshotWriter;

  // The bucket of `hash` among `n` (a power of 2).
  static size_t BucketOf(size_t hash, size_t n) {
    return (hash >> kPgShardBits) & (n - 1);
  }
  size_t BucketOf(size_t hash) const { return BucketOf(hash, buckets_.size()); }

  std::vector<std::shared_ptr<const Bucket>> buckets_;  // a power of 2
  size_t size_ = 0;                                     // groups
};

// One shard of a name -> slot map (node ids, slice names): the slots with
// their names' hashes, in no order. The names are not kept again: the table
// the slots index holds them, and a lookup reads the name there. Copying a
// shard (a write to a published one) is then one block of a few words per
// name, not a string and a re-hash per name.
class SlotShard {
 public:
  // The slot named `name`, whose hash is `hash`, or -1. `name_of(slot)`
  // reads a slot's name (empty for a free slot; no name is empty).
  template <typename NameOf>
  int64_t Find(absl::string_view name, uint64_t hash,
               const NameOf& name_of) const {
    const uint32_t tag = Tag(hash);
    for (const Entry& e : entries_) {
      if (e.tag == tag && name_of(e.slot) == name) return e.slot;
    }
    return -1;
  }
  size_t size() const { return entries_.size(); }
  // `slot`, whose name's hash is `hash`, is in the shard from now on.
  void Add(uint64_t hash, uint32_t slot) {
    entries_.push_back({Tag(hash), slot});
  }
  // Drops `slot`'s entry, if any.
  void Remove(uint32_t slot) {
    for (Entry& e : entries_) {
      if (e.slot == slot) {
        e = entries_.back();
        entries_.pop_back();
        return;
      }
    }
  }

 private:
  struct Entry {
    uint32_t tag;  // Tag() of the name's hash
    uint32_t slot;
  };
  // The hash bits a shard keeps: those above the ones that pick the shard
  // (SnapshotState::IdShardOf).
  static uint32_t Tag(uint64_t hash) {
    return static_cast<uint32_t>(hash >> 32);
  }

  std::vector<Entry> entries_;
};

// Label keys whose values are held as bitsets over node indexes too
// (SnapshotState::value_bits()): each has few values, each value is on many
// nodes, and the solver asks for them on every zone try and compute-class
// priority. Each is one of the labels a node changes only through a
// node-set change (SameSliceLabels() in the writer), never in place.
inline constexpr std::array<absl::string_view, 3> kBitsetLabelKeys = {
    kLabelZone, kLabelCapacityTier, kLabelAcceleratorType};

class SnapshotState {
 public:
  using NodeEntry = InventorySnapshot::NodeEntry;
  using SliceEntry = InventorySnapshot::SliceEntry;
  using SliceKeyIndex = InventorySnapshot::SliceKeyIndex;
  using PostingList = CowSortedSet;  // sorted node slots
  // A key's values, in copy-on-write chunks: ray.io/node-id alone has a
  // value per node.
  using ValueIndex = CowMap<std::shared_ptr<const PostingList>>;
  using LabelIndex =
      absl::btree_map<std::string, std::shared_ptr<const ValueIndex>>;
  static constexpr int kPgShards = 1 << kPgShardBits;
  // Node id (or slice name) -> slot, one shard.
  using IdShard = SlotShard;
  // Resource name -> total amount a node has -> how many nodes have it.
  using AmountCounts =
      absl::btree_map<std::string, absl::btree_map<int64_t, int64_t>>;
  // A label value -> its nodes, by index.
  using ValueBits = absl::btree_map<std::string, CowBitset>;
  // By key of kBitsetLabelKeys, in that order.
  using LabelBits = std::array<ValueBits, kBitsetLabelKeys.size()>;
  static constexpr int kIdShards = 4096;
  static constexpr uint32_t kNoIndex = ~uint32_t{0};
  static constexpr uint32_t kNoSlot = ~uint32_t{0};  // a gap's slot

  // Node indexes may have gaps (see "Gaps" in SnapshotWriter): index i
  // holds a node when has_node(i), for i < index_end().
  size_t num_nodes() const { return static_cast<size_t>(node_bits_.count()); }
  size_t index_end() const { return slot_of_index_.size(); }
  bool has_node(uint32_t i) const { return slot_of_index_[i] != kNoSlot; }
  size_t num_slices() const { return slice_slot_of_index_.size(); }
  // REQUIRES: has_node(i).
  const NodeEntry& node(uint32_t i) const { return *nodes_[slot_of_index_[i]]; }
  const SliceEntry& slice(uint32_t i) const {
    return *slices_[slice_slot_of_index_[i]];
  }
  // -1 when unknown.
  int64_t NodeIndex(absl::string_view node_id) const;
  int64_t SliceIndex(absl::string_view name) const;
  // Nodes have a slot besides their index. The index is the node's place in
  // id order (what bitsets and the solver use) and moves when nodes are
  // added or removed before it; the slot never changes while the node
  // lives. The node table, posting lists and slice hosts hold slots, so
  // adding a node does not renumber them. After a full build, slot ==
  // index; a removed node's slot is taken again by a later added node.
  uint32_t IndexOfSlot(uint32_t slot) const { return index_of_slot_[slot]; }
  // Slots in use or free (the node table's size).
  size_t num_node_slots() const { return index_of_slot_.size(); }
  uint32_t SlotOf(uint32_t i) const { return slot_of_index_[i]; }
  uint32_t HostIndex(const SliceEntry& se, size_t w) const {
    return index_of_slot_[se.host_slots[w]];
  }
  // Slices have slots too (NodeEntry::slice_slot, the slice table), taken
  // again as node slots are; their index is their place in name order. -1
  // when the node is in no slice.
  int32_t SliceOf(const NodeEntry& e) const {
    return e.slice_slot < 0
               ? -1
               : static_cast<int32_t>(slice_index_of_slot_[e.slice_slot]);
  }
  uint32_t SliceSlotOf(uint32_t s) const { return slice_slot_of_index_[s]; }
  uint32_t IndexOfSliceSlot(uint32_t slot) const {
    return slice_index_of_slot_[slot];
  }
  size_t num_slice_slots() const { return slice_index_of_slot_.size(); }
  // Label key -> value -> the slots of the nodes carrying it (any state).
  const LabelIndex& label_index() const { return *label_index_; }
  // For a key of kBitsetLabelKeys, the label index's values again, as
  // bitsets over node indexes (any state; no empty set); null for any other
  // key. A term on such a key then costs O(n/64) words instead of a walk of
  // its values' posting lists, which hold a large part of the nodes each.
  const ValueBits* value_bits(absl::string_view key) const {
    for (size_t k = 0; k < kBitsetLabelKeys.size(); ++k) {
      if (kBitsetLabelKeys[k] == key) return &(*label_bits_)[k];
    }
    return nullptr;
  }
  // The most of resource `name` any node has in total (any state); 0 when
  // no node has it. A request for more fits no node, now or later.
  int64_t MostOnANode(const std::string& name) const {
    auto it = node_totals_->find(name);
    return it == node_totals_->end() || it->second.empty()
               ? 0
               : it->second.rbegin()->first;
  }
  // Per resource, the nodes' totals (what MostOnANode() reads).
  const AmountCounts& node_totals() const { return *node_totals_; }
  // Free intact slices per key.
  const SliceSets& free_slices() const { return free_slices_; }
  // Slices not intact per key (any allocations).
  const SliceSets& broken_slices() const { return broken_slices_; }
  // Intact slices per key that a sub-slice may be carved from: those no host
  // of which has TPU work (SliceEntry::tpu_busy_hosts), and those some but
  // not all hosts of which have it. A slice every host of which has TPU
  // work is in neither: no box of it is free.
  const SliceSets& idle_slices() const { return idle_slices_; }
  const SliceSets& partly_busy_slices() const { return partly_busy_slices_; }
  // Per key, what its hosts have (KeyHosts), for the diagnosis.
  const SliceKeyMap<std::shared_ptr<const KeyHosts>>& key_hosts() const {
    return key_hosts_;
  }
  const SliceKeyIndex& slices_by_key() const { return *slices_by_key_; }
  // Bit i set when has_node(i): the indexes that are not gaps.
  const CowBitset& node_bits() const { return node_bits_; }
  // Nodes of rank r for bundles of `kind` (ALIVE nodes only).
  const CowBitset& rank_set(BundleKind kind, int r) const {
    return rank_sets_[static_cast<int>(kind)][r];
  }
  // The rank of node i for a bundle kind; kNumRanks when it takes none.
  int Rank(BundleKind kind, uint32_t i) const;
  // The hash of a PG id that picks its shard (PgShardOf) and its bucket.
  static size_t PgHash(absl::string_view pg_id);
  static size_t PgShardOf(size_t hash) { return hash & (kPgShards - 1); }
  const PgShard& pg_shard(size_t shard) const { return *pgs_[shard]; }
  int64_t num_allocations() const { return num_allocations_; }

 private:
  friend class sliced::scheduler::SnapshotWriter;

  // The slot of node `node_id`, or -1.
  int64_t NodeSlot(absl::string_view node_id) const;
  // A node id's or slice name's hash, and the shard that holds it.
  static uint64_t IdHash(absl::string_view name);
  static size_t IdShardOf(uint64_t hash) { return hash % kIdShards; }
  // True when slice s exists, is intact and free.
  bool SliceFreeIntact(int32_t s) const;

  // By slot; null for a free slot.
  CowArray<std::shared_ptr<const NodeEntry>, 8> nodes_;
  CowArray<std::shared_ptr<const SliceEntry>, 8> slices_;  // by slot
  CowArray<std::shared_ptr<const IdShard>, 6> node_ids_;  // by IdShardOf()
  CowArray<uint32_t, 10> slot_of_index_;                  // kNoSlot for a gap
  CowBitset node_bits_;                   // see node_bits()
  CowArray<uint32_t, 10> index_of_slot_;  // kNoIndex for a free slot
  // The free slots, ascending: an added node takes the lowest.
  std::shared_ptr<const std::vector<uint32_t>> free_node_slots_ =
      std::make_shared<const std::vector<uint32_t>>();
  CowArray<std::shared_ptr<const IdShard>, 6> slice_ids_;  // name -> slot
  CowArray<uint32_t, 10> slice_slot_of_index_;
  CowArray<uint32_t, 10> slice_index_of_slot_;  // kNoIndex when free
  std::shared_ptr<const std::vector<uint32_t>> free_slice_slots_ =
      std::make_shared<const std::vector<uint32_t>>();  // ascending
  std::shared_ptr<const SliceKeyIndex> slices_by_key_;
  std::shared_ptr<const LabelIndex> label_index_;
  std::shared_ptr<const LabelBits> label_bits_ = std::make_shared<LabelBits>();
  std::shared_ptr<const AmountCounts> node_totals_ =
      std::make_shared<AmountCounts>();
  SliceSets free_slices_;
  SliceSets broken_slices_;
  SliceSets idle_slices_;
  SliceSets partly_busy_slices_;
  SliceKeyMap<std::shared_ptr<const KeyHosts>> key_hosts_;
  std::array<std::array<CowBitset, kNumRanks>, 2> rank_sets_;
  // PG id -> its allocations, sharded by hash; see PgShard.
  CowArray<std::shared_ptr<const PgShard>, 6> pgs_;
  int64_t num_allocations_ = 0;
};

}  // namespace sliced::scheduler::internal

#endif  // SLICED_SCHEDULER_INTERNAL_SNAPSHOT_STATE_H_
