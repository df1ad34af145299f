// The cluster's in-memory state and the view one write operation has of it.
//
// ClusterState is what readers see: everything committed. A Txn is one
// operation's view during a group commit: the committed state, overlaid with
// the changes of the operations before it in the same group, overlaid with
// its own. The engine snapshot is not overlaid but edited: one
// SnapshotEditor per group, which the Cluster rolls back when an op fails. Its
// writes go both to that overlay and to the storage mutation the group commits.
// See server/core/cluster.h for how groups are run, committed and installed.
//
// Thread-safety: ClusterState is guarded by Cluster's lock. A Txn is not
// thread-safe; it lives on the coordinator's writer thread for the duration
// of one operation.
#ifndef SLICED_SERVER_CORE_TXN_H_
#define SLICED_SERVER_CORE_TXN_H_

#include <cstdint>
#include <functional>
#include <limits>
#include <memory>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

#include "absl/container/btree_map.h"
#include "absl/container/btree_set.h"
#include "absl/container/flat_hash_map.h"
#include "absl/hash/hash.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "scheduler/snapshot.h"
#include "scheduler/types.h"
#include "server/core/placement_group.h"
#include "server/core/telemetry.h"
#include "storage/store.h"

namespace sliced::server {

// A node as the cluster state holds it (its lease is in Leases).
// Queue order: priority descending, then arrival, then id.
using QueueKey = std::tuple<int64_t, uint64_t, std::string>;
QueueKey QueueKeyOf(const PlacementGroup& pg);

// The hash the string-keyed absl hash maps of the state (Changes, PgTable)
// use for `key`: computed once, it serves one key's lookups in several.
inline size_t KeyHash(absl::string_view key) {
  return absl::Hash<absl::string_view>{}(key);
}

// The live placement groups by id: found by hash (the queue's retry looks
// up every queued group), walked in id order (pages, watchers' first
// state). Each group is immutable once put, and shared: a Put replaces it,
// so a reader may keep one past the cluster's lock (Share) and build its
// view after, and copying a watch's current state copies pointers, not
// groups. The table's slots hold a pointer, never empty room the size of a
// group.
class PgTable {
 public:
  // Nullptr when absent; valid until the group's next Put or Erase.
  // `hash`: KeyHash(id), when the caller has it.
  const PlacementGroup* Find(absl::string_view id) const {
    return Find(id, KeyHash(id));
  }
  const PlacementGroup* Find(absl::string_view id, size_t hash) const {
    auto it = by_id_.find(id, hash);
    return it == by_id_.end() ? nullptr : it->second.get();
  }
  // The group, kept alive as long as the caller holds it (nullptr when
  // absent).
  std::shared_ptr<const PlacementGroup> Share(absl::string_view id) const {
    auto it = by_id_.find(id);
    return it == by_id_.end() ? nullptr : it->second;
  }
  bool Contains(absl::string_view id) const { return by_id_.contains(id); }
  size_t size() const { return by_id_.size(); }
  void Put(PlacementGroup pg) {
    auto [it, added] = by_id_.try_emplace(pg.id);
    if (added) ids_.insert(pg.id);
    it->second = std::make_shared<const PlacementGroup>(std::move(pg));
  }
  void Erase(absl::string_view id) {
    auto it = by_id_.find(id);
    if (it == by_id_.end()) return;
    ids_.erase(it->first);
    by_id_.erase(it);
  }
  // Calls `visit` on each group in id order, after `after` when it is not
  // empty, until it returns false.
  template <typename Visit>
  void ForEach(Visit visit, absl::string_view after = "") const {
    ForEachShared(
        [&](const std::shared_ptr<const PlacementGroup>& g) {
          return visit(*g);
        },
        after);
  }
  // ForEach, with the groups as Share() gives them.
  template <typename Visit>
  void ForEachShared(Visit visit, absl::string_view after = "") const {
    auto it = after.empty() ? ids_.begin() : ids_.upper_bound(after);
    for (; it != ids_.end(); ++it) {
      if (!visit(by_id_.find(*it)->second)) return;
    }
  }

 private:
  absl::flat_hash_map<std::string, std::shared_ptr<const PlacementGroup>>
      by_id_;
  absl::btree_set<std::string> ids_;
};

// What readers see: everything committed.
struct ClusterState {
  // The nodes and the engine's view of their allocations, consistent with
  // `pgs`. The snapshot is the one copy of each node (snapshot->FindNode,
  // node(i) in id order).
  std::shared_ptr<const scheduler::InventorySnapshot> snapshot =
      scheduler::InventorySnapshot::Empty();
  // Live placement groups (not removed).
  PgTable pgs;
  absl::flat_hash_map<std::string, std::string> pg_by_request_id;
  absl::btree_map<std::string, ComputeClass> classes;
  // Queued groups (PENDING, RESCHEDULING, INFEASIBLE) in queue order.
  absl::btree_set<QueueKey> queue;
  // The waiting ones among them (PENDING, RESCHEDULING): what a release of
  // capacity may let fit, without a walk over INFEASIBLE groups.
  absl::btree_set<QueueKey> waiting;
  // The waiting groups by the time they were queued: the ones that may
  // starve, oldest first.
  absl::btree_set<std::pair<absl::Time, std::string>> waiting_since;
  // How many CREATED groups there are of each priority (no zero counts):
  // the lowest is the least a group must outrank to have a victim.
  absl::btree_map<int32_t, int64_t> created_by_priority;
  // The waiting groups' LeastAskOfANode(request), counted (no zero
  // counts): a release on a node that covers none of them lets no waiting
  // group fit there.
  absl::btree_map<scheduler::ResourceSet, int64_t> waiting_asks;
  // For the preemption checks, which run every second and must not walk
  // every group under the lock the writer installs with:
  // - groups waiting for their victims (non-empty `preempting`), by the
  //   time the victims are due;
  absl::btree_set<std::pair<absl::Time, std::string>> preemptors_by_deadline;
  // - how many PENDING groups of each priority may still preempt (no
  //   victims chosen, policy not NEVER; no zero counts);
  absl::btree_map<int32_t, int64_t> may_preempt_by_priority;
  // - CREATED groups by (placed time, priority): whose cool-down ends when.
  absl::btree_set<std::tuple<absl::Time, int32_t, std::string>>
      created_by_placed_time;
  // (job id, group id) of the groups that name a job: what a driver lists
  // or watches costs its job's groups, not a walk of every group.
  absl::btree_set<std::pair<std::string, std::string>> pgs_by_job;
  // (state, group id) of every group: a list by state alone (what is
  // PENDING?) reads that state's groups, not a walk of every group.
  absl::btree_set<std::pair<PgState, std::string>> pgs_by_state;
  // Arrival order for the next placement group.
  uint64_t next_sequence = 1;
};

template <typename T>
using Changes = absl::flat_hash_map<std::string, std::optional<T>>;

// Everything a group (or one op) changes, in memory.
struct StateChanges {
  Changes<scheduler::Node> nodes;
  Changes<PlacementGroup> pgs;
  Changes<ComputeClass> classes;
  uint64_t next_sequence = 0;
  // Set when capacity may have freed up or a class changed: the pending
  // queue is retried at the end of the group.
  bool retry_pending = false;
  // Set (with retry_pending) when a node was added or its labels or
  // resources changed, or a class changed: INFEASIBLE groups are re-checked.
  bool recheck_infeasible = false;
  // Set when the queue was re-tried; retry_pending then says whether
  // capacity freed again since.
  bool queue_retried = false;
  // Since the queue was last re-tried: the nodes where a release freed
  // capacity, and whether anything else asked for a retry (a node or class
  // change, victims leaving), after which any waiting group may fit.
  absl::btree_set<std::string> released_on;
  bool retry_all = false;
  // Intermediate states watchers should see before the final ones (e.g.
  // RESCHEDULING when a group is re-placed within the same commit).
  std::vector<PlacementGroup> events;
  // Kept by Txn::PutPg/DeletePg and Cluster::Merge, so that the queries a
  // create makes cost O(1) or O(answer), not a walk of every change of the
  // commit group (which takes every waiting op: thousands under a burst):
  // - queued groups (IsQueued) now minus before this layer's changes;
  int64_t queued_delta = 0;
  // - (queued time, id) of this layer's changed groups that wait, as the
  //   layer last put them;
  absl::btree_set<std::pair<absl::Time, std::string>> waiting_since;
  // - the waiting groups' LeastAskOfANode counts and the CREATED groups'
  //   counts per priority, now minus before (no zero entries).
  absl::btree_map<scheduler::ResourceSet, int64_t> waiting_asks_delta;
  absl::btree_map<int32_t, int64_t> created_delta;
  // - ids of this layer's changed groups that wait for their victims
  //   (non-empty `preempting`), as the layer last put them.
  absl::btree_set<std::string> preemptors;
};

// Adds `d` to `counts[key]`, dropping the entry when it comes to zero.
template <typename Map>
void AddCount(Map& counts, const typename Map::key_type& key, int64_t d) {
  if (d == 0) return;
  auto [it, fresh] = counts.try_emplace(key, d);
  if (!fresh && (it->second += d) == 0) counts.erase(it);
}

class Txn {
 public:
  // `snapshot` edits the engine snapshot for the group: committed, with the
  // changes of the group's ops before this one.
  // REQUIRES: `committed`, `group` and `snapshot` outlive the Txn.
  Txn(const ClusterState& committed, const StateChanges& group,
      scheduler::SnapshotEditor& snapshot, absl::Time now);

  absl::Time now() const { return now_; }

  // ---- Nodes
  // The node as this op sees it; nullptr when absent.
  const scheduler::Node* FindNode(absl::string_view node_id) const;
  // Stores `node` durably (and in the engine snapshot).
  void PutNode(const scheduler::Node& node);
  void RemoveNode(absl::string_view node_id);

  // ---- Placement groups
  const PlacementGroup* FindPg(absl::string_view pg_id) const;
  const PlacementGroup* FindPgByRequestId(absl::string_view request_id) const;
  // Stores `pg` durably; the second form moves it into this op's changes
  // and returns it as stored (valid until the op's next change of groups).
  void PutPg(const PlacementGroup& pg);
  const PlacementGroup& PutPg(PlacementGroup&& pg);
  void DeletePg(absl::string_view pg_id);
  // Makes watchers see `pg` as it is now, even if a later change of this
  // commit supersedes it.
  void NotifyIntermediate(const PlacementGroup& pg) {
    own_.events.push_back(pg);
  }
  // Ids of queued groups in queue order, with the group's changes so far;
  // without INFEASIBLE ones unless `with_infeasible`. Costs O(those groups
  // + changes of the commit group).
  std::vector<std::string> PendingQueue(bool with_infeasible = true) const;
  // How many groups are queued (PendingQueue().size()), in O(1).
  int64_t QueueSize() const {
    return static_cast<int64_t>(committed_.queue.size()) + group_.queued_delta +
           own_.queued_delta;
  }
  // Calls `visit` on every waiting group (PENDING, RESCHEDULING) queued at
  // or before `cutoff`, as this op sees it, once each, in no set order.
  // Costs O(groups, committed or changed, queued at or before `cutoff`).
  void ForEachWaitingSince(
      absl::Time cutoff,
      const std::function<void(const PlacementGroup&)>& visit) const;
  // Calls `visit` on every group that waits for its victims (non-empty
  // `preempting`), as this op sees it, once each. O(those groups).
  void ForEachPreemptor(
      const std::function<void(const PlacementGroup&)>& visit) const;
  // The lowest priority of a CREATED group, as this op sees them; nullopt
  // when there is none. O(priorities).
  std::optional<int32_t> LowestCreatedPriority() const;
  // Calls `visit` on every live group as this op sees it, once each, until
  // it returns false.
  void ForEachPg(const std::function<bool(const PlacementGroup&)>& visit) const;
  // True when some live group (as this op sees them) satisfies `pred`.
  bool AnyPg(const std::function<bool(const PlacementGroup&)>& pred) const;
  // Ids of live groups holding a bundle on `node_id`, sorted.
  std::vector<std::string> PgsOnNode(absl::string_view node_id);

  // ---- Compute classes
  const ComputeClass* FindClass(absl::string_view name) const;
  void PutClass(const ComputeClass& cls);
  void DeleteClass(absl::string_view name);

  // ---- Log lines: written with the op's commit, not part of ClusterState.
  void PutLog(absl::string_view key, const LogLine& line) {
    mutation_.PutLog(key, line);
  }
  void DeleteLog(absl::string_view key) { mutation_.DeleteLog(key); }

  // ---- The engine snapshot
  // The snapshot with every change so far applied, valid until this op's
  // next change (ApplyDelta, or a node change and the next View): for work
  // done with it before that. Returns the error of applying pending node
  // changes (e.g. removing a node that holds allocations:
  // FailedPrecondition).
  absl::StatusOr<const scheduler::InventorySnapshot*> View();
  // The same, published: immutable and shared, for a caller that keeps it
  // past a change. The group's next change then copies what it writes.
  absl::StatusOr<std::shared_ptr<const scheduler::InventorySnapshot>>
  Snapshot();
  // Applies an allocation delta to the snapshot.
  absl::Status ApplyDelta(scheduler::SnapshotDelta delta);

  // ---- Queue bookkeeping
  // A fresh placement-group sequence; the new high-water mark is written in
  // the same commit, so a restart never reuses it.
  uint64_t NextSequence() {
    mutation_.PutNextPgSequence(own_.next_sequence + 1);
    return own_.next_sequence++;
  }
  void RequestPendingRetry() { own_.retry_pending = own_.retry_all = true; }
  // The queue is re-tried at the end of the group, INFEASIBLE groups too,
  // as after a node change (at start-up: what decides placement, such as
  // the daemon's flags, may have changed since the state was stored).
  void RequestFullRetry() {
    own_.retry_pending = own_.retry_all = own_.recheck_infeasible = true;
  }
  // Whether this op or an earlier one of the group may have freed capacity.
  bool PendingRetryRequested() const {
    return own_.queue_retried ? own_.retry_pending
                              : own_.retry_pending || group_.retry_pending;
  }
  // Whether the inventory or a class changed since the queue was last
  // re-tried: only then may an INFEASIBLE group fit (infeasible means "not
  // even on an empty cluster"; releases and node states do not change it).
  bool InfeasibleRecheckRequested() const {
    return own_.queue_retried
               ? own_.recheck_infeasible
               : own_.recheck_infeasible || group_.recheck_infeasible;
  }
  // Records that the queue was just re-tried on this op's view.
  void MarkQueueRetried() {
    own_.retry_pending = false;
    own_.recheck_infeasible = false;
    own_.retry_all = false;
    own_.released_on.clear();
    own_.queue_retried = true;
  }
  // Whether releases alone asked for a retry since the queue was last
  // re-tried (PendingRetryRequested() and nothing else freed capacity).
  bool RetryAskedByReleasesOnly() const {
    return !(own_.queue_retried ? own_.retry_all
                                : own_.retry_all || group_.retry_all);
  }
  // Calls `visit` on each node where a release freed capacity since the
  // queue was last re-tried (a node may come twice).
  void ForEachReleasedOn(
      const std::function<void(const std::string&)>& visit) const;
  // Calls `visit` on each distinct LeastAskOfANode of the waiting groups,
  // as this op sees them. O(distinct asks).
  void ForEachWaitingAsk(
      const std::function<void(const scheduler::ResourceSet&)>& visit) const;

  // ---- Writes
  // A queue walk stops before its next group once this op has made
  // `max` writes: the store commits only so many in one op (etcd: one Txn).
  // `refused`: the limit is below what the store refused (etcd: one Txn's
  // ops), so the walk spares writes for placements (SparesReasonWrites).
  void LimitWrites(size_t max, bool refused = false) {
    write_limit_ = max;
    limit_refused_ = refused;
  }
  bool AtWriteLimit() const { return mutation_.size() >= write_limit_; }
  // Whether a walk writes no more reasons alone: the limit is a store's
  // refusal's and this op has made half its writes; the rest are kept for
  // placements.
  bool SparesReasonWrites() const {
    return limit_refused_ && mutation_.size() * 2 >= write_limit_;
  }
  // How many more writes this op may make before that limit.
  size_t WritesLeft() const {
    return mutation_.size() >= write_limit_ ? 0
                                            : write_limit_ - mutation_.size();
  }

  // Applies node changes still pending to the snapshot.
  absl::Status Flush();

 private:
  friend class Cluster;  // runs ops and merges them into the group

  // Whether the commit group or this op changed group `id` (hash:
  // KeyHash(id)).
  bool ChangedPg(absl::string_view id, size_t hash) const {
    return own_.pgs.find(id, hash) != own_.pgs.end() ||
           group_.pgs.find(id, hash) != group_.pgs.end();
  }
  // Keeps own_'s queue count, waiting entries and count deltas as `pg_id`
  // becomes `next` (nullptr: deleted). Call before own_.pgs changes.
  void Replace(absl::string_view pg_id, const PlacementGroup* next);
  // Calls `visit` once on the id of each group changed by the commit group
  // or this op.
  void ForEachChangedPg(
      const std::function<void(const std::string&)>& visit) const;

  const ClusterState& committed_;
  const StateChanges& group_;
  scheduler::SnapshotEditor& snapshot_;
  StateChanges own_;
  scheduler::SnapshotDelta pending_nodes_;
  storage::Mutation mutation_;
  size_t write_limit_ = std::numeric_limits<size_t>::max();
  bool limit_refused_ = false;
  const absl::Time now_;
};

}  // namespace sliced::server

#endif  // SLICED_SERVER_CORE_TXN_H_
