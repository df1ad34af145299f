// InventorySnapshot: the immutable, indexed view of the cluster the solver
// reads (DESIGN §3), and SnapshotDelta, the change that derives the next one
// (leveldb Version + VersionEdit).
//
// A snapshot holds:
//   - nodes under indexes sorted by node id, with gaps (index_end(),
//     has_node());
//   - a label index key -> value -> sorted node slots;
//   - per node: free capacity in fixed point (total minus allocations) and
//     the allocations held on it;
//   - slices (DeriveSlices) with intact/free state, free = no allocation on
//     any of its hosts;
//   - an index of free intact slices by (generation, topology, tier, zone), so
//     a slice request never scans the cluster;
//   - per-node placement ranks (which nodes a generic bundle should try
//     first, see solver.h) as bitsets.
// The indexes and the copy-on-write containers are engine-internal
// (scheduler/internal/snapshot_state.h); this header shows the queries.
//
// Everything lives in copy-on-write chunks shared between snapshots:
// Apply(delta) copies only the chunks the delta touches, so deriving the next
// snapshot after a placement costs O(k log n) for k touched nodes, not O(n).
// A delta that adds, removes or re-labels nodes is a delta too (issue 17):
// only the changed nodes and the slices they leave or join are derived
// again; the indexes that name nodes and slices by position are renumbered
// when positions move (integers and pointers, no per-node strings). Build()
// is for load and restart.
//
// SnapshotEditor applies a run of deltas without publishing each step (the
// daemon's writer, across one commit group): what one delta copied, the
// next writes in place.
//
// Thread-safety: immutable after Build()/Apply(); share freely through
// std::shared_ptr<const InventorySnapshot>. Apply() does not modify `this`.
// A SnapshotEditor is for one thread; what it publishes is immutable.
#ifndef SLICED_SCHEDULER_SNAPSHOT_H_
#define SLICED_SCHEDULER_SNAPSHOT_H_

#include <cstddef>
#include <cstdint>
#include <iterator>
#include <memory>
#include <string>
#include <tuple>
#include <vector>

#include "absl/container/btree_map.h"
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

// A node's allocations, sorted by (pg_id, bundle_index). The allocations
// are shared: copying the list (as a snapshot writer copies a node's entry
// to change it) copies a pointer per allocation, not its strings and
// resources.
class AllocationList {
 public:
  using Items = std::vector<std::shared_ptr<const Allocation>>;
  class const_iterator {
   public:
    using iterator_category = std::forward_iterator_tag;
    using value_type = Allocation;
    using difference_type = std::ptrdiff_t;
    using pointer = const Allocation*;
    using reference = const Allocation&;

    const_iterator() = default;
    explicit const_iterator(Items::const_iterator it) : it_(it) {}
    reference operator*() const { return **it_; }
    pointer operator->() const { return it_->get(); }
    const_iterator& operator++() {
      ++it_;
      return *this;
    }
    friend bool operator==(const const_iterator&,
                           const const_iterator&) = default;

   private:
    Items::const_iterator it_;
  };

  const_iterator begin() const { return const_iterator(items_.begin()); }
  const_iterator end() const { return const_iterator(items_.end()); }
  size_t size() const { return items_.size(); }
  bool empty() const { return items_.empty(); }
  const Allocation& operator[](size_t i) const { return *items_[i]; }

  // Adds `a` in order (before an equal key).
  void Insert(Allocation a);
  // Removes the allocation of (pg_id, bundle_index); false when absent.
  bool Erase(absl::string_view pg_id, int bundle_index);

 private:
  Items items_;
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

// Key of the slice indexes.
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

class InventorySnapshot;
class SnapshotWriter;
namespace internal {
class SnapshotState;
// The indexes behind `snapshot`, for the solver. Engine-internal.
const SnapshotState& StateOf(const InventorySnapshot& snapshot);
}  // namespace internal

class InventorySnapshot {
 public:
  // Per-node state.
  struct NodeEntry {
    Node node;
    ResourceSet free;  // total - allocations; < 0 if over-committed
    AllocationList allocations;  // sorted by (pg_id, bundle_index)
    // The slot of its slice (see SliceIndexOf()), -1 when none.
    int32_t slice_slot = -1;
    bool tpu = false;                     // has a "TPU" resource
    bool single_host = false;             // its slice has one host
  };
  // Per-slice state.
  struct SliceEntry {
    SliceInfo info;
    bool shape_known = false;
    TpuShape shape;               // valid when shape_known
    // The hosts' node slots (not indexes: see HostIndex()), worker-id order
    // if intact.
    std::vector<uint32_t> host_slots;
    // Per resource, the least any host has (one that some host lacks is
    // left out); kept current with the hosts, as `info` is. A request that
    // asks no more of each host fits all of them, which the diagnosis then
    // need not read. Slices with equal minima mostly share one set, so the
    // diagnosis checks a request against each set once. Never null.
    std::shared_ptr<const ResourceSet> host_min;
    // The most TPU any host has (0 without any). With host_min it bounds
    // how each host counts its chips, which a v7x request (1 or 2 TPU per
    // chip) must know of every host.
    int64_t host_most_tpu = 0;
    std::string tier;
    std::string zone;
    int64_t allocated_hosts = 0;  // hosts holding any allocation
    // Hosts holding an allocation that asks for TPU, and hosts holding one
    // that asks none (CPU-only work); a host may count in both.
    int64_t tpu_held_hosts = 0;
    int64_t cpu_held_hosts = 0;
    // Hosts with less TPU free than they have: what a carved sub-slice must
    // leave out (internal/carver.h).
    int64_t tpu_busy_hosts = 0;
    bool free() const { return allocated_hosts == 0; }
  };
  // Slice indexes (ascending) per (generation, topology, tier, zone).
  using SliceKeyIndex = absl::btree_map<SliceKey, std::vector<uint32_t>>;

  // Builds a snapshot from scratch. Node ids must be unique and non-empty.
  // Returns InvalidArgument for duplicate/empty node ids, NotFound for an
  // allocation on an unknown node, InvalidArgument for a duplicate
  // (pg_id, bundle_index). Over-committed nodes are accepted here; see
  // CheckNotOverCommitted().
  static absl::StatusOr<std::shared_ptr<const InventorySnapshot>> Build(
      std::vector<Node> nodes, std::vector<Allocation> allocations);

  // An empty inventory.
  static std::shared_ptr<const InventorySnapshot> Empty();

  ~InventorySnapshot();

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
  size_t num_nodes() const;
  size_t num_slices() const;
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
  int64_t num_allocations() const;

  // --- Indexes ---------------------------------------------------------------
  // Node indexes follow node-id order, slice indexes name order. Slice
  // indexes are dense; node indexes may have gaps, so that a node added in
  // the middle of the order moves a few indexes, not every one after it:
  // index i holds a node when has_node(i), for i < index_end() (at least
  // num_nodes()). REQUIRES: has_node(i), s < num_slices().
  size_t index_end() const;
  bool has_node(uint32_t i) const;
  const NodeEntry& node(uint32_t i) const;
  const SliceEntry& slice(uint32_t s) const;
  // -1 when unknown.
  int64_t NodeIndex(absl::string_view node_id) const;
  // The node index of host w of a slice (se.host_slots[w]). Slices name
  // their hosts by slot, which stays put while indexes move as nodes come
  // and go. REQUIRES: w < se.host_slots.size().
  uint32_t HostIndex(const SliceEntry& se, size_t w) const;
  // All of a slice's hosts as node indexes, in host_slots order.
  std::vector<uint32_t> HostIndexes(const SliceEntry& se) const;
  // The index of a node's slice, -1 when it is in none. Nodes name their
  // slice by slot, which stays put while slice indexes move.
  int32_t SliceIndexOf(const NodeEntry& e) const;
  int64_t SliceIndex(absl::string_view name) const;
  // Every slice of a known shape whatever its state, by key. A slice's key
  // only changes when its members change, so only such deltas copy this
  // map.
  const SliceKeyIndex& slices_by_key() const;

 private:
  InventorySnapshot();
  // Only Apply() copies a snapshot (to derive the next one).
  InventorySnapshot(const InventorySnapshot& other);
  InventorySnapshot& operator=(const InventorySnapshot&) = delete;
  friend class SnapshotWriter;
  friend class SnapshotEditor;
  friend const internal::SnapshotState& internal::StateOf(
      const InventorySnapshot& snapshot);

  std::unique_ptr<internal::SnapshotState> state_;  // never null
};

// Applies a run of deltas to a snapshot without publishing each step. Apply()
// on a published snapshot copies the chunks the delta touches, and the next
// Apply() copies them again; an editor keeps the copy it writes to, so a run
// of N placements copies a touched chunk once, not N times (and frees no
// intermediate snapshot). It keeps the deltas since its last publication:
// RollBack() returns to the last Savepoint() by re-applying them to that
// publication (as does a failed Apply(), which may have half edited the
// copy). After either had to re-apply deltas, every Savepoint() publishes
// first, so a later one re-applies at most the deltas since the last
// savepoint, and a run with failures costs about what publishing each step
// does.
//
// Nothing outside the editor sees its current() snapshot change: the
// reference is valid until the next Apply(), RollBack() or Publish() (or the
// editor's end), and what Publish() returns is never written again.
class SnapshotEditor {
 public:
  explicit SnapshotEditor(std::shared_ptr<const InventorySnapshot> base);
  SnapshotEditor(const SnapshotEditor&) = delete;
  SnapshotEditor& operator=(const SnapshotEditor&) = delete;
  ~SnapshotEditor();

  // The snapshot with every delta applied so far.
  const InventorySnapshot& current() const;
  // Applies `delta` and keeps it (for a roll-back); errors as
  // InventorySnapshot::Apply(), and on error current() and `delta` are as
  // they were.
  absl::Status Apply(SnapshotDelta&& delta);
  // current() as a shared, immutable snapshot; the next Apply() copies what
  // it writes. Returns the same snapshot until something is applied.
  std::shared_ptr<const InventorySnapshot> Publish();
  // Marks current() as the state RollBack() returns to.
  void Savepoint();
  // Returns to the last Savepoint() (the construction if none).
  void RollBack();

 private:
  // Makes current() base_ with the first `n` deltas of applied_ (which
  // succeeded on it before, and so do again).
  void Replay(size_t n);

  std::shared_ptr<const InventorySnapshot> base_;  // the last publication
  // Edits a copy of base_ to which applied_ was applied; null when current()
  // is base_ (applied_ is empty).
  std::unique_ptr<SnapshotWriter> writer_;
  std::vector<SnapshotDelta> applied_;
  // The savepoint: save_base_ with its first save_count_ deltas, which are
  // applied_'s while save_base_ is base_, and saved_ once base_ moved on.
  std::shared_ptr<const InventorySnapshot> save_base_;
  size_t save_count_ = 0;
  std::vector<SnapshotDelta> saved_;
  // Set once a roll-back or a failed Apply() re-applied deltas: savepoints
  // publish first.
  bool publish_at_savepoints_ = false;
};

}  // namespace sliced::scheduler

#endif  // SLICED_SCHEDULER_SNAPSHOT_H_
