// The coordinator: sliced's single writer, a generic group-commit engine.
//
// Every mutation is a WriteOp submitted to one writer thread. The thread takes
// every waiting op at once (no linger) and runs them in arrival order through
// the Machine (the state being written; server/core/cluster.h), each against
// a Txn that sees the committed state plus the changes of the ops before it
// in the same group. An op either succeeds (its changes join the group) or
// fails (its changes vanish; the others go on). The group's writes are
// committed to the Store in one synced batch (none when the group wrote
// nothing); only then does the Machine
// install them where readers see them, and only then is any op of the group
// answered. If the commit fails, every op of the group is answered
// UNAVAILABLE and nothing is installed (leveldb's "persist the edit, then
// install the version"); as a failed commit may still have reached the store
// (a write whose sync failed), the Machine is then restored from the store,
// so memory always matches what a restart would load.
//
// The coordinator knows nothing of nodes, placement groups or queues: that
// is the Machine's. It owns the order of events: run, commit, install, reply.
//
// A leader that steps down (server/ha.h) Refuse()s what has not run yet:
// nothing more is committed, and nobody waits on a writer that may re-send a
// commit for a while.
//
// Thread-safety: Submit and Refuse may be called from any thread. `apply`
// callbacks run on the writer thread; `done` callbacks run on the writer
// thread after the commit (or on the thread that refused the op) and must
// not block.
#ifndef SLICED_SERVER_CORE_COORDINATOR_H_
#define SLICED_SERVER_CORE_COORDINATOR_H_

#include <deque>
#include <functional>
#include <memory>
#include <thread>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "storage/store.h"

namespace sliced::server {

class Txn;  // one op's view of the state; defined by the Machine's state

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
  // The state the coordinator writes. All calls come from one thread at a
  // time (start-up, then the writer thread).
  class Machine {
   public:
    virtual ~Machine() = default;
    // Replaces the in-memory state with what `stored` holds (start-up, and
    // after a failed commit). May append writes to `repair` (e.g. trimming
    // log rings) that are committed before anything else.
    // Returns DataLoss/FailedPrecondition when the stored state is
    // inconsistent; the daemon then refuses to serve it.
    // `stored` is the machine's to take apart.
    virtual absl::Status Restore(storage::StoredState stored,
                                 storage::Mutation& repair) = 0;
    // Opens a group of ops at `now`.
    virtual void BeginGroup(absl::Time now) = 0;
    // Whether one op's writes can be committed at all (Store::CheckUnit).
    using UnitCheck = std::function<absl::Status(const storage::Mutation&)>;
    // Runs `apply` as the next op of the open group. OK: its changes join
    // the group and its writes are appended to `writes`. Error (also when
    // `check` refuses its writes): its changes vanish and the error is
    // returned.
    virtual absl::Status RunOp(const std::function<absl::Status(Txn&)>& apply,
                               storage::Mutation& writes,
                               const UnitCheck& check) = 0;
    // After the group's last op, before the commit: the work its changes
    // call for (e.g. re-trying the queue when capacity freed), as one more
    // op whose writes join `writes` (none when `check` refuses them).
    virtual void EndGroup(storage::Mutation& writes,
                          const UnitCheck& check) = 0;
    // The group's writes are durable: make them visible and tell watchers.
    virtual void Install() = 0;
    // The group's ops have had their answers: send what waited for them
    // (watch events are written after the answers, not before).
    virtual void Answered() {}
    // The commit failed: forget the group.
    virtual void Abandon() = 0;
  };

  // Receives one call per committed (or failed) group, for metrics.
  class CommitObserver {
   public:
    virtual ~CommitObserver() = default;
    virtual void OnCommit(absl::Duration took, int64_t ops, int64_t writes,
                          bool ok) = 0;
  };

  struct Options {
    // Clock; default absl::Now.
    std::function<absl::Time()> clock;
    // Optional; must outlive the coordinator.
    CommitObserver* observer = nullptr;
  };

  // Loads the store into `machine` and commits its repairs. Ops may be
  // submitted from now on; they run once Run() starts the writer.
  // Returns the store's load error (DataLoss, Unavailable) or the Machine's
  // Restore error. REQUIRES: `machine` outlives the coordinator.
  static absl::StatusOr<std::unique_ptr<Coordinator>> Open(
      std::unique_ptr<storage::Store> store, Machine* machine, Options options);

  // Starts the writer thread, first with one op that asks for the
  // Machine's end-of-group work (the queue re-tried, INFEASIBLE groups
  // re-checked) on the state as loaded. Call once, when whatever the
  // Machine calls back is wired.
  void Run();

  // Stops accepting ops, finishes those queued, and joins the writer.
  ~Coordinator();

  // Queues `op`. After shutdown began, `done` gets Unavailable at once;
  // after Refuse(), its status.
  void Submit(WriteOp op);

  // From now on ops are answered `why` (not OK) instead of being run: the
  // queued ones now, later ones as they are submitted. The group being
  // committed gets the commit's answer; after a failed one the store is not
  // re-read (nothing runs on this state any more).
  void Refuse(const absl::Status& why);

  absl::Time Now() const { return options_.clock(); }

  // What Open() loaded and how long it took: reading and decoding the store,
  // then building the state from it (the daemon prints it at start).
  struct LoadStats {
    size_t nodes = 0;
    size_t placement_groups = 0;
    absl::Duration read;
    absl::Duration restore;
  };
  const LoadStats& opened() const { return opened_; }

 private:
  Coordinator(std::unique_ptr<storage::Store> store, Machine* machine,
              Options options);
  void WriterLoop();
  void RunGroup(std::vector<WriteOp> ops);
  // Whether Refuse() was called.
  bool refusing() const;
  // Restores the machine from what the store holds now. Writer thread only.
  absl::Status Resync(LoadStats* stats = nullptr);

  const Options options_;
  const std::unique_ptr<storage::Store> store_;
  Machine* const machine_;

  mutable absl::Mutex queue_mu_;
  std::deque<WriteOp> queue_ ABSL_GUARDED_BY(queue_mu_);
  bool stopping_ ABSL_GUARDED_BY(queue_mu_) = false;
  absl::Status refusal_ ABSL_GUARDED_BY(queue_mu_);

  // Set when a commit failed and re-reading the store failed too: the next
  // group re-reads first (writer thread only).
  bool needs_resync_ = false;
  // Set by Open().
  LoadStats opened_;

  std::thread writer_;
};

// Submits an op that computes a value for its caller: `apply(txn, out)`
// (an absl::Status(Txn&, T&) callable) fills `out`; `done` gets it once the
// op is durable and visible, or the op's (or the commit's) error. The op's
// state is one allocation, which the op's two functions point to (a pointer
// fits in std::function without an allocation of its own, a shared_ptr does
// not); the op's `done` frees it, as it runs exactly once.
template <typename T, typename Apply>
void SubmitForValue(Coordinator& coordinator, Apply apply,
                    std::function<void(absl::StatusOr<T>)> done) {
  struct State {
    Apply apply;
    std::function<void(absl::StatusOr<T>)> done;
    T value;
  };
  State* state = new State{std::move(apply), std::move(done), T()};
  coordinator.Submit(
      WriteOp{[state](Txn& txn) { return state->apply(txn, state->value); },
              [state](const absl::Status& s) {
                std::unique_ptr<State> owned(state);
                if (s.ok()) {
                  owned->done(std::move(owned->value));
                } else {
                  owned->done(s);
                }
              }});
}

}  // namespace sliced::server

#endif  // SLICED_SERVER_CORE_COORDINATOR_H_
