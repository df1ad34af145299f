#include "server/core/txn.h"

#include <algorithm>
#include <utility>

#include "absl/container/flat_hash_set.h"
#include "base/status_macros.h"
#include "server/core/pg_spec.h"

namespace sliced::server {
namespace {

// Looks `key` up in the op's changes, then the group's, then in committed
// state through `committed(key, KeyHash(key))` (a pointer, null when
// absent). One hash serves every map (the queue's retry finds every queued
// group).
template <typename T, typename Committed>
const T* Lookup(absl::string_view key, const Changes<T>& own,
                const Changes<T>& group, const Committed& committed) {
  const size_t hash = KeyHash(key);
  for (const Changes<T>* changes : {&own, &group}) {
    auto it = changes->find(key, hash);
    if (it != changes->end()) return it->second ? &*it->second : nullptr;
  }
  return committed(key, hash);
}

// `committed` for a map of committed values.
template <typename Map>
auto InMap(const Map& map) {
  return [&map](absl::string_view key,
                size_t /*hash*/) -> const typename Map::mapped_type* {
    auto it = map.find(key);
    return it == map.end() ? nullptr : &it->second;
  };
}

}  // namespace

QueueKey QueueKeyOf(const PlacementGroup& pg) {
  return {-int64_t{pg.priority}, pg.sequence, pg.id};
}

Txn::Txn(const ClusterState& committed, const StateChanges& group,
         scheduler::SnapshotEditor& snapshot, absl::Time now)
    : committed_(committed), group_(group), snapshot_(snapshot), now_(now) {
  own_.next_sequence =
      group.next_sequence ? group.next_sequence : committed.next_sequence;
}

const scheduler::Node* Txn::FindNode(absl::string_view node_id) const {
  // Committed nodes live in the snapshot only.
  return Lookup(node_id, own_.nodes, group_.nodes,
                [&](absl::string_view id, size_t /*hash*/) {
                  return committed_.snapshot->FindNode(id);
                });
}

void Txn::PutNode(const scheduler::Node& node) {
  mutation_.PutNode(node);
  const scheduler::Node* old = FindNode(node.node_id);
  if (old == nullptr || !(*old == node)) {
    pending_nodes_.upsert_nodes.push_back(node);
  }
  // A new, revived or healed node may let pending groups fit; a new one, or
  // new labels or resources, may let an infeasible one fit too.
  if (old == nullptr || scheduler::TakesPlacements(node)) {
    own_.retry_pending = own_.retry_all = true;
  }
  if (old == nullptr || old->labels != node.labels ||
      old->resources != node.resources) {
    own_.retry_pending = own_.recheck_infeasible = own_.retry_all = true;
  }
  own_.nodes[node.node_id] = node;
}

void Txn::RemoveNode(absl::string_view node_id) {
  mutation_.DeleteNode(node_id);
  pending_nodes_.remove_node_ids.emplace_back(node_id);
  own_.nodes[std::string(node_id)] = std::nullopt;
}

const PlacementGroup* Txn::FindPg(absl::string_view pg_id) const {
  return Lookup(pg_id, own_.pgs, group_.pgs,
                [this](absl::string_view id, size_t hash) {
                  return committed_.pgs.Find(id, hash);
                });
}

const PlacementGroup* Txn::FindPgByRequestId(
    absl::string_view request_id) const {
  for (const Changes<PlacementGroup>* changes : {&own_.pgs, &group_.pgs}) {
    for (const auto& [id, change] : *changes) {
      if (change && change->request_id == request_id) return &*change;
    }
  }
  auto it = committed_.pg_by_request_id.find(request_id);
  return it == committed_.pg_by_request_id.end() ? nullptr : FindPg(it->second);
}

void Txn::Replace(absl::string_view pg_id, const PlacementGroup* next) {
  // What this op saw before: for the queue count, and this layer's own
  // waiting entry to drop.
  const PlacementGroup* before = FindPg(pg_id);
  own_.queued_delta += int{next != nullptr && IsQueued(next->state)} -
                       int{before != nullptr && IsQueued(before->state)};
  for (const auto& [pg, d] : {std::pair{before, -1}, std::pair{next, 1}}) {
    if (pg == nullptr) continue;
    if (Waits(pg->state)) {
      AddCount(own_.waiting_asks_delta, LeastAskOfANode(pg->request), d);
    }
    if (pg->state == PgState::kCreated) {
      AddCount(own_.created_delta, pg->priority, d);
    }
  }
  auto mine = own_.pgs.find(pg_id);
  if (mine != own_.pgs.end() && mine->second && Waits(mine->second->state)) {
    own_.waiting_since.erase({mine->second->queued_time, std::string(pg_id)});
  }
  if (next != nullptr && Waits(next->state)) {
    own_.waiting_since.emplace(next->queued_time, next->id);
  }
  if (next != nullptr && !next->preempting.empty()) {
    own_.preemptors.insert(std::string(pg_id));
  } else {
    own_.preemptors.erase(pg_id);
  }
}

void Txn::PutPg(const PlacementGroup& pg) { PutPg(PlacementGroup(pg)); }

const PlacementGroup& Txn::PutPg(PlacementGroup&& pg) {
  mutation_.PutPlacementGroup(pg);
  Replace(pg.id, &pg);
  std::optional<PlacementGroup>& stored = own_.pgs[pg.id];
  stored = std::move(pg);
  return *stored;
}

void Txn::DeletePg(absl::string_view pg_id) {
  mutation_.DeletePlacementGroup(pg_id);
  Replace(pg_id, nullptr);
  own_.pgs[std::string(pg_id)] = std::nullopt;
}

std::vector<std::string> Txn::PendingQueue(bool with_infeasible) const {
  auto queued = [&](const PlacementGroup& pg) {
    return with_infeasible ? IsQueued(pg.state) : Waits(pg.state);
  };
  // The changed groups queued now, in queue order; the committed queue's
  // entries for changed groups are stale, the others merge in as they are.
  std::vector<QueueKey> changed;
  ForEachChangedPg([&](const std::string& id) {
    const PlacementGroup* pg = FindPg(id);
    if (pg != nullptr && queued(*pg)) changed.push_back(QueueKeyOf(*pg));
  });
  std::sort(changed.begin(), changed.end());
  const absl::btree_set<QueueKey>& committed =
      with_infeasible ? committed_.queue : committed_.waiting;
  std::vector<std::string> ids;
  ids.reserve(committed.size() + changed.size());
  auto next = changed.begin();
  for (const QueueKey& key : committed) {
    const std::string& id = std::get<2>(key);
    if (ChangedPg(id, KeyHash(id))) continue;
    for (; next != changed.end() && *next < key; ++next) {
      ids.push_back(std::get<2>(*next));
    }
    ids.push_back(id);
  }
  for (; next != changed.end(); ++next) ids.push_back(std::get<2>(*next));
  return ids;
}

void Txn::ForEachChangedPg(
    const std::function<void(const std::string&)>& visit) const {
  for (const auto& [id, change] : group_.pgs) visit(id);
  for (const auto& [id, change] : own_.pgs) {
    if (!group_.pgs.contains(id)) visit(id);
  }
}

void Txn::ForEachWaitingSince(
    absl::Time cutoff,
    const std::function<void(const PlacementGroup&)>& visit) const {
  for (const auto& [queued, id] : committed_.waiting_since) {
    if (queued > cutoff) break;
    const size_t hash = KeyHash(id);
    if (!ChangedPg(id, hash)) visit(*committed_.pgs.Find(id, hash));
  }
  // The changed ones, each from the layer that changed it last.
  for (const auto& [queued, id] : group_.waiting_since) {
    if (queued > cutoff) break;
    if (!own_.pgs.contains(id)) visit(*FindPg(id));
  }
  for (const auto& [queued, id] : own_.waiting_since) {
    if (queued > cutoff) break;
    visit(*FindPg(id));
  }
}

void Txn::ForEachPreemptor(
    const std::function<void(const PlacementGroup&)>& visit) const {
  for (const auto& [deadline, id] : committed_.preemptors_by_deadline) {
    const size_t hash = KeyHash(id);
    if (!ChangedPg(id, hash)) visit(*committed_.pgs.Find(id, hash));
  }
  // The changed ones, each from the layer that changed it last.
  for (const std::string& id : group_.preemptors) {
    if (!own_.pgs.contains(id)) visit(*FindPg(id));
  }
  for (const std::string& id : own_.preemptors) visit(*FindPg(id));
}

std::optional<int32_t> Txn::LowestCreatedPriority() const {
  // The commit group's changes to the committed counts.
  absl::btree_map<int32_t, int64_t> delta = group_.created_delta;
  for (const auto& [priority, d] : own_.created_delta) {
    AddCount(delta, priority, d);
  }
  for (const auto& [priority, count] : committed_.created_by_priority) {
    auto changed = delta.find(priority);
    if (count + (changed == delta.end() ? 0 : changed->second) > 0) {
      // A priority only the changes hold may be lower still.
      for (const auto& [p, d] : delta) {
        if (p >= priority) break;
        if (d > 0) return p;
      }
      return priority;
    }
  }
  for (const auto& [p, d] : delta) {
    if (d > 0) return p;
  }
  return std::nullopt;
}

void Txn::ForEachPg(
    const std::function<bool(const PlacementGroup&)>& visit) const {
  bool stopped = false;
  committed_.pgs.ForEach([&](const PlacementGroup& pg) {
    const PlacementGroup* current = FindPg(pg.id);
    stopped = current != nullptr && !visit(*current);
    return !stopped;
  });
  if (stopped) return;
  // Groups created in this commit group, once each (as the op sees them).
  absl::flat_hash_set<absl::string_view> created;
  for (const Changes<PlacementGroup>* changes : {&group_.pgs, &own_.pgs}) {
    for (const auto& [id, change] : *changes) {
      if (committed_.pgs.Contains(id) || !created.insert(id).second) continue;
      const PlacementGroup* current = FindPg(id);
      if (current != nullptr && !visit(*current)) return;
    }
  }
}

bool Txn::AnyPg(const std::function<bool(const PlacementGroup&)>& pred) const {
  bool any = false;
  ForEachPg([&](const PlacementGroup& pg) {
    any = pred(pg);
    return !any;
  });
  return any;
}

std::vector<std::string> Txn::PgsOnNode(absl::string_view node_id) {
  absl::btree_set<std::string> ids;
  auto snapshot = View();
  if (!snapshot.ok()) return {};
  int64_t index = (*snapshot)->NodeIndex(node_id);
  if (index < 0) return {};
  for (const scheduler::Allocation& a : (*snapshot)->node(index).allocations) {
    ids.insert(a.pg_id);
  }
  return {ids.begin(), ids.end()};
}

const ComputeClass* Txn::FindClass(absl::string_view name) const {
  return Lookup(name, own_.classes, group_.classes, InMap(committed_.classes));
}

void Txn::PutClass(const ComputeClass& cls) {
  mutation_.PutComputeClass(cls);
  own_.classes[cls.name] = cls;
  own_.retry_pending = own_.recheck_infeasible = own_.retry_all = true;
}

void Txn::DeleteClass(absl::string_view name) {
  mutation_.DeleteComputeClass(name);
  own_.classes[std::string(name)] = std::nullopt;
  own_.retry_pending = own_.recheck_infeasible = own_.retry_all = true;
}

absl::Status Txn::Flush() {
  if (pending_nodes_.upsert_nodes.empty() &&
      pending_nodes_.remove_node_ids.empty()) {
    return absl::OkStatus();
  }
  // On error the changes stay pending: every later View() fails too.
  RETURN_IF_ERROR(snapshot_.Apply(std::move(pending_nodes_)));
  pending_nodes_ = scheduler::SnapshotDelta();
  return absl::OkStatus();
}

absl::StatusOr<const scheduler::InventorySnapshot*> Txn::View() {
  RETURN_IF_ERROR(Flush());
  return &snapshot_.current();
}

absl::StatusOr<std::shared_ptr<const scheduler::InventorySnapshot>>
Txn::Snapshot() {
  RETURN_IF_ERROR(Flush());
  return snapshot_.Publish();
}

absl::Status Txn::ApplyDelta(scheduler::SnapshotDelta delta) {
  RETURN_IF_ERROR(Flush());
  std::vector<std::string> released_on;
  for (const std::string& pg_id : delta.release_pg_ids) {
    for (scheduler::Allocation& a : snapshot_.current().AllocationsOf(pg_id)) {
      released_on.push_back(std::move(a.node_id));
    }
  }
  const bool releases = !delta.release_pg_ids.empty();
  RETURN_IF_ERROR(snapshot_.Apply(std::move(delta)));
  if (releases) own_.retry_pending = true;
  own_.released_on.insert(released_on.begin(), released_on.end());
  return absl::OkStatus();
}

void Txn::ForEachReleasedOn(
    const std::function<void(const std::string&)>& visit) const {
  for (const std::string& node_id : own_.released_on) visit(node_id);
  if (own_.queue_retried) return;
  for (const std::string& node_id : group_.released_on) visit(node_id);
}

void Txn::ForEachWaitingAsk(
    const std::function<void(const scheduler::ResourceSet&)>& visit) const {
  // The commit group's changes to the committed counts.
  absl::btree_map<scheduler::ResourceSet, int64_t> delta =
      group_.waiting_asks_delta;
  for (const auto& [ask, d] : own_.waiting_asks_delta) AddCount(delta, ask, d);
  for (const auto& [ask, count] : committed_.waiting_asks) {
    auto changed = delta.find(ask);
    if (changed == delta.end()) {
      visit(ask);
    } else if (count + changed->second > 0) {
      visit(ask);
      changed->second = 0;  // visited
    } else {
      changed->second = 0;
    }
  }
  for (const auto& [ask, count] : delta) {
    if (count > 0) visit(ask);
  }
}

}  // namespace sliced::server
