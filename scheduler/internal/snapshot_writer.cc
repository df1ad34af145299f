// SnapshotWriter: builds an InventorySnapshot's state from scratch, or edits
// a copy of it by a delta in O(k log n); see snapshot_writer.h.
//
// Thread-safety: a writer owns its unpublished snapshot exclusively; it is
// not thread-safe and lives inside one Build() or Apply() call.
#include "scheduler/internal/snapshot_writer.h"

#include <algorithm>
#include <tuple>
#include <utility>

#include "absl/container/btree_map.h"
#include "absl/container/btree_set.h"
#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
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
using internal::kNumRanks;
using internal::SnapshotState;

namespace {

using PgIndex = SnapshotState::PgIndex;

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

}  // namespace

// Builds or edits an unpublished snapshot. Owns it exclusively until
// Finish(), so copy-on-write chunks with use_count() == 1 may be written in
// place.
class SnapshotWriter {
 public:
  explicit SnapshotWriter(std::unique_ptr<InventorySnapshot> snap)
      : s_(std::move(snap)), st_(*s_->state_) {}

  // --- Full build ------------------------------------------------------------
  // Steps: sort and check the node ids, make the node entries and the label
  // index, derive the slices, install empty allocation and rank indexes, add
  // the allocations, then index every slice and node.
  absl::Status BuildFrom(std::vector<Node> nodes,
                         std::vector<Allocation> allocations) {
    building_ = true;
    ASSIGN_OR_RETURN(nodes, SortedById(std::move(nodes)));
    NodeTable table = MakeNodeTable(std::move(nodes));
    st_.label_index_ = MakeLabelIndex(table.entries);
    InstallSlices(table);
    const size_t n = table.entries.size();
    st_.nodes_ =
        CowArray<std::shared_ptr<const InventorySnapshot::NodeEntry>, 8>(n);
    for (uint32_t i = 0; i < n; ++i) {
      st_.nodes_.Mutable(i) = std::move(table.entries[i]);
    }
    st_.node_ids_ = std::move(table.ids);
    InstallEmptyIndexes(n);

    std::sort(allocations.begin(), allocations.end(), AllocationLess);
    for (Allocation& a : allocations) {
      RETURN_IF_ERROR(AddAllocation(std::move(a), /*check_fit=*/false));
    }
    auto by_key = std::make_shared<InventorySnapshot::SliceKeyIndex>();
    for (uint32_t si = 0; si < st_.slices_.size(); ++si) {
      RecountSlice(si);
      IndexSlice(si, true);
      const InventorySnapshot::SliceEntry& se = st_.slice(si);
      if (se.shape_known) {
        (*by_key)[SliceKey{se.shape.generation, se.shape.topology, se.tier,
                           se.zone}]
            .push_back(si);
      }
    }
    st_.slices_by_key_ = std::move(by_key);
    for (uint32_t i = 0; i < n; ++i) IndexNode(i, true);
    building_ = false;
    return absl::OkStatus();
  }

  // --- Incremental edit ------------------------------------------------------
  // Returns false (and does nothing) when the delta needs a full rebuild.
  absl::StatusOr<bool> TryApply(const SnapshotDelta& delta) {
    if (!delta.remove_node_ids.empty()) return false;
    std::vector<uint32_t> upserted;
    for (const Node& node : delta.upsert_nodes) {
      const int64_t i = st_.NodeIndex(node.node_id);
      if (i < 0) return false;
      if (!SameSliceLabels(st_.node(i).node, node)) return false;
      upserted.push_back(static_cast<uint32_t>(i));
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
      if (st_.node(i).slice >= 0) slices.insert(st_.node(i).slice);
    }
    for (uint32_t si : slices) {
      for (uint32_t h : st_.slice(si).hosts) nodes.insert(h);
    }

    free_map_ =
        std::make_shared<SnapshotState::FreeSliceIndex>(*st_.free_slices_);
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
      RecheckSlice(si);
      RecountSlice(si);
      IndexSlice(si, true);
    }
    for (uint32_t i : nodes) IndexNode(i, true);
    return true;
  }

  std::shared_ptr<const InventorySnapshot> Finish() {
    st_.free_slices_ = std::move(free_map_);
    return std::shared_ptr<const InventorySnapshot>(std::move(s_));
  }

  InventorySnapshot& snap() { return *s_; }

 private:
  // Node entries in node-id order and the id -> index map.
  struct NodeTable {
    std::vector<std::shared_ptr<InventorySnapshot::NodeEntry>> entries;
    std::shared_ptr<absl::flat_hash_map<std::string, uint32_t>> ids;
  };

  // `nodes` sorted by id. InvalidArgument for an empty or duplicate id.
  static absl::StatusOr<std::vector<Node>> SortedById(std::vector<Node> nodes) {
    std::sort(nodes.begin(), nodes.end(), [](const Node& a, const Node& b) {
      return a.node_id < b.node_id;
    });
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

  // REQUIRES: `nodes` sorted by id, ids unique.
  static NodeTable MakeNodeTable(std::vector<Node> nodes) {
    NodeTable table;
    table.ids = std::make_shared<absl::flat_hash_map<std::string, uint32_t>>();
    table.ids->reserve(nodes.size());
    table.entries.resize(nodes.size());
    for (uint32_t i = 0; i < nodes.size(); ++i) {
      auto e = std::make_shared<InventorySnapshot::NodeEntry>();
      e->node = std::move(nodes[i]);
      e->free = e->node.resources;
      e->tpu = Amount(e->node.resources, std::string(kResourceTpu)) > 0;
      (*table.ids)[e->node.node_id] = i;
      table.entries[i] = std::move(e);
    }
    return table;
  }

  static std::shared_ptr<const SnapshotState::LabelIndex> MakeLabelIndex(
      const std::vector<std::shared_ptr<InventorySnapshot::NodeEntry>>&
          entries) {
    absl::btree_map<std::string,
                    absl::btree_map<std::string, SnapshotState::PostingList>>
        labels;
    for (uint32_t i = 0; i < entries.size(); ++i) {
      for (const auto& [k, v] : entries[i]->node.labels) {
        labels[k][v].push_back(i);
      }
    }
    auto label_index = std::make_shared<SnapshotState::LabelIndex>();
    for (auto& [k, values] : labels) {
      auto vi = std::make_shared<SnapshotState::ValueIndex>();
      for (auto& [v, list] : values) {
        (*vi)[v] =
            std::make_shared<const SnapshotState::PostingList>(std::move(list));
      }
      (*label_index)[k] = std::move(vi);
    }
    return label_index;
  }

  // Derives the slices of `table`'s nodes, links each node to its slice, and
  // installs the slice table and the slice name -> index map.
  void InstallSlices(NodeTable& table) {
    std::vector<const Node*> ptrs;
    ptrs.reserve(table.entries.size());
    for (const auto& e : table.entries) ptrs.push_back(&e->node);
    std::vector<SliceInfo> infos = DeriveSlices(ptrs);
    auto slice_ids =
        std::make_shared<absl::flat_hash_map<std::string, uint32_t>>();
    st_.slices_ =
        CowArray<std::shared_ptr<const InventorySnapshot::SliceEntry>, 8>(
            infos.size());
    for (uint32_t si = 0; si < infos.size(); ++si) {
      auto se = std::make_shared<InventorySnapshot::SliceEntry>();
      se->info = std::move(infos[si]);
      for (const std::string& id : se->info.node_ids) {
        if (id.empty()) continue;
        const uint32_t ni = table.ids->at(id);
        se->hosts.push_back(ni);
        table.entries[ni]->slice = static_cast<int32_t>(si);
      }
      ResolveShape(*se);
      for (uint32_t h : se->hosts) {
        table.entries[h]->single_host = se->shape_known && se->shape.hosts == 1;
      }
      (*slice_ids)[se->info.name] = si;
      st_.slices_.Mutable(si) = std::move(se);
    }
    st_.slice_ids_ = std::move(slice_ids);
  }

  // Empty PG shards, rank bitsets over n nodes and free-slice index.
  void InstallEmptyIndexes(size_t n) {
    st_.pgs_ =
        CowArray<std::shared_ptr<const PgIndex>, 6>(SnapshotState::kPgShards);
    auto empty = std::make_shared<const PgIndex>();
    for (size_t i = 0; i < SnapshotState::kPgShards; ++i) {
      st_.pgs_.Mutable(i) = empty;
    }
    for (auto& per_kind : st_.rank_sets_) {
      for (CowBitset& set : per_kind) set = CowBitset(n);
    }
    free_map_ = std::make_shared<SnapshotState::FreeSliceIndex>();
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

  InventorySnapshot::NodeEntry& MutableNode(uint32_t i) {
    return MutableEntry(st_.nodes_, owned_nodes_, i);
  }

  InventorySnapshot::SliceEntry& MutableSlice(uint32_t si) {
    return MutableEntry(st_.slices_, owned_slices_, si);
  }

  PgIndex& MutablePgShard(size_t shard) {
    if (!owned_shards_[shard]) {
      st_.pgs_.Mutable(shard) = std::make_shared<PgIndex>(*st_.pgs_[shard]);
      owned_shards_[shard] = true;
    }
    return const_cast<PgIndex&>(*st_.pgs_[shard]);
  }

  absl::Status AddAllocation(Allocation a, bool check_fit) {
    const int64_t i = st_.NodeIndex(a.node_id);
    if (i < 0) {
      return absl::NotFoundError(absl::StrCat("allocation of ", a.pg_id, "[",
                                              a.bundle_index,
                                              "] on unknown node ", a.node_id));
    }
    PgIndex& shard = MutablePgShard(SnapshotState::PgShard(a.pg_id));
    std::vector<Allocation>& held = shard[a.pg_id];
    for (const Allocation& h : held) {
      if (h.bundle_index == a.bundle_index) {
        return absl::InvalidArgumentError(absl::StrCat(
            "duplicate allocation of ", a.pg_id, "[", a.bundle_index, "]"));
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
    auto pos = std::lower_bound(e.allocations.begin(), e.allocations.end(), a,
                                AllocationLess);
    e.allocations.insert(pos, a);
    held.insert(std::lower_bound(held.begin(), held.end(), a,
                                 [](const Allocation& x, const Allocation& y) {
                                   return x.bundle_index < y.bundle_index;
                                 }),
                std::move(a));
    ++st_.num_allocations_;
    return absl::OkStatus();
  }

  void Release(const std::string& pg) {
    const size_t shard_index = SnapshotState::PgShard(pg);
    auto it = st_.pgs_[shard_index]->find(pg);
    if (it == st_.pgs_[shard_index]->end()) return;
    PgIndex& shard = MutablePgShard(shard_index);
    auto mit = shard.find(pg);
    for (const Allocation& a : mit->second) {
      InventorySnapshot::NodeEntry& e =
          MutableNode(static_cast<uint32_t>(st_.NodeIndex(a.node_id)));
      for (const auto& [name, amount] : a.resources) e.free[name] += amount;
      auto pos = std::lower_bound(e.allocations.begin(), e.allocations.end(), a,
                                  AllocationLess);
      if (pos != e.allocations.end() && pos->pg_id == a.pg_id &&
          pos->bundle_index == a.bundle_index) {
        e.allocations.erase(pos);
      }
      --st_.num_allocations_;
    }
    shard.erase(mit);
  }

  void UpsertInPlace(uint32_t i, const Node& node) {
    InventorySnapshot::NodeEntry& e = MutableNode(i);
    UpdateLabelIndex(i, e.node.labels, node.labels);
    e.node = node;
    e.free = node.resources;
    for (const Allocation& a : e.allocations) {
      for (const auto& [name, amount] : a.resources) e.free[name] -= amount;
    }
    e.tpu = Amount(node.resources, std::string(kResourceTpu)) > 0;
  }

  void UpdateLabelIndex(uint32_t i, const Labels& before, const Labels& after) {
    if (before == after) return;
    auto index = std::make_shared<SnapshotState::LabelIndex>(*st_.label_index_);
    auto edit = [&](const std::string& key, const std::string& value,
                    bool add) {
      auto vi =
          index->contains(key)
              ? std::make_shared<SnapshotState::ValueIndex>(*(*index)[key])
              : std::make_shared<SnapshotState::ValueIndex>();
      auto list =
          vi->contains(value)
              ? std::make_shared<SnapshotState::PostingList>(*(*vi)[value])
              : std::make_shared<SnapshotState::PostingList>();
      auto pos = std::lower_bound(list->begin(), list->end(), i);
      if (add && (pos == list->end() || *pos != i)) list->insert(pos, i);
      if (!add && pos != list->end() && *pos == i) list->erase(pos);
      if (list->empty()) {
        vi->erase(value);
      } else {
        (*vi)[value] = std::move(list);
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

  // Re-derives intactness of slice si from its hosts' current nodes (state
  // and TPU counts may have changed; membership has not).
  void RecheckSlice(uint32_t si) {
    const InventorySnapshot::SliceEntry& old = st_.slice(si);
    std::vector<const Node*> hosts;
    for (uint32_t h : old.hosts) hosts.push_back(&st_.node(h).node);
    std::vector<SliceInfo> infos = DeriveSlices(hosts);
    if (infos.size() == 1 && infos[0] == old.info) return;
    InventorySnapshot::SliceEntry& se = MutableSlice(si);
    if (infos.size() == 1) se.info = std::move(infos[0]);
  }

  void RecountSlice(uint32_t si) {
    const InventorySnapshot::SliceEntry& old = st_.slice(si);
    int64_t allocated = 0, tpu_held = 0, cpu_held = 0;
    for (uint32_t h : old.hosts) {
      const std::vector<Allocation>& held = st_.node(h).allocations;
      if (!held.empty()) ++allocated;
      bool tpu = false, cpu = false;
      for (const Allocation& a : held) {
        (a.resources.contains(kResourceTpu) ? tpu : cpu) = true;
      }
      tpu_held += tpu ? 1 : 0;
      cpu_held += cpu ? 1 : 0;
    }
    const uint32_t w0 = old.hosts.empty() ? 0 : old.hosts[0];
    auto label = [&](absl::string_view key) -> std::string {
      if (old.hosts.empty()) return "";
      auto it = st_.node(w0).node.labels.find(key);
      return it == st_.node(w0).node.labels.end() ? "" : it->second;
    };
    std::string tier = label(kLabelCapacityTier);
    std::string zone = label(kLabelZone);
    if (allocated == old.allocated_hosts && tpu_held == old.tpu_held_hosts &&
        cpu_held == old.cpu_held_hosts && tier == old.tier &&
        zone == old.zone) {
      return;
    }
    InventorySnapshot::SliceEntry& se = MutableSlice(si);
    se.allocated_hosts = allocated;
    se.tpu_held_hosts = tpu_held;
    se.cpu_held_hosts = cpu_held;
    se.tier = std::move(tier);
    se.zone = std::move(zone);
  }

  void IndexSlice(uint32_t si, bool present) {
    const InventorySnapshot::SliceEntry& se = st_.slice(si);
    if (!se.shape_known) return;
    if (present && !(se.info.intact && se.free())) return;
    SliceKey key{se.shape.generation, se.shape.topology, se.tier, se.zone};
    auto it = free_map_->find(key);
    if (it == free_map_->end()) {
      if (!present) return;
      it = free_map_
               ->emplace(key,
                         std::make_shared<const CowBitset>(st_.slices_.size()))
               .first;
    }
    if (it->second->Test(si) == present) return;
    auto copy = std::make_shared<CowBitset>(*it->second);
    copy->Set(si, present);
    if (copy->count() == 0) {
      free_map_->erase(it);
    } else {
      it->second = std::move(copy);
    }
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
  std::shared_ptr<SnapshotState::FreeSliceIndex> free_map_;
  absl::flat_hash_set<uint32_t> owned_nodes_;
  absl::flat_hash_set<uint32_t> owned_slices_;
  std::vector<bool> owned_shards_ = std::vector<bool>(SnapshotState::kPgShards);
};

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
  ASSIGN_OR_RETURN(bool applied, writer.TryApply(delta));
  if (!applied) return std::shared_ptr<const InventorySnapshot>();
  return writer.Finish();
}

}  // namespace internal
}  // namespace sliced::scheduler
