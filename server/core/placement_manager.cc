#include "server/core/placement_manager.h"

#include <algorithm>
#include <iterator>
#include <memory>
#include <utility>

#include "absl/container/btree_set.h"
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
  std::string line = absl::StrCat("placement group ", g.id);
  if (!g.job_id.empty()) absl::StrAppend(&line, " (job ", Quote(g.job_id), ")");
  absl::StrAppend(&line, " ", PgStateName(g.state));
  if (g.state == PgState::kCreated) {
    if (!g.slice_names.empty()) {
      absl::StrAppend(&line, ": placed on slice(s) ",
                      absl::StrJoin(g.slice_names, ", "));
    } else {
      absl::btree_set<std::string> nodes;
      for (const PlacedBundle& b : g.bundles) nodes.insert(b.node_id);
      constexpr size_t kMaxNamed = 8;
      std::vector<std::string> named(
          nodes.begin(),
          std::next(nodes.begin(), std::min(nodes.size(), kMaxNamed)));
      absl::StrAppend(&line, ": placed on node(s) ", absl::StrJoin(named, ", "),
                      nodes.size() > kMaxNamed
                          ? absl::StrCat(", ... (", nodes.size(), " nodes)")
                          : "");
    }
  } else if (!g.reason.empty()) {
    absl::StrAppend(&line, ": ", g.reason);
  }
  return line;
}

bool Waits(const PlacementGroup& g) {
  return g.state == PgState::kPending || g.state == PgState::kRescheduling;
}

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

// The request that re-places `group` after node loss: its bundle list in
// use as the primary, surviving bundles of a plain group pinned (a slice
// group is re-placed whole), its own allocations counted as free.
PlacementRequest ReplacementRequest(const PlacementGroup& group,
                                    const absl::btree_set<std::string>& lost) {
  PlacementRequest request = group.request;
  request.bundles.clear();
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
      decisions_(decisions) {}

// ---------------------------------------------------------------- solving

absl::StatusOr<Decision> PlacementManager::TryPlace(
    Txn& txn, PlacementGroup& group, const PlacementRequest& asked) {
  ASSIGN_OR_RETURN(PlacementRequest request,
                   WithPriorities(asked, group.compute_class,
                                  txn.FindClass(group.compute_class)));
  if (!options_.subslicing && request.slice.has_value()) {
    request.slice->subslicing = scheduler::Subslicing::kNever;
  }
  ASSIGN_OR_RETURN(auto snapshot, txn.Snapshot());
  const absl::Time start = absl::Now();
  Decision d = scheduler::Solve(*snapshot, request);
  if (decisions_ != nullptr) decisions_->OnDecision(d, absl::Now() - start);
  group.update_time = txn.now();
  if (d.outcome != Decision::kPlaced) {
    // The state says PENDING or INFEASIBLE; the reason says why.
    group.reason = d.diagnosis.summary;
    if (group.state == PgState::kPending ||
        group.state == PgState::kInfeasible) {
      group.state = d.outcome == Decision::kInfeasible ? PgState::kInfeasible
                                                       : PgState::kPending;
    }
    return d;
  }
  std::vector<scheduler::Bundle> bundles = UsedBundles(request, d);
  scheduler::SnapshotDelta delta;
  if (!request.replacing_pg_id.empty())
    delta.release_pg_ids.push_back(group.id);
  group.bundles.clear();
  for (size_t i = 0; i < bundles.size(); ++i) {
    delta.add_allocations.push_back(
        scheduler::Allocation{group.id, static_cast<int>(i), d.bundle_nodes[i],
                              bundles[i].resources});
    group.bundles.push_back(PlacedBundle{
        bundles[i].resources, bundles[i].selector, d.bundle_nodes[i]});
  }
  RETURN_IF_ERROR(txn.ApplyDelta(delta));
  group.slice_names = d.slice_names;
  group.state = PgState::kCreated;
  group.reason.clear();
  group.priority_index = d.priority_index;
  group.fallback_index = d.fallback_index;
  return d;
}

bool PlacementManager::IsStarving(const PlacementGroup& g,
                                  absl::Time now) const {
  return Waits(g) && options_.starvation_bound > absl::ZeroDuration() &&
         now - g.queued_time >= options_.starvation_bound;
}

std::string PlacementManager::BlockedBy(const PlacementGroup& starving) const {
  return absl::StrCat("PENDING: waiting behind ", starving.id,
                      ", which has waited over ",
                      absl::FormatDuration(options_.starvation_bound),
                      " and claims capacity first");
}

const PlacementGroup* PlacementManager::Starving(
    Txn& txn, const std::vector<std::string>& queue, int32_t priority) const {
  if (options_.starvation_bound <= absl::ZeroDuration()) return nullptr;
  for (const std::string& id : queue) {
    const PlacementGroup* pg = txn.FindPg(id);
    if (pg->priority < priority) break;
    if (IsStarving(*pg, txn.now())) return pg;
  }
  return nullptr;
}

// ---------------------------------------------------------------- create

absl::Status PlacementManager::CreateInTxn(Txn& txn, PgSpec& spec) {
  PlacementGroup& g = spec.group;
  RETURN_IF_ERROR(
      options_.priority_classes.Resolve(g.priority_class, g.priority));
  if (!g.request_id.empty()) {
    if (const PlacementGroup* existing = txn.FindPgByRequestId(g.request_id)) {
      g = *existing;
      return absl::OkStatus();
    }
  }
  g.sequence = txn.NextSequence();
  g.id = absl::StrFormat("pg-%012x", g.sequence);
  g.state = PgState::kPending;
  g.create_time = g.update_time = g.queued_time = txn.now();
  // Queued groups go first: if an earlier op of this group freed capacity,
  // re-try the queue before this newcomer can take it. A new group then
  // backfills beside the queued ones, unless one of at least its priority
  // starves.
  if (txn.PendingRetryRequested()) RetryQueue(txn);
  const std::vector<std::string> queue = txn.PendingQueue();
  const bool room = static_cast<int>(queue.size()) < options_.max_pending;
  const absl::Status full = absl::ResourceExhaustedError(absl::StrCat(
      "the pending queue is full (", options_.max_pending,
      " groups); nothing was created. Retry later or remove waiting groups"));
  if (const PlacementGroup* starving = Starving(txn, queue, g.priority)) {
    if (!room) return full;
    g.reason = BlockedBy(*starving);
    txn.PutPg(g);
    return absl::OkStatus();
  }
  ASSIGN_OR_RETURN(Decision d, TryPlace(txn, g, g.request));
  if (d.outcome != Decision::kPlaced && !g.compute_class.empty()) {
    const ComputeClass* cls = txn.FindClass(g.compute_class);
    if (cls != nullptr && cls->when_unsatisfiable == WhenUnsatisfiable::kFail) {
      return absl::FailedPreconditionError(absl::StrCat(
          "compute class \"", g.compute_class,
          "\" says FAIL and no priority holds the whole gang now: ",
          d.diagnosis.summary));
    }
  }
  if (d.outcome != Decision::kPlaced && !room) return full;
  txn.PutPg(g);
  return absl::OkStatus();
}

void PlacementManager::Create(PgSpec spec, ViewDone done) {
  SubmitForValue<PlacementGroupView>(
      *coordinator_,
      [this, spec = std::move(spec)](Txn& txn,
                                     PlacementGroupView& view) mutable {
        RETURN_IF_ERROR(CreateInTxn(txn, spec));
        ASSIGN_OR_RETURN(auto snapshot, txn.Snapshot());
        view = ViewOf(spec.group, *snapshot);
        return absl::OkStatus();
      },
      std::move(done));
}

void PlacementManager::Remove(const std::string& pg_id, Done done) {
  coordinator_->Submit(WriteOp{[pg_id](Txn& txn) {
                                 if (txn.FindPg(pg_id) == nullptr)
                                   return PgNotFound(pg_id);
                                 scheduler::SnapshotDelta delta;
                                 delta.release_pg_ids.push_back(pg_id);
                                 RETURN_IF_ERROR(txn.ApplyDelta(delta));
                                 txn.DeletePg(pg_id);
                                 return absl::OkStatus();
                               },
                               std::move(done)});
}

// ---------------------------------------------------------------- the queue

void PlacementManager::RetryQueue(Txn& txn) {
  txn.MarkQueueRetried();
  std::optional<PlacementGroup> blocker;  // a starving group not placed
  for (const std::string& id : txn.PendingQueue()) {
    const PlacementGroup* current = txn.FindPg(id);
    if (current == nullptr) continue;
    PlacementGroup g = *current;
    if (blocker && Waits(g)) {
      std::string reason = BlockedBy(*blocker);
      if (g.reason != reason) {
        g.reason = std::move(reason);
        txn.PutPg(g);
      }
      continue;
    }
    // A RESCHEDULING group keeps what survived; re-place the rest.
    auto d =
        TryPlace(txn, g,
                 g.state == PgState::kRescheduling ? ReplacementRequest(g, {})
                                                   : g.request);
    if (!d.ok()) continue;
    if (d->outcome != Decision::kPlaced && IsStarving(g, txn.now())) {
      blocker = g;
    }
    if (d->outcome == Decision::kPlaced || g.state != current->state ||
        g.reason != current->reason) {
      txn.PutPg(g);
    }
  }
}

absl::Status PlacementManager::RescheduleLost(
    Txn& txn, const PlacementGroup& current,
    const absl::btree_set<std::string>& lost) {
  PlacementGroup g = current;
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
  RETURN_IF_ERROR(txn.ApplyDelta(release));
  g.state = PgState::kRescheduling;
  g.queued_time = g.update_time = txn.now();
  absl::btree_set<std::string> its_lost;  // of `lost`, the ones it was on
  for (PlacedBundle& b : g.bundles) {
    if (lost.contains(b.node_id)) its_lost.insert(b.node_id);
    if (g.request.slice || lost.contains(b.node_id)) b.node_id.clear();
  }
  g.slice_names.clear();
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
  for (const std::string& id : affected) {
    const PlacementGroup* current = txn.FindPg(id);
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
        auto it = s.pgs.find(pg_id);
        if (it == s.pgs.end()) return PgNotFound(pg_id);
        return ViewOf(it->second, *s.snapshot);
      });
}

std::vector<PlacementGroupView> PlacementManager::List(
    const ListFilter& filter) const {
  return cluster_->Read([&](const ClusterState& s) {
    std::vector<PlacementGroupView> out;
    for (const auto& [id, g] : s.pgs) {
      if (!filter.job_id.empty() && g.job_id != filter.job_id) continue;
      if (filter.state && g.state != *filter.state) continue;
      out.push_back(ViewOf(g, *s.snapshot));
    }
    return out;
  });
}

PlacementManager::Explanation PlacementManager::ExplainGroup(
    const ClusterState& state, const PlacementGroup& group,
    std::optional<PreemptionWhatIf>& what_if) const {
  Explanation out;
  if (group.state == PgState::kCreated) {
    // Nothing to explain: say where it is.
    out.outcome = std::string(scheduler::OutcomeName(Decision::kPlaced));
    absl::btree_set<std::string> nodes;
    for (const PlacedBundle& b : group.bundles) {
      nodes.insert(b.node_id);
      out.bundle_nodes.push_back(b.node_id);
    }
    out.summary = absl::StrCat(
        "CREATED: holds ", group.bundles.size(), " bundle(s) on ", nodes.size(),
        " node(s)",
        group.slice_names.empty()
            ? ""
            : absl::StrCat(", slices ",
                           absl::StrJoin(group.slice_names, ", ")));
    return out;
  }
  const ComputeClass* cls = nullptr;
  if (auto it = state.classes.find(group.compute_class);
      it != state.classes.end()) {
    cls = &it->second;
  }
  PlacementRequest request = group.request;
  if (cls != nullptr) request.priorities = cls->priorities;
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
  if (d.outcome == Decision::kUnschedulable) {
    std::vector<scheduler::VictimCandidate> candidates;
    for (const auto& [id, g] : state.pgs) {
      const PriorityClass* cls =
          options_.priority_classes.Find(g.priority_class);
      if (g.state == PgState::kCreated && g.priority < group.priority &&
          id != group.id && (cls == nullptr || cls->preemptible)) {
        candidates.push_back({id, g.priority, g.sequence, g.priority_class});
      }
    }
    if (!candidates.empty()) {
      what_if = PreemptionWhatIf{state.snapshot, std::move(request),
                                 std::move(candidates)};
    }
  }
  return out;
}

void PlacementManager::AddPreemptionWhatIf(const PreemptionWhatIf& what_if,
                                           Explanation& out) {
  const scheduler::PreemptionPlan plan = scheduler::PlanPreemption(
      *what_if.snapshot, what_if.request, what_if.candidates);
  out.details.push_back(absl::StrCat(
      "what-if (sliced does not preempt yet, docs/preemption.md): ",
      plan.summary));
}

absl::StatusOr<PlacementManager::Explanation> PlacementManager::Explain(
    absl::string_view pg_id) const {
  std::optional<PreemptionWhatIf> what_if;
  absl::StatusOr<Explanation> out =
      cluster_->Read([&](const ClusterState& s) -> absl::StatusOr<Explanation> {
        auto it = s.pgs.find(pg_id);
        if (it == s.pgs.end()) return PgNotFound(pg_id);
        return ExplainGroup(s, it->second, what_if);
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
    for (const auto& [id, g] : s.pgs) watcher->Deliver(ViewOf(g, *s.snapshot));
    return 0;
  });
}

void PlacementManager::Unwatch(Watcher* watcher) {
  absl::MutexLock lock(&watch_mu_);
  watchers_.erase(watcher);
}

void PlacementManager::Published(const std::vector<PlacementGroup>& changed,
                                 const scheduler::InventorySnapshot& snapshot) {
  LogChanges(changed);
  std::vector<PlacementGroupView> views;
  views.reserve(changed.size());
  for (const PlacementGroup& g : changed) views.push_back(ViewOf(g, snapshot));
  absl::MutexLock lock(&watch_mu_);
  for (Watcher* w : watchers_) {
    for (const PlacementGroupView& view : views) w->Deliver(view);
  }
}

void PlacementManager::LogChanges(const std::vector<PlacementGroup>& changed) {
  Logger* log = options_.log;
  if (log == nullptr || !log->enabled(Logger::Level::kInfo)) return;
  for (const PlacementGroup& g : changed) {
    auto [it, fresh] = logged_states_.try_emplace(g.id, g.state);
    const bool state_changed = fresh || it->second != g.state;
    it->second = g.state;
    if (g.state == PgState::kRemoved) logged_states_.erase(it);
    if (!state_changed && !log->enabled(Logger::Level::kDebug)) continue;
    log->Log(state_changed ? Logger::Level::kInfo : Logger::Level::kDebug,
             GroupChangeLine(g));
  }
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
