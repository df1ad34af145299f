// InventorySnapshot: construction and Apply() (through SnapshotWriter,
// internal/snapshot_writer.h) and the queries; see snapshot.h.
//
// Thread-safety: const methods are safe on a shared, published snapshot.
#include "scheduler/snapshot.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "base/status_macros.h"
#include "scheduler/internal/resources.h"
#include "scheduler/internal/snapshot_state.h"
#include "scheduler/internal/snapshot_writer.h"

namespace sliced::scheduler {

using internal::Amount;
using internal::SnapshotState;

// ---------------------------------------------------------------------------
// AllocationList

namespace {

// Where (pg_id, bundle_index) is or would go.
AllocationList::Items::const_iterator LowerBound(
    const AllocationList::Items& items, absl::string_view pg_id,
    int bundle_index) {
  return std::lower_bound(
      items.begin(), items.end(), std::make_pair(pg_id, bundle_index),
      [](const std::shared_ptr<const Allocation>& a,
         const std::pair<absl::string_view, int>& key) {
        const int c = absl::string_view(a->pg_id).compare(key.first);
        return c < 0 || (c == 0 && a->bundle_index < key.second);
      });
}

}  // namespace

void AllocationList::Insert(Allocation a) {
  auto pos = LowerBound(items_, a.pg_id, a.bundle_index);
  items_.insert(pos, std::make_shared<const Allocation>(std::move(a)));
}

bool AllocationList::Erase(absl::string_view pg_id, int bundle_index) {
  auto pos = LowerBound(items_, pg_id, bundle_index);
  if (pos == items_.end() || (*pos)->pg_id != pg_id ||
      (*pos)->bundle_index != bundle_index) {
    return false;
  }
  items_.erase(pos);
  return true;
}

// ---------------------------------------------------------------------------
// InventorySnapshot

InventorySnapshot::InventorySnapshot()
    : state_(std::make_unique<SnapshotState>()) {}

InventorySnapshot::InventorySnapshot(const InventorySnapshot& other)
    : state_(std::make_unique<SnapshotState>(*other.state_)) {}

InventorySnapshot::~InventorySnapshot() = default;

const SnapshotState& internal::StateOf(const InventorySnapshot& snapshot) {
  return *snapshot.state_;
}

absl::StatusOr<std::shared_ptr<const InventorySnapshot>>
InventorySnapshot::Build(std::vector<Node> nodes,
                         std::vector<Allocation> allocations) {
  return internal::BuildSnapshot(
      std::unique_ptr<InventorySnapshot>(new InventorySnapshot()),
      std::move(nodes), std::move(allocations));
}

std::shared_ptr<const InventorySnapshot> InventorySnapshot::Empty() {
  return *Build({}, {});
}

absl::StatusOr<std::shared_ptr<const InventorySnapshot>>
InventorySnapshot::Apply(const SnapshotDelta& delta) const {
  return internal::ApplyInPlace(
      std::unique_ptr<InventorySnapshot>(new InventorySnapshot(*this)), delta);
}

absl::Status InventorySnapshot::CheckNotOverCommitted() const {
  std::vector<std::string> problems;
  for (uint32_t i = 0; i < index_end(); ++i) {
    if (!has_node(i)) continue;
    const NodeEntry& e = node(i);
    for (const auto& [name, amount] : e.free) {
      if (amount >= 0) continue;
      std::vector<std::string> holders;
      for (const Allocation& a : e.allocations) {
        if (a.resources.contains(name)) {
          holders.push_back(absl::StrCat(a.pg_id, "[", a.bundle_index, "]"));
        }
      }
      problems.push_back(absl::StrCat(
          "node ", e.node.node_id, " holds ",
          FromFixedPoint(Amount(e.node.resources, name) - amount), " ", name,
          " of ", FromFixedPoint(Amount(e.node.resources, name)), " (",
          absl::StrJoin(holders, ", "), ")"));
    }
  }
  if (problems.empty()) return absl::OkStatus();
  return absl::FailedPreconditionError(
      absl::StrCat("over-committed: ", absl::StrJoin(problems, "; ")));
}

const Node* InventorySnapshot::FindNode(absl::string_view node_id) const {
  const int64_t i = NodeIndex(node_id);
  return i < 0 ? nullptr : &node(i).node;
}

absl::StatusOr<ResourceSet> InventorySnapshot::FreeResources(
    absl::string_view node_id) const {
  const int64_t i = NodeIndex(node_id);
  if (i < 0) return absl::NotFoundError(absl::StrCat("unknown node ", node_id));
  return node(i).free;
}

std::vector<SliceState> InventorySnapshot::ListSlices() const {
  std::vector<SliceState> out;
  out.reserve(num_slices());
  for (size_t i = 0; i < num_slices(); ++i) {
    out.push_back({slice(i).info, slice(i).free()});
  }
  return out;
}

absl::StatusOr<SliceState> InventorySnapshot::GetSlice(
    absl::string_view name) const {
  const int64_t i = SliceIndex(name);
  if (i < 0) return absl::NotFoundError(absl::StrCat("unknown slice ", name));
  return SliceState{slice(i).info, slice(i).free()};
}

std::vector<Allocation> InventorySnapshot::AllocationsOf(
    absl::string_view pg_id) const {
  const size_t hash = SnapshotState::PgHash(pg_id);
  const internal::PgShard::List* list =
      state_->pg_shard(SnapshotState::PgShardOf(hash)).Find(pg_id, hash);
  return list == nullptr ? std::vector<Allocation>() : **list;
}

size_t InventorySnapshot::num_nodes() const { return state_->num_nodes(); }

size_t InventorySnapshot::index_end() const { return state_->index_end(); }

bool InventorySnapshot::has_node(uint32_t i) const {
  return state_->has_node(i);
}

size_t InventorySnapshot::num_slices() const { return state_->num_slices(); }

int64_t InventorySnapshot::num_allocations() const {
  return state_->num_allocations();
}

const InventorySnapshot::NodeEntry& InventorySnapshot::node(uint32_t i) const {
  return state_->node(i);
}

const InventorySnapshot::SliceEntry& InventorySnapshot::slice(
    uint32_t s) const {
  return state_->slice(s);
}

int64_t InventorySnapshot::NodeIndex(absl::string_view node_id) const {
  return state_->NodeIndex(node_id);
}

uint32_t InventorySnapshot::HostIndex(const SliceEntry& se, size_t w) const {
  return state_->HostIndex(se, w);
}

std::vector<uint32_t> InventorySnapshot::HostIndexes(
    const SliceEntry& se) const {
  std::vector<uint32_t> out;
  out.reserve(se.host_slots.size());
  for (size_t w = 0; w < se.host_slots.size(); ++w) {
    out.push_back(state_->HostIndex(se, w));
  }
  return out;
}

int32_t InventorySnapshot::SliceIndexOf(const NodeEntry& e) const {
  return state_->SliceOf(e);
}

int64_t InventorySnapshot::SliceIndex(absl::string_view name) const {
  return state_->SliceIndex(name);
}

const InventorySnapshot::SliceKeyIndex& InventorySnapshot::slices_by_key()
    const {
  return state_->slices_by_key();
}

std::vector<uint32_t> InventorySnapshot::MatchingNodes(
    const LabelSelector& selector) const {
  // Narrow with the smallest positive term's posting lists, then check the
  // whole selector on each candidate.
  const SnapshotState::PostingList* best = nullptr;
  std::vector<uint32_t> merged;
  bool have_positive = false;
  size_t best_size = num_nodes() + 1;
  for (const SelectorTerm& term : selector.terms) {
    if (term.op != SelectorOp::kEquals && term.op != SelectorOp::kIn) continue;
    have_positive = true;
    size_t size = 0;
    auto key = state_->label_index().find(term.key);
    if (key != state_->label_index().end()) {
      for (const std::string& v : term.values) {
        auto it = key->second->find(v);
        if (it != key->second->end()) size += it->second->size();
      }
    }
    if (size < best_size) {
      best_size = size;
      merged.clear();
      best = nullptr;
      if (key != state_->label_index().end()) {
        for (const std::string& v : term.values) {
          auto it = key->second->find(v);
          if (it == key->second->end()) continue;
          if (term.values.size() == 1) {
            best = it->second.get();
          } else {
            merged.insert(merged.end(), it->second->begin(), it->second->end());
          }
        }
      }
      std::sort(merged.begin(), merged.end());
    }
  }
  std::vector<uint32_t> out;
  if (have_positive) {
    // Posting lists hold slots: the matches in index (id) order.
    auto check = [&](uint32_t slot) {
      const uint32_t i = state_->IndexOfSlot(slot);
      if (Matches(selector, node(i).node.labels)) out.push_back(i);
    };
    if (best != nullptr) {
      for (uint32_t slot : *best) check(slot);
    } else {
      for (uint32_t slot : merged) check(slot);
    }
    std::sort(out.begin(), out.end());
    out.erase(std::unique(out.begin(), out.end()), out.end());
    return out;
  }
  for (uint32_t i = 0; i < index_end(); ++i) {
    if (has_node(i) && Matches(selector, node(i).node.labels)) out.push_back(i);
  }
  return out;
}

}  // namespace sliced::scheduler
