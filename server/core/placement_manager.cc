#include "server/core/placement_manager.h"

#include <algorithm>
#include <iterator>
#include <limits>
#include <memory>
#include <optional>
#include <utility>

#include "absl/container/btree_set.h"
#include "absl/container/flat_hash_set.h"
#include "absl/container/inlined_vector.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "base/quote.h"
#include "base/status_macros.h"

namespace sliced::server {
namespace {

using scheduler::Decision;
using scheduler::PlacementRequest;

absl::Status PgNotFound(absl::string_view id) {
  return absl::NotFoundError(
      absl::StrCat("placement_group_id: no placement group ", Quote(id)));
}

absl::Status ClassNotFound(absl::string_view name) {
  return absl::NotFoundError(
      absl::StrCat("compute_class: no compute class ", Quote(name)));
}

// The log line of a group's new state: "placement group pg-1 (job "j")
// CREATED: placed on slices v6e-a".
std::string GroupChangeLine(const PlacementGroup& g) {
  std::string line;
  line.reserve(128);  // one allocation for most lines
  absl::StrAppend(&line, "placement group ", g.id);
  if (!g.job_id.empty()) absl::StrAppend(&line, " (job ", Quote(g.job_id), ")");
  absl::StrAppend(&line, " ", PgStateName(g.state));
  if (g.state == PgState::kCreated) {
    if (!g.slice_names.empty()) {
      absl::StrAppend(&line, ": placed on slice(s) ",
                      absl::StrJoin(g.slice_names, ", "));
    } else {
      // The nodes in name order, each once; views into the group's bundles.
      absl::InlinedVector<absl::string_view, 8> nodes;
      for (const PlacedBundle& b : g.bundles) nodes.push_back(b.node_id);
      std::sort(nodes.begin(), nodes.end());
      nodes.erase(std::unique(nodes.begin(), nodes.end()), nodes.end());
      constexpr size_t kMaxNamed = 8;
      absl::StrAppend(
          &line, ": placed on node(s) ",
          absl::StrJoin(nodes.begin(),
                        nodes.begin() + std::min(nodes.size(), kMaxNamed),
                        ", "));
      if (nodes.size() > kMaxNamed) {
        absl::StrAppend(&line, ", ... (", nodes.size(), " nodes)");
      }
    }
  } else if (!g.reason.empty()) {
    absl::StrAppend(&line, ": ", g.reason);
  }
  return line;
}

// "pg-1 (production, priority 1000)".
std::string Who(const PlacementGroup& g) {
  return absl::StrCat(g.id, " (",
                      g.priority_class.empty() ? "no class" : g.priority_class,
                      ", priority ", g.priority, ")");
}

std::string TimeString(absl::Time t) {
  return absl::FormatTime("%Y-%m-%dT%H:%M:%E3SZ", t, absl::UTCTimeZone());
}

// `g` as a group not placed: the request's bundles on no node.
void Unplace(PlacementGroup& g) {
  g.bundles.clear();
  for (const scheduler::Bundle& b : g.request.bundles) {
    g.bundles.push_back(PlacedBundle{b.resources, b.selector, ""});
  }
  g.slice_names.clear();
  g.placement_note.clear();
  g.priority_index = -1;
  g.fallback_index = -1;
}

// What became of a group that left PREEMPTING, by its new state.
absl::string_view PreemptionOutcome(PgState state) {
  switch (state) {
    case PgState::kRemoved:
      return "removed";
    case PgState::kCreated:
      return "cancelled";
    case PgState::kRescheduling:
      return "rescheduled";
    default:
      return "requeued";
  }
}

// Searches for victims (the groups on the nodes the request could use,
// then a plan bounded by scheduler/preemption.h) one RetryQueue pass may
// run; the other waiting groups search on a later pass. A search that
// finds no plan stops at its first trial (one solve: even every candidate
// gone does not make room), so it does not spend a search: otherwise the
// groups first in the queue that no preemption can help would spend every
// pass's searches, and a group behind them that has a plan would never
// search. Those are bounded apart, and the same ask on the same snapshot
// is searched once per pass (FailedSolves).
constexpr int kMaxPreemptionSearchesPerRetry = 2;
constexpr int kMaxFruitlessSearchesPerRetry = 16;

// The most writes a create's own walk of the queue makes (etcd's default
// limit is 128 writes an op).
constexpr size_t kMaxWritesOfACreatesWalk = 64;

// The solves of one queue retry that did not place their group, by what
// they asked, while the snapshot they ran on is still the current one. A
// queue of many groups asking the same (a job's replicas waiting for
// capacity) then costs one solve per release, not one per group: the same
// request on the same snapshot gets the same decision.
class FailedSolves {
 public:
  // The decision for `g`'s request on `snapshot`, if one was noted.
  const Decision* Find(
      const std::shared_ptr<const scheduler::InventorySnapshot>& snapshot,
      const PlacementGroup& g) {
    if (snapshot != snapshot_) {
      entries_.clear();
      snapshot_ = snapshot;  // held, so that its address is not reused
    }
    const Entry* e = EntryOf(g);
    return e != nullptr ? &e->decision : nullptr;
  }
  // Notes a failed solve of `g`'s own request on the snapshot of the last
  // Find.
  void Add(const PlacementGroup& g, const Decision& d) {
    if (entries_.size() < kMaxEntries) {
      entries_.push_back({g.compute_class, g.request, d, {}});
    }
  }
  // Whether a victim search for a group like `g` found no plan on the
  // snapshot of the last Find. Its candidates depend on the group only
  // through its priority and whom it may not preempt back.
  bool NoPlan(const PlacementGroup& g) {
    const Entry* e = EntryOf(g);
    return e != nullptr &&
           std::find(e->no_plan.begin(), e->no_plan.end(),
                     std::pair(g.priority, g.preempted_by)) != e->no_plan.end();
  }
  void AddNoPlan(const PlacementGroup& g) {
    Entry* e = EntryOf(g);
    if (e != nullptr) e->no_plan.emplace_back(g.priority, g.preempted_by);
  }

 private:
  // Distinct requests kept; the lookup is a linear scan.
  static constexpr size_t kMaxEntries = 32;
  struct Entry {
    std::string compute_class;
    PlacementRequest request;
    Decision decision;
    std::vector<std::pair<int32_t, std::string>> no_plan;
  };
  Entry* EntryOf(const PlacementGroup& g) {
    for (Entry& e : entries_) {
      if (e.compute_class == g.compute_class && e.request == g.request) {
        return &e;
      }
    }
    return nullptr;
  }
  std::shared_ptr<const scheduler::InventorySnapshot> snapshot_;
  std::vector<Entry> entries_;
};

// `request` plus the priorities of the compute class `name` ("" for none).
absl::StatusOr<PlacementRequest> WithPriorities(PlacementRequest request,
                                                absl::string_view name,
                                                const ComputeClass* cls) {
  if (name.empty()) return request;
  if (cls == nullptr) return ClassNotFound(name);
  request.priorities = cls->priorities;
  return request;
}

// The bundle list a decision used.
std::vector<scheduler::Bundle> UsedBundles(const PlacementRequest& request,
                                           const Decision& d) {
  if (d.fallback_index >= 0) return request.fallbacks[d.fallback_index];
  return ExpandSliceBundles(request);
}

// Whether every bundle of `group` is on a node.
bool Whole(const PlacementGroup& group) {
  return std::all_of(group.bundles.begin(), group.bundles.end(),
                     [](const PlacedBundle& b) { return !b.node_id.empty(); });
}

// The request that re-places `group` after node loss: its bundle list in
// use as the primary, surviving bundles of a plain group pinned (a slice
// group is re-placed whole), its own allocations counted as free. A plain
// group keeps that list: another (a fallback) would move its survivors.
PlacementRequest ReplacementRequest(const PlacementGroup& group,
                                    const absl::btree_set<std::string>& lost) {
  PlacementRequest request = group.request;
  request.bundles.clear();
  if (!request.slice) request.fallbacks.clear();
  for (const PlacedBundle& b : group.bundles) {
    scheduler::Bundle bundle{b.resources, b.selector, ""};
    if (!request.slice && !b.node_id.empty() && !lost.contains(b.node_id)) {
      bundle.pinned_node_id = b.node_id;
    }
    request.bundles.push_back(std::move(bundle));
  }
  request.replacing_pg_id = group.id;
  return request;
}

}  // namespace

PlacementManager::PlacementManager(Coordinator* coordinator, Cluster* cluster,
                                   Options options, DecisionObserver* decisions)
    : coordinator_(coordinator),
      cluster_(cluster),
      options_(options),
      decisions_(decisions) {
  SeedPreempting();
  if (options_.preemption_check_interval > absl::ZeroDuration()) {
    ticker_.Start("sliced-preempt", options_.preemption_check_interval,
                  [this] { CompletePreemptions(); });
  }
}

PlacementManager::~PlacementManager() { StopPreemptionChecks(); }

void PlacementManager::SeedPreempting() {
  preempting_.clear();
  cluster_->Read([&](const ClusterState& s) {
    s.pgs.ForEach([&](const PlacementGroup& g) {
      if (g.state == PgState::kPreempting) preempting_.insert(g.id);
      return true;
    });
    return 0;
  });
}

void PlacementManager::StopPreemptionChecks() { ticker_.Stop(); }

// ---------------------------------------------------------------- solving

absl::StatusOr<PlacementRequest> PlacementManager::SolveRequest(
    Txn& txn, const PlacementGroup& group,
    const PlacementRequest& asked) const {
  ASSIGN_OR_RETURN(PlacementRequest request,
                   WithPriorities(asked, group.compute_class,
                                  txn.FindClass(group.compute_class)));
  ApplyFlags(request);
  return request;
}

bool PlacementManager::FlagsChange(const PlacementRequest& request) const {
  return !options_.subslicing && request.slice.has_value();
}

void PlacementManager::ApplyFlags(PlacementRequest& request) const {
  if (FlagsChange(request)) {
    request.slice->subslicing = scheduler::Subslicing::kNever;
  }
}

absl::StatusOr<Decision> PlacementManager::TryPlace(
    Txn& txn, PlacementGroup& group, const PlacementRequest& asked) {
  // SolveRequest's copy only when it changes the request: a class's
  // priorities (WithPriorities) or a flag.
  std::optional<PlacementRequest> adjusted;
  if (!group.compute_class.empty() || FlagsChange(asked)) {
    ASSIGN_OR_RETURN(adjusted, SolveRequest(txn, group, asked));
  }
  const PlacementRequest& request = adjusted ? *adjusted : asked;
  ASSIGN_OR_RETURN(const scheduler::InventorySnapshot* snapshot, txn.View());
  const absl::Time start = absl::Now();
  Decision d = scheduler::Solve(*snapshot, request);
  if (decisions_ != nullptr) decisions_->OnDecision(d, absl::Now() - start);
  if (d.outcome != Decision::kPlaced) {
    NotPlaced(txn, d, group);
    return d;
  }
  std::vector<scheduler::Bundle> bundles = UsedBundles(request, d);
  scheduler::SnapshotDelta delta;
  if (!request.replacing_pg_id.empty())
    delta.release_pg_ids.push_back(group.id);
  for (size_t i = 0; i < bundles.size(); ++i) {
    delta.add_allocations.push_back(
        scheduler::Allocation{group.id, static_cast<int>(i), d.bundle_nodes[i],
                              bundles[i].resources});
  }
  ASSIGN_OR_RETURN(const std::string spoiled,
                   SpoiledPreemptor(txn, group, *snapshot, delta));
  if (!spoiled.empty()) {
    Decision held;
    held.outcome = Decision::kUnschedulable;
    held.diagnosis.summary =
        absl::StrCat("it would take capacity that ", spoiled,
                     " (of higher priority) is to use once its victims leave");
    NotPlaced(txn, held, group);
    return held;
  }
  group.update_time = txn.now();
  group.bundles.clear();
  for (size_t i = 0; i < bundles.size(); ++i) {
    group.bundles.push_back(PlacedBundle{std::move(bundles[i].resources),
                                         std::move(bundles[i].selector),
                                         d.bundle_nodes[i]});
  }
  RETURN_IF_ERROR(txn.ApplyDelta(std::move(delta)));
  group.slice_names = d.slice_names;
  group.state = PgState::kCreated;
  group.placed_time = txn.now();
  group.reason.clear();
  group.placement_note = d.placement_note;
  group.priority_index = d.priority_index;
  // A replacement's primary is the list the group was using.
  if (request.replacing_pg_id.empty() || d.fallback_index >= 0) {
    group.fallback_index = d.fallback_index;
  }
  return d;
}

std::vector<PlacementGroup> PlacementManager::PreemptorsAbove(
    const Txn& txn, const PlacementGroup& group) {
  std::vector<PlacementGroup> above;
  txn.ForEachPreemptor([&](const PlacementGroup& p) {
    if (p.id != group.id && p.state == PgState::kPending &&
        p.priority > group.priority) {
      above.push_back(p);
    }
  });
  return above;
}

absl::StatusOr<std::string> PlacementManager::SpoiledPreemptor(
    Txn& txn, const PlacementGroup& group,
    const scheduler::InventorySnapshot& snapshot,
    const scheduler::SnapshotDelta& placement) const {
  for (const PlacementGroup& p : PreemptorsAbove(txn, group)) {
    scheduler::SnapshotDelta victims_gone;
    victims_gone.release_pg_ids = p.preempting;
    ASSIGN_OR_RETURN(auto freed, snapshot.Apply(victims_gone));
    ASSIGN_OR_RETURN(PlacementRequest request, SolveRequest(txn, p, p.request));
    // Where it would not fit anyway (a node died), nothing is spoiled.
    if (scheduler::Solve(*freed, request).outcome != Decision::kPlaced) {
      continue;
    }
    ASSIGN_OR_RETURN(auto taken, freed->Apply(placement));
    if (scheduler::Solve(*taken, request).outcome != Decision::kPlaced) {
      return p.id;
    }
  }
  return std::string();
}

PgState PlacementManager::StateIfNotPlaced(const PlacementGroup& group,
                                           const Decision& d) {
  if (group.state != PgState::kPending && group.state != PgState::kInfeasible) {
    return group.state;
  }
  return d.outcome == Decision::kInfeasible ? PgState::kInfeasible
                                            : PgState::kPending;
}

void PlacementManager::NotPlaced(const Txn& txn, const Decision& d,
                                 PlacementGroup& group) {
  group.update_time = txn.now();
  // The state says PENDING or INFEASIBLE; the reason says why.
  group.reason = d.diagnosis.summary;
  group.state = StateIfNotPlaced(group, d);
}

bool PlacementManager::IsStarving(const PlacementGroup& g,
                                  absl::Time now) const {
  return Waits(g.state) && options_.starvation_bound > absl::ZeroDuration() &&
         now - g.queued_time >= options_.starvation_bound;
}

std::string PlacementManager::BlockedBy(const PlacementGroup& starving) const {
  return absl::StrCat("waiting behind ", starving.id,
                      ", which has waited over ",
                      absl::FormatDuration(options_.starvation_bound),
                      " and claims capacity first");
}

namespace {

// The first in queue order of the groups `for_each(visit)` visits that
// `counts` admits, if any.
template <typename ForEach, typename Counts>
const PlacementGroup* FirstInQueue(const ForEach& for_each,
                                   const Counts& counts) {
  const PlacementGroup* first = nullptr;
  for_each([&](const PlacementGroup& pg) {
    if (counts(pg) &&
        (first == nullptr || QueueKeyOf(pg) < QueueKeyOf(*first))) {
      first = &pg;
    }
  });
  return first;
}

}  // namespace

const PlacementGroup* PlacementManager::StarvingAhead(
    const ClusterState& state, const PlacementGroup& group,
    absl::Time now) const {
  if (options_.starvation_bound <= absl::ZeroDuration() ||
      !Waits(group.state)) {
    return nullptr;
  }
  const bool queued = state.pgs.Find(group.id) != nullptr;
  const QueueKey key = QueueKeyOf(group);
  return FirstInQueue(
      [&](const auto& visit) {
        for (const auto& [since, id] : state.waiting_since) {
          if (now - since < options_.starvation_bound) break;
          if (const PlacementGroup* pg = state.pgs.Find(id)) visit(*pg);
        }
      },
      [&](const PlacementGroup& pg) {
        return pg.id != group.id &&
               (queued ? QueueKeyOf(pg) < key : pg.priority >= group.priority);
      });
}

const PlacementGroup* PlacementManager::Starving(const Txn& txn,
                                                 int32_t priority) const {
  if (options_.starvation_bound <= absl::ZeroDuration()) return nullptr;
  // The first in queue order of the starving groups at or above `priority`.
  return FirstInQueue(
      [&](const auto& visit) {
        txn.ForEachWaitingSince(txn.now() - options_.starvation_bound, visit);
      },
      [&](const PlacementGroup& pg) { return pg.priority >= priority; });
}

// ---------------------------------------------------------------- create

absl::StatusOr<const PlacementGroup*> PlacementManager::CreateInTxn(
    Txn& txn, PgSpec& spec) {
  PlacementGroup& g = spec.group;
  RETURN_IF_ERROR(
      options_.priority_classes.Resolve(g.priority_class, g.priority));
  if (!g.request_id.empty()) {
    if (const PlacementGroup* existing = txn.FindPgByRequestId(g.request_id)) {
      // A retry repeats its request: the same request_id from another job,
      // under another name or as the other kind of request is a client's
      // mistake, not the group it was given.
      if (existing->job_id != g.job_id || existing->name != g.name ||
          existing->scaling_config.has_value() !=
              g.scaling_config.has_value()) {
        return absl::AlreadyExistsError(absl::StrCat(
            "request_id ", Quote(g.request_id), " was used for ", existing->id,
            " (job_id ", Quote(existing->job_id), ", name ",
            Quote(existing->name), ", ",
            existing->scaling_config ? "a ScalingConfig" : "placement bundles",
            "); a retry must repeat the same request, and a new request "
            "needs a new request_id"));
      }
      return existing;
    }
  }
  g.sequence = txn.NextSequence();
  g.id = absl::StrFormat("pg-%012x", g.sequence);
  g.state = PgState::kPending;
  g.create_time = g.update_time = g.queued_time = txn.now();
  // Queued groups go first: if an earlier op of this group freed capacity
  // that a queued group may use, re-try the queue before this newcomer can
  // take it. A new group then backfills beside the queued ones, unless one
  // of at least its priority starves.
  // The walk writes at most kMaxWritesOfACreatesWalk (an op must fit what
  // the store commits at once: etcd's Txn); past that the rest of the
  // queue, and this group behind it, wait for the walk that ends the commit
  // group.
  bool walked_all = true;
  if (txn.PendingRetryRequested() && QueueMayPlace(txn)) {
    txn.LimitWrites(kMaxWritesOfACreatesWalk);
    walked_all = WalkQueue(txn);
    txn.LimitWrites(std::numeric_limits<size_t>::max());
  }
  const bool room = txn.QueueSize() < options_.max_pending;
  auto full = [&] {
    return absl::ResourceExhaustedError(absl::StrCat(
        "the pending queue is full (", options_.max_pending,
        " groups); nothing was created. Retry later or remove waiting groups"));
  };
  // The class is checked before anything else decides: it must exist, and
  // FAIL means placed now or not created, even behind a starving group.
  const ComputeClass* cls = nullptr;
  if (!g.compute_class.empty()) {
    cls = txn.FindClass(g.compute_class);
    if (cls == nullptr) return ClassNotFound(g.compute_class);
  }
  const bool fail =
      cls != nullptr && cls->when_unsatisfiable == WhenUnsatisfiable::kFail;
  if (const PlacementGroup* starving = Starving(txn, g.priority)) {
    if (fail) {
      return absl::FailedPreconditionError(
          absl::StrCat("compute class \"", g.compute_class,
                       "\" says FAIL, and the group would wait behind ",
                       starving->id, ", which has waited over ",
                       absl::FormatDuration(options_.starvation_bound),
                       " and claims capacity first"));
    }
    if (!room) return full();
    g.reason = BlockedBy(*starving);
    return &txn.PutPg(std::move(g));
  }
  if (!walked_all && !fail && room) {
    g.reason = "queued while the groups before it are re-tried";
    return &txn.PutPg(std::move(g));
  }
  ASSIGN_OR_RETURN(Decision d, TryPlace(txn, g, g.request));
  if (d.outcome != Decision::kPlaced && fail) {
    return absl::FailedPreconditionError(
        absl::StrCat("compute class \"", g.compute_class,
                     "\" says FAIL and no priority holds the whole gang now: ",
                     d.diagnosis.summary));
  }
  if (d.outcome != Decision::kPlaced && !room) return full();
  if (d.outcome == Decision::kUnschedulable) {
    RETURN_IF_ERROR(StartPreemption(txn, g).status());
  }
  return &txn.PutPg(std::move(g));
}

void PlacementManager::Create(PgSpec spec, ViewDone done) {
  SubmitForValue<PlacementGroupView>(
      *coordinator_,
      [this, spec = std::move(spec)](Txn& txn,
                                     PlacementGroupView& view) mutable {
        ASSIGN_OR_RETURN(const PlacementGroup* group, CreateInTxn(txn, spec));
        if (spec.reply == ReplyDetail::kBasic) {
          view.group.id = group->id;
          view.group.state = group->state;
          view.group.reason = group->reason;
          return absl::OkStatus();
        }
        ASSIGN_OR_RETURN(const scheduler::InventorySnapshot* snapshot,
                         txn.View());
        view = ViewOf(*group, *snapshot);
        return absl::OkStatus();
      },
      std::move(done));
}

void PlacementManager::Remove(const std::string& pg_id, Done done) {
  coordinator_->Submit(
      WriteOp{[this, pg_id](Txn& txn) { return RemoveInTxn(txn, pg_id); },
              std::move(done)});
}

absl::Status PlacementManager::RemoveInTxn(Txn& txn, const std::string& pg_id) {
  const PlacementGroup* current = txn.FindPg(pg_id);
  if (current == nullptr) return PgNotFound(pg_id);
  // The groups blocked behind a starving group were not tried: once it
  // leaves, they may fit anywhere.
  const bool starving = IsStarving(*current, txn.now());
  const PlacementGroup* preemptor = current->state == PgState::kPreempting
                                        ? txn.FindPg(current->preempted_by)
                                        : nullptr;
  if (preemptor != nullptr) {
    // Its capacity is promised to the preemptor: it stays, held, until the
    // preemptor's other victims are gone too (at once if none is left).
    PlacementGroup victim = *current;
    victim.removed = true;
    victim.update_time = txn.now();
    victim.reason =
        absl::StrCat("PREEMPTING: removed; its capacity goes to ",
                     preemptor->id, " when its other victims leave (by ",
                     TimeString(preemptor->preemption_deadline), ")");
    txn.PutPg(victim);
    if (!VictimsDue(txn, *preemptor)) return absl::OkStatus();
    PlacementGroup p = *preemptor;
    return FinishPreemption(txn, p);
  }
  if (!current->preempting.empty()) {
    PlacementGroup p = *current;
    RETURN_IF_ERROR(CancelPreemption(txn, p));
  }
  scheduler::SnapshotDelta delta;
  delta.release_pg_ids.push_back(pg_id);
  RETURN_IF_ERROR(txn.ApplyDelta(std::move(delta)));
  txn.DeletePg(pg_id);
  if (starving) txn.RequestPendingRetry();
  return absl::OkStatus();
}

// ---------------------------------------------------------------- preemption

bool PlacementManager::MayPreempt(const PlacementGroup& preemptor,
                                  const PlacementGroup& victim,
                                  absl::Time now) const {
  if (victim.state != PgState::kCreated ||
      victim.priority >= preemptor.priority || victim.id == preemptor.id ||
      victim.id == preemptor.preempted_by) {
    return false;
  }
  const PriorityClass* cls =
      options_.priority_classes.Find(victim.priority_class);
  if (cls != nullptr && !cls->preemptible) return false;
  return now - victim.placed_time >= options_.preemption_cooldown;
}

absl::StatusOr<PlacementManager::Search> PlacementManager::StartPreemption(
    Txn& txn, PlacementGroup& group) {
  if (!options_.preemption ||
      group.preemption_policy == PreemptionPolicy::kNever ||
      group.state != PgState::kPending || !group.preempting.empty()) {
    return Search::kNone;
  }
  ASSIGN_OR_RETURN(PlacementRequest request,
                   SolveRequest(txn, group, group.request));
  ASSIGN_OR_RETURN(auto snapshot, txn.Snapshot());
  // Only a group holding capacity where the request could go can help: the
  // candidates come from those nodes' allocations, not from every group
  // (a production job waiting for TPU slices beside 50k best-effort CPU
  // groups searches none of them).
  // (The planner orders the candidates itself.)
  absl::flat_hash_set<absl::string_view> holders;
  for (uint32_t i : scheduler::NodesARequestMayUse(*snapshot, request)) {
    for (const scheduler::Allocation& a : snapshot->node(i).allocations) {
      holders.insert(a.pg_id);
    }
  }
  std::vector<scheduler::VictimCandidate> candidates;
  for (absl::string_view id : holders) {
    const PlacementGroup* g = txn.FindPg(id);
    if (g != nullptr && MayPreempt(group, *g, txn.now())) {
      candidates.push_back(
          {g->id, g->priority, g->sequence, g->priority_class});
    }
  }
  if (candidates.empty()) return Search::kNoPlan;  // nobody to preempt
  // It may fit without victims, but be held for a preemptor of higher
  // priority (SpoiledPreemptor): then it waits, taking nothing from anyone.
  // (Only then: otherwise the caller's solve already failed.)
  if (!PreemptorsAbove(txn, group).empty() &&
      scheduler::Solve(*snapshot, request).outcome == Decision::kPlaced) {
    return Search::kNone;
  }
  const scheduler::PreemptionPlan plan =
      scheduler::PlanPreemption(*snapshot, request, candidates);
  if (!plan.found) return Search::kNoPlan;
  // A plan whose writes (its victims and itself) do not fit what this op
  // may still write (a queue walk cut to the store's limit) waits for a
  // walk where it comes earlier.
  if (plan.victims.size() + 1 > txn.WritesLeft()) return Search::kNone;
  const absl::Time deadline = txn.now() + options_.preemption_grace;
  for (const scheduler::Victim& v : plan.victims) {
    PlacementGroup victim = *txn.FindPg(v.pg_id);
    victim.state = PgState::kPreempting;
    victim.preempted_by = group.id;
    victim.preemption_deadline = deadline;
    victim.update_time = txn.now();
    victim.reason = absl::StrCat(
        "preempted by ", Who(group), "; leaves at ", TimeString(deadline),
        ", then ",
        victim.on_preemption == OnPreemption::kRemove ? "removed" : "requeued");
    // With no grace it leaves in this same commit: watchers are told still.
    if (options_.preemption_grace <= absl::ZeroDuration()) {
      txn.NotifyIntermediate(victim);
    }
    txn.PutPg(victim);
    group.preempting.push_back(v.pg_id);
  }
  group.preemption_deadline = deadline;
  group.update_time = txn.now();
  group.reason = absl::StrCat(plan.summary, "; placed when they leave at ",
                              TimeString(deadline));
  if (options_.preemption_grace <= absl::ZeroDuration()) {
    RETURN_IF_ERROR(FinishPreemption(txn, group));
  }
  return Search::kStarted;
}

bool PlacementManager::VictimsDue(Txn& txn,
                                  const PlacementGroup& preemptor) const {
  for (const std::string& id : preemptor.preempting) {
    const PlacementGroup* v = txn.FindPg(id);
    if (v == nullptr || v->state != PgState::kPreempting ||
        v->preempted_by != preemptor.id) {
      continue;
    }
    if (!v->removed && v->preemption_deadline > txn.now()) return false;
  }
  return true;
}

absl::Status PlacementManager::FinishPreemption(Txn& txn,
                                                PlacementGroup& preemptor) {
  scheduler::SnapshotDelta release;
  for (const std::string& id : preemptor.preempting) {
    const PlacementGroup* current = txn.FindPg(id);
    if (current == nullptr || current->state != PgState::kPreempting ||
        current->preempted_by != preemptor.id) {
      continue;
    }
    release.release_pg_ids.push_back(id);
    if (current->removed || current->on_preemption == OnPreemption::kRemove) {
      txn.DeletePg(id);
      continue;
    }
    PlacementGroup victim = *current;
    Unplace(victim);
    victim.state = PgState::kPending;
    victim.preemption_deadline = absl::InfinitePast();
    victim.queued_time = victim.update_time = txn.now();
    victim.reason = absl::StrCat("preempted by ", Who(preemptor), "; requeued");
    txn.PutPg(victim);
    // Placed again in this commit (elsewhere), it was still requeued first:
    // watchers and the preemption outcome see PENDING.
    txn.NotifyIntermediate(victim);
  }
  RETURN_IF_ERROR(txn.ApplyDelta(std::move(release)));
  ++preemptions_finished_;
  preemptor.preempting.clear();
  preemptor.preemption_deadline = absl::InfinitePast();
  RETURN_IF_ERROR(TryPlace(txn, preemptor, preemptor.request).status());
  txn.PutPg(preemptor);
  txn.RequestPendingRetry();
  return absl::OkStatus();
}

absl::Status PlacementManager::CancelPreemption(Txn& txn,
                                                PlacementGroup& preemptor) {
  std::vector<PlacementGroup> victims;  // still PREEMPTING for it
  scheduler::SnapshotDelta release;     // those their owner removed meanwhile
  for (const std::string& id : preemptor.preempting) {
    const PlacementGroup* current = txn.FindPg(id);
    if (current == nullptr || current->state != PgState::kPreempting ||
        current->preempted_by != preemptor.id) {
      continue;
    }
    victims.push_back(*current);
    // Removed meanwhile, it goes now; a slice group that lost a node
    // meanwhile is placed again whole, as RescheduleLost does.
    if (current->removed || (current->request.slice && !Whole(*current))) {
      release.release_pg_ids.push_back(id);
    }
  }
  // The one step that can fail goes first: on an error nothing changed.
  if (!release.release_pg_ids.empty()) {
    RETURN_IF_ERROR(txn.ApplyDelta(std::move(release)));
  }
  for (PlacementGroup& victim : victims) {
    if (victim.removed) {  // it goes now
      txn.DeletePg(victim.id);
      continue;
    }
    victim.preempted_by.clear();
    victim.preemption_deadline = absl::InfinitePast();
    victim.update_time = txn.now();
    if (Whole(victim)) {
      victim.state = PgState::kCreated;
      victim.reason.clear();
    } else {  // it lost a node while PREEMPTING: re-placed by the queue
      victim.state = PgState::kRescheduling;
      victim.queued_time = txn.now();
      victim.reason = absl::StrCat("lost node(s) while preempted by ",
                                   preemptor.id, ", which no longer needs it");
      if (victim.request.slice) {
        for (PlacedBundle& b : victim.bundles) b.node_id.clear();
        victim.slice_names.clear();
      }
      victim.placement_note.clear();
      txn.RequestPendingRetry();
    }
    txn.PutPg(victim);
  }
  preemptor.preempting.clear();
  preemptor.preemption_deadline = absl::InfinitePast();
  return absl::OkStatus();
}

void PlacementManager::CompletePreemptions(Done done) {
  if (!done) done = [](const absl::Status&) {};
  const absl::Time now = coordinator_->Now();
  absl::Time since;
  {
    absl::MutexLock lock(&check_mu_);
    since = last_check_;
    last_check_ = now;
  }
  bool cooled = false;  // a victim's cool-down ended since the last check
  // Under the cluster's reader lock, which the writer needs to install: the
  // indexes keep this to the groups due and those placed since the last
  // check, however many groups there are.
  std::vector<std::string> due = cluster_->Read([&](const ClusterState& s) {
    std::vector<std::string> ids;
    for (const auto& [deadline, id] : s.preemptors_by_deadline) {
      if (deadline > now) break;
      ids.push_back(id);
    }
    if (!options_.preemption || s.may_preempt_by_priority.empty()) return ids;
    // The highest priority that may preempt, against the CREATED groups
    // whose cool-down (placed_time + cooldown) ended in (since, now].
    const int32_t top = s.may_preempt_by_priority.rbegin()->first;
    const absl::Time after = since - options_.preemption_cooldown;
    const absl::Time until = now - options_.preemption_cooldown;
    for (auto it = s.created_by_placed_time.lower_bound(
             {after, std::numeric_limits<int32_t>::min(), std::string()});
         !cooled && it != s.created_by_placed_time.end() &&
         std::get<0>(*it) <= until;
         ++it) {
      cooled = std::get<0>(*it) > after && std::get<1>(*it) < top;
    }
    return ids;
  });
  // A walk skipped (or cut) since the last check: have one now.
  const bool walk = walk_skipped_.exchange(false, std::memory_order_relaxed);
  const bool recheck =
      recheck_skipped_.exchange(false, std::memory_order_relaxed);
  if (due.empty() && !cooled && !walk && !recheck) {
    done(absl::OkStatus());
    return;
  }
  // One op per preemption that is due, so that one the store can't commit
  // (etcd: above one Txn's limits; many victims) fails alone and the
  // others finish; then one that asks for the walk. `done` gets the first
  // error once every op has answered.
  struct Outcome {
    absl::Mutex mu;
    size_t left ABSL_GUARDED_BY(mu) = 0;
    absl::Status first ABSL_GUARDED_BY(mu);
    Done done;
  };
  auto outcome = std::make_shared<Outcome>();
  outcome->done = std::move(done);
  {
    absl::MutexLock lock(&outcome->mu);
    outcome->left = due.size() + 1;
  }
  auto answer = [outcome](const absl::Status& status) {
    absl::Status first;
    {
      absl::MutexLock lock(&outcome->mu);
      if (outcome->first.ok()) outcome->first = status;
      if (--outcome->left > 0) return;
      first = outcome->first;
    }
    outcome->done(first);
  };
  for (std::string& id : due) {
    coordinator_->Submit(WriteOp{[this, id = std::move(id)](Txn& txn) {
                                   const PlacementGroup* g = txn.FindPg(id);
                                   if (g == nullptr || g->preempting.empty() ||
                                       !VictimsDue(txn, *g)) {
                                     return absl::OkStatus();
                                   }
                                   PlacementGroup p = *g;
                                   return FinishPreemption(txn, p);
                                 },
                                 answer});
  }
  coordinator_->Submit(WriteOp{[cooled, walk, recheck](Txn& txn) {
                                 // New victims (a cool-down ended), or a
                                 // walk skipped since: the queue is re-tried
                                 // (and may preempt them).
                                 if (cooled || walk) txn.RequestPendingRetry();
                                 if (recheck) txn.RequestFullRetry();
                                 return absl::OkStatus();
                               },
                               answer});
}

// ---------------------------------------------------------------- the queue

bool PlacementManager::QueueMayPlace(Txn& txn) const {
  if (!txn.RetryAskedByReleasesOnly()) return true;
  // With a starving group, the groups behind it were not tried.
  if (Starving(txn, std::numeric_limits<int32_t>::min()) != nullptr) {
    return true;
  }
  auto snapshot = txn.View();
  if (!snapshot.ok()) return true;
  std::vector<const scheduler::ResourceSet*> frees;
  txn.ForEachReleasedOn([&](const std::string& node_id) {
    const int64_t i = (*snapshot)->NodeIndex(node_id);
    if (i >= 0) frees.push_back(&(*snapshot)->node(i).free);
  });
  auto covers = [](const scheduler::ResourceSet& free,
                   const scheduler::ResourceSet& ask) {
    return std::all_of(ask.begin(), ask.end(), [&](const auto& entry) {
      auto has = free.find(entry.first);
      return has != free.end() && has->second >= entry.second;
    });
  };
  bool may = false;
  txn.ForEachWaitingAsk([&](const scheduler::ResourceSet& ask) {
    may = may || std::any_of(frees.begin(), frees.end(), [&](const auto* free) {
            return covers(*free, ask);
          });
  });
  return may;
}

void PlacementManager::RetryQueue(Txn& txn) {
  if (QueueMayPlace(txn)) {
    WalkQueue(txn);
    // A retry the walk asked for itself (cut at the write limit, reasons
    // it left unwritten to spare writes, or what it freed after its last
    // pass: a preemptor placed without its victims releases those their
    // owners removed, and turns one that lost a node RESCHEDULING) is not
    // run by this walk, the last of its commit group: the next check walks
    // the queue.
    if (txn.PendingRetryRequested()) {
      (txn.InfeasibleRecheckRequested() ? recheck_skipped_ : walk_skipped_)
          .store(true, std::memory_order_relaxed);
    }
    return;
  }
  // Releases alone, where no waiting group can fit: a walk would place
  // nothing. It would only refresh reasons (a freed node may now be short
  // of another resource first) and run the victim searches the last walk
  // had no budget for; the next preemption check has one run, so a busy
  // cluster walks a deep queue once per check, not once per commit. With
  // nothing queued there is nothing to refresh.
  if (txn.QueueSize() > 0) walk_skipped_.store(true, std::memory_order_relaxed);
}

bool PlacementManager::WalkQueue(Txn& txn) {
  constexpr int kMaxWalkPasses = 3;
  for (int pass = 0; pass < kMaxWalkPasses; ++pass) {
    const int64_t finished = preemptions_finished_;
    if (!WalkQueueOnce(txn)) return false;
    if (preemptions_finished_ == finished) return true;
  }
  return true;
}

bool PlacementManager::WalkQueueOnce(Txn& txn) {
  // INFEASIBLE groups cannot fit until the inventory or a class changes.
  const bool with_infeasible = txn.InfeasibleRecheckRequested();
  const std::vector<std::string> queue = txn.PendingQueue(with_infeasible);
  txn.MarkQueueRetried();
  std::optional<PlacementGroup> blocker;  // a starving group not placed
  // Searches for victims this pass may still run (that start a
  // preemption, and that find no plan); and the lowest priority of a
  // running group (found once, when first needed): a group at or below it
  // has no victim, and costs no search.
  int searches = kMaxPreemptionSearchesPerRetry;
  int fruitless = kMaxFruitlessSearchesPerRetry;
  FailedSolves failed;
  std::optional<std::optional<int32_t>> lowest_running;
  // `shares`: `failed` holds `g`'s decision on the current snapshot.
  auto may_search = [&](const PlacementGroup& g, bool shares) {
    if (searches <= 0 || fruitless <= 0) return false;
    if (!lowest_running.has_value()) {
      lowest_running = txn.LowestCreatedPriority();
    }
    return lowest_running->has_value() && **lowest_running < g.priority &&
           !(shares && failed.NoPlan(g));
  };
  // Asks for the walk that goes on where this one stopped writing: at the
  // end of the commit group (a create's walk) or at the next preemption
  // check (RetryQueue).
  auto ask_next_walk = [&] {
    if (with_infeasible) {
      txn.RequestFullRetry();
    } else {
      txn.RequestPendingRetry();
    }
  };
  // Writes `g` when only its reason changed, unless this walk runs again
  // after the store refused its writes and has made half those it may
  // (Txn::SparesReasonWrites): every node change rewrites every waiting
  // group's reason (it counts the nodes), and under steady churn those
  // rewrites at the head of a deep queue would take every cut walk's writes
  // from the groups behind them that fit. Those reasons are written by a
  // later walk, once the churn leaves room.
  auto put_reason = [&](const PlacementGroup& g) {
    if (txn.SparesReasonWrites()) {
      ask_next_walk();
    } else {
      txn.PutPg(g);
    }
  };
  for (const std::string& id : queue) {
    if (txn.AtWriteLimit()) {
      // The store takes no more writes in one op: the rest of the queue
      // waits for the next walk.
      ask_next_walk();
      return false;
    }
    const PlacementGroup* current = txn.FindPg(id);
    if (current == nullptr) continue;
    if (blocker && Waits(current->state)) {
      std::string reason = BlockedBy(*blocker);
      if (current->reason != reason) {
        PlacementGroup g = *current;
        g.reason = std::move(reason);
        put_reason(g);
      }
      continue;
    }
    // A RESCHEDULING group keeps what survived; re-place the rest. Only
    // groups that ask their own request and wait for no victims share
    // decisions.
    const bool rescheduling = current->state == PgState::kRescheduling;
    const bool shares = !rescheduling && current->preempting.empty();
    const Decision* same = nullptr;
    if (shares) {
      auto snapshot = txn.Snapshot();
      if (!snapshot.ok()) continue;
      same = failed.Find(*snapshot, *current);
    }
    const bool searches_now = same != nullptr &&
                              same->outcome == Decision::kUnschedulable &&
                              may_search(*current, true);
    if (same != nullptr && !searches_now &&
        current->reason == same->diagnosis.summary &&
        current->state == StateIfNotPlaced(*current, *same)) {
      // Decided as before, and nothing to write: no copy of the group.
      if (IsStarving(*current, txn.now())) blocker = *current;
      continue;
    }
    PlacementGroup g = *current;
    // `current` may point into this op's own changes (a later pass, or a
    // group this op changed before), which the writes below may move:
    // what is compared afterwards is kept here, and `current` not read.
    const PgState state_before = g.state;
    const std::string reason_before = g.reason;
    const std::vector<std::string> preempting_before = g.preempting;
    current = nullptr;
    Decision solved;
    if (same != nullptr) {
      NotPlaced(txn, *same, g);
    } else {
      auto d = TryPlace(txn, g,
                        rescheduling ? ReplacementRequest(g, {}) : g.request);
      if (!d.ok()) continue;
      solved = *std::move(d);
      if (shares && solved.outcome != Decision::kPlaced) {
        failed.Add(g, solved);
      }
    }
    const Decision& d = same != nullptr ? *same : solved;
    if (d.outcome == Decision::kPlaced) {
      // Placed without its victims: they stay.
      if (!CancelPreemption(txn, g).ok()) continue;
    } else if (!g.preempting.empty()) {
      g.reason = reason_before;  // still waits for its victims
    } else if (d.outcome == Decision::kUnschedulable && may_search(g, shares)) {
      auto searched = StartPreemption(txn, g);
      if (!searched.ok()) continue;
      if (*searched == Search::kStarted) --searches;
      if (*searched == Search::kNoPlan) {
        --fruitless;
        if (shares) failed.AddNoPlan(g);
      }
    }
    if (IsStarving(g, txn.now())) blocker = g;
    if (d.outcome == Decision::kPlaced || g.state != state_before ||
        g.preempting != preempting_before) {
      txn.PutPg(g);
    } else if (g.reason != reason_before) {
      put_reason(g);
    }
  }
  return true;
}

absl::Status PlacementManager::RescheduleLost(
    Txn& txn, const PlacementGroup& current,
    const absl::btree_set<std::string>& lost) {
  PlacementGroup g = current;
  if (g.state == PgState::kPreempting) {
    // It is leaving (at its deadline, or as soon as its preemptor's other
    // victims are gone): placed again, it would escape its preemption and
    // could take the capacity its preemptor waits for. Its bundles on the
    // lost nodes are released now, the rest when it leaves; removed by its
    // owner meanwhile, it goes now.
    scheduler::SnapshotDelta release;
    release.release_pg_ids.push_back(g.id);
    absl::btree_set<std::string> its_lost;
    for (size_t i = 0; i < g.bundles.size(); ++i) {
      PlacedBundle& b = g.bundles[i];
      if (lost.contains(b.node_id)) {
        its_lost.insert(b.node_id);
        b.node_id.clear();
      }
      if (g.removed || b.node_id.empty()) continue;
      release.add_allocations.push_back(scheduler::Allocation{
          g.id, static_cast<int>(i), b.node_id, b.resources});
    }
    RETURN_IF_ERROR(txn.ApplyDelta(std::move(release)));
    if (g.removed) {
      txn.DeletePg(g.id);
      return absl::OkStatus();
    }
    g.update_time = txn.now();
    g.reason = absl::StrCat(current.reason, "; lost node(s) ",
                            absl::StrJoin(its_lost, ", "));
    txn.PutPg(g);
    return absl::OkStatus();
  }
  g.preemption_deadline = absl::InfinitePast();
  const PlacementRequest request = ReplacementRequest(g, lost);
  // Release everything; a plain group keeps its surviving bundles by
  // pinning them, a slice group is re-placed whole elsewhere.
  scheduler::SnapshotDelta release;
  release.release_pg_ids.push_back(g.id);
  for (size_t i = 0; i < request.bundles.size(); ++i) {
    const scheduler::Bundle& b = request.bundles[i];
    if (b.pinned_node_id.empty()) continue;
    release.add_allocations.push_back(scheduler::Allocation{
        g.id, static_cast<int>(i), b.pinned_node_id, b.resources});
  }
  RETURN_IF_ERROR(txn.ApplyDelta(std::move(release)));
  g.state = PgState::kRescheduling;
  g.queued_time = g.update_time = txn.now();
  absl::btree_set<std::string> its_lost;  // of `lost`, the ones it was on
  for (PlacedBundle& b : g.bundles) {
    if (lost.contains(b.node_id)) its_lost.insert(b.node_id);
    if (g.request.slice || lost.contains(b.node_id)) b.node_id.clear();
  }
  g.slice_names.clear();
  g.placement_note.clear();
  g.reason = absl::StrCat("lost node(s) ", absl::StrJoin(its_lost, ", "));
  txn.NotifyIntermediate(g);
  ASSIGN_OR_RETURN(Decision d, TryPlace(txn, g, request));
  (void)d;
  txn.PutPg(g);
  return absl::OkStatus();
}

absl::Status PlacementManager::HandleNodesLost(
    Txn& txn, const std::vector<std::string>& node_ids) {
  absl::btree_set<std::string> lost(node_ids.begin(), node_ids.end());
  absl::btree_set<std::string> affected;
  for (const std::string& node : node_ids) {
    for (std::string& pg : txn.PgsOnNode(node)) affected.insert(std::move(pg));
  }
  // Re-placed in queue order, the highest priority first (then the oldest):
  // a group that lost a node waits RESCHEDULING and preempts nothing, so
  // one re-placed after a lower-priority one that took the room would wait
  // behind it.
  std::vector<std::pair<int32_t, const std::string*>> order;
  order.reserve(affected.size());
  for (const std::string& id : affected) {
    if (const PlacementGroup* g = txn.FindPg(id)) {
      order.emplace_back(g->priority, &id);
    }
  }
  std::stable_sort(
      order.begin(), order.end(),
      [](const auto& a, const auto& b) { return a.first > b.first; });
  for (const auto& [priority, id] : order) {
    const PlacementGroup* current = txn.FindPg(*id);
    if (current == nullptr) continue;
    RETURN_IF_ERROR(RescheduleLost(txn, *current, lost));
  }
  return absl::OkStatus();
}

// ---------------------------------------------------------------- reads

absl::StatusOr<PlacementGroupView> PlacementManager::Get(
    absl::string_view pg_id) const {
  return cluster_->Read(
      [&](const ClusterState& s) -> absl::StatusOr<PlacementGroupView> {
        const PlacementGroup* g = s.pgs.Find(pg_id);
        if (g == nullptr) return PgNotFound(pg_id);
        return ViewOf(*g, *s.snapshot);
      });
}

std::vector<PlacementGroupView> PlacementManager::List(
    const ListFilter& filter, absl::string_view after, int limit,
    std::string* next) const {
  bool more = false;
  const CurrentState page = Collect(filter, after, limit, &more);
  if (next != nullptr) *next = more ? page.groups.back()->id : "";
  std::vector<PlacementGroupView> out;
  out.reserve(page.groups.size());
  for (const auto& g : page.groups) out.push_back(ViewOf(*g, *page.snapshot));
  return out;
}

PlacementManager::CurrentState PlacementManager::Collect(
    const ListFilter& filter, absl::string_view after, int limit,
    bool* more_out) const {
  std::vector<std::shared_ptr<const PlacementGroup>> page;
  std::shared_ptr<const scheduler::InventorySnapshot> snapshot;
  bool more = false;
  // Takes `g` unless the filter's state drops it; false once the page is
  // full.
  auto take = [&](const std::shared_ptr<const PlacementGroup>& g) {
    if (filter.state && g->state != *filter.state) return true;
    if (limit > 0 && static_cast<int>(page.size()) == limit) {
      more = true;
      return false;
    }
    page.push_back(g);
    return true;
  };
  cluster_->Read([&](const ClusterState& s) {
    snapshot = s.snapshot;
    if (!filter.placement_group_id.empty()) {
      // One group, if it matches.
      auto g = s.pgs.Share(filter.placement_group_id);
      if (g != nullptr && absl::string_view(g->id) > after &&
          (filter.job_id.empty() || g->job_id == filter.job_id)) {
        take(g);
      }
      return 0;
    }
    if (filter.job_id.empty() && filter.state) {
      // A state's groups from the index, in id order, past `after`.
      for (auto it =
               s.pgs_by_state.upper_bound({*filter.state, std::string(after)});
           it != s.pgs_by_state.end() && it->first == *filter.state; ++it) {
        if (!take(s.pgs.Share(it->second))) break;
      }
      return 0;
    }
    if (filter.job_id.empty()) {
      s.pgs.ForEachShared(take, after);
      return 0;
    }
    // A job's groups from the index, in id order, past `after`.
    for (auto it =
             s.pgs_by_job.upper_bound({filter.job_id, std::string(after)});
         it != s.pgs_by_job.end() && it->first == filter.job_id; ++it) {
      if (!take(s.pgs.Share(it->second))) break;
    }
    return 0;
  });
  if (more_out != nullptr) *more_out = more;
  return CurrentState{std::move(page), std::move(snapshot)};
}

PlacementManager::Explanation PlacementManager::ExplainGroup(
    const ClusterState& state, const PlacementGroup& group,
    std::optional<PreemptionWhatIf>& what_if) const {
  Explanation out;
  if (HoldsCapacity(group.state) && group.state != PgState::kRescheduling) {
    // Nothing to explain: say where it is.
    out.outcome = std::string(scheduler::OutcomeName(Decision::kPlaced));
    absl::btree_set<std::string> nodes;
    for (const PlacedBundle& b : group.bundles) {
      // (A PREEMPTING group that lost a node keeps the rest until it leaves.)
      if (!b.node_id.empty()) nodes.insert(b.node_id);
      out.bundle_nodes.push_back(b.node_id);
    }
    out.summary = absl::StrCat(
        PgStateName(group.state), ": holds ", group.bundles.size(),
        " bundle(s) on ", nodes.size(), " node(s)",
        group.slice_names.empty()
            ? ""
            : absl::StrCat(", slices ", absl::StrJoin(group.slice_names, ", ")),
        group.placement_note.empty() ? "" : "; ", group.placement_note);
    if (group.state == PgState::kPreempting) {
      out.details.push_back(group.reason);
    }
    return out;
  }
  const ComputeClass* cls = nullptr;
  if (auto it = state.classes.find(group.compute_class);
      it != state.classes.end()) {
    cls = &it->second;
  }
  // The request the queue would solve: a RESCHEDULING group's survivors
  // pinned, the daemon's flags applied.
  PlacementRequest request = group.state == PgState::kRescheduling
                                 ? ReplacementRequest(group, {})
                                 : group.request;
  if (cls != nullptr) request.priorities = cls->priorities;
  ApplyFlags(request);
  Decision d = scheduler::Solve(*state.snapshot, request);
  out.outcome = std::string(scheduler::OutcomeName(d.outcome));
  out.summary = d.diagnosis.summary;
  for (const scheduler::DiagnosisStep& step : d.diagnosis.steps) {
    std::string line = absl::StrCat(step.step, ": ", step.accepted, "/",
                                    step.considered, " accepted");
    for (const scheduler::Rejection& r : step.rejected) {
      absl::StrAppend(&line, ", ", r.count, " ", r.reason);
    }
    out.details.push_back(std::move(line));
  }
  out.bundle_nodes = d.bundle_nodes;
  const absl::Time now = coordinator_->Now();
  // Behind a starving group it is not tried (a create is not placed), and
  // it preempts nothing.
  if (d.outcome != Decision::kInfeasible) {
    if (const PlacementGroup* starving = StarvingAhead(state, group, now)) {
      const std::string blocked = BlockedBy(*starving);
      out.summary = d.outcome == Decision::kPlaced
                        ? absl::StrCat("would fit now (", d.diagnosis.summary,
                                       "), but it is ", blocked)
                        : absl::StrCat(blocked, "; ", d.diagnosis.summary);
      out.outcome =
          std::string(scheduler::OutcomeName(Decision::kUnschedulable));
      out.bundle_nodes.clear();
      return out;
    }
  }
  if (d.outcome != Decision::kUnschedulable) return out;
  if (!group.preempting.empty()) {
    out.details.push_back(absl::StrCat(
        "preemption: waiting for ", absl::StrJoin(group.preempting, ", "),
        " to leave (by ", TimeString(group.preemption_deadline), ")"));
    return out;
  }
  if (group.state == PgState::kRescheduling) {
    // StartPreemption: only PENDING groups preempt. (No what-if, nor a walk
    // of every group for it: a plan for its whole request would count its
    // own surviving bundles as held.)
    out.details.push_back(
        "preemption: only PENDING groups preempt (this one is RESCHEDULING), "
        "so it waits for capacity to free");
    return out;
  }
  std::vector<scheduler::VictimCandidate> candidates;
  int cooling = 0;  // would be candidates but for the cool-down
  state.pgs.ForEach([&](const PlacementGroup& g) {
    if (MayPreempt(group, g, now)) {
      candidates.push_back({g.id, g.priority, g.sequence, g.priority_class});
    } else if (MayPreempt(group, g, absl::InfiniteFuture())) {
      ++cooling;
    }
    return true;
  });
  if (cooling > 0) {
    out.details.push_back(absl::StrCat(
        "preemption: ", cooling,
        " running group(s) of lower priority were placed less than ",
        absl::FormatDuration(options_.preemption_cooldown),
        " ago (--preemption_cooldown) and are not victims yet"));
  }
  if (candidates.empty()) return out;
  std::string prefix = "preemption: ";
  if (!options_.preemption) {
    prefix = "preemption is off (--preemption=false), so it waits; ";
  } else if (group.preemption_policy == PreemptionPolicy::kNever) {
    prefix = "preemption_policy NEVER, so it waits; ";
  }
  what_if = PreemptionWhatIf{state.snapshot, std::move(request),
                             std::move(candidates), std::move(prefix)};
  return out;
}

void PlacementManager::AddPreemptionWhatIf(const PreemptionWhatIf& what_if,
                                           Explanation& out) {
  const scheduler::PreemptionPlan plan = scheduler::PlanPreemption(
      *what_if.snapshot, what_if.request, what_if.candidates);
  out.details.push_back(absl::StrCat(what_if.prefix, plan.summary));
}

absl::StatusOr<PlacementManager::Explanation> PlacementManager::Explain(
    absl::string_view pg_id) const {
  std::optional<PreemptionWhatIf> what_if;
  absl::StatusOr<Explanation> out =
      cluster_->Read([&](const ClusterState& s) -> absl::StatusOr<Explanation> {
        const PlacementGroup* g = s.pgs.Find(pg_id);
        if (g == nullptr) return PgNotFound(pg_id);
        return ExplainGroup(s, *g, what_if);
      });
  if (out.ok() && what_if.has_value()) AddPreemptionWhatIf(*what_if, *out);
  return out;
}

absl::StatusOr<PlacementManager::Explanation> PlacementManager::ExplainDryRun(
    const PgSpec& spec) const {
  PlacementGroup group = spec.group;
  RETURN_IF_ERROR(
      options_.priority_classes.Resolve(group.priority_class, group.priority));
  std::optional<PreemptionWhatIf> what_if;
  absl::StatusOr<Explanation> out =
      cluster_->Read([&](const ClusterState& s) -> absl::StatusOr<Explanation> {
        const std::string& cls = group.compute_class;
        if (!cls.empty() && !s.classes.contains(cls)) {
          return ClassNotFound(cls);
        }
        return ExplainGroup(s, group, what_if);
      });
  if (out.ok() && what_if.has_value()) AddPreemptionWhatIf(*what_if, *out);
  return out;
}

// ---------------------------------------------------------------- watch

void PlacementManager::Watch(Watcher* watcher) {
  absl::MutexLock lock(&watch_mu_);
  watchers_.insert(watcher);
  // Under watch_mu_, so that no change is published between the current
  // state and the watcher's registration.
  cluster_->Read([&](const ClusterState& s) {
    s.pgs.ForEach([&](const PlacementGroup& g) {
      std::optional<PlacementGroupView> view;
      watcher->Deliver(g, [&]() -> const PlacementGroupView& {
        if (!view) view = ViewOf(g, *s.snapshot);
        return *view;
      });
      return true;
    });
    return 0;
  });
}

void PlacementManager::WatchChanges(Watcher* watcher) {
  absl::MutexLock lock(&watch_mu_);
  watchers_.insert(watcher);
}

PlacementManager::CurrentState PlacementManager::WithCurrentState(
    const ListFilter& filter, absl::FunctionRef<void()> subscribe) {
  absl::MutexLock lock(&watch_mu_);
  CurrentState current = Collect(filter);
  subscribe();
  return current;
}

void PlacementManager::Unwatch(Watcher* watcher) {
  absl::MutexLock lock(&watch_mu_);
  watchers_.erase(watcher);
}

void PlacementManager::Publish(absl::FunctionRef<void()> install) {
  absl::MutexLock lock(&watch_mu_);
  install();
}

void PlacementManager::Published(const std::vector<Change>& changed,
                                 const scheduler::InventorySnapshot& snapshot) {
  watch_mu_.AssertHeld();  // Publish()
  LogChanges(changed);
  for (const Change& c : changed) {
    const PlacementGroup& g = *c.group;
    if (g.state == PgState::kPreempting) {
      preempting_.insert(g.id);
    } else if (preempting_.erase(g.id) > 0 && decisions_ != nullptr) {
      decisions_->OnPreemption(g, PreemptionOutcome(g.state));
    }
  }
  for (const Change& c : changed) {
    std::optional<PlacementGroupView> view;  // built once, if wanted
    auto build = [&]() -> const PlacementGroupView& {
      if (!view) view = ViewOf(*c.group, snapshot);
      return *view;
    };
    for (Watcher* w : watchers_) w->Deliver(*c.group, build);
  }
}

void PlacementManager::Restored() {
  SeedPreempting();
  absl::MutexLock lock(&watch_mu_);
  for (Watcher* w : watchers_) w->Restored();
}

void PlacementManager::Answered() {
  absl::MutexLock lock(&watch_mu_);
  for (Watcher* w : watchers_) w->Flush();
}

void PlacementManager::LogChanges(const std::vector<Change>& changed) {
  Logger* log = options_.log;
  if (log == nullptr || !log->enabled(Logger::Level::kInfo)) return;
  std::vector<std::pair<Logger::Level, std::string>> lines;
  lines.reserve(changed.size());
  for (const Change& c : changed) {
    const bool state_changed = c.before != c.group->state;
    if (!state_changed && !log->enabled(Logger::Level::kDebug)) continue;
    lines.emplace_back(
        state_changed ? Logger::Level::kInfo : Logger::Level::kDebug,
        GroupChangeLine(*c.group));
  }
  log->LogAll(lines);
}

// ---------------------------------------------------------------- classes

void PlacementManager::PutClass(ComputeClass cls, Done done) {
  coordinator_->Submit(WriteOp{[cls = std::move(cls)](Txn& txn) {
                                 txn.PutClass(cls);
                                 return absl::OkStatus();
                               },
                               std::move(done)});
}

void PlacementManager::DeleteClass(const std::string& name, Done done) {
  coordinator_->Submit(WriteOp{
      [name](Txn& txn) {
        if (txn.FindClass(name) == nullptr) {
          return absl::NotFoundError(
              absl::StrCat("name: no compute class ", Quote(name)));
        }
        if (txn.AnyPg([&](const PlacementGroup& g) {
              return g.compute_class == name;
            })) {
          return absl::FailedPreconditionError(absl::StrCat(
              "name: compute class \"", name,
              "\" is used by live placement groups; remove them first"));
        }
        txn.DeleteClass(name);
        return absl::OkStatus();
      },
      std::move(done)});
}

std::vector<ComputeClass> PlacementManager::ListClasses() const {
  return cluster_->Read([](const ClusterState& s) {
    std::vector<ComputeClass> out;
    for (const auto& [name, cls] : s.classes) out.push_back(cls);
    return out;
  });
}

}  // namespace sliced::server
