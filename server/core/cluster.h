// The cluster: the committed state readers see, and the Machine the
// coordinator writes it through.
//
// A group of ops is run against an overlay (StateChanges) of the committed
// ClusterState; each op gets a Txn over the overlay. The engine snapshot is
// edited in place for the whole group (a SnapshotEditor: a chunk the group
// copied once is written in place after that) and rolled back to the op's
// start when an op fails; it is published at Install(). When the group's writes
// are durable, Install() applies the overlay to the committed state under
// the write lock and hands the groups whose state changed to the Observer
// (the placement manager publishes them to watchers). The Observer also runs
// the end-of-group work: re-trying the queue when capacity may have freed.
//
// Thread-safety: Read() from any thread (reader lock). The Machine methods
// run on the coordinator's writer thread (or at start-up before it runs).
#ifndef SLICED_SERVER_CORE_CLUSTER_H_
#define SLICED_SERVER_CORE_CLUSTER_H_

#include <functional>
#include <memory>
#include <optional>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/functional/function_ref.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "server/core/coordinator.h"
#include "server/core/reaper.h"
#include "server/core/txn.h"

namespace sliced::server {

class LogStore;

class Cluster : public Coordinator::Machine {
 public:
  // Placement policy over the cluster, implemented by the PlacementManager.
  class Observer {
   public:
    virtual ~Observer() = default;
    // At the end of a group whose changes may have freed capacity (or
    // changed a class): re-try the queue in `txn`. Runs inside the group.
    virtual void RetryQueue(Txn& txn) = 0;
    // A group as a commit changed it, and its state before that change:
    // as installed before the commit, or at the commit's previous event of
    // the group; none for a new group.
    struct Change {
      const PlacementGroup* group;
      std::optional<PgState> before;
    };
    // Install() installs a commit and calls Published() inside `install`:
    // an observer may hold a lock of its own across both, so that what reads
    // the installed state under that lock (a watch's current state) sees
    // every later Published() and none of the changes already in it.
    virtual void Publish(absl::FunctionRef<void()> install) { install(); }
    // After Install(): the groups whose state changed, in order (removed
    // ones with state kRemoved), and the snapshot they were installed with.
    // The groups are valid during the call only. Must not block.
    virtual void Published(const std::vector<Change>& changed,
                           const scheduler::InventorySnapshot& snapshot) = 0;
    // After Restore() replaced the state with the store's, once there is an
    // observer (a re-read after a failed commit, which may have landed): what
    // was published may differ from what is installed now.
    virtual void Restored() {}
    // After the ops of the group installed last had their answers.
    virtual void Answered() {}
  };

  // `logs` (optional) is restored from the store's log table.
  explicit Cluster(LogStore* logs);

  // REQUIRES: called once, before the coordinator starts.
  void set_observer(Observer* observer) { observer_ = observer; }

  // Runs `fn(const ClusterState&)` under the read lock and returns its
  // result.
  template <typename Fn>
  auto Read(Fn fn) const {
    absl::ReaderMutexLock lock(&mu_);
    return fn(static_cast<const ClusterState&>(state_));
  }
  // The committed snapshot. It is immutable: work over the whole inventory
  // runs on it after the lock is released, so that it never holds up the
  // writer (docs/architecture.md).
  std::shared_ptr<const scheduler::InventorySnapshot> Snapshot() const {
    return Read([](const ClusterState& s) { return s.snapshot; });
  }

  // Coordinator::Machine
  absl::Status Restore(storage::StoredState stored,
                       storage::Mutation& repair) override;
  void BeginGroup(absl::Time now) override;
  // An empty `check` (tests) checks nothing.
  absl::Status RunOp(const std::function<absl::Status(Txn&)>& apply,
                     storage::Mutation& writes,
                     const UnitCheck& check) override;
  void EndGroup(storage::Mutation& writes, const UnitCheck& check) override;
  void Install() override;
  void Answered() override {
    if (observer_ != nullptr) observer_->Answered();
  }
  void Abandon() override;

 private:
  // The in-memory state for what the store holds (nodes and groups are
  // moved out of `stored`).
  absl::StatusOr<ClusterState> Build(storage::StoredState& stored) const
      ABSL_SHARED_LOCKS_REQUIRED(mu_);
  // Moves `txn`'s changes into the commit group's, its writes into `writes`.
  void Merge(Txn& txn, storage::Mutation& writes);

  LogStore* const logs_;
  Observer* observer_ = nullptr;

  mutable absl::Mutex mu_;
  ClusterState state_ ABSL_GUARDED_BY(mu_);

  // The open group (writer thread only); `snapshot_` holds state_.snapshot
  // with the group's changes, and is empty between groups.
  StateChanges group_;
  std::optional<scheduler::SnapshotEditor> snapshot_;
  absl::Time now_;
  // Frees the snapshots Install() replaces, off the writer's path.
  Reaper reaper_{"sliced-reaper"};
};

}  // namespace sliced::server

#endif  // SLICED_SERVER_CORE_CLUSTER_H_
