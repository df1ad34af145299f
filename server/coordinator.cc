#include "server/coordinator.h"

#include <pthread.h>

#include <algorithm>
#include <cstdio>
#include <tuple>
#include <utility>

#include "absl/container/btree_set.h"
#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "sliced/v1/sliced.pb.h"
#include "storage/records.h"

namespace sliced::server {
namespace {

// Looks `key` up in the op's changes, then the group's, then committed state.
template <typename T, typename Committed>
const T* Lookup(absl::string_view key, const Changes<T>& own,
                const Changes<T>& group, const Committed& committed) {
  for (const Changes<T>* changes : {&own, &group}) {
    auto it = changes->find(key);
    if (it != changes->end()) return it->second ? &*it->second : nullptr;
  }
  auto it = committed.find(key);
  return it == committed.end() ? nullptr : &it->second;
}

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

// Groups the queue re-tries: waiting ones, and infeasible ones (the
// inventory may since have gained the shape they need).
bool IsPending(const storage::PlacementGroupRecord& r) {
  return r.state() == v1::PENDING || r.state() == v1::RESCHEDULING ||
         r.state() == v1::INFEASIBLE;
}

std::tuple<int64_t, uint64_t, std::string> QueueKey(
    const storage::PlacementGroupRecord& r) {
  // Priority descending, then arrival.
  return {-int64_t{r.priority()}, r.sequence(), r.placement_group_id()};
}

bool HoldsAllocations(const storage::PlacementGroupRecord& r) {
  return r.state() == v1::CREATED || r.state() == v1::RESCHEDULING;
}

}  // namespace

// ---------------------------------------------------------------- Txn

const NodeEntry* Txn::FindNode(absl::string_view node_id) const {
  return Lookup(node_id, own_.nodes, group_.nodes, committed_.nodes);
}

void Txn::PutNode(const NodeEntry& entry) {
  mutation_.PutNode(storage::ToRecord(entry.node));
  const NodeEntry* old = FindNode(entry.node.node_id);
  if (old == nullptr || !(old->node == entry.node)) {
    pending_nodes_.upsert_nodes.push_back(entry.node);
  }
  own_.nodes[entry.node.node_id] = entry;
  // A new or revived node may let pending groups fit.
  if (old == nullptr || entry.node.state == scheduler::NodeState::kAlive) {
    own_.retry_pending = true;
  }
}

void Txn::TouchNode(const NodeEntry& entry) {
  own_.nodes[entry.node.node_id] = entry;
}

void Txn::RemoveNode(absl::string_view node_id) {
  mutation_.DeleteNode(node_id);
  pending_nodes_.remove_node_ids.emplace_back(node_id);
  own_.nodes[std::string(node_id)] = std::nullopt;
}

const PgEntry* Txn::FindPg(absl::string_view pg_id) const {
  return Lookup(pg_id, own_.pgs, group_.pgs, committed_.pgs);
}

const PgEntry* Txn::FindPgByRequestId(absl::string_view request_id) const {
  for (const Changes<PgEntry>* changes : {&own_.pgs, &group_.pgs}) {
    for (const auto& [id, change] : *changes) {
      if (change && change->record.request_id() == request_id) return &*change;
    }
  }
  auto it = committed_.pg_by_request_id.find(request_id);
  return it == committed_.pg_by_request_id.end() ? nullptr : FindPg(it->second);
}

void Txn::PutPg(const PgEntry& entry) {
  mutation_.PutPlacementGroup(entry.record);
  own_.pgs[entry.record.placement_group_id()] = entry;
}

void Txn::DeletePg(absl::string_view pg_id) {
  mutation_.DeletePlacementGroup(pg_id);
  own_.pgs[std::string(pg_id)] = std::nullopt;
}

std::vector<std::string> Txn::PendingQueue() const {
  absl::btree_set<std::tuple<int64_t, uint64_t, std::string>> queue;
  auto consider = [&](const std::string& id) {
    const PgEntry* pg = FindPg(id);
    if (pg != nullptr && IsPending(pg->record))
      queue.insert(QueueKey(pg->record));
  };
  for (const auto& [p, s, id] : committed_.queue) consider(id);
  for (const Changes<PgEntry>* changes : {&group_.pgs, &own_.pgs}) {
    for (const auto& [id, change] : *changes) consider(id);
  }
  std::vector<std::string> ids;
  for (const auto& [p, s, id] : queue) ids.push_back(id);
  return ids;
}

bool Txn::AnyPg(const std::function<bool(const PgEntry&)>& pred) const {
  for (const auto& [id, pg] : committed_.pgs) {
    const PgEntry* current = FindPg(id);
    if (current != nullptr && pred(*current)) return true;
  }
  for (const Changes<PgEntry>* changes : {&group_.pgs, &own_.pgs}) {
    for (const auto& [id, change] : *changes) {
      if (change && pred(*change)) return true;
    }
  }
  return false;
}

std::vector<std::string> Txn::PgsOnNode(absl::string_view node_id) {
  absl::btree_set<std::string> ids;
  auto snapshot = Snapshot();
  if (!snapshot.ok()) return {};
  int64_t index = (*snapshot)->NodeIndex(node_id);
  if (index < 0) return {};
  for (const scheduler::Allocation& a : (*snapshot)->node(index).allocations) {
    ids.insert(a.pg_id);
  }
  return {ids.begin(), ids.end()};
}

const storage::ComputeClassRecord* Txn::FindClass(
    absl::string_view name) const {
  return Lookup(name, own_.classes, group_.classes, committed_.classes);
}

void Txn::PutClass(const storage::ComputeClassRecord& record) {
  mutation_.PutComputeClass(record);
  own_.classes[record.name()] = record;
  own_.retry_pending = true;
}

void Txn::DeleteClass(absl::string_view name) {
  mutation_.DeleteComputeClass(name);
  own_.classes[std::string(name)] = std::nullopt;
  own_.retry_pending = true;
}

std::vector<storage::ComputeClassRecord> Txn::Classes() const {
  absl::btree_set<std::string> names;
  for (const auto& [name, record] : committed_.classes) names.insert(name);
  for (const auto* changes : {&group_.classes, &own_.classes}) {
    for (const auto& [name, change] : *changes) names.insert(name);
  }
  std::vector<storage::ComputeClassRecord> out;
  for (const std::string& name : names) {
    if (const auto* record = FindClass(name)) out.push_back(*record);
  }
  return out;
}

absl::Status Txn::FlushNodes() {
  if (pending_nodes_.upsert_nodes.empty() &&
      pending_nodes_.remove_node_ids.empty()) {
    return absl::OkStatus();
  }
  ASSIGN_OR_RETURN(own_.snapshot, own_.snapshot->Apply(pending_nodes_));
  pending_nodes_ = scheduler::SnapshotDelta();
  return absl::OkStatus();
}

absl::StatusOr<std::shared_ptr<const scheduler::InventorySnapshot>>
Txn::Snapshot() {
  RETURN_IF_ERROR(FlushNodes());
  return own_.snapshot;
}

absl::Status Txn::ApplyDelta(const scheduler::SnapshotDelta& delta) {
  RETURN_IF_ERROR(FlushNodes());
  ASSIGN_OR_RETURN(own_.snapshot, own_.snapshot->Apply(delta));
  if (!delta.release_pg_ids.empty()) own_.retry_pending = true;
  return absl::OkStatus();
}

uint64_t Txn::NextSequence() { return own_.next_sequence++; }

// ---------------------------------------------------------------- Coordinator

Coordinator::Coordinator(std::unique_ptr<storage::Store> store, Options options)
    : options_(std::move(options)), store_(std::move(store)) {}

absl::StatusOr<ClusterState> Coordinator::BuildState(
    const storage::StoredState& stored, const ClusterState* previous) const {
  const absl::Time now = Now();
  ClusterState state;
  std::vector<scheduler::Node> nodes;
  for (const storage::NodeRecord& record : stored.nodes) {
    ASSIGN_OR_RETURN(scheduler::Node node, storage::FromRecord(record));
    nodes.push_back(node);
    std::string id = node.node_id;
    absl::Time beat = now;  // a fresh lease after a restart
    if (previous != nullptr) {
      auto it = previous->nodes.find(id);
      if (it != previous->nodes.end()) beat = it->second.last_heartbeat;
    }
    state.nodes[id] = NodeEntry{std::move(node), beat};
  }
  std::vector<scheduler::Allocation> allocations;
  if (options_.parse_pg) {
    for (storage::PlacementGroupRecord record : stored.placement_groups) {
      auto request = options_.parse_pg(record);
      if (!request.ok()) {
        return absl::DataLossError(
            absl::StrCat("stored placement group ", record.placement_group_id(),
                         " is unreadable: ", request.status().message()));
      }
      if (HoldsAllocations(record)) {
        for (int i = 0; i < record.bundles_size(); ++i) {
          const storage::BundleRecord& b = record.bundles(i);
          if (b.node_id().empty()) continue;
          allocations.push_back(scheduler::Allocation{
              record.placement_group_id(), i, b.node_id(),
              scheduler::ResourceSet(b.resources().begin(),
                                     b.resources().end())});
        }
      }
      state.next_sequence =
          std::max(state.next_sequence, record.sequence() + 1);
      if (IsPending(record)) state.queue.insert(QueueKey(record));
      if (!record.request_id().empty()) {
        state.pg_by_request_id[record.request_id()] =
            record.placement_group_id();
      }
      std::string id = record.placement_group_id();
      state.pgs[id] = PgEntry{std::move(record), *std::move(request)};
    }
  }
  for (const storage::ComputeClassRecord& record : stored.compute_classes) {
    state.classes[record.name()] = record;
  }
  auto snapshot = scheduler::InventorySnapshot::Build(std::move(nodes),
                                                      std::move(allocations));
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

absl::Status Coordinator::Resync() {
  absl::StatusOr<storage::StoredState> stored = store_->Load();
  if (!stored.ok()) return stored.status();
  absl::StatusOr<ClusterState> state;
  {
    absl::ReaderMutexLock lock(&state_mu_);
    state = BuildState(*stored, &state_);
  }
  if (!state.ok()) return state.status();
  absl::MutexLock lock(&state_mu_);
  state_ = *std::move(state);
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<Coordinator>> Coordinator::Start(
    std::unique_ptr<storage::Store> store, Options options) {
  if (!options.clock) options.clock = [] { return absl::Now(); };
  ASSIGN_OR_RETURN(storage::StoredState stored, store->Load());
  std::unique_ptr<Coordinator> c(
      new Coordinator(std::move(store), std::move(options)));
  {
    ASSIGN_OR_RETURN(ClusterState state, c->BuildState(stored, nullptr));
    absl::MutexLock lock(&c->state_mu_);
    c->state_ = std::move(state);
  }
  if (c->options_.load_logs) {
    storage::Mutation trim;
    c->options_.load_logs(stored.logs, &trim);
    RETURN_IF_ERROR(c->store_->Commit(trim));
  }
  c->writer_ = std::thread([raw = c.get()] { raw->WriterLoop(); });
  if (c->options_.heartbeat_timeout > absl::ZeroDuration()) {
    c->lease_checker_ = std::thread([raw = c.get()] { raw->LeaseLoop(); });
  }
  // Resume the queue: placements may fit the inventory as loaded.
  c->Submit(WriteOp{[](Txn& txn) {
                      txn.RequestPendingRetry();
                      return absl::OkStatus();
                    },
                    [](const absl::Status&) {}});
  return c;
}

Coordinator::~Coordinator() {
  {
    absl::MutexLock lock(&queue_mu_);
    stopping_ = true;
  }
  if (lease_checker_.joinable()) lease_checker_.join();
  if (writer_.joinable()) writer_.join();
}

void Coordinator::Submit(WriteOp op) {
  {
    absl::MutexLock lock(&queue_mu_);
    if (!stopping_) {
      queue_.push_back(std::move(op));
      return;
    }
  }
  op.done(absl::UnavailableError("sliced is shutting down"));
}

void Coordinator::WriterLoop() {
  pthread_setname_np(pthread_self(), "sliced-writer");
  while (true) {
    std::vector<WriteOp> ops;
    {
      absl::MutexLock lock(&queue_mu_);
      auto ready = [this]() ABSL_SHARED_LOCKS_REQUIRED(queue_mu_) {
        return stopping_ || !queue_.empty();
      };
      queue_mu_.Await(absl::Condition(&ready));
      if (queue_.empty()) return;  // stopping and drained
      ops.reserve(queue_.size());
      for (WriteOp& op : queue_) ops.push_back(std::move(op));
      queue_.clear();
    }
    RunGroup(std::move(ops));
  }
}

void Coordinator::RunGroup(std::vector<WriteOp> ops) {
  if (needs_resync_) {
    absl::Status resynced = Resync();
    if (!resynced.ok()) {
      for (WriteOp& op : ops) {
        op.done(absl::UnavailableError(absl::StrCat(
            "the store failed a commit and can't be re-read yet; nothing was "
            "applied: ",
            resynced.message())));
      }
      return;
    }
    needs_resync_ = false;
  }
  StateChanges group;
  storage::Mutation mutation;
  std::vector<WriteOp*> applied;
  const absl::Time now = Now();
  {
    // The writer is the only thread that changes state_, so a reader lock is
    // enough to read it while readers go on.
    absl::ReaderMutexLock lock(&state_mu_);
    auto run = [&](const std::function<absl::Status(Txn&)>& apply)
                   ABSL_SHARED_LOCKS_REQUIRED(state_mu_) {
                     Txn txn(state_, group, now);
                     absl::Status status = apply(txn);
                     if (status.ok()) status = txn.FlushNodes();
                     if (!status.ok()) return status;
                     MergeInto(txn.own_.nodes, group.nodes);
                     MergeInto(txn.own_.pgs, group.pgs);
                     MergeInto(txn.own_.classes, group.classes);
                     group.snapshot = txn.own_.snapshot;
                     for (PgEntry& e : txn.own_.events)
                       group.events.push_back(std::move(e));
                     group.next_sequence = txn.own_.next_sequence;
                     group.retry_pending =
                         txn.own_.queue_retried
                             ? txn.own_.retry_pending
                             : group.retry_pending || txn.own_.retry_pending;
                     mutation.Append(txn.mutation_);
                     return absl::OkStatus();
                   };
    for (WriteOp& op : ops) {
      absl::Status status = run(op.apply);
      if (status.ok()) {
        applied.push_back(&op);
      } else {
        op.done(status);
      }
    }
    if (group.retry_pending && options_.retry_pending) {
      // The retry's own changes never ask for another round.
      absl::Status retried = run([this](Txn& txn) {
        options_.retry_pending(txn);
        return absl::OkStatus();
      });
      (void)retried;  // a failed retry leaves the queue as it was
    }
  }
  const absl::Time commit_start = absl::Now();
  absl::Status committed = store_->Commit(mutation);
  if (options_.on_commit && !mutation.empty()) {
    options_.on_commit(absl::Now() - commit_start,
                       static_cast<int64_t>(applied.size()),
                       static_cast<int64_t>(mutation.size()), committed.ok());
  }
  if (!committed.ok()) {
    // A failed commit may still have reached the store in part or whole (a
    // write that failed only its sync): re-read the store so that memory
    // matches what a restart would load, before anything else is decided.
    needs_resync_ = !Resync().ok();
  }
  if (committed.ok()) {
    std::vector<PgEntry> changed = std::move(group.events);
    std::shared_ptr<const scheduler::InventorySnapshot> snapshot;
    {
      absl::MutexLock lock(&state_mu_);
      for (auto& [id, change] : group.pgs) {
        if (change) {
          changed.push_back(*change);
        } else if (auto it = state_.pgs.find(id); it != state_.pgs.end()) {
          changed.push_back(it->second);
          changed.back().record.set_state(v1::REMOVED);
        }
      }
      Install(group);
      snapshot = state_.snapshot;
    }
    if (options_.on_pg_changes && !changed.empty()) {
      options_.on_pg_changes(changed, *snapshot);
    }
  }
  for (WriteOp* op : applied) op->done(committed);
}

void Coordinator::Install(StateChanges& group) {
  for (const auto& [id, change] : group.pgs) {
    auto old = state_.pgs.find(id);
    if (old != state_.pgs.end()) {
      if (!old->second.record.request_id().empty()) {
        state_.pg_by_request_id.erase(old->second.record.request_id());
      }
      state_.queue.erase(QueueKey(old->second.record));
    }
    if (change && !change->record.request_id().empty()) {
      state_.pg_by_request_id[change->record.request_id()] = id;
    }
    if (change && IsPending(change->record)) {
      state_.queue.insert(QueueKey(change->record));
    }
  }
  InstallInto(group.nodes, state_.nodes);
  InstallInto(group.pgs, state_.pgs);
  InstallInto(group.classes, state_.classes);
  if (group.snapshot) state_.snapshot = group.snapshot;
  if (group.next_sequence) state_.next_sequence = group.next_sequence;
}

void Coordinator::LeaseLoop() {
  pthread_setname_np(pthread_self(), "sliced-leases");
  const absl::Duration interval =
      std::min(options_.lease_check_interval, options_.heartbeat_timeout / 4);
  while (true) {
    {
      absl::MutexLock lock(&queue_mu_);
      auto stopping = [this]() ABSL_SHARED_LOCKS_REQUIRED(queue_mu_) {
        return stopping_;
      };
      if (queue_mu_.AwaitWithTimeout(absl::Condition(&stopping), interval)) {
        return;
      }
    }
    const absl::Time deadline = Now() - options_.heartbeat_timeout;
    std::vector<std::string> expired = Read([&](const ClusterState& s) {
      std::vector<std::string> ids;
      for (const auto& [id, entry] : s.nodes) {
        if (entry.node.state != scheduler::NodeState::kDead &&
            entry.last_heartbeat < deadline) {
          ids.push_back(id);
        }
      }
      return ids;
    });
    if (expired.empty()) continue;
    Submit(WriteOp{
        .apply =
            [this, expired](Txn& txn) {
              const absl::Time cutoff = txn.now() - options_.heartbeat_timeout;
              std::vector<std::string> lost;
              for (const std::string& id : expired) {
                const NodeEntry* entry = txn.FindNode(id);
                // Re-check: a heartbeat may have come in meanwhile.
                if (entry == nullptr || entry->last_heartbeat >= cutoff ||
                    entry->node.state == scheduler::NodeState::kDead) {
                  continue;
                }
                NodeEntry dead = *entry;
                dead.node.state = scheduler::NodeState::kDead;
                txn.PutNode(dead);
                lost.push_back(id);
              }
              if (options_.on_nodes_lost && !lost.empty()) {
                return options_.on_nodes_lost(txn, lost);
              }
              return absl::OkStatus();
            },
        // A failure (storage trouble) changes nothing; the next check, a
        // lease interval later, tries again. Say so rather than stay silent.
        .done =
            [n = expired.size()](const absl::Status& s) {
              if (!s.ok()) {
                std::fprintf(stderr,
                             "sliced: marking %zu node(s) with expired leases "
                             "DEAD failed, will retry: %s\n",
                             n, s.ToString().c_str());
              }
            },
    });
  }
}

}  // namespace sliced::server
