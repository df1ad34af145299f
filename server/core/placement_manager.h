// The placement manager: placement groups and compute classes on top of the
// coordinator. It owns the policy; the Cluster owns the state.
//
//  - Create: idempotent by request_id; a new group is given an id and tried
//    at once (queued groups first when capacity just freed). One that does
//    not fit is queued PENDING (or INFEASIBLE with the reason), unless its
//    compute class says FAIL or the queue is full.
//  - The queue: priority descending, then arrival. Smaller groups may
//    backfill around a blocked one, but a group that has waited past the
//    starvation bound blocks every group behind it (same or lower priority)
//    until it is placed. Re-tried at the end of every commit group that may
//    have freed capacity (Cluster::Observer::RetryQueue), unless releases
//    alone freed it where no waiting group can fit; then the reasons are
//    refreshed by the next preemption check (CompletePreemptions).
//  - Node loss: the groups on lost nodes go RESCHEDULING in the same commit;
//    a slice group is re-placed whole, a plain group re-places only its lost
//    bundles (the others stay pinned).
//  - Preemption (docs/preemption.md): a group that does not fit may take
//    the capacity of running groups of lower priority. Its victims go
//    PREEMPTING and keep their capacity for the grace period (so nothing
//    else can take it), then leave (requeued or removed) and the preemptor
//    is placed, in one commit. All of it is in the records.
//  - Watchers see the current state of every group, then every change, in
//    commit order (Cluster::Observer::Published). The log (Options::log)
//    gets one line per state change there: placed, queued, rescheduling,
//    removed.
//
// Thread-safety: the public methods may be called from any thread; the
// callbacks of Create/Remove/PutClass/DeleteClass run on the coordinator's
// writer thread after the commit and must not block. Methods taking a Txn
// run on the writer thread inside an op.
#ifndef SLICED_SERVER_CORE_PLACEMENT_MANAGER_H_
#define SLICED_SERVER_CORE_PLACEMENT_MANAGER_H_

#include <atomic>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/functional/function_ref.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "scheduler/preemption.h"
#include "scheduler/solver.h"
#include "server/core/cluster.h"
#include "server/core/coordinator.h"
#include "server/core/logger.h"
#include "server/core/pg_spec.h"
#include "server/core/priority_classes.h"
#include "server/core/ticker.h"

namespace sliced::server {

class PlacementManager : public Cluster::Observer {
 public:
  struct Options {
    // Once a group has waited this long it blocks every group behind it in
    // queue order (same or lower priority, later arrival) until it is
    // placed. Zero disables the bound. Default 5 minutes.
    absl::Duration starvation_bound = absl::Minutes(5);
    // Groups the queue may hold; a create that would wait beyond this is
    // RESOURCE_EXHAUSTED. Default Limits::max_pending_pgs.
    int max_pending = 100000;
    // Where state changes are logged after each commit (not owned); null:
    // nowhere. Default null.
    Logger* log = nullptr;
    // False: slice requests are never carved, whatever they allow.
    bool subslicing = true;
    // Named priorities; a create resolves its class against them.
    PriorityClasses priority_classes;
    // False: a group that does not fit waits, whatever its priority
    // (--preemption).
    bool preemption = true;
    // How long a victim keeps its capacity after it is told
    // (--preemption_grace). Zero: it leaves in the same commit.
    absl::Duration preemption_grace = absl::Seconds(30);
    // A group placed less than this long ago is not a victim
    // (--preemption_cooldown; Slurm's PreemptExemptTime). Zero: none.
    absl::Duration preemption_cooldown = absl::ZeroDuration();
    // How often a thread ends the grace periods that are due. Zero: no
    // thread (tests call CompletePreemptions).
    absl::Duration preemption_check_interval = absl::ZeroDuration();
  };

  // Told of every solve (metrics). Called on the writer thread.
  class DecisionObserver {
   public:
    virtual ~DecisionObserver() = default;
    virtual void OnDecision(const scheduler::Decision& decision,
                            absl::Duration took) = 0;
    // A victim left PREEMPTING (after the commit): `outcome` is
    // "requeued", "removed", "cancelled" (its preemptor was placed
    // without it or removed) or "rescheduled" (it lost a node first).
    virtual void OnPreemption(const PlacementGroup& /*victim*/,
                              absl::string_view /*outcome*/) {}
  };

  // A watch stream. Deliver must not block.
  class Watcher {
   public:
    virtual ~Watcher() = default;
    // A change of `group`. `view()` builds its view (every worker's env)
    // the first time any watcher calls it: call it only when the change
    // goes somewhere.
    virtual void Deliver(
        const PlacementGroup& group,
        absl::FunctionRef<const PlacementGroupView&()> view) = 0;
    // The ops of the commit whose changes were delivered last have had
    // their answers: a watcher that holds changes back until then (so that
    // writing them does not delay the answers) sends them now.
    virtual void Flush() {}
    // The state was re-read from the store after a failed commit (which may
    // have landed): changes may have happened that were never delivered. A
    // watcher that serves subscribers makes them start over from the
    // current state.
    virtual void Restored() {}
  };

  // Why a group waits (or where it is): the engine's diagnosis.
  struct Explanation {
    std::string outcome;  // "PLACED", "UNSCHEDULABLE", "INFEASIBLE"
    std::string summary;
    std::vector<std::string> details;       // one line per pipeline step
    std::vector<std::string> bundle_nodes;  // where it is / would go
  };

  struct ListFilter {
    std::string job_id = "";                      // "" for any
    std::optional<PgState> state = std::nullopt;  // nullopt for any
    std::string placement_group_id = "";          // "" for any
  };

  // REQUIRES: `coordinator` and `cluster` outlive the manager;
  // `decisions` may be null. Call cluster->set_observer(this) before the
  // coordinator starts.
  PlacementManager(Coordinator* coordinator, Cluster* cluster, Options options,
                   DecisionObserver* decisions);
  ~PlacementManager() override;

  using ViewDone = std::function<void(absl::StatusOr<PlacementGroupView>)>;
  using Done = std::function<void(const absl::Status&)>;

  // Creates the group (or finds the one with the same request_id) and tries
  // to place it at once. Errors: NotFound for an unknown compute class;
  // FailedPrecondition when the class says FAIL and the gang does not fit
  // now; ResourceExhausted when it would wait and the queue is full;
  // Unavailable when the commit failed. With spec.reply kBasic the view
  // holds only the group's id, state and reason, and no workers.
  void Create(PgSpec spec, ViewDone done);
  // Releases the group's capacity and forgets it. NotFound when unknown.
  // A PREEMPTING group stays until its preemptor's other victims leave (its
  // capacity is the preemptor's), but leaves REMOVED, not requeued; a
  // preemptor's victims go back to CREATED.
  void Remove(const std::string& pg_id, Done done);

  // Ends the grace periods that are due: each preemptor's victims leave
  // (requeued or removed) and it is placed, in one commit. When groups'
  // cool-downs ended since the last call, re-tries the queue too.
  void CompletePreemptions(Done done = nullptr);
  // Stops the thread that calls CompletePreemptions (before the
  // coordinator goes).
  void StopPreemptionChecks();

  absl::StatusOr<PlacementGroupView> Get(absl::string_view pg_id) const;
  // The groups that pass `filter`, in id order: those after `after` (a
  // page token: the last id of the previous page), at most `limit` (0: no
  // limit). `next` (optional) is set to the last id returned when more
  // may follow, and cleared otherwise. The views are built after the
  // cluster's lock is released.
  std::vector<PlacementGroupView> List(const ListFilter& filter,
                                       absl::string_view after = {},
                                       int limit = 0,
                                       std::string* next = nullptr) const;

  // The diagnosis of a group (NotFound when unknown), or of a dry run of a
  // spec not created (NotFound for an unknown compute class).
  absl::StatusOr<Explanation> Explain(absl::string_view pg_id) const;
  absl::StatusOr<Explanation> ExplainDryRun(const PgSpec& spec) const;

  // Registers `watcher` and delivers the current state of every live group
  // to it, atomically with respect to changes. Unwatch before destroying it.
  void Watch(Watcher* watcher);
  // Registers `watcher` for the changes from now on only: for one that gets
  // the current state per subscriber, from WithCurrentState (at a restart
  // with 50k groups, Watch's walk is ~1 % of the CPU, on the serial tail).
  void WatchChanges(Watcher* watcher);
  void Unwatch(Watcher* watcher);
  // The groups a filter matched, copied, and the snapshot their views are
  // built with (ViewOf).
  struct CurrentState {
    // In id order; shared with the cluster state (PgTable::Share).
    std::vector<std::shared_ptr<const PlacementGroup>> groups;
    std::shared_ptr<const scheduler::InventorySnapshot> snapshot;
  };
  // Takes the current state of the groups `filter` matches, and calls
  // `subscribe` while no change is delivered to watchers: what `subscribe`
  // registers (with a watcher registered here) gets every later change and
  // none already in the state returned. Only taking the state (pointers to
  // the groups) and `subscribe` run under the lock the writer installs
  // with: the caller builds and sends the views after.
  CurrentState WithCurrentState(const ListFilter& filter,
                                absl::FunctionRef<void()> subscribe);

  // Compute classes. DeleteClass: NotFound when unknown, FailedPrecondition
  // while live groups use it.
  void PutClass(ComputeClass cls, Done done);
  void DeleteClass(const std::string& name, Done done);
  std::vector<ComputeClass> ListClasses() const;

  // Nodes turned DEAD (or were force-removed) in `txn`: their groups go
  // RESCHEDULING and are re-placed where possible.
  absl::Status HandleNodesLost(Txn& txn,
                               const std::vector<std::string>& node_ids);

  // Cluster::Observer: walks the queue (WalkQueue) when a group may fit
  // (QueueMayPlace); else only asks the next CompletePreemptions to.
  void RetryQueue(Txn& txn) override;
  // Holds the watch lock across the install and Published(), so that
  // WithCurrentState sees a commit either whole in the current state or
  // only as changes.
  void Publish(absl::FunctionRef<void()> install) override;
  void Published(const std::vector<Change>& changed,
                 const scheduler::InventorySnapshot& snapshot) override;
  // Re-seeds what Published() keeps, and tells the watchers (Watcher::
  // Restored).
  void Restored() override;
  void Answered() override;

 private:
  // Creates spec.group (moved from) in `txn`: the group as stored, or the
  // group an earlier request with its request_id created.
  absl::StatusOr<const PlacementGroup*> CreateInTxn(Txn& txn, PgSpec& spec);
  // List()'s page, the groups shared (PgTable::Share) under the cluster's
  // read lock: `more` (may be null) is set when more may follow.
  CurrentState Collect(const ListFilter& filter, absl::string_view after = {},
                       int limit = 0, bool* more = nullptr) const;
  // Re-tries every waiting group in queue order: places what fits, keeps
  // the reasons current, starts preemptions (a bounded number of searches).
  // With no grace, a preemption a pass starts releases its victims at once
  // (requeued after the pass took its list): another pass follows, up to
  // kMaxWalkPasses.
  // Both false when they stopped at the op's write limit
  // (Txn::AtWriteLimit), having asked for the next walk.
  bool WalkQueue(Txn& txn);
  bool WalkQueueOnce(Txn& txn);
  // Solves `group` on the txn's snapshot and, when placed, allocates.
  // Updates the group's state, bundles and reason; returns the decision.
  absl::StatusOr<scheduler::Decision> TryPlace(
      Txn& txn, PlacementGroup& group,
      const scheduler::PlacementRequest& request);
  // The state `group` is in once `d` did not place it.
  static PgState StateIfNotPlaced(const PlacementGroup& group,
                                  const scheduler::Decision& d);
  // Records on `group` that `d` did not place it: state and reason.
  static void NotPlaced(const Txn& txn, const scheduler::Decision& d,
                        PlacementGroup& group);
  // The first in queue order of the waiting groups of at least `priority`
  // that have waited past the bound, if any. Costs O(starving groups), not
  // O(queue): a create must not slow down with the queue's depth.
  const PlacementGroup* Starving(const Txn& txn, int32_t priority) const;
  // Whether `victim` may be preempted by `preemptor` now: CREATED, of
  // strictly lower priority, of a preemptible class, placed at least the
  // cool-down ago, and not the group that preempted `preemptor`.
  bool MayPreempt(const PlacementGroup& preemptor, const PlacementGroup& victim,
                  absl::Time now) const;
  // The request `group` is solved with: its compute class's priorities,
  // sub-slicing off when the daemon says so.
  absl::StatusOr<scheduler::PlacementRequest> SolveRequest(
      Txn& txn, const PlacementGroup& group,
      const scheduler::PlacementRequest& asked) const;
  // The groups waiting for their victims (PENDING) of higher priority than
  // `group`, copied: few, and only while preemptions are under way.
  static std::vector<PlacementGroup> PreemptorsAbove(
      const Txn& txn, const PlacementGroup& group);
  // The waiting preemptor of higher priority than `group` that `placement`
  // (group's allocations, on `snapshot`) would keep from fitting once its
  // victims leave, if any (its id, or ""): the free capacity a preemptor's
  // plan counts on is held for it during the grace, as Kubernetes holds a
  // nominated node. Costs two solves per such preemptor, none without.
  absl::StatusOr<std::string> SpoiledPreemptor(
      Txn& txn, const PlacementGroup& group,
      const scheduler::InventorySnapshot& snapshot,
      const scheduler::SnapshotDelta& placement) const;
  // What StartPreemption did.
  enum class Search {
    kNone,     // it may not preempt (or is held for a preemptor above it)
    kNoPlan,   // no set of victims makes room (one solve at most)
    kStarted,  // its victims go PREEMPTING (with no grace: it is placed)
  };
  // `group` (PENDING, not placed) preempts the cheapest set of victims that
  // makes room, if any. With no grace the victims leave and it is placed at
  // once.
  absl::StatusOr<Search> StartPreemption(Txn& txn, PlacementGroup& group);
  // The victims of `preemptor` still PREEMPTING for it leave; it is placed
  // if it fits. Stores both.
  absl::Status FinishPreemption(Txn& txn, PlacementGroup& preemptor);
  // Whether every victim still PREEMPTING for `preemptor` is due.
  bool VictimsDue(Txn& txn, const PlacementGroup& preemptor) const;
  // The victims still PREEMPTING for `preemptor` go back to CREATED (or
  // go, when their owner removed them meanwhile).
  absl::Status CancelPreemption(Txn& txn, PlacementGroup& preemptor);
  absl::Status RemoveInTxn(Txn& txn, const std::string& pg_id);
  absl::Status RescheduleLost(Txn& txn, const PlacementGroup& current,
                              const absl::btree_set<std::string>& lost);
  bool IsStarving(const PlacementGroup& g, absl::Time now) const;
  // Whether a retry of the queue may place a group now. Every waiting group
  // was tried since the last retry, or arrived since and did not fit; what
  // was placed since only took capacity. So when releases alone asked for
  // the retry, a group may fit only on a node they freed that covers the
  // least the group asks of one node (LeastAskOfANode). Anything else that
  // asked for it (a node or class change, victims leaving, a starving group
  // leaving), or a starving group now (the groups behind it were not
  // tried), makes it a yes. O(released nodes x distinct asks + changes).
  bool QueueMayPlace(Txn& txn) const;
  // "waiting behind <starving>, which has waited over ...". A group's
  // reason never repeats its state: the log line, slicectl and the web view
  // show the state beside it.
  std::string BlockedBy(const PlacementGroup& starving) const;
  // For Explain: the starving group `group` waits behind (the first in
  // queue order of the waiting groups ahead of it that waited past the
  // bound; for a dry run, of those of at least its priority), if any.
  const PlacementGroup* StarvingAhead(const ClusterState& state,
                                      const PlacementGroup& group,
                                      absl::Time now) const;
  // What Explain needs to ask, off the cluster lock, which running groups
  // of lower priority would make room (docs/preemption.md).
  struct PreemptionWhatIf {
    std::shared_ptr<const scheduler::InventorySnapshot> snapshot;
    scheduler::PlacementRequest request;
    std::vector<scheduler::VictimCandidate> candidates;
    std::string prefix;  // "preemption: ", or why it will not
  };
  // What the daemon's flags change in a request before it is solved
  // (--subslicing=false: never carve), and whether they change `request`.
  void ApplyFlags(scheduler::PlacementRequest& request) const;
  bool FlagsChange(const scheduler::PlacementRequest& request) const;
  // Sets `what_if` when the group is unschedulable and groups of lower
  // priority hold capacity.
  Explanation ExplainGroup(const ClusterState& state,
                           const PlacementGroup& group,
                           std::optional<PreemptionWhatIf>& what_if) const;
  // Adds the preemption line to `out`: what preempting would free.
  static void AddPreemptionWhatIf(const PreemptionWhatIf& what_if,
                                  Explanation& out);
  // Logs the groups of `changed` at info when their state differs from the
  // one before the change (Change::before); a new reason alone is debug.
  // Writer thread.
  void LogChanges(const std::vector<Change>& changed);
  // Fills preempting_ from the installed state. Construction, then the
  // writer thread.
  void SeedPreempting();

  Coordinator* const coordinator_;
  Cluster* const cluster_;
  const Options options_;
  DecisionObserver* const decisions_;

  // Groups last published PREEMPTING (for DecisionObserver::OnPreemption):
  // seeded at construction and after a Restore, then touched only by
  // Published.
  absl::flat_hash_set<std::string> preempting_;

  absl::Mutex check_mu_;
  // When CompletePreemptions last looked (cool-downs that ended since then
  // re-try the queue).
  absl::Time last_check_ ABSL_GUARDED_BY(check_mu_) = absl::InfinitePast();
  // Set by RetryQueue when it skipped the walk (the waiting groups' reasons
  // may have changed: which resource a freed node is short of first; and
  // the searches for victims a walk would have run did not run), or when
  // its walk asked for another. CompletePreemptions then has the queue
  // walked.
  std::atomic<bool> walk_skipped_{false};
  // Set by RetryQueue when its walk asked for a retry that re-checks
  // INFEASIBLE groups too (cut at the write limit after an inventory
  // change); one of the waiting groups only sets walk_skipped_.
  std::atomic<bool> recheck_skipped_{false};
  // Preemptions finished (victims released), for WalkQueue's passes. Only
  // the writer's ops touch it.
  int64_t preemptions_finished_ = 0;
  Ticker ticker_;  // calls CompletePreemptions

  absl::Mutex watch_mu_;
  absl::flat_hash_set<Watcher*> watchers_ ABSL_GUARDED_BY(watch_mu_);
};

}  // namespace sliced::server

#endif  // SLICED_SERVER_CORE_PLACEMENT_MANAGER_H_
