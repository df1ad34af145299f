#include "server/core/cluster.h"

#include <algorithm>
#include <limits>
#include <thread>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "base/status_macros.h"
#include "server/core/log_store.h"
#include "server/core/pg_spec.h"

namespace sliced::server {
namespace {

template <typename T>
void MergeInto(Changes<T>& from, Changes<T>& into) {
  for (auto& [key, change] : from) into[key] = std::move(change);
}

template <typename T, typename Map>
void InstallInto(Changes<T>& changes, Map& map) {
  for (auto& [key, change] : changes) {
    if (change) {
      map[key] = std::move(*change);
    } else {
      map.erase(key);
    }
  }
}

void InstallInto(Changes<PlacementGroup>& changes, PgTable& table) {
  for (auto& [id, change] : changes) {
    if (change) {
      table.Put(std::move(*change));
    } else {
      table.Erase(id);
    }
  }
}

// The allocations a stored group holds.
void AddAllocations(const PlacementGroup& pg,
                    std::vector<scheduler::Allocation>& out) {
  if (!HoldsCapacity(pg.state)) return;
  for (size_t i = 0; i < pg.bundles.size(); ++i) {
    const PlacedBundle& b = pg.bundles[i];
    if (b.node_id.empty()) continue;
    out.push_back(scheduler::Allocation{pg.id, static_cast<int>(i), b.node_id,
                                        b.resources});
  }
}

// A PENDING group that has not chosen victims and may preempt.
bool MayStillPreempt(const PlacementGroup& pg) {
  return pg.state == PgState::kPending && pg.preempting.empty() &&
         pg.preemption_policy != PreemptionPolicy::kNever;
}

// Adds `pg` to the state's indexes of groups: by request id, the queue and
// its waiting part, waiting groups by queued time, CREATED per priority and
// by placed time, the preemption checks', by job and by state (ClusterState).
void IndexGroup(ClusterState& state, const PlacementGroup& pg) {
  if (!pg.request_id.empty()) state.pg_by_request_id[pg.request_id] = pg.id;
  if (IsQueued(pg.state)) state.queue.insert(QueueKeyOf(pg));
  if (Waits(pg.state)) {
    state.waiting.insert(QueueKeyOf(pg));
    state.waiting_since.emplace(pg.queued_time, pg.id);
    AddCount(state.waiting_asks, LeastAskOfANode(pg.request), 1);
  }
  if (pg.state == PgState::kCreated) {
    AddCount(state.created_by_priority, pg.priority, 1);
    state.created_by_placed_time.emplace(pg.placed_time, pg.priority, pg.id);
  }
  if (!pg.preempting.empty()) {
    state.preemptors_by_deadline.emplace(pg.preemption_deadline, pg.id);
  }
  if (MayStillPreempt(pg)) {
    AddCount(state.may_preempt_by_priority, pg.priority, 1);
  }
  if (!pg.job_id.empty()) state.pgs_by_job.emplace(pg.job_id, pg.id);
  state.pgs_by_state.emplace(pg.state, pg.id);
}

// Takes `pg` (as IndexGroup() added it) out of the state's indexes.
void UnindexGroup(ClusterState& state, const PlacementGroup& pg) {
  if (!pg.request_id.empty()) state.pg_by_request_id.erase(pg.request_id);
  if (IsQueued(pg.state)) state.queue.erase(QueueKeyOf(pg));
  if (Waits(pg.state)) {
    state.waiting.erase(QueueKeyOf(pg));
    state.waiting_since.erase({pg.queued_time, pg.id});
    AddCount(state.waiting_asks, LeastAskOfANode(pg.request), -1);
  }
  if (pg.state == PgState::kCreated) {
    AddCount(state.created_by_priority, pg.priority, -1);
    state.created_by_placed_time.erase({pg.placed_time, pg.priority, pg.id});
  }
  if (!pg.preempting.empty()) {
    state.preemptors_by_deadline.erase({pg.preemption_deadline, pg.id});
  }
  if (MayStillPreempt(pg)) {
    AddCount(state.may_preempt_by_priority, pg.priority, -1);
  }
  if (!pg.job_id.empty()) state.pgs_by_job.erase({pg.job_id, pg.id});
  state.pgs_by_state.erase({pg.state, pg.id});
}

}  // namespace

Cluster::Cluster(LogStore* logs) : logs_(logs) {}

absl::StatusOr<ClusterState> Cluster::Build(
    storage::StoredState& stored) const {
  ClusterState state;
  std::vector<scheduler::Allocation> allocations;
  for (const PlacementGroup& pg : stored.placement_groups) {
    AddAllocations(pg, allocations);
  }
  // The snapshot on a second thread while this one indexes the groups (at
  // 100k nodes and 50k groups the indexes take a quarter of the snapshot's
  // time).
  absl::StatusOr<std::shared_ptr<const scheduler::InventorySnapshot>> snapshot;
  {
    std::jthread build([&] {
      snapshot = scheduler::InventorySnapshot::Build(std::move(stored.nodes),
                                                     std::move(allocations));
    });
    for (PlacementGroup& pg : stored.placement_groups) {
      state.next_sequence = std::max(state.next_sequence, pg.sequence + 1);
      IndexGroup(state, pg);
      state.pgs.Put(std::move(pg));
    }
  }
  // The stored high-water mark outlives removed groups: their ids are never
  // handed out again after a restart.
  state.next_sequence = std::max(state.next_sequence, stored.next_pg_sequence);
  for (const ComputeClass& cls : stored.compute_classes) {
    state.classes[cls.name] = cls;
  }
  if (!snapshot.ok()) {
    return absl::FailedPreconditionError(absl::StrCat(
        "stored placements are inconsistent with the stored nodes; refusing "
        "to serve: ",
        snapshot.status().message()));
  }
  absl::Status whole = (*snapshot)->CheckNotOverCommitted();
  if (!whole.ok()) {
    return absl::FailedPreconditionError(absl::StrCat(
        "stored placements hold some capacity twice; refusing to serve: ",
        whole.message()));
  }
  state.snapshot = *std::move(snapshot);
  return state;
}

absl::Status Cluster::Restore(storage::StoredState stored,
                              storage::Mutation& repair) {
  absl::StatusOr<ClusterState> state;
  {
    absl::ReaderMutexLock lock(&mu_);
    state = Build(stored);
  }
  RETURN_IF_ERROR(state.status());
  if (logs_ != nullptr) {
    const scheduler::InventorySnapshot& nodes = *state->snapshot;
    logs_->Restore(
        stored.logs,
        [&](const std::string& id) { return nodes.FindNode(id) != nullptr; },
        repair);
  }
  {
    absl::MutexLock lock(&mu_);
    state_ = *std::move(state);
  }
  group_ = StateChanges();
  snapshot_.reset();
  if (observer_ != nullptr) observer_->Restored();
  return absl::OkStatus();
}

void Cluster::BeginGroup(absl::Time now) {
  group_ = StateChanges();
  snapshot_.reset();
  now_ = now;
}

void Cluster::Merge(Txn& txn, storage::Mutation& writes) {
  StateChanges& own = txn.own_;
  // The group's waiting and preemptor entries of the groups this op changed
  // give way to the op's (before the op's changes replace the group's).
  for (const auto& [id, change] : own.pgs) {
    auto it = group_.pgs.find(id);
    if (it != group_.pgs.end() && it->second && Waits(it->second->state)) {
      group_.waiting_since.erase({it->second->queued_time, id});
    }
    group_.preemptors.erase(id);
  }
  group_.waiting_since.insert(own.waiting_since.begin(),
                              own.waiting_since.end());
  group_.preemptors.insert(own.preemptors.begin(), own.preemptors.end());
  group_.queued_delta += own.queued_delta;
  for (const auto& [ask, d] : own.waiting_asks_delta) {
    AddCount(group_.waiting_asks_delta, ask, d);
  }
  for (const auto& [priority, d] : own.created_delta) {
    AddCount(group_.created_delta, priority, d);
  }
  MergeInto(own.nodes, group_.nodes);
  MergeInto(own.pgs, group_.pgs);
  MergeInto(own.classes, group_.classes);
  for (PlacementGroup& e : own.events) group_.events.push_back(std::move(e));
  group_.next_sequence = own.next_sequence;
  group_.retry_pending = own.queue_retried
                             ? own.retry_pending
                             : group_.retry_pending || own.retry_pending;
  group_.recheck_infeasible =
      own.queue_retried ? own.recheck_infeasible
                        : group_.recheck_infeasible || own.recheck_infeasible;
  group_.retry_all =
      own.queue_retried ? own.retry_all : group_.retry_all || own.retry_all;
  if (own.queue_retried) group_.released_on.clear();
  group_.released_on.insert(own.released_on.begin(), own.released_on.end());
  writes.Append(std::move(txn.mutation_));
}

absl::Status Cluster::RunOp(const std::function<absl::Status(Txn&)>& apply,
                            storage::Mutation& writes, const UnitCheck& check) {
  // The writer is the only thread that changes state_, so a reader lock is
  // enough to read it while readers go on.
  absl::ReaderMutexLock lock(&mu_);
  if (!snapshot_) snapshot_.emplace(state_.snapshot);
  snapshot_->Savepoint();
  Txn txn(state_, group_, *snapshot_, now_);
  absl::Status status = apply(txn);
  if (status.ok()) status = txn.Flush();
  if (status.ok() && check) status = check(txn.mutation_);
  if (!status.ok()) {
    snapshot_->RollBack();
    return status;
  }
  Merge(txn, writes);
  return absl::OkStatus();
}

void Cluster::EndGroup(storage::Mutation& writes, const UnitCheck& check) {
  if (!group_.retry_pending || observer_ == nullptr) return;
  // The retry's own changes never ask for another round; a failed retry
  // leaves the queue as it was. One the store can't commit in one op (etcd:
  // one Txn's limits; a walk that places hundreds of groups at once) runs
  // again with at most half the writes, down to one: the walk stops at the
  // limit (and starts no preemption above it), and the rest of the queue
  // waits for the next walk.
  size_t limit = std::numeric_limits<size_t>::max();
  while (true) {
    size_t refused_size = 0;
    const UnitCheck counted = [&](const storage::Mutation& unit) {
      absl::Status fits = check ? check(unit) : absl::OkStatus();
      if (!fits.ok()) refused_size = unit.size();
      return fits;
    };
    absl::Status retried = RunOp(
        [this, limit](Txn& txn) {
          txn.LimitWrites(
              limit, /*refused=*/limit != std::numeric_limits<size_t>::max());
          observer_->RetryQueue(txn);
          return absl::OkStatus();
        },
        writes, counted);
    if (retried.ok() || refused_size == 0) return;
    limit = std::min(limit, refused_size) / 2;
    if (limit == 0) return;
  }
}

void Cluster::Install() {
  // What watchers and the log see: the commit's intermediate events, then
  // each changed group. A group still present is read where it was
  // installed, not copied: only this thread (the writer) changes the table,
  // and a node_hash_map keeps its entries in place. A removed one is copied
  // here, as it was, with state REMOVED.
  const std::vector<PlacementGroup> events = std::move(group_.events);
  std::vector<PlacementGroup> removed;
  std::vector<Observer::Change> changed;
  // Change::before: a group's state at its last intermediate event of this
  // commit (few commits have any), else as `installed` before it.
  absl::flat_hash_map<absl::string_view, PgState> evented;
  auto before = [&evented](const std::string& id,
                           const PlacementGroup* installed) {
    if (auto it = evented.find(id); it != evented.end()) {
      return std::optional<PgState>(it->second);
    }
    return installed != nullptr ? std::optional<PgState>(installed->state)
                                : std::nullopt;
  };
  std::shared_ptr<const scheduler::InventorySnapshot> snapshot;
  // Published before the lock; the one it replaces is let go of after it,
  // to the reaper: freeing it (the chunks this commit copied, the chunk
  // pointers of every table it copied) holds up no answer.
  std::shared_ptr<const scheduler::InventorySnapshot> replaced;
  if (snapshot_) snapshot = snapshot_->Publish();
  auto install = [&] {
    absl::MutexLock lock(&mu_);
    // Watchers see a commit's changes in id order (never hash order).
    std::vector<const std::string*> ids;
    ids.reserve(group_.pgs.size());
    for (const auto& [id, change] : group_.pgs) ids.push_back(&id);
    std::sort(
        ids.begin(), ids.end(),
        [](const std::string* a, const std::string* b) { return *a < *b; });
    removed.reserve(ids.size());  // `changed` points into it
    std::vector<const std::string*> finals;  // ids of the final events
    changed.reserve(events.size() + ids.size());
    for (const PlacementGroup& e : events) {
      changed.push_back({&e, before(e.id, state_.pgs.Find(e.id))});
      evented[e.id] = e.state;
    }
    for (const std::string* id_ptr : ids) {
      const std::string& id = *id_ptr;
      const std::optional<PlacementGroup>& change = group_.pgs.at(id);
      const PlacementGroup* old = state_.pgs.Find(id);
      // What a removed group was: as installed, or, for one this commit
      // both made and removed (a victim with on_preemption REMOVE and no
      // grace), as its last intermediate event, which watchers saw.
      const PlacementGroup* gone = old;
      if (!change && gone == nullptr && evented.contains(id)) {
        for (auto e = events.rbegin(); e != events.rend(); ++e) {
          if (e->id == id) {
            gone = &*e;
            break;
          }
        }
      }
      if (!change && gone != nullptr) {
        // The final event: the group as it was, REMOVED; a reason it was
        // waiting for would be stale now.
        removed.push_back(*gone);
        removed.back().state = PgState::kRemoved;
        removed.back().reason.clear();
      }
      if (change || gone != nullptr) {
        finals.push_back(&id);
        changed.push_back({nullptr, before(id, old)});
      }
      if (old != nullptr) UnindexGroup(state_, *old);
      if (change) IndexGroup(state_, *change);
    }
    InstallInto(group_.pgs, state_.pgs);
    // The final events' groups, now that they are installed.
    auto next_removed = removed.begin();
    for (size_t i = 0; i < finals.size(); ++i) {
      const PlacementGroup* installed = state_.pgs.Find(*finals[i]);
      changed[events.size() + i].group =
          installed != nullptr ? installed : &*next_removed++;
    }
    InstallInto(group_.classes, state_.classes);
    if (snapshot) {
      replaced = std::move(state_.snapshot);
      state_.snapshot = snapshot;
    } else {
      snapshot = state_.snapshot;
    }
    if (group_.next_sequence) state_.next_sequence = group_.next_sequence;
  };
  if (observer_ == nullptr) {
    install();
  } else {
    observer_->Publish([&] {
      install();
      if (!changed.empty()) observer_->Published(changed, *snapshot);
    });
  }
  // A group that changed no snapshot published the same one: nothing to
  // free.
  if (replaced != snapshot) reaper_.Drop(std::move(replaced));
  group_ = StateChanges();
  snapshot_.reset();
}

void Cluster::Abandon() {
  group_ = StateChanges();
  snapshot_.reset();
}

}  // namespace sliced::server
