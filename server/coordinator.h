// The coordinator: sliced's single writer.
//
// Every mutation is a WriteOp submitted to one writer thread. The thread takes
// every waiting op at once (no linger) and runs them in arrival order, each
// against a Txn that sees the committed state plus the changes of the ops
// before it in the same group. An op either succeeds (its changes join the
// group) or fails (its changes vanish; the others go on). The group's writes
// are committed to the Store in one synced batch; only then are the changes
// installed into the state that readers see, and only then is any op of the
// group answered. If the commit fails, every op of the group is answered
// UNAVAILABLE and its changes are not installed (leveldb's "persist the
// edit, then install the version"); as a failed commit may still have
// reached the store (a write whose sync failed), the state is then re-read
// from the store, so memory always matches what a restart would load.
//
// Thread-safety: Submit and Read may be called from any thread. `apply`
// callbacks run on the writer thread; `done` callbacks run on the writer
// thread after the commit and must not block.
#ifndef SLICED_SERVER_COORDINATOR_H_
#define SLICED_SERVER_COORDINATOR_H_

#include <deque>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/btree_map.h"
#include "absl/container/btree_set.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "scheduler/snapshot.h"
#include "scheduler/solver.h"
#include "scheduler/types.h"
#include "storage/store.h"

namespace sliced::server {

struct NodeEntry {
  scheduler::Node node;
  // In memory only: a restart gives every node a fresh lease.
  absl::Time last_heartbeat = absl::InfinitePast();
};

// A live placement group: its durable record and the engine request parsed
// from it (without compute-class priorities, resolved at solve time).
struct PgEntry {
  storage::PlacementGroupRecord record;
  scheduler::PlacementRequest request;
};

// What readers see: everything committed.
struct ClusterState {
  absl::btree_map<std::string, NodeEntry> nodes;
  // The engine's view of nodes and allocations, consistent with `nodes` and
  // `pgs`.
  std::shared_ptr<const scheduler::InventorySnapshot> snapshot;
  // Live placement groups (not removed), by id.
  absl::btree_map<std::string, PgEntry> pgs;
  absl::flat_hash_map<std::string, std::string> pg_by_request_id;
  absl::btree_map<std::string, storage::ComputeClassRecord> classes;
  // Queued groups (PENDING, RESCHEDULING, INFEASIBLE) as (-priority,
  // sequence, id): queue order.
  absl::btree_set<std::tuple<int64_t, uint64_t, std::string>> queue;
  // Arrival order for the next placement group.
  uint64_t next_sequence = 1;
};

template <typename T>
using Changes = absl::flat_hash_map<std::string, std::optional<T>>;
using NodeChanges = Changes<NodeEntry>;

// Everything a group (or one op) changes, in memory.
struct StateChanges {
  NodeChanges nodes;
  Changes<PgEntry> pgs;
  Changes<storage::ComputeClassRecord> classes;
  std::shared_ptr<const scheduler::InventorySnapshot> snapshot;
  uint64_t next_sequence = 0;
  // Set when capacity may have freed up or a class changed: the pending
  // queue is retried at the end of the group.
  bool retry_pending = false;
  // Intermediate states watchers should see before the final ones (e.g.
  // RESCHEDULING when a group is re-placed within the same commit).
  std::vector<PgEntry> events;
  // Set when the queue was re-tried; retry_pending then says whether
  // capacity freed again since.
  bool queue_retried = false;
};

// One operation's view of the state and its pending writes.
// Not thread-safe; lives on the writer thread for the duration of `apply`.
class Txn {
 public:
  // The node as committed, changed by earlier ops of the group and by this op;
  // nullptr when absent.
  const NodeEntry* FindNode(absl::string_view node_id) const;

  // Stores `entry` durably (and in the engine snapshot).
  void PutNode(const NodeEntry& entry);
  // Updates `entry` in memory only (a lease renewal that changes no state).
  void TouchNode(const NodeEntry& entry);
  void RemoveNode(absl::string_view node_id);

  // Placement groups: as committed, changed by the group and by this op.
  const PgEntry* FindPg(absl::string_view pg_id) const;
  const PgEntry* FindPgByRequestId(absl::string_view request_id) const;
  void PutPg(const PgEntry& entry);
  void DeletePg(absl::string_view pg_id);
  // Makes watchers see `entry` as it is now, even if a later change of this
  // commit supersedes it.
  void NotifyIntermediate(const PgEntry& entry) {
    own_.events.push_back(entry);
  }
  // Ids of PENDING/RESCHEDULING/INFEASIBLE groups in queue order (priority
  // desc, then arrival); includes the changes of the group so far.
  std::vector<std::string> PendingQueue() const;
  // True when some live group (as the op sees them) satisfies `pred`.
  bool AnyPg(const std::function<bool(const PgEntry&)>& pred) const;
  // Ids of live groups holding a bundle on `node_id`.
  std::vector<std::string> PgsOnNode(absl::string_view node_id);

  // Log records: written with the op's commit, not part of ClusterState.
  void PutLog(absl::string_view key, const storage::LogRecord& record) {
    mutation_.PutLog(key, record);
  }
  void DeleteLog(absl::string_view key) { mutation_.DeleteLog(key); }

  const storage::ComputeClassRecord* FindClass(absl::string_view name) const;
  void PutClass(const storage::ComputeClassRecord& record);
  void DeleteClass(absl::string_view name);
  std::vector<storage::ComputeClassRecord> Classes() const;

  // The engine snapshot with every change so far applied. Returns the error
  // of applying pending node changes (e.g. removing a node that holds
  // allocations: FailedPrecondition).
  absl::StatusOr<std::shared_ptr<const scheduler::InventorySnapshot>>
  Snapshot();
  // Applies an allocation delta to the snapshot.
  absl::Status ApplyDelta(const scheduler::SnapshotDelta& delta);

  uint64_t NextSequence();
  void RequestPendingRetry() { own_.retry_pending = true; }
  // Whether this op or an earlier one of the group may have freed capacity.
  bool PendingRetryRequested() const {
    return own_.queue_retried ? own_.retry_pending
                              : own_.retry_pending || group_.retry_pending;
  }
  // Records that the queue was just re-tried on this op's view.
  void MarkQueueRetried() {
    own_.retry_pending = false;
    own_.queue_retried = true;
  }
  absl::Time now() const { return now_; }

 private:
  friend class Coordinator;
  Txn(const ClusterState& committed, const StateChanges& group, absl::Time now)
      : committed_(committed), group_(group), now_(now) {
    own_.snapshot = group.snapshot ? group.snapshot : committed.snapshot;
    own_.next_sequence =
        group.next_sequence ? group.next_sequence : committed.next_sequence;
  }
  absl::Status FlushNodes();

  const ClusterState& committed_;
  const StateChanges& group_;
  StateChanges own_;
  scheduler::SnapshotDelta pending_nodes_;
  storage::Mutation mutation_;
  absl::Time now_;
};

struct WriteOp {
  // Validates and applies the operation to `txn`. A non-OK status discards
  // this op's changes and is passed to `done`.
  std::function<absl::Status(Txn& txn)> apply;
  // Called exactly once: with apply's error, with the commit's error
  // (Unavailable), or OK once the op's writes are durable and visible.
  std::function<void(const absl::Status& status)> done;
};

class Coordinator {
 public:
  struct Options {
    // A node that sends no heartbeat for this long turns DEAD. Zero disables
    // leases. Default 10 s.
    absl::Duration heartbeat_timeout = absl::Seconds(10);
    // How often leases are checked. Default 1 s (or timeout/4 if smaller).
    absl::Duration lease_check_interval = absl::Seconds(1);
    // Clock; default absl::Now.
    std::function<absl::Time()> clock;
    // Runs on the writer thread after a group is installed, with the groups
    // whose state changed (removed ones have state REMOVED). Must not block.
    std::function<void(const std::vector<PgEntry>&,
                       const scheduler::InventorySnapshot&)>
        on_pg_changes;
    // Runs on the writer thread at the end of every group that asked for it
    // (Txn::RequestPendingRetry), inside the same commit: re-tries the
    // pending queue. Set by the placement layer.
    std::function<void(Txn&)> retry_pending;
    // Runs inside the op that turns nodes DEAD (lease expiry), so their
    // placement groups are rescheduled in the same commit.
    std::function<absl::Status(Txn&, const std::vector<std::string>&)>
        on_nodes_lost;
    // Runs after every group commit: its latency, ops and writes, success.
    std::function<void(absl::Duration, int64_t ops, int64_t writes, bool ok)>
        on_commit;
    // Receives the stored log records at start-up and may add writes (e.g.
    // trimming) that are committed before serving.
    std::function<void(
        const std::vector<std::pair<std::string, storage::LogRecord>>&,
        storage::Mutation*)>
        load_logs;
    // Parses a stored placement group record into the engine request
    // (recovery). Set by the placement layer; without it PGs are not loaded.
    std::function<absl::StatusOr<scheduler::PlacementRequest>(
        const storage::PlacementGroupRecord&)>
        parse_pg;
  };

  // Loads the store's contents, rebuilds the snapshot, checks that no chip is
  // held twice, and starts the writer and lease threads.
  // Returns the store's load error (DataLoss, Unavailable); DataLoss when a
  // record is inconsistent; FailedPrecondition when the stored placements
  // over-commit a node (the daemon refuses to serve such state).
  static absl::StatusOr<std::unique_ptr<Coordinator>> Start(
      std::unique_ptr<storage::Store> store, Options options);

  // Stops accepting ops, finishes those queued, and joins the threads.
  ~Coordinator();

  // Queues `op`. After shutdown began, `done` gets Unavailable at once.
  void Submit(WriteOp op);

  // Runs `fn(const ClusterState&)` under the read lock and returns its result.
  template <typename Fn>
  auto Read(Fn fn) const {
    absl::ReaderMutexLock lock(&state_mu_);
    return fn(static_cast<const ClusterState&>(state_));
  }

  const Options& options() const { return options_; }
  absl::Time Now() const { return options_.clock(); }

 private:
  Coordinator(std::unique_ptr<storage::Store> store, Options options);
  void WriterLoop();
  void LeaseLoop();
  void RunGroup(std::vector<WriteOp> ops);
  // The in-memory state for what the store holds. `previous` (optional)
  // keeps heartbeat times. Errors as Start's.
  absl::StatusOr<ClusterState> BuildState(const storage::StoredState& stored,
                                          const ClusterState* previous) const;
  // Replaces the state with what the store holds now (after a failed
  // commit). Writer thread only.
  absl::Status Resync();
  void Install(StateChanges& group) ABSL_EXCLUSIVE_LOCKS_REQUIRED(state_mu_);

  const Options options_;
  const std::unique_ptr<storage::Store> store_;

  mutable absl::Mutex state_mu_;
  ClusterState state_ ABSL_GUARDED_BY(state_mu_);

  mutable absl::Mutex queue_mu_;
  std::deque<WriteOp> queue_ ABSL_GUARDED_BY(queue_mu_);
  bool stopping_ ABSL_GUARDED_BY(queue_mu_) = false;

  // Set when a commit failed and re-reading the store failed too: the next
  // group re-reads first (writer thread only).
  bool needs_resync_ = false;

  std::thread writer_;
  std::thread lease_checker_;
};

}  // namespace sliced::server

#endif  // SLICED_SERVER_COORDINATOR_H_
