#include "server/coordinator.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "scheduler/status_macros.h"
#include "storage/records.h"

namespace sliced::server {

const NodeEntry* Txn::FindNode(absl::string_view node_id) const {
  for (const NodeChanges* changes : {&own_, &group_}) {
    auto it = changes->find(node_id);
    if (it != changes->end()) return it->second ? &*it->second : nullptr;
  }
  auto it = committed_.nodes.find(node_id);
  return it == committed_.nodes.end() ? nullptr : &it->second;
}

void Txn::PutNode(const NodeEntry& entry) {
  mutation_.PutNode(storage::ToRecord(entry.node));
  own_[entry.node.node_id] = entry;
}

void Txn::TouchNode(const NodeEntry& entry) { own_[entry.node.node_id] = entry; }

void Txn::RemoveNode(absl::string_view node_id) {
  mutation_.DeleteNode(node_id);
  own_[std::string(node_id)] = std::nullopt;
}

Coordinator::Coordinator(std::unique_ptr<storage::Store> store, Options options)
    : options_(std::move(options)), store_(std::move(store)) {}

absl::StatusOr<std::unique_ptr<Coordinator>> Coordinator::Start(
    std::unique_ptr<storage::Store> store, Options options) {
  if (!options.clock) options.clock = [] { return absl::Now(); };
  ASSIGN_OR_RETURN(storage::StoredState stored, store->Load());
  std::unique_ptr<Coordinator> c(
      new Coordinator(std::move(store), std::move(options)));
  const absl::Time now = c->Now();
  {
    absl::MutexLock lock(&c->state_mu_);
    for (const storage::NodeRecord& record : stored.nodes) {
      ASSIGN_OR_RETURN(scheduler::Node node, storage::FromRecord(record));
      std::string id = node.node_id;
      c->state_.nodes[id] = NodeEntry{std::move(node), now};
    }
  }
  c->writer_ = std::thread([raw = c.get()] { raw->WriterLoop(); });
  if (c->options_.heartbeat_timeout > absl::ZeroDuration()) {
    c->lease_checker_ = std::thread([raw = c.get()] { raw->LeaseLoop(); });
  }
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

Coordinator::Stats Coordinator::stats() const {
  absl::MutexLock lock(&queue_mu_);
  return stats_;
}

void Coordinator::WriterLoop() {
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
  NodeChanges group;
  storage::Mutation mutation;
  std::vector<WriteOp*> applied;
  const absl::Time now = Now();
  {
    // The writer is the only thread that changes state_, so a reader lock is
    // enough to read it while readers go on.
    absl::ReaderMutexLock lock(&state_mu_);
    for (WriteOp& op : ops) {
      Txn txn(state_, group, now);
      absl::Status status = op.apply(txn);
      if (!status.ok()) {
        op.done(status);
        continue;
      }
      for (auto& [id, change] : txn.own_) group[id] = std::move(change);
      mutation.Append(txn.mutation_);
      applied.push_back(&op);
    }
  }
  absl::Status committed = store_->Commit(mutation);
  {
    absl::MutexLock lock(&queue_mu_);
    ++stats_.groups;
    stats_.ops += static_cast<int64_t>(applied.size());
    if (!committed.ok()) ++stats_.failed_commits;
  }
  if (committed.ok()) {
    absl::MutexLock lock(&state_mu_);
    for (auto& [id, change] : group) {
      if (change) {
        state_.nodes[id] = std::move(*change);
      } else {
        state_.nodes.erase(id);
      }
    }
  }
  for (WriteOp* op : applied) op->done(committed);
}

void Coordinator::LeaseLoop() {
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
              }
              return absl::OkStatus();
            },
        .done = [](const absl::Status&) {},
    });
  }
}

}  // namespace sliced::server
