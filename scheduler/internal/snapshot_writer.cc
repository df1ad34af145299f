// SnapshotWriter: builds an InventorySnapshot's state from scratch, or edits
// a copy of it by a delta: placements and releases in O(k log n), node
// adds, removals and re-labels by ChangeNodeSet(); see snapshot_writer.h.
//
// Thread-safety: a writer owns its unpublished snapshot exclusively; it is
// not thread-safe and lives inside one Build() or Apply() call, or as long
// as a SnapshotEditor's copy is unpublished.
#include "scheduler/internal/snapshot_writer.h"

#include <algorithm>
#include <bit>
#include <cstdio>
#include <cstdlib>
#include <deque>
#include <iterator>
#include <optional>
#include <thread>
#include <tuple>
#include <utility>

#include "absl/container/btree_map.h"
#include "absl/container/btree_set.h"
#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "base/parallel.h"
#include "base/status_macros.h"
#include "scheduler/internal/cow.h"
#include "scheduler/internal/resources.h"
#include "scheduler/internal/snapshot_state.h"
#include "scheduler/slices.h"

namespace sliced::scheduler {

using internal::Amount;
using internal::BundleKind;
using internal::CowArray;
using internal::CowBitset;
using internal::kBitsetLabelKeys;
using internal::KeyHosts;
using internal::kNumRanks;
using internal::Renumbering;
using internal::SliceSets;
using internal::SnapshotState;

namespace {

using ::sliced::scheduler::internal::PgShard;

// The posting list of `value` in `vi`, or an empty one. A reference: a
// zone's list has hundreds of chunks, and copying it only to edit the copy
// took a reference on each (and dropped them again).
const SnapshotState::PostingList& PostingsOf(
    const SnapshotState::ValueIndex& vi, absl::string_view value) {
  static const SnapshotState::PostingList* const kNone =
      new SnapshotState::PostingList();
  auto it = vi.find(value);
  return it == vi.end() ? *kNone : *it->second;
}

// True when a and b have the same labels of those a slice derives from.
// These include kBitsetLabelKeys, whose value bitsets are edited only when
// the node set changes.
bool SameSliceLabels(const Node& a, const Node& b) {
  for (absl::string_view key :
       {kLabelTpuSliceName, kLabelAcceleratorType, kLabelTpuTopology,
        kLabelTpuWorkerId, kLabelZone, kLabelCapacityTier}) {
    auto ia = a.labels.find(key);
    auto ib = b.labels.find(key);
    const bool pa = ia != a.labels.end();
    const bool pb = ib != b.labels.end();
    if (pa != pb || (pa && ia->second != ib->second)) return false;
  }
  return true;
}

bool AllocationLess(const Allocation& a, const Allocation& b) {
  return std::tie(a.pg_id, a.bundle_index) < std::tie(b.pg_id, b.bundle_index);
}

// The first index in [0, n) for which `before(i)` is false, where it is
// true on a prefix (a lower bound over indexes; std::ranges::partition_point
// over std::views::iota does not build with this clang and libstdc++).
template <typename Before>
uint32_t FirstNotBefore(uint32_t n, const Before& before) {
  uint32_t lo = 0, hi = n;
  while (lo < hi) {
    const uint32_t mid = lo + (hi - lo) / 2;
    if (before(mid)) {
      lo = mid + 1;
    } else {
      hi = mid;
    }
  }
  return lo;
}

}  // namespace

// Builds or edits an unpublished snapshot. Owns it exclusively until
// Finish(); writes in place only what it created or copied itself (the
// copy-on-write containers' epochs, the owned_* sets below).
class SnapshotWriter {
 public:
  friend class SnapshotEditor;  // reads s_ between deltas

  explicit SnapshotWriter(std::unique_ptr<InventorySnapshot> snap)
      : s_(std::move(snap)), st_(*s_->state_) {}

  // --- Full build ------------------------------------------------------------
  // Steps: sort and check the node ids, make the node entries, the label
  // index and (at the same time, on the calling thread) the slices, install
  // empty allocation and rank indexes, add the allocations, then index every
  // slice and node.
  absl::Status BuildFrom(std::vector<Node> nodes,
                         std::vector<Allocation> allocations) {
    building_ = true;
    ASSIGN_OR_RETURN(nodes, SortedById(std::move(nodes)));
    NodeEntries entries = MakeNodeEntries(std::move(nodes));
    std::vector<SnapshotState::IdShard> id_shards;
    {
      // The label index and the id map on threads of their own: each a
      // tenth of a restart at 100k nodes. They read only the entries'
      // labels and ids; InstallSlices() reads them too and writes only the
      // entries' slice fields.
      std::jthread labels([&] { st_.label_index_ = MakeLabelIndex(entries); });
      std::jthread ids([&] { id_shards = IdShardsOf(entries); });
      std::vector<SliceInfo> slices = DeriveSlices(NodesOf(entries), 0);
      ids.join();  // InstallSlices finds the slices' hosts by id in it
      InstallSlices(entries, std::move(slices), id_shards);
    }
    const size_t n = entries.size();
    st_.nodes_ =
        CowArray<std::shared_ptr<const InventorySnapshot::NodeEntry>, 8>(n);
    for (uint32_t i = 0; i < n; ++i) {
      st_.nodes_.Mutable(i) = std::move(entries[i]);
    }
    InstallIdentitySlots(n, std::move(id_shards));
    InstallEmptyIndexes(n);

    std::sort(allocations.begin(), allocations.end(), AllocationLess);
    for (Allocation& a : allocations) {
      RETURN_IF_ERROR(AddAllocation(std::move(a), /*check_fit=*/false));
    }
    auto by_key = std::make_shared<InventorySnapshot::SliceKeyIndex>();
    for (uint32_t si = 0; si < st_.num_slices(); ++si) {
      RecountSlice(si);
      IndexSlice(si, true);
      const InventorySnapshot::SliceEntry& se = st_.slice(si);
      if (se.shape_known) (*by_key)[KeyOf(se)].push_back(si);
    }
    for (const auto& [key, list] : *by_key) RefreshKeyHosts(key, *by_key);
    st_.slices_by_key_ = std::move(by_key);
    for (uint32_t i = 0; i < n; ++i) IndexNode(i, true);
    st_.label_bits_ = LabelBitsOfIndex();
    auto totals = std::make_shared<SnapshotState::AmountCounts>();
    for (uint32_t i = 0; i < n; ++i) {
      CountTotals(*totals, st_.node(i).node.resources, 1);
    }
    st_.node_totals_ = std::move(totals);
    building_ = false;
    return absl::OkStatus();
  }

  // --- Incremental edit ------------------------------------------------------
  // Applies `delta` to the copy. A delta that adds or removes nodes or moves
  // a node between slices runs in three steps (releases, the node set,
  // allocations); any other in one.
  absl::Status Apply(const SnapshotDelta& delta) {
    if (!ChangesNodeSet(delta)) return ApplyInPlace(delta);
    if (!delta.release_pg_ids.empty()) {
      // First, so that a removed node may have held bundles of released PGs
      // (as a rebuild would see it).
      SnapshotDelta releases;
      releases.release_pg_ids = delta.release_pg_ids;
      RETURN_IF_ERROR(ApplyInPlace(releases));
    }
    RETURN_IF_ERROR(ChangeNodeSet(delta.upsert_nodes, delta.remove_node_ids));
    if (delta.add_allocations.empty()) return absl::OkStatus();
    SnapshotDelta allocations;
    allocations.add_allocations = delta.add_allocations;
    return ApplyInPlace(allocations);
  }

  // Edits the copy by a delta that keeps the node set and every node's slice
  // (ChangesNodeSet() is false), in O(k log n) for k touched nodes.
  absl::Status ApplyInPlace(const SnapshotDelta& delta) {
    std::vector<uint32_t> upserted;
    for (const Node& node : delta.upsert_nodes) {
      upserted.push_back(static_cast<uint32_t>(st_.NodeIndex(node.node_id)));
    }
    // Validate allocations before touching anything.
    for (const Allocation& a : delta.add_allocations) {
      if (st_.NodeIndex(a.node_id) < 0) {
        return absl::NotFoundError(
            absl::StrCat("allocation of ", a.pg_id, "[", a.bundle_index,
                         "] on unknown node ", a.node_id));
      }
    }
    // Touched nodes: upserts, released and added allocations; then all hosts
    // of their slices (a slice's free state feeds its hosts' ranks).
    absl::btree_set<uint32_t> nodes(upserted.begin(), upserted.end());
    for (const std::string& pg : delta.release_pg_ids) {
      for (const Allocation& a : s_->AllocationsOf(pg)) {
        nodes.insert(static_cast<uint32_t>(st_.NodeIndex(a.node_id)));
      }
    }
    for (const Allocation& a : delta.add_allocations) {
      nodes.insert(static_cast<uint32_t>(st_.NodeIndex(a.node_id)));
    }
    absl::btree_set<uint32_t> slices;
    for (uint32_t i : nodes) {
      const int32_t s = st_.SliceOf(st_.node(i));
      if (s >= 0) slices.insert(s);
    }
    // Only an upsert changes what a slice derives from its hosts (states,
    // chips, resources); allocations alone change only its counts.
    absl::flat_hash_set<uint32_t> upserted_slices;
    for (uint32_t i : upserted) {
      const int32_t s = st_.SliceOf(st_.node(i));
      if (s >= 0) upserted_slices.insert(s);
    }
    for (uint32_t si : slices) {
      for (uint32_t h : HostIndexes(st_.slice(si))) nodes.insert(h);
    }

    for (uint32_t si : slices) IndexSlice(si, false);
    for (uint32_t i : nodes) IndexNode(i, false);

    for (size_t u = 0; u < upserted.size(); ++u) {
      UpsertInPlace(upserted[u], delta.upsert_nodes[u]);
    }
    for (const std::string& pg : delta.release_pg_ids) Release(pg);
    for (const Allocation& a : delta.add_allocations) {
      RETURN_IF_ERROR(AddAllocation(a, /*check_fit=*/true));
    }

    for (uint32_t si : slices) {
      if (upserted_slices.contains(si)) RecheckSlice(si);
      RecountSlice(si);
      IndexSlice(si, true);
    }
    RefreshChangedKeys(*st_.slices_by_key_);
    for (uint32_t i : nodes) IndexNode(i, true);
    return absl::OkStatus();
  }

  std::shared_ptr<const InventorySnapshot> Finish() {
    return std::shared_ptr<const InventorySnapshot>(std::move(s_));
  }

  InventorySnapshot& snap() { return *s_; }

 private:
  using NodeEntry = InventorySnapshot::NodeEntry;
  using SliceEntry = InventorySnapshot::SliceEntry;

  // True when `delta` adds or removes nodes or changes a label that decides
  // a node's slice (its index or its slice's membership move).
  bool ChangesNodeSet(const SnapshotDelta& delta) const {
    if (!delta.remove_node_ids.empty()) return true;
    for (const Node& node : delta.upsert_nodes) {
      const int64_t i = st_.NodeIndex(node.node_id);
      if (i < 0 || !SameSliceLabels(st_.node(i).node, node)) return true;
    }
    return false;
  }

  // What a node-set change does, by old and new index.
  struct NodePlan {
    std::vector<std::pair<uint32_t, const Node*>> replaced;  // old index
    std::vector<const Node*> added;                          // sorted by id
    std::vector<uint32_t> removed_nodes;  // old indexes, ascending
    // How indexes move (LayOutNodes()): the removed nodes' and the gaps
    // taken go; added nodes and new gaps come (inserted_node[k] is the
    // added node moves.inserted()[k] is for, -1 for a gap).
    Renumbering moves{0, {}, {}};
    std::vector<int64_t> inserted_node;
    std::vector<uint32_t> added_at;  // new index of added[a]
    const std::vector<uint32_t>& removed() const { return removed_nodes; }
  };

  // Slices whose members change, re-derived, and the new slice order.
  struct SlicePlan {
    // Affected names -> the slice derived from their new members (nullopt
    // when no member is left).
    absl::btree_map<std::string, std::optional<SliceInfo>> derived;
    std::vector<const SliceInfo*> added;  // new names, sorted
    // Gone slices leave, added[a] goes to moves.inserted()[a].
    Renumbering moves{0, {}, {}};
    std::vector<uint32_t> rederived;  // new indexes, ascending
    // The keys of the re-derived slices that were there before.
    absl::btree_set<SliceKey> old_keys;
    bool Rederived(uint32_t q) const {
      return std::binary_search(rederived.begin(), rederived.end(), q);
    }
  };

  // Checks upserts and removals, and lays out the new node order. Errors as
  // InventorySnapshot::Apply().
  absl::StatusOr<NodePlan> PlanNodes(const std::vector<Node>& upserts,
                                     const std::vector<std::string>& removals) {
    NodePlan plan;
    absl::btree_set<uint32_t> removed;                   // old indexes
    absl::btree_map<std::string, const Node*> upserted;  // the last one wins
    for (const Node& n : upserts) {
      if (n.node_id.empty()) {
        return absl::InvalidArgumentError("node_id must not be empty");
      }
      upserted[n.node_id] = &n;
    }
    for (const std::string& id : removals) {
      const int64_t i = st_.NodeIndex(id);
      const size_t dropped = upserted.erase(id);
      if (i < 0 && dropped == 0) {
        return absl::NotFoundError(
            absl::StrCat("cannot remove unknown node ", id));
      }
      if (i < 0) continue;
      if (!st_.node(i).allocations.empty()) {
        return absl::FailedPreconditionError(absl::StrCat(
            "cannot remove node ", id, ": it still holds bundles"));
      }
      removed.insert(static_cast<uint32_t>(i));
    }
    for (const auto& [id, node] : upserted) {
      const int64_t i = st_.NodeIndex(id);
      if (i >= 0) {
        plan.replaced.emplace_back(static_cast<uint32_t>(i), node);
      } else {
        plan.added.push_back(node);
      }
    }
    // Where each new id goes among the old ones: a binary search each (a
    // gap reads as the node after it).
    const uint32_t n = static_cast<uint32_t>(st_.index_end());
    std::vector<uint32_t> insert_at;
    insert_at.reserve(plan.added.size());
    for (const Node* node : plan.added) {
      insert_at.push_back(FirstNotBefore(n, [&](uint32_t i) {
        const size_t at = st_.node_bits().NextSet(i);
        return at < n &&
               st_.node(static_cast<uint32_t>(at)).node.node_id < node->node_id;
      }));
    }
    plan.removed_nodes.assign(removed.begin(), removed.end());
    LayOutNodes(plan, insert_at);
    return plan;
  }

  // Gaps. Node indexes follow id order, and bitsets are over them, so a
  // node added in the middle of the order would move every index after it
  // (O(n) words in every rank and value bitset, and the slot arrays). The
  // index space keeps gaps instead: a removed node leaves one, and an added
  // node takes the gap nearest its place in the order (within kGapReach),
  // moving only the indexes between the two. When none is that near, or
  // gaps are more than kept / 8 + kGapEvery, every gap is dropped and one
  // is left before every kGapEvery-th node (O(n)). Around the add that
  // found no gap near, the spread leaves more: one before every
  // kHotEvery-th of the kHotNodes nodes there (at most a sixteenth of the
  // nodes). Adds one after another at one place (ids with a counter) then
  // find a gap a few indexes away for about kHotNodes / kHotEvery adds,
  // where with gaps kGapEvery apart the k-th one moved ~kGapEvery * k / 2
  // indexes and the gaps in reach ran out after kGapReach / kGapEvery of
  // them. A node appended after the last index takes no gap. A full build
  // has none.
  static constexpr size_t kGapEvery = 64;
  static constexpr size_t kGapReach = 4096;
  static constexpr size_t kHotNodes = 1024;
  static constexpr size_t kHotEvery = 2;

  // Fills plan.moves, inserted_node and added_at for the removed
  // nodes and the added ones going in before old indexes `insert_at`.
  void LayOutNodes(NodePlan& plan, const std::vector<uint32_t>& insert_at) {
    const size_t n = st_.index_end();
    const CowBitset& present = st_.node_bits();
    const size_t kept = st_.num_nodes() - plan.removed_nodes.size();
    std::vector<uint32_t> gone = plan.removed_nodes;
    // (insert before, added node or -1 for a gap)
    std::vector<std::pair<uint32_t, int64_t>> in;
    for (uint32_t i : plan.removed_nodes) in.emplace_back(i, -1);
    const size_t had_gaps = n - st_.num_nodes();
    absl::flat_hash_set<uint32_t> taken;
    bool spread = false;
    int64_t hot_at = -1;  // where an add found no gap near
    for (size_t a = 0; a < plan.added.size() && !spread; ++a) {
      in.emplace_back(insert_at[a], static_cast<int64_t>(a));
      if (insert_at[a] == n) continue;  // after the last index
      const int64_t h =
          taken.size() < had_gaps ? NearestGap(insert_at[a], taken) : -1;
      if (h < 0) {
        spread = true;
        hot_at = insert_at[a];
      } else {
        taken.insert(static_cast<uint32_t>(h));
        gone.push_back(static_cast<uint32_t>(h));
      }
    }
    const size_t gaps = had_gaps + plan.removed_nodes.size() - taken.size();
    if (spread || gaps > kept / 8 + kGapEvery) {
      // Every gap and removed node goes; a gap before every kGapEvery-th
      // kept node.
      gone.clear();
      in.clear();
      for (size_t w = 0; w < present.num_words(); ++w) {
        for (uint64_t v = ~present.word(w); v != 0; v &= v - 1) {
          const size_t i = (w << 6) + static_cast<size_t>(std::countr_zero(v));
          if (i < n) gone.push_back(static_cast<uint32_t>(i));
        }
      }
      gone.insert(gone.end(), plan.removed_nodes.begin(),
                  plan.removed_nodes.end());
      for (size_t a = 0; a < plan.added.size(); ++a) {
        in.emplace_back(insert_at[a], static_cast<int64_t>(a));
      }
      // The ranks (among kept nodes) of the hot nodes: [hot_lo, hot_hi),
      // centred on hot_at's rank (the nodes before it, less the removed
      // ones).
      size_t hot_lo = 0, hot_hi = 0;
      if (hot_at >= 0) {
        const size_t at = static_cast<size_t>(hot_at);
        size_t rank = 0;
        for (size_t w = 0; w < (at >> 6); ++w) {
          rank += static_cast<size_t>(std::popcount(present.word(w)));
        }
        if ((at & 63) != 0) {
          rank += static_cast<size_t>(std::popcount(
              present.word(at >> 6) & ((uint64_t{1} << (at & 63)) - 1)));
        }
        rank -= static_cast<size_t>(std::lower_bound(plan.removed_nodes.begin(),
                                                     plan.removed_nodes.end(),
                                                     hot_at) -
                                    plan.removed_nodes.begin());
        const size_t half = std::min(kHotNodes, kept / 16) / 2;
        hot_lo = rank > half ? rank - half : 0;
        hot_hi = rank + half;
      }
      // A word at a time: its kept nodes are counted, and walked only when
      // the count passes a multiple of kGapEvery in it or reaches the hot
      // nodes.
      size_t count = 0;
      for (size_t w = 0, r = 0; w < present.num_words(); ++w) {
        uint64_t v = present.word(w);
        for (; r < plan.removed_nodes.size() && plan.removed_nodes[r] >> 6 == w;
             ++r) {
          v &= ~(uint64_t{1} << (plan.removed_nodes[r] & 63));
        }
        const size_t c = static_cast<size_t>(std::popcount(v));
        const bool hot = count < hot_hi && count + c > hot_lo;
        if (!hot && count % kGapEvery + c < kGapEvery) {
          count += c;
          continue;
        }
        for (; v != 0; v &= v - 1) {
          const size_t rank = count++;
          const bool gap = rank >= hot_lo && rank < hot_hi
                               ? (rank - hot_lo) % kHotEvery == kHotEvery - 1
                               : count % kGapEvery == 0;
          if (gap) in.emplace_back((w << 6) + std::countr_zero(v), -1);
        }
      }
    }
    std::sort(gone.begin(), gone.end());
    std::stable_sort(in.begin(), in.end(), [](const auto& x, const auto& y) {
      return x.first < y.first;
    });
    std::vector<uint32_t> before;
    before.reserve(in.size());
    plan.inserted_node.clear();
    for (const auto& [at, what] : in) {
      before.push_back(at);
      plan.inserted_node.push_back(what);
    }
    plan.moves = Renumbering(n, std::move(gone), before);
    plan.added_at.assign(plan.added.size(), 0);
    for (size_t k = 0; k < in.size(); ++k) {
      if (in[k].second >= 0) {
        plan.added_at[in[k].second] = plan.moves.inserted()[k];
      }
    }
  }

  // The gap nearest old index q (at q, or before it) within kGapReach
  // that no other added node took; -1 when there is none.
  int64_t NearestGap(uint32_t q,
                     const absl::flat_hash_set<uint32_t>& taken) const {
    const CowBitset& present = st_.node_bits();
    const size_t n = present.bits();
    auto gap = [&](size_t i) {
      return !present.Test(i) && !taken.contains(static_cast<uint32_t>(i));
    };
    for (size_t d = 0; d <= kGapReach && (q + d < n || d < q); ++d) {
      if (q + d < n && gap(q + d)) return static_cast<int64_t>(q + d);
      if (d < q && gap(q - 1 - d)) return static_cast<int64_t>(q - 1 - d);
    }
    return -1;
  }

  // Re-derives the slices any changed node leaves or joins, from their new
  // members only, and lays out the new slice order.
  SlicePlan PlanSlices(const NodePlan& nodes) {
    SlicePlan plan;
    auto note_old = [&](uint32_t i) {
      const int32_t s = st_.SliceOf(st_.node(i));
      if (s >= 0) plan.derived[st_.slice(s).info.name];
    };
    auto note_new = [&](const Node& node) {
      std::string name = SliceNameOf(node);
      if (!name.empty()) plan.derived[std::move(name)];
    };
    absl::flat_hash_set<uint32_t> changed(nodes.removed().begin(),
                                          nodes.removed().end());
    for (uint32_t i : nodes.removed()) note_old(i);
    for (const auto& [i, node] : nodes.replaced) {
      note_old(i);
      note_new(*node);
      changed.insert(i);
    }
    for (const Node* node : nodes.added) note_new(*node);

    absl::flat_hash_map<std::string, std::vector<const Node*>> members;
    for (auto& [name, info] : plan.derived) {
      const int64_t s = st_.SliceIndex(name);
      if (s < 0) continue;
      for (uint32_t h : HostIndexes(st_.slice(s))) {
        if (!changed.contains(h)) members[name].push_back(&st_.node(h).node);
      }
    }
    for (const auto& [i, node] : nodes.replaced) {
      std::string name = SliceNameOf(*node);
      if (!name.empty()) members[name].push_back(node);
    }
    for (const Node* node : nodes.added) {
      std::string name = SliceNameOf(*node);
      if (!name.empty()) members[name].push_back(node);
    }
    for (auto& [name, info] : plan.derived) {
      std::vector<SliceInfo> infos = DeriveSlices(members[name]);
      if (!infos.empty()) info = std::move(infos[0]);
    }

    // The new order: old slices that stay, in place, and new names merged
    // in (a binary search each); gone slices leave.
    const uint32_t count = static_cast<uint32_t>(st_.num_slices());
    std::vector<uint32_t> gone, insert_at, kept;
    for (const auto& [name, info] : plan.derived) {
      const int64_t s = st_.SliceIndex(name);
      if (s >= 0) {
        const SliceEntry& se = st_.slice(s);
        if (se.shape_known) plan.old_keys.insert(KeyOf(se));
        (info.has_value() ? kept : gone).push_back(static_cast<uint32_t>(s));
        continue;
      }
      if (!info.has_value()) continue;
      // (This clang's lambdas cannot capture a structured binding.)
      const std::string& new_name = name;
      insert_at.push_back(FirstNotBefore(count, [&](uint32_t s) {
        return st_.slice(s).info.name < new_name;
      }));
      plan.added.push_back(&*info);
    }
    plan.moves = Renumbering(count, std::move(gone), insert_at);
    plan.rederived = plan.moves.inserted();
    for (uint32_t s : kept) {
      plan.rederived.push_back(static_cast<uint32_t>(plan.moves.NewIndex(s)));
    }
    std::sort(plan.rederived.begin(), plan.rederived.end());
    return plan;
  }

  // Adds, removes and re-labels nodes without a rebuild: only the changed
  // nodes' entries and labels and the slices they leave or join are made
  // anew; other entries are shared. The node table, posting lists and slice
  // hosts name nodes by slot, so only what names nodes by index is
  // renumbered when indexes move: the slot <-> index arrays and the rank and
  // value bitsets (integers and words). Errors as InventorySnapshot::Apply().
  absl::Status ChangeNodeSet(const std::vector<Node>& upserts,
                             const std::vector<std::string>& removals) {
    ASSIGN_OR_RETURN(NodePlan nodes, PlanNodes(upserts, removals));
    SlicePlan slices = PlanSlices(nodes);
    for (const auto& [name, info] : slices.derived) {
      const int64_t s = st_.SliceIndex(name);
      if (s >= 0) IndexSlice(static_cast<uint32_t>(s), false);
    }
    const std::vector<uint32_t> new_slots = NewSlots(
        *st_.free_node_slots_, st_.num_node_slots(), nodes.added.size());
    st_.label_index_ = EditLabels(nodes, new_slots);
    EditTotals(nodes);
    InstallNodes(nodes, new_slots);
    InstallSlices(slices);
    RenumberSliceIndexes(slices);
    const Renumbering& moves = nodes.moves;
    RenumberRankSets(moves);
    // The replaced and added nodes, by new index.
    std::vector<uint32_t> changed = nodes.added_at;
    for (const auto& [i, node] : nodes.replaced) {
      changed.push_back(static_cast<uint32_t>(moves.NewIndex(i)));
    }
    EditLabelBits(moves, changed);

    // Re-index what changed: the re-derived slices and every host of them,
    // and the changed nodes.
    absl::btree_set<uint32_t> touched(changed.begin(), changed.end());
    for (uint32_t q : slices.rederived) {
      RecountSlice(q);
      IndexSlice(q, true);
      AddSliceKey(q);
      for (uint32_t h : HostIndexes(st_.slice(q))) touched.insert(h);
    }
    for (uint32_t p : touched) {
      IndexNode(p, false);
      IndexNode(p, true);
    }
    if (by_key_ != nullptr) {
      for (auto it = by_key_->begin(); it != by_key_->end();) {
        it = it->second.empty() ? by_key_->erase(it) : std::next(it);
      }
      st_.slices_by_key_ = std::move(by_key_);
      by_key_ = nullptr;
    }
    RefreshChangedKeys(*st_.slices_by_key_);
    return absl::OkStatus();
  }

  // The label index after the change: removed nodes' postings dropped,
  // replaced nodes' changed labels moved, added nodes' labels added (added
  // node a gets slot new_slots[a]). Each touched posting list and value map
  // is copied once; the rest is shared. Reads the old entries.
  std::shared_ptr<const SnapshotState::LabelIndex> EditLabels(
      const NodePlan& plan, const std::vector<uint32_t>& new_slots) {
    struct Edit {
      std::vector<uint32_t> add, drop;  // slots
    };
    absl::btree_map<std::string, absl::btree_map<std::string, Edit>> edits;
    for (uint32_t i : plan.removed()) {
      for (const auto& [k, v] : st_.node(i).node.labels) {
        edits[k][v].drop.push_back(st_.SlotOf(i));
      }
    }
    for (const auto& [i, node] : plan.replaced) {
      const uint32_t slot = st_.SlotOf(i);
      const Labels& before = st_.node(i).node.labels;
      const Labels& after = node->labels;
      for (const auto& [k, v] : before) {
        auto it = after.find(k);
        if (it == after.end() || it->second != v) {
          edits[k][v].drop.push_back(slot);
        }
      }
      for (const auto& [k, v] : after) {
        auto it = before.find(k);
        if (it == before.end() || it->second != v) {
          edits[k][v].add.push_back(slot);
        }
      }
    }
    for (uint32_t a = 0; a < plan.added.size(); ++a) {
      for (const auto& [k, v] : plan.added[a]->labels) {
        edits[k][v].add.push_back(new_slots[a]);
      }
    }
    auto index = std::make_shared<SnapshotState::LabelIndex>(*st_.label_index_);
    for (auto& [key, key_edits] : edits) {
      auto old_key = index->find(key);
      auto vi =
          old_key == index->end()
              ? std::make_shared<SnapshotState::ValueIndex>()
              : std::make_shared<SnapshotState::ValueIndex>(*old_key->second);
      for (auto& [value, edit] : key_edits) {
        // A value such as a zone is on most nodes: its list copies only
        // the chunks the edit lands in (CowSortedSet).
        std::sort(edit.drop.begin(), edit.drop.end());
        std::sort(edit.add.begin(), edit.add.end());
        SnapshotState::PostingList out =
            PostingsOf(*vi, value).Edited(edit.add, edit.drop);
        if (out.empty()) {
          vi->Erase(value);
        } else {
          vi->Set(value, std::make_shared<const SnapshotState::PostingList>(
                             std::move(out)));
        }
      }
      if (vi->empty()) {
        index->erase(key);
      } else {
        (*index)[key] = std::move(vi);
      }
    }
    return index;
  }

  // Renumbers the per-key slice bitsets and the slice key index after slices
  // moved; re-derived slices leave the key index here and come back in
  // AddSliceKey(). Keys that lose or gain a slice are noted in
  // changed_keys_. When no slice moves or goes, only the re-derived slices'
  // keys are edited.
  void RenumberSliceIndexes(const SlicePlan& plan) {
    const Renumbering& moves = plan.moves;
    if (moves.changed()) {
      for (SliceSets* sets : {&st_.free_slices_, &st_.broken_slices_,
                              &st_.idle_slices_, &st_.partly_busy_slices_}) {
        sets->ForEachMutable([&](std::shared_ptr<const CowBitset>& set) {
          set = std::make_shared<const CowBitset>(set->Renumbered(moves));
        });
      }
    }
    if (moves.first_moved() >= moves.old_size()) {
      for (const SliceKey& key : plan.old_keys) {
        std::vector<uint32_t>& list = MutableByKey()[key];
        std::erase_if(list, [&](uint32_t s) { return plan.Rederived(s); });
        changed_keys_.insert(key);
      }
      return;
    }
    by_key_ = std::make_shared<InventorySnapshot::SliceKeyIndex>();
    for (const auto& [key, list] : *st_.slices_by_key_) {
      std::vector<uint32_t>& out = (*by_key_)[key];
      out.reserve(list.size());
      for (uint32_t s : list) {
        const int64_t to = moves.NewIndex(s);
        if (to >= 0 && !plan.Rederived(static_cast<uint32_t>(to))) {
          out.push_back(static_cast<uint32_t>(to));
        }
      }
      if (out.size() != list.size()) changed_keys_.insert(key);
    }
  }

  // The slice key index being edited by ChangeNodeSet(), copied from the
  // snapshot's on the first edit.
  InventorySnapshot::SliceKeyIndex& MutableByKey() {
    if (by_key_ == nullptr) {
      by_key_ = std::make_shared<InventorySnapshot::SliceKeyIndex>(
          *st_.slices_by_key_);
    }
    return *by_key_;
  }

  void AddSliceKey(uint32_t q) {
    const SliceEntry& se = st_.slice(q);
    if (!se.shape_known) return;
    const SliceKey key = KeyOf(se);
    std::vector<uint32_t>& list = MutableByKey()[key];
    list.insert(std::lower_bound(list.begin(), list.end(), q), q);
    changed_keys_.insert(key);
  }

  // Renumbers the rank bitsets after nodes moved (`moves`: the plan's).
  void RenumberRankSets(const Renumbering& moves) {
    if (!moves.changed()) return;
    for (auto& per_kind : st_.rank_sets_) {
      for (CowBitset& set : per_kind) set = set.Renumbered(moves);
    }
  }

  // Adds `delta` (1 or -1) to the count of each of `resources`' amounts.
  static void CountTotals(SnapshotState::AmountCounts& totals,
                          const ResourceSet& resources, int64_t delta) {
    for (const auto& [name, amount] : resources) {
      auto& counts = totals[name];
      if ((counts[amount] += delta) == 0) counts.erase(amount);
      if (counts.empty()) totals.erase(name);
    }
  }

  // The nodes' totals after a node-set change: the removed and replaced
  // nodes' resources out, the replaced and added nodes' in. Reads the old
  // node table.
  void EditTotals(const NodePlan& plan) {
    auto totals =
        std::make_shared<SnapshotState::AmountCounts>(st_.node_totals());
    for (uint32_t i : plan.removed()) {
      CountTotals(*totals, st_.node(i).node.resources, -1);
    }
    for (const auto& [i, node] : plan.replaced) {
      CountTotals(*totals, st_.node(i).node.resources, -1);
      CountTotals(*totals, node->resources, 1);
    }
    for (const Node* node : plan.added) {
      CountTotals(*totals, node->resources, 1);
    }
    st_.node_totals_ = std::move(totals);
  }

  // The value bitsets of kBitsetLabelKeys from the label index (a full
  // build).
  std::shared_ptr<const SnapshotState::LabelBits> LabelBitsOfIndex() const {
    auto bits = std::make_shared<SnapshotState::LabelBits>();
    for (size_t k = 0; k < kBitsetLabelKeys.size(); ++k) {
      auto values = st_.label_index().find(kBitsetLabelKeys[k]);
      if (values == st_.label_index().end()) continue;
      for (const auto& [value, slots] : *values->second) {
        CowBitset& set =
            (*bits)[k].emplace(value, CowBitset(st_.index_end())).first->second;
        for (uint32_t slot : *slots) set.Set(st_.IndexOfSlot(slot), true);
      }
    }
    return bits;
  }

  // The value bitsets after nodes were added, removed or replaced:
  // renumbered as the rank bitsets are, then each `changed` node (the
  // replaced and added ones, by new index) put in its values' sets alone.
  // Reads the new node table. (A node's values of these keys change only
  // here: they are among SameSliceLabels()' labels, so an in-place upsert
  // keeps them.)
  void EditLabelBits(const Renumbering& moves,
                     const std::vector<uint32_t>& changed) {
    const bool moved = moves.changed();
    if (!moved && changed.empty()) return;
    auto bits = std::make_shared<SnapshotState::LabelBits>();
    for (size_t k = 0; k < kBitsetLabelKeys.size(); ++k) {
      SnapshotState::ValueBits& values = (*bits)[k];
      for (const auto& [value, set] : (*st_.label_bits_)[k]) {
        if (!moved) {
          values.emplace(value, set);
          continue;
        }
        // The value's last node may have been removed.
        CowBitset renumbered = set.Renumbered(moves);
        if (renumbered.count() > 0) {
          values.emplace(value, std::move(renumbered));
        }
      }
      for (uint32_t p : changed) PutInValueSet(kBitsetLabelKeys[k], values, p);
    }
    st_.label_bits_ = std::move(bits);
  }

  // Node i (of the new node table) in the set of its value of `key` and in
  // no other of `values`; a set left empty is dropped.
  void PutInValueSet(absl::string_view key, SnapshotState::ValueBits& values,
                     uint32_t i) const {
    const Labels& labels = st_.node(i).node.labels;
    auto value = labels.find(key);
    for (auto it = values.begin(); it != values.end();) {
      if (value == labels.end() || it->first != value->second) {
        it->second.Set(i, false);
      }
      it = it->second.count() == 0 ? values.erase(it) : std::next(it);
    }
    if (value == labels.end()) return;
    // A new value's set is made only when there is none: building one is
    // O(nodes), and try_emplace would build it before looking.
    auto set = values.find(value->second);
    if (set == values.end()) {
      set = values.emplace(value->second, CowBitset(st_.index_end())).first;
    }
    set->second.Set(i, true);
  }

  // The slots of `count` added nodes or slices: the lowest `free` ones,
  // then new ones past the table's end (`num_slots`).
  static std::vector<uint32_t> NewSlots(const std::vector<uint32_t>& free,
                                        size_t num_slots, size_t count) {
    std::vector<uint32_t> slots(free.begin(),
                                free.begin() + std::min(count, free.size()));
    for (auto next = static_cast<uint32_t>(num_slots); slots.size() < count;
         ++next) {
      slots.push_back(next);
    }
    return slots;
  }

  // The free slots after `new_slots` (NewSlots()) were taken from `free`
  // and `freed` ones were given up; `free` itself when neither happened.
  static std::shared_ptr<const std::vector<uint32_t>> FreeSlotsAfter(
      const std::shared_ptr<const std::vector<uint32_t>>& free,
      const std::vector<uint32_t>& new_slots, std::vector<uint32_t> freed) {
    if (new_slots.empty() && freed.empty()) return free;
    const size_t taken = std::min(new_slots.size(), free->size());
    std::sort(freed.begin(), freed.end());
    auto left = std::make_shared<std::vector<uint32_t>>();
    std::merge(free->begin() + taken, free->end(), freed.begin(), freed.end(),
               std::back_inserter(*left));
    return left;
  }

  // The table size after taking `new_slots`.
  static size_t SlotsAfter(size_t num_slots,
                           const std::vector<uint32_t>& new_slots) {
    return std::max<size_t>(num_slots,
                            new_slots.empty() ? 0 : new_slots.back() + 1);
  }

  // `slots` (index -> slot; a copy of `old`, resized) after `moves`: in
  // [first_moved, end_moved) the runs of old indexes copied over, and the
  // inserted items' `inserted_slots` (kNoSlot for a gap) between them.
  static void MoveSlots(CowArray<uint32_t, 10>& slots,
                        const CowArray<uint32_t, 10>& old,
                        const Renumbering& moves,
                        const std::vector<uint32_t>& inserted_slots) {
    const size_t from = moves.first_moved();
    for (const Renumbering::Run& run : moves.runs()) {
      if (run.to + run.len <= from) continue;
      if (run.from >= moves.end_moved()) break;  // from here on, in place
      const size_t skip = run.to < from ? from - run.to : 0;
      slots.CopyRange(run.to + skip, old, run.from + skip, run.len - skip);
    }
    for (size_t k = 0; k < inserted_slots.size(); ++k) {
      slots.Mutable(moves.inserted()[k]) = inserted_slots[k];
    }
  }

  // `indexes` (slot -> index; a copy of the old array, resized with
  // kNoIndex) after `moves`, `slots` (the new index -> slot): the removed
  // items' `freed` slots are free, and every slot whose item's index is in
  // the moved range learns it, in one pass over the range (slots mostly
  // come in index order: a run of them writes one chunk).
  static void MoveIndexes(CowArray<uint32_t, 10>& indexes,
                          const CowArray<uint32_t, 10>& slots,
                          const Renumbering& moves,
                          const std::vector<uint32_t>& freed) {
    for (uint32_t slot : freed) indexes.Mutable(slot) = SnapshotState::kNoIndex;
    const size_t from = moves.first_moved();
    const size_t to = moves.bits() - (moves.old_size() - moves.end_moved());
    CowArray<uint32_t, 10>::Cursor out(indexes);
    for (size_t p = from; p < to; ++p) {
      const uint32_t slot = slots[p];
      if (slot != SnapshotState::kNoSlot && indexes[slot] != p) {
        out[slot] = static_cast<uint32_t>(p);
      }
    }
  }

  // The new node table, which is by slot: new entries for replaced nodes in
  // their slots and for added ones in `new_slots` (NewSlots()); the slot <->
  // index arrays from the first index that moved; removed nodes' slots
  // emptied (and free from now on), and the id shards. Reads the old slot
  // arrays.
  void InstallNodes(const NodePlan& plan,
                    const std::vector<uint32_t>& new_slots) {
    const Renumbering& moves = plan.moves;
    const size_t n2 = moves.bits();
    const size_t num_slots = SlotsAfter(st_.num_node_slots(), new_slots);
    owned_nodes_.clear();
    CowArray<std::shared_ptr<const NodeEntry>, 8> table = st_.nodes_;
    table.Resize(num_slots);
    for (const auto& [i, node] : plan.replaced) {
      const uint32_t slot = st_.SlotOf(i);
      std::shared_ptr<const NodeEntry>& p = table.Mutable(slot);
      auto e = std::make_shared<NodeEntry>(*p);
      e->node = *node;
      e->slice_slot = -1;  // set again from the slice it is a host of
      e->single_host = false;
      e->free = e->node.resources;
      for (const Allocation& a : e->allocations) {
        for (const auto& [name, amount] : a.resources) e->free[name] -= amount;
      }
      e->tpu = Amount(e->node.resources, std::string(kResourceTpu)) > 0;
      p = std::move(e);
      owned_nodes_.insert(slot);
    }
    for (uint32_t a = 0; a < plan.added.size(); ++a) {
      auto e = std::make_shared<NodeEntry>();
      e->node = *plan.added[a];
      e->free = e->node.resources;
      e->tpu = Amount(e->node.resources, std::string(kResourceTpu)) > 0;
      table.Mutable(new_slots[a]) = std::move(e);
      owned_nodes_.insert(new_slots[a]);
    }
    // Every node whose index moves learns its new one.
    std::vector<uint32_t> inserted_slots;
    inserted_slots.reserve(plan.inserted_node.size());
    for (int64_t a : plan.inserted_node) {
      inserted_slots.push_back(a < 0 ? SnapshotState::kNoSlot : new_slots[a]);
    }
    CowArray<uint32_t, 10> slots = st_.slot_of_index_;
    slots.Resize(n2);
    MoveSlots(slots, st_.slot_of_index_, moves, inserted_slots);
    std::vector<uint32_t> freed;
    for (uint32_t i : plan.removed()) freed.push_back(st_.SlotOf(i));
    CowArray<uint32_t, 10> indexes = st_.index_of_slot_;
    indexes.Resize(num_slots, SnapshotState::kNoIndex);
    MoveIndexes(indexes, slots, moves, freed);
    for (uint32_t i : plan.removed()) {
      const uint32_t slot = st_.SlotOf(i);
      table.Mutable(slot) = nullptr;
      const uint64_t hash = SnapshotState::IdHash(st_.node(i).node.node_id);
      MutableIdShard(SnapshotState::IdShardOf(hash)).Remove(slot);
    }
    for (uint32_t a = 0; a < plan.added.size(); ++a) {
      const uint64_t hash = SnapshotState::IdHash(plan.added[a]->node_id);
      MutableIdShard(SnapshotState::IdShardOf(hash)).Add(hash, new_slots[a]);
    }
    st_.free_node_slots_ =
        FreeSlotsAfter(st_.free_node_slots_, new_slots, std::move(freed));
    st_.nodes_ = std::move(table);
    st_.slot_of_index_ = std::move(slots);
    st_.index_of_slot_ = std::move(indexes);
    // The indexes holding a node, with the slot arrays (num_nodes() reads
    // it).
    if (moves.changed()) st_.node_bits_ = st_.node_bits_.Renumbered(moves);
    for (uint32_t p : plan.added_at) st_.node_bits_.Set(p, true);
  }

  // The new slice table, which is by slot: gone slices' slots emptied (and
  // free from now on), new entries for re-derived slices (in their slots, or
  // for new slices in the lowest free ones); then the slot <-> index arrays
  // and every host's slice slot.
  void InstallSlices(const SlicePlan& plan) {
    owned_slices_.clear();
    const std::vector<uint32_t> new_slots = NewSlots(
        *st_.free_slice_slots_, st_.num_slice_slots(), plan.added.size());
    // The slot of new index q (reads the old slot arrays).
    auto slot_of = [&](uint32_t q) {
      const int64_t src = plan.moves.SourceOf(q);
      return src >= 0 ? st_.SliceSlotOf(static_cast<uint32_t>(src))
                      : new_slots[-1 - src];
    };
    CowArray<std::shared_ptr<const SliceEntry>, 8> table = st_.slices_;
    table.Resize(SlotsAfter(st_.num_slice_slots(), new_slots));
    for (uint32_t s : plan.moves.removed()) {  // gone
      table.Mutable(st_.SliceSlotOf(s)) = nullptr;
    }
    for (uint32_t q : plan.rederived) {
      const int64_t src = plan.moves.SourceOf(q);
      const std::string& name =
          src >= 0 ? st_.slice(src).info.name : plan.added[-1 - src]->name;
      auto se = std::make_shared<SliceEntry>();
      se->info = *plan.derived.at(name);
      for (const std::string& id : se->info.node_ids) {
        if (id.empty()) continue;
        // A host is a node of this snapshot (InstallNodes() put it in).
        se->host_slots.push_back(static_cast<uint32_t>(st_.NodeSlot(id)));
      }
      ResolveShape(*se);
      std::vector<const ResourceSet*> hosts;
      for (uint32_t h : HostIndexes(*se)) {
        hosts.push_back(&st_.node(h).node.resources);
      }
      se->host_min =
          Shared(LeastOf(hosts), src >= 0 ? &st_.slice(src) : nullptr,
                 q > 0 ? table[slot_of(q - 1)].get() : nullptr);
      se->host_most_tpu = MostTpuOf(hosts);
      table.Mutable(slot_of(q)) = std::move(se);
      owned_slices_.insert(slot_of(q));
    }
    InstallSliceSlots(plan, new_slots);
    st_.slices_ = std::move(table);
    // Hosts of re-derived slices name them by slot (replaced nodes start
    // with none); other nodes keep theirs, whatever index it has now.
    for (uint32_t q : plan.rederived) {
      const SliceEntry& se = st_.slice(q);
      const bool single = se.shape_known && se.shape.hosts == 1;
      const int32_t slot = static_cast<int32_t>(st_.SliceSlotOf(q));
      for (uint32_t h : HostIndexes(se)) {
        const NodeEntry& e = st_.node(h);
        if (e.slice_slot == slot && e.single_host == single) continue;
        NodeEntry& m = MutableNode(h);
        m.slice_slot = slot;
        m.single_host = single;
      }
    }
  }

  // Slice slots after a change: slices that are gone give theirs up, new
  // ones take `new_slots`, and every slice from the first moved index on
  // learns its new index. Reads the old slot arrays; runs before the new
  // slice table is installed.
  void InstallSliceSlots(const SlicePlan& plan,
                         const std::vector<uint32_t>& new_slots) {
    const size_t count = plan.moves.bits();
    CowArray<uint32_t, 10> slots = st_.slice_slot_of_index_;
    slots.Resize(count);
    CowArray<uint32_t, 10> indexes = st_.slice_index_of_slot_;
    indexes.Resize(SlotsAfter(st_.num_slice_slots(), new_slots),
                   SnapshotState::kNoIndex);
    std::vector<uint32_t> freed;
    for (uint32_t s : plan.moves.removed()) {  // gone
      freed.push_back(st_.SliceSlotOf(s));
      const uint64_t hash = SnapshotState::IdHash(st_.slice(s).info.name);
      MutableShard(st_.slice_ids_, owned_slice_id_shards_,
                   SnapshotState::IdShardOf(hash))
          .Remove(st_.SliceSlotOf(s));
    }
    for (uint32_t a = 0; a < plan.added.size(); ++a) {
      const uint64_t hash = SnapshotState::IdHash(plan.added[a]->name);
      MutableShard(st_.slice_ids_, owned_slice_id_shards_,
                   SnapshotState::IdShardOf(hash))
          .Add(hash, new_slots[a]);
    }
    MoveSlots(slots, st_.slice_slot_of_index_, plan.moves, new_slots);
    MoveIndexes(indexes, slots, plan.moves, freed);
    st_.free_slice_slots_ =
        FreeSlotsAfter(st_.free_slice_slots_, new_slots, std::move(freed));
    st_.slice_slot_of_index_ = std::move(slots);
    st_.slice_index_of_slot_ = std::move(indexes);
  }

  // Node entries, in node-id order.
  using NodeEntries = std::vector<std::shared_ptr<InventorySnapshot::NodeEntry>>;

  // `nodes` sorted by id. InvalidArgument for an empty or duplicate id.
  static absl::StatusOr<std::vector<Node>> SortedById(std::vector<Node> nodes) {
    auto by_id = [](const Node& a, const Node& b) {
      return a.node_id < b.node_id;
    };
    // A store hands them over in key (= id) order already.
    if (!std::is_sorted(nodes.begin(), nodes.end(), by_id)) {
      std::sort(nodes.begin(), nodes.end(), by_id);
    }
    for (size_t i = 0; i < nodes.size(); ++i) {
      if (nodes[i].node_id.empty()) {
        return absl::InvalidArgumentError("node_id must not be empty");
      }
      if (i > 0 && nodes[i].node_id == nodes[i - 1].node_id) {
        return absl::InvalidArgumentError(
            absl::StrCat("duplicate node_id ", nodes[i].node_id));
      }
    }
    return nodes;
  }

  // The entries of `nodes`, made on every core (100k at a restart).
  static NodeEntries MakeNodeEntries(std::vector<Node> nodes) {
    NodeEntries entries(nodes.size());
    ParallelChunks(nodes.size(), 4096, 0, [&](size_t begin, size_t end) {
      for (size_t i = begin; i < end; ++i) {
        auto e = std::make_shared<InventorySnapshot::NodeEntry>();
        e->node = std::move(nodes[i]);
        e->free = e->node.resources;
        e->tpu = Amount(e->node.resources, std::string(kResourceTpu)) > 0;
        entries[i] = std::move(e);
      }
    });
    return entries;
  }

  static std::vector<const Node*> NodesOf(const NodeEntries& entries) {
    std::vector<const Node*> nodes;
    nodes.reserve(entries.size());
    for (const auto& e : entries) nodes.push_back(&e->node);
    return nodes;
  }

  static std::shared_ptr<const SnapshotState::LabelIndex> MakeLabelIndex(
      const std::vector<std::shared_ptr<InventorySnapshot::NodeEntry>>&
          entries) {
    // Gathered over views of the entries' labels, then sorted once. Label
    // keys share long prefixes, which every search step of an ordered map
    // would compare. Neighbouring nodes mostly have the same keys in the
    // same order, and many the same values (a slice's hosts): the previous
    // node's key at the same position, and each key's previous value, are
    // tried before a hash lookup. (Plain two-level hash maps, sorted at the
    // end, made a 100k-node restart 0.1 s slower: bench/RESULTS.md.)
    using PostingList = SnapshotState::PostingList;
    struct Key {
      absl::string_view name;
      absl::flat_hash_map<absl::string_view, uint32_t> value_at;  // in lists
      std::vector<std::pair<absl::string_view, std::vector<uint32_t>>> lists;
      uint32_t last = 0;  // the list of the previous value
    };
    absl::flat_hash_map<absl::string_view, Key*> key_of;
    std::deque<Key> keys;     // stable addresses
    std::vector<Key*> prev;   // the previous node's keys, by position
    for (uint32_t i = 0; i < entries.size(); ++i) {
      size_t pos = 0;
      for (const auto& [k, v] : entries[i]->node.labels) {
        if (pos == prev.size()) prev.push_back(nullptr);
        Key*& key = prev[pos++];
        if (key == nullptr || key->name != k) {
          auto [it, fresh] = key_of.try_emplace(k, nullptr);
          if (fresh) it->second = &keys.emplace_back(Key{k, {}, {}, 0});
          key = it->second;
        }
        if (key->lists.empty() || key->lists[key->last].first != v) {
          auto [it, fresh] = key->value_at.try_emplace(
              v, static_cast<uint32_t>(key->lists.size()));
          if (fresh) key->lists.emplace_back(v, std::vector<uint32_t>());
          key->last = it->second;
        }
        key->lists[key->last].second.push_back(i);
      }
    }
    auto by_name = [](const auto& a, const auto& b) { return a.first < b.first; };
    std::sort(keys.begin(), keys.end(),
              [](const Key& a, const Key& b) { return a.name < b.name; });
    auto label_index = std::make_shared<SnapshotState::LabelIndex>();
    for (Key& key : keys) {
      // Values often come in order already (ids, in node-id order).
      if (!std::is_sorted(key.lists.begin(), key.lists.end(), by_name)) {
        std::sort(key.lists.begin(), key.lists.end(), by_name);
      }
      std::vector<std::pair<std::string, std::shared_ptr<const PostingList>>>
          items;
      items.reserve(key.lists.size());
      for (auto& [v, list] : key.lists) {
        items.emplace_back(std::string(v),
                           std::make_shared<const PostingList>(
                               PostingList::FromSorted(std::move(list))));
      }
      label_index->emplace_hint(
          label_index->end(), std::string(key.name),
          std::make_shared<const SnapshotState::ValueIndex>(
              SnapshotState::ValueIndex::FromSorted(std::move(items))));
    }
    return label_index;
  }

  // Installs `infos` (DeriveSlices of `entries`, whose ids `id_shards` map
  // to their indexes) as the slice table, links each node to its slice, and
  // makes the slice name -> index map.
  void InstallSlices(NodeEntries& entries, std::vector<SliceInfo> infos,
                     const std::vector<SnapshotState::IdShard>& id_shards) {
    // On every core: 25k slices at 100k nodes, on the restart's critical
    // path. A node is in one slice, so each chunk writes its own nodes.
    std::vector<std::shared_ptr<InventorySnapshot::SliceEntry>> slices(
        infos.size());
    std::vector<ResourceSet> least(infos.size());
    ParallelChunks(infos.size(), 512, 0, [&](size_t begin, size_t end) {
      for (size_t si = begin; si < end; ++si) {
        auto se = std::make_shared<InventorySnapshot::SliceEntry>();
        se->info = std::move(infos[si]);
        for (const std::string& id : se->info.node_ids) {
          if (id.empty()) continue;
          const uint64_t hash = SnapshotState::IdHash(id);
          const uint32_t ni = static_cast<uint32_t>(
              id_shards[SnapshotState::IdShardOf(hash)].Find(
                  id, hash, [&](uint32_t i) -> absl::string_view {
                    return entries[i]->node.node_id;
                  }));
          se->host_slots.push_back(ni);  // a full build's slots are indexes
          entries[ni]->slice_slot = static_cast<int32_t>(si);
        }
        ResolveShape(*se);
        std::vector<const ResourceSet*> hosts;
        for (uint32_t h : se->host_slots) {
          entries[h]->single_host = se->shape_known && se->shape.hosts == 1;
          hosts.push_back(&entries[h]->node.resources);
        }
        least[si] = LeastOf(hosts);
        se->host_most_tpu = MostTpuOf(hosts);
        slices[si] = std::move(se);
      }
    });
    st_.slices_ =
        CowArray<std::shared_ptr<const InventorySnapshot::SliceEntry>, 8>(
            infos.size());
    for (uint32_t si = 0; si < infos.size(); ++si) {
      // Shared() reuses the sets it made last: in slice order, on this thread.
      slices[si]->host_min = Shared(std::move(least[si]), nullptr, nullptr);
      st_.slices_.Mutable(si) = std::move(slices[si]);
    }
    // Slice slots: as for nodes, slot == index after a full build.
    st_.slice_slot_of_index_ = CowArray<uint32_t, 10>(infos.size());
    st_.slice_index_of_slot_ = CowArray<uint32_t, 10>(infos.size());
    std::vector<SnapshotState::IdShard> shards(SnapshotState::kIdShards);
    for (uint32_t si = 0; si < infos.size(); ++si) {
      st_.slice_slot_of_index_.Mutable(si) = si;
      st_.slice_index_of_slot_.Mutable(si) = si;
      const uint64_t hash = SnapshotState::IdHash(st_.slice(si).info.name);
      shards[SnapshotState::IdShardOf(hash)].Add(hash, si);
    }
    st_.slice_ids_ = MakeIdShards(std::move(shards));
  }

  std::vector<uint32_t> HostIndexes(const SliceEntry& se) const {
    std::vector<uint32_t> out;
    out.reserve(se.host_slots.size());
    for (size_t w = 0; w < se.host_slots.size(); ++w) {
      out.push_back(st_.HostIndex(se, w));
    }
    return out;
  }

  // After a full build: slot i is node i, and `shards` (IdShardsOf the
  // same nodes) map ids to slots.
  void InstallIdentitySlots(size_t n,
                            std::vector<SnapshotState::IdShard> shards) {
    st_.slot_of_index_ = CowArray<uint32_t, 10>(n);
    st_.index_of_slot_ = CowArray<uint32_t, 10>(n);
    st_.node_bits_ = CowBitset::AllSet(n);
    for (uint32_t i = 0; i < n; ++i) {
      st_.slot_of_index_.Mutable(i) = i;
      st_.index_of_slot_.Mutable(i) = i;
    }
    st_.node_ids_ = MakeIdShards(std::move(shards));
  }

  // The node-id map of `entries` (id -> index), sharded as node_ids_ is.
  static std::vector<SnapshotState::IdShard> IdShardsOf(
      const std::vector<std::shared_ptr<InventorySnapshot::NodeEntry>>&
          entries) {
    std::vector<SnapshotState::IdShard> shards(SnapshotState::kIdShards);
    for (uint32_t i = 0; i < entries.size(); ++i) {
      const uint64_t hash = SnapshotState::IdHash(entries[i]->node.node_id);
      shards[SnapshotState::IdShardOf(hash)].Add(hash, i);
    }
    return shards;
  }

  static CowArray<std::shared_ptr<const SnapshotState::IdShard>, 6>
  MakeIdShards(std::vector<SnapshotState::IdShard> shards) {
    CowArray<std::shared_ptr<const SnapshotState::IdShard>, 6> out(
        shards.size());
    auto empty = std::make_shared<const SnapshotState::IdShard>();
    for (size_t k = 0; k < shards.size(); ++k) {
      out.Mutable(k) = shards[k].size() == 0
                           ? empty
                           : std::make_shared<const SnapshotState::IdShard>(
                                 std::move(shards[k]));
    }
    return out;
  }

  // Shard `shard` of a node-id or slice-name map, copied on first write.
  static SnapshotState::IdShard& MutableShard(
      CowArray<std::shared_ptr<const SnapshotState::IdShard>, 6>& shards,
      absl::flat_hash_set<size_t>& owned, size_t shard) {
    if (!owned.contains(shard)) {
      shards.Mutable(shard) =
          std::make_shared<SnapshotState::IdShard>(*shards[shard]);
      owned.insert(shard);
    }
    return const_cast<SnapshotState::IdShard&>(*shards[shard]);
  }

  SnapshotState::IdShard& MutableIdShard(size_t shard) {
    return MutableShard(st_.node_ids_, owned_id_shards_, shard);
  }

  // Empty PG shards, rank bitsets over n nodes and per-key slice indexes.
  void InstallEmptyIndexes(size_t n) {
    st_.pgs_ =
        CowArray<std::shared_ptr<const PgShard>, 6>(SnapshotState::kPgShards);
    auto empty = std::make_shared<const PgShard>();
    for (size_t i = 0; i < SnapshotState::kPgShards; ++i) {
      st_.pgs_.Mutable(i) = empty;
    }
    for (auto& per_kind : st_.rank_sets_) {
      for (CowBitset& set : per_kind) set = CowBitset(n);
    }
    st_.free_slices_ = SliceSets();
    st_.broken_slices_ = SliceSets();
    st_.idle_slices_ = SliceSets();
    st_.partly_busy_slices_ = SliceSets();
    st_.key_hosts_ = {};
  }

  // The most TPU of `sets` (0 without any).
  static int64_t MostTpuOf(const std::vector<const ResourceSet*>& sets) {
    int64_t most = 0;
    for (const ResourceSet* set : sets) {
      most = std::max(most, Amount(*set, std::string(kResourceTpu)));
    }
    return most;
  }

  // Per resource, the least amount of `sets`; a resource some set lacks is
  // left out (it has 0 there).
  static ResourceSet LeastOf(const std::vector<const ResourceSet*>& sets) {
    if (sets.empty()) return {};
    // Narrowed in place: one copy of the first set's names, none per set.
    ResourceSet least = *sets[0];
    for (size_t i = 1; i < sets.size() && !least.empty(); ++i) {
      const ResourceSet& set = *sets[i];
      for (auto& [name, amount] : least) {
        auto it = set.find(name);
        if (it != set.end()) amount = std::min(amount, it->second);
      }
      erase_if(least, [&](const ResourceSet::value_type& entry) {
        return !set.contains(entry.first);
      });
    }
    return least;
  }

  // `least` as a shared set: the one of `a` or `b` (slice entries, may be
  // null) or of a slice this writer set before when equal, else a new one.
  std::shared_ptr<const ResourceSet> Shared(ResourceSet least,
                                            const SliceEntry* a,
                                            const SliceEntry* b) {
    for (const SliceEntry* e : {a, b}) {
      if (e != nullptr && e->host_min && *e->host_min == least) {
        return e->host_min;
      }
    }
    for (const auto& set : recent_minima_) {
      if (*set == least) return set;
    }
    auto set = std::make_shared<const ResourceSet>(std::move(least));
    if (recent_minima_.size() == kRecentMinima) recent_minima_.pop_front();
    recent_minima_.push_back(set);
    return set;
  }

  static void ResolveShape(InventorySnapshot::SliceEntry& se) {
    auto gen = ParseTpuGeneration(se.info.accelerator_type);
    if (gen.ok()) {
      auto shape = ResolveTpuShape(*gen, se.info.topology);
      if (shape.ok()) {
        se.shape_known = true;
        se.shape = *std::move(shape);
      }
    }
  }

  // Entry i of `table`, copied first unless this writer created it or
  // already copied it (recorded in `owned`).
  template <typename Entry>
  Entry& MutableEntry(CowArray<std::shared_ptr<const Entry>, 8>& table,
                      absl::flat_hash_set<uint32_t>& owned, uint32_t i) {
    std::shared_ptr<const Entry>& p = table.Mutable(i);
    if (!building_ && !owned.contains(i)) {
      p = std::make_shared<Entry>(*p);
      owned.insert(i);
    }
    return const_cast<Entry&>(*p);
  }

  // Node i (by index), writable.
  InventorySnapshot::NodeEntry& MutableNode(uint32_t i) {
    return MutableEntry(st_.nodes_, owned_nodes_, st_.SlotOf(i));
  }

  // Slice si (by index), writable.
  InventorySnapshot::SliceEntry& MutableSlice(uint32_t si) {
    return MutableEntry(st_.slices_, owned_slices_, st_.SliceSlotOf(si));
  }

  // The shard of a PG id whose hash is `hash`, writable: copied (its bucket
  // pointers) on its first write in this derivation.
  PgShard& MutablePgShard(size_t hash) {
    const size_t shard = SnapshotState::PgShardOf(hash);
    if (owned_shards_.insert(shard).second) {
      st_.pgs_.Mutable(shard) = std::make_shared<PgShard>(*st_.pgs_[shard]);
    }
    return const_cast<PgShard&>(*st_.pgs_[shard]);
  }

  // The bucket of `shard` for `hash`, writable: copied on its first write
  // in this derivation.
  PgShard::Bucket& MutableBucket(PgShard& shard, size_t hash) {
    std::shared_ptr<const PgShard::Bucket>& bucket =
        shard.buckets_[shard.BucketOf(hash)];
    if (!owned_buckets_.contains(bucket.get())) {
      bucket = std::make_shared<PgShard::Bucket>(*bucket);
      owned_buckets_.insert(bucket.get());
    }
    return const_cast<PgShard::Bucket&>(*bucket);
  }

  // Doubles the shard's buckets once they hold more than kBucketGroups
  // groups on average: O(the shard's groups), every time it doubles.
  void MaybeSplit(PgShard& shard) {
    if (shard.size_ <= PgShard::kBucketGroups * shard.buckets_.size()) return;
    const size_t n = 2 * shard.buckets_.size();
    std::vector<std::shared_ptr<PgShard::Bucket>> split(n);
    for (auto& bucket : split) {
      bucket = std::make_shared<PgShard::Bucket>();
      owned_buckets_.insert(bucket.get());
    }
    for (const auto& bucket : shard.buckets_) {
      owned_buckets_.erase(bucket.get());
      for (const auto& [id, list] : *bucket) {
        split[PgShard::BucketOf(SnapshotState::PgHash(id), n)]->emplace(id,
                                                                        list);
      }
    }
    shard.buckets_.assign(split.begin(), split.end());
  }

  absl::Status AddAllocation(Allocation a, bool check_fit) {
    const int64_t i = st_.NodeIndex(a.node_id);
    if (i < 0) {
      return absl::NotFoundError(absl::StrCat("allocation of ", a.pg_id, "[",
                                              a.bundle_index,
                                              "] on unknown node ", a.node_id));
    }
    const size_t hash = SnapshotState::PgHash(a.pg_id);
    const PgShard::List* held =
        st_.pg_shard(SnapshotState::PgShardOf(hash)).Find(a.pg_id, hash);
    if (held != nullptr) {
      for (const Allocation& h : **held) {
        if (h.bundle_index == a.bundle_index) {
          return absl::InvalidArgumentError(absl::StrCat(
              "duplicate allocation of ", a.pg_id, "[", a.bundle_index, "]"));
        }
      }
    }
    InventorySnapshot::NodeEntry& e = MutableNode(static_cast<uint32_t>(i));
    for (const auto& [name, amount] : a.resources) {
      int64_t& free = e.free[name];
      if (check_fit && free < amount) {
        return absl::FailedPreconditionError(absl::StrCat(
            "allocation of ", a.pg_id, "[", a.bundle_index, "] needs ",
            FromFixedPoint(amount), " ", name, " on node ", a.node_id,
            ", only ", FromFixedPoint(free), " free"));
      }
      free -= amount;
    }
    e.allocations.Insert(a);
    PgShard& shard = MutablePgShard(hash);
    auto [it, fresh] = MutableBucket(shard, hash).try_emplace(a.pg_id);
    // Copied on its first write in this derivation: a list only this
    // bucket holds was made here (as a non-const vector), and no snapshot
    // shows it yet.
    PgShard::List& list = it->second;
    if (list == nullptr) {
      list = std::make_shared<std::vector<Allocation>>();
    } else if (list.use_count() > 1) {
      list = std::make_shared<std::vector<Allocation>>(*list);
    }
    auto& allocations = const_cast<std::vector<Allocation>&>(*list);
    allocations.insert(
        std::lower_bound(allocations.begin(), allocations.end(), a,
                         [](const Allocation& x, const Allocation& y) {
                           return x.bundle_index < y.bundle_index;
                         }),
        std::move(a));
    ++st_.num_allocations_;
    if (fresh) {
      ++shard.size_;
      MaybeSplit(shard);  // last: it moves the bucket `list` is in
    }
    return absl::OkStatus();
  }

  void Release(const std::string& pg) {
    const size_t hash = SnapshotState::PgHash(pg);
    const PgShard::List* held =
        st_.pg_shard(SnapshotState::PgShardOf(hash)).Find(pg, hash);
    if (held == nullptr) return;
    const PgShard::List list = *held;  // outlives the erase below
    PgShard& shard = MutablePgShard(hash);
    MutableBucket(shard, hash).erase(pg);
    --shard.size_;
    for (const Allocation& a : *list) {
      InventorySnapshot::NodeEntry& e =
          MutableNode(static_cast<uint32_t>(st_.NodeIndex(a.node_id)));
      for (const auto& [name, amount] : a.resources) e.free[name] += amount;
      e.allocations.Erase(a.pg_id, a.bundle_index);
      --st_.num_allocations_;
    }
  }

  void UpsertInPlace(uint32_t i, const Node& node) {
    InventorySnapshot::NodeEntry& e = MutableNode(i);
    UpdateLabelIndex(st_.SlotOf(i), e.node.labels, node.labels);
    if (e.node.resources != node.resources) {
      auto totals =
          std::make_shared<SnapshotState::AmountCounts>(st_.node_totals());
      CountTotals(*totals, e.node.resources, -1);
      CountTotals(*totals, node.resources, 1);
      st_.node_totals_ = std::move(totals);
    }
    e.node = node;
    e.free = node.resources;
    for (const Allocation& a : e.allocations) {
      for (const auto& [name, amount] : a.resources) e.free[name] -= amount;
    }
    e.tpu = Amount(node.resources, std::string(kResourceTpu)) > 0;
  }

  // Moves node slot i's postings from `before` to `after`.
  void UpdateLabelIndex(uint32_t i, const Labels& before, const Labels& after) {
    if (before == after) return;
    auto index = std::make_shared<SnapshotState::LabelIndex>(*st_.label_index_);
    auto edit = [&](const std::string& key, const std::string& value,
                    bool add) {
      auto old_key = index->find(key);
      auto vi =
          old_key != index->end()
              ? std::make_shared<SnapshotState::ValueIndex>(*old_key->second)
              : std::make_shared<SnapshotState::ValueIndex>();
      const std::vector<uint32_t> slot = {i}, none;
      auto list = std::make_shared<const SnapshotState::PostingList>(
          PostingsOf(*vi, value).Edited(add ? slot : none, add ? none : slot));
      if (list->empty()) {
        vi->Erase(value);
      } else {
        vi->Set(value, std::move(list));
      }
      if (vi->empty()) {
        index->erase(key);
      } else {
        (*index)[key] = std::move(vi);
      }
    };
    for (const auto& [k, v] : before) {
      auto it = after.find(k);
      if (it == after.end() || it->second != v) edit(k, v, false);
    }
    for (const auto& [k, v] : after) {
      auto it = before.find(k);
      if (it == before.end() || it->second != v) edit(k, v, true);
    }
    st_.label_index_ = std::move(index);
  }

  // Re-derives intactness and the least host of slice si from its hosts'
  // current nodes (state and resources may have changed; membership has
  // not).
  void RecheckSlice(uint32_t si) {
    const InventorySnapshot::SliceEntry& old = st_.slice(si);
    std::vector<const Node*> hosts;
    std::vector<const ResourceSet*> resources;
    for (uint32_t h : HostIndexes(old)) {
      hosts.push_back(&st_.node(h).node);
      resources.push_back(&st_.node(h).node.resources);
    }
    std::vector<SliceInfo> infos = DeriveSlices(hosts);
    ResourceSet least = LeastOf(resources);
    const int64_t most_tpu = MostTpuOf(resources);
    const bool same_least = least == *old.host_min;
    const bool same_hosts = same_least && most_tpu == old.host_most_tpu;
    if (infos.size() == 1 && infos[0] == old.info && same_hosts) return;
    InventorySnapshot::SliceEntry& se = MutableSlice(si);
    if (infos.size() == 1) se.info = std::move(infos[0]);
    if (same_hosts) return;
    const size_t n = st_.num_slices();
    if (!same_least) {
      se.host_min =
          Shared(std::move(least), si > 0 ? &st_.slice(si - 1) : nullptr,
                 si + 1 < n ? &st_.slice(si + 1) : nullptr);
    }
    se.host_most_tpu = most_tpu;
    if (se.shape_known) changed_keys_.insert(KeyOf(se));
  }

  void RecountSlice(uint32_t si) {
    const InventorySnapshot::SliceEntry& old = st_.slice(si);
    int64_t allocated = 0, tpu_held = 0, cpu_held = 0, tpu_busy = 0;
    for (uint32_t h : HostIndexes(old)) {
      const InventorySnapshot::NodeEntry& e = st_.node(h);
      const AllocationList& held = e.allocations;
      if (!held.empty()) ++allocated;
      if (Amount(e.free, std::string(kResourceTpu)) <
          Amount(e.node.resources, std::string(kResourceTpu))) {
        ++tpu_busy;
      }
      bool tpu = false, cpu = false;
      for (const Allocation& a : held) {
        (a.resources.contains(kResourceTpu) ? tpu : cpu) = true;
      }
      tpu_held += tpu ? 1 : 0;
      cpu_held += cpu ? 1 : 0;
    }
    const uint32_t w0 = old.host_slots.empty() ? 0 : st_.HostIndex(old, 0);
    auto label = [&](absl::string_view key) -> std::string {
      if (old.host_slots.empty()) return "";
      auto it = st_.node(w0).node.labels.find(key);
      return it == st_.node(w0).node.labels.end() ? "" : it->second;
    };
    std::string tier = label(kLabelCapacityTier);
    std::string zone = label(kLabelZone);
    if (allocated == old.allocated_hosts && tpu_held == old.tpu_held_hosts &&
        cpu_held == old.cpu_held_hosts && tpu_busy == old.tpu_busy_hosts &&
        tier == old.tier && zone == old.zone) {
      return;
    }
    InventorySnapshot::SliceEntry& se = MutableSlice(si);
    se.allocated_hosts = allocated;
    se.tpu_held_hosts = tpu_held;
    se.cpu_held_hosts = cpu_held;
    se.tpu_busy_hosts = tpu_busy;
    se.tier = std::move(tier);
    se.zone = std::move(zone);
  }

  static SliceKey KeyOf(const SliceEntry& se) {
    return SliceKey{se.shape.generation, se.shape.topology, se.tier, se.zone};
  }

  // Adds slice si to the per-key sets it belongs in (free and intact, or
  // not intact; idle or partly busy), or takes it out of all of them.
  void IndexSlice(uint32_t si, bool present) {
    const InventorySnapshot::SliceEntry& se = st_.slice(si);
    if (!se.shape_known) return;
    const SliceKey key = KeyOf(se);
    const bool intact = se.info.intact;
    const int64_t hosts = static_cast<int64_t>(se.host_slots.size());
    if (!present || (intact && se.free())) {
      SetMember(st_.free_slices_, key, si, present);
    }
    if (!present || !intact) {
      SetMember(st_.broken_slices_, key, si, present);
    }
    if (!present || (intact && se.tpu_busy_hosts == 0)) {
      SetMember(st_.idle_slices_, key, si, present);
    }
    if (!present ||
        (intact && se.tpu_busy_hosts > 0 && se.tpu_busy_hosts < hosts)) {
      SetMember(st_.partly_busy_slices_, key, si, present);
    }
  }

  void SetMember(SliceSets& sets, const SliceKey& key, uint32_t si,
                 bool present) {
    const CowBitset* current = sets.Find(key);
    if (current == nullptr ? !present : current->Test(si) == present) return;
    if (current != nullptr && owned_sets_.contains(current)) {
      // This writer made it: no snapshot shares it yet.
      const_cast<CowBitset*>(current)->Set(si, present);
      if (current->count() == 0) {
        owned_sets_.erase(current);
        sets.Put(key, nullptr);
      }
      return;
    }
    auto copy = current == nullptr
                    ? std::make_shared<CowBitset>(st_.num_slices())
                    : std::make_shared<CowBitset>(*current);
    copy->Set(si, present);
    if (copy->count() > 0) owned_sets_.insert(copy.get());
    sets.Put(key, std::move(copy));
  }

  // RefreshKeyHosts() for each key in changed_keys_, once however many of
  // its slices changed; then forgets them.
  void RefreshChangedKeys(const InventorySnapshot::SliceKeyIndex& by_key) {
    for (const SliceKey& key : changed_keys_) RefreshKeyHosts(key, by_key);
    changed_keys_.clear();
  }

  // Sets what the hosts of `key` have (SnapshotState::key_hosts()) from its
  // slices in `by_key`: O(slices of the key), run when one of them changes
  // or the key gains or loses a slice.
  void RefreshKeyHosts(const SliceKey& key,
                       const InventorySnapshot::SliceKeyIndex& by_key) {
    auto it = by_key.find(key);
    if (it == by_key.end() || it->second.empty()) {
      st_.key_hosts_.Put(key, nullptr);
      return;
    }
    // Neighbours mostly share their set: each run of one set counts once.
    std::vector<const ResourceSet*> sets;
    int64_t most_tpu = 0;
    for (uint32_t si : it->second) {
      const SliceEntry& se = st_.slice(si);
      const ResourceSet* set = se.host_min.get();
      if (sets.empty() || sets.back() != set) sets.push_back(set);
      most_tpu = std::max(most_tpu, se.host_most_tpu);
    }
    const KeyHosts* current = st_.key_hosts_.Find(key);
    KeyHosts hosts;
    hosts.most_tpu = most_tpu;
    if (sets.size() == 1) {  // every slice shares one set
      hosts.least = st_.slice(it->second[0]).host_min;
    } else if (ResourceSet least = LeastOf(sets);
               current != nullptr && *current->least == least) {
      hosts.least = current->least;
    } else {
      hosts.least = std::make_shared<const ResourceSet>(std::move(least));
    }
    if (current != nullptr && current->least == hosts.least &&
        current->most_tpu == most_tpu) {
      return;
    }
    st_.key_hosts_.Put(key, std::make_shared<const KeyHosts>(std::move(hosts)));
  }

  void IndexNode(uint32_t i, bool present) {
    for (int kind = 0; kind < 2; ++kind) {
      if (!present) {
        for (CowBitset& set : st_.rank_sets_[kind]) set.Set(i, false);
        continue;
      }
      const int r = st_.Rank(static_cast<BundleKind>(kind), i);
      if (r < kNumRanks) st_.rank_sets_[kind][r].Set(i, true);
    }
  }

  std::unique_ptr<InventorySnapshot> s_;
  SnapshotState& st_;  // *s_->state_
  // True inside BuildFrom(): every entry was created by this writer.
  bool building_ = false;
  // Inside ChangeNodeSet(): the slice key index being edited or rebuilt;
  // null while it is the snapshot's (MutableByKey()).
  std::shared_ptr<InventorySnapshot::SliceKeyIndex> by_key_;
  // Keys whose hosts (KeyHosts) must be derived again (a slice joined or
  // left, or its hosts' least or most changed); see RefreshChangedKeys().
  absl::btree_set<SliceKey> changed_keys_;
  // Per-key slice bitsets this writer made (SetMember()).
  absl::flat_hash_set<const CowBitset*> owned_sets_;
  absl::flat_hash_set<uint32_t> owned_nodes_;  // by slot
  absl::flat_hash_set<uint32_t> owned_slices_;  // by slot
  absl::flat_hash_set<size_t> owned_id_shards_;
  absl::flat_hash_set<size_t> owned_slice_id_shards_;
  absl::flat_hash_set<size_t> owned_shards_;
  // PG buckets this writer made or copied (PgShard).
  absl::flat_hash_set<const PgShard::Bucket*> owned_buckets_;
  // The least-host sets this writer made last (Shared()), for reuse.
  static constexpr size_t kRecentMinima = 8;
  std::deque<std::shared_ptr<const ResourceSet>> recent_minima_;
};

// ---- SnapshotEditor -------------------------------------------------------
// Its writer lives as long as its copy is unpublished: the owned_* sets and
// the copy-on-write containers' epochs carry over from one delta to the
// next, which is what makes the second write of a chunk in place.

SnapshotEditor::SnapshotEditor(std::shared_ptr<const InventorySnapshot> base)
    : base_(std::move(base)), save_base_(base_) {}

SnapshotEditor::~SnapshotEditor() = default;

const InventorySnapshot& SnapshotEditor::current() const {
  return writer_ != nullptr ? *writer_->s_ : *base_;
}

absl::Status SnapshotEditor::Apply(SnapshotDelta&& delta) {
  if (writer_ == nullptr) {
    writer_ = std::make_unique<SnapshotWriter>(
        std::unique_ptr<InventorySnapshot>(new InventorySnapshot(*base_)));
  }
  absl::Status status = writer_->Apply(delta);
  if (!status.ok()) {
    // The copy may be half edited: make it again from what succeeded.
    if (!applied_.empty()) publish_at_savepoints_ = true;
    Replay(applied_.size());
    return status;
  }
  applied_.push_back(std::move(delta));
  return absl::OkStatus();
}

std::shared_ptr<const InventorySnapshot> SnapshotEditor::Publish() {
  if (writer_ == nullptr) return base_;
  if (save_base_ == base_) {
    // The savepoint's deltas leave applied_, which now restarts.
    saved_.assign(std::make_move_iterator(applied_.begin()),
                  std::make_move_iterator(applied_.begin() + save_count_));
  }
  base_ = writer_->Finish();
  writer_ = nullptr;
  applied_.clear();
  return base_;
}

void SnapshotEditor::Savepoint() {
  if (publish_at_savepoints_) Publish();
  save_base_ = base_;
  save_count_ = applied_.size();
  saved_.clear();
}

void SnapshotEditor::RollBack() {
  if (save_base_ != base_) {  // published since the savepoint
    base_ = save_base_;
    applied_ = std::move(saved_);
    saved_.clear();
  } else if (save_count_ == applied_.size()) {
    return;  // nothing applied since
  }
  Replay(save_count_);
  if (save_count_ > 0) publish_at_savepoints_ = true;
}

void SnapshotEditor::Replay(size_t n) {
  writer_ = nullptr;
  applied_.resize(n);
  if (n == 0) return;
  writer_ = std::make_unique<SnapshotWriter>(
      std::unique_ptr<InventorySnapshot>(new InventorySnapshot(*base_)));
  for (const SnapshotDelta& delta : applied_) {
    absl::Status status = writer_->Apply(delta);
    if (!status.ok()) {
      // These deltas succeeded in this order on this snapshot before; the
      // engine is not deterministic if they do not now. The daemon's state
      // is in its store, which a restart reads again.
      std::fprintf(stderr,
                   "SnapshotEditor: a delta that applied before "
                   "failed on replay: %s\n",
                   status.ToString().c_str());
      std::abort();
    }
  }
}

namespace internal {

absl::StatusOr<std::shared_ptr<const InventorySnapshot>> BuildSnapshot(
    std::unique_ptr<InventorySnapshot> empty, std::vector<Node> nodes,
    std::vector<Allocation> allocations) {
  SnapshotWriter writer(std::move(empty));
  RETURN_IF_ERROR(writer.BuildFrom(std::move(nodes), std::move(allocations)));
  return writer.Finish();
}

absl::StatusOr<std::shared_ptr<const InventorySnapshot>> ApplyInPlace(
    std::unique_ptr<InventorySnapshot> copy, const SnapshotDelta& delta) {
  SnapshotWriter writer(std::move(copy));
  RETURN_IF_ERROR(writer.Apply(delta));
  return writer.Finish();
}

}  // namespace internal
}  // namespace sliced::scheduler
