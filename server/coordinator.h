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
// UNAVAILABLE and nothing changes in memory (leveldb's "persist the edit,
// then install the version").
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
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/btree_map.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "scheduler/types.h"
#include "storage/store.h"

namespace sliced::server {

struct NodeEntry {
  scheduler::Node node;
  // In memory only: a restart gives every node a fresh lease.
  absl::Time last_heartbeat = absl::InfinitePast();
};

// What readers see: everything committed.
struct ClusterState {
  absl::btree_map<std::string, NodeEntry> nodes;
};

// Changes to node entries: nullopt = removed.
using NodeChanges = absl::flat_hash_map<std::string, std::optional<NodeEntry>>;

// One operation's view of the state and its pending writes.
// Not thread-safe; lives on the writer thread for the duration of `apply`.
class Txn {
 public:
  // The node as committed, changed by earlier ops of the group and by this op;
  // nullptr when absent.
  const NodeEntry* FindNode(absl::string_view node_id) const;

  // Stores `entry` durably.
  void PutNode(const NodeEntry& entry);
  // Updates `entry` in memory only (a lease renewal that changes no state).
  void TouchNode(const NodeEntry& entry);
  void RemoveNode(absl::string_view node_id);

  absl::Time now() const { return now_; }

 private:
  friend class Coordinator;
  Txn(const ClusterState& committed, const NodeChanges& group, absl::Time now)
      : committed_(committed), group_(group), now_(now) {}

  const ClusterState& committed_;
  const NodeChanges& group_;
  NodeChanges own_;
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
  };

  // Loads the store's contents and starts the writer and lease threads.
  // Returns the store's load error (DataLoss, Unavailable), or DataLoss when a
  // record is inconsistent.
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

  // Number of groups committed and ops in them, for tests and metrics.
  struct Stats {
    int64_t groups = 0;
    int64_t ops = 0;
    int64_t failed_commits = 0;
  };
  Stats stats() const;

 private:
  Coordinator(std::unique_ptr<storage::Store> store, Options options);
  void WriterLoop();
  void LeaseLoop();
  void RunGroup(std::vector<WriteOp> ops);

  const Options options_;
  const std::unique_ptr<storage::Store> store_;

  mutable absl::Mutex state_mu_;
  ClusterState state_ ABSL_GUARDED_BY(state_mu_);

  mutable absl::Mutex queue_mu_;
  std::deque<WriteOp> queue_ ABSL_GUARDED_BY(queue_mu_);
  bool stopping_ ABSL_GUARDED_BY(queue_mu_) = false;
  Stats stats_ ABSL_GUARDED_BY(queue_mu_);

  std::thread writer_;
  std::thread lease_checker_;
};

}  // namespace sliced::server

#endif  // SLICED_SERVER_COORDINATOR_H_
