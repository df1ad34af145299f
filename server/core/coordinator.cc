#include "server/core/coordinator.h"

#include <pthread.h>

#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "server/core/txn.h"

namespace sliced::server {

Coordinator::Coordinator(std::unique_ptr<storage::Store> store,
                         Machine* machine, Options options)
    : options_(std::move(options)),
      store_(std::move(store)),
      machine_(machine) {}

absl::StatusOr<std::unique_ptr<Coordinator>> Coordinator::Open(
    std::unique_ptr<storage::Store> store, Machine* machine, Options options) {
  if (!options.clock) options.clock = [] { return absl::Now(); };
  std::unique_ptr<Coordinator> c(
      new Coordinator(std::move(store), machine, std::move(options)));
  RETURN_IF_ERROR(c->Resync(&c->opened_));
  return c;
}

void Coordinator::Run() {
  {
    // An op first that asks for the end-of-group work (the queue re-tried,
    // INFEASIBLE groups re-checked) on the state as loaded: the flags that
    // decide placement may differ from the last run's.
    absl::MutexLock lock(&queue_mu_);
    queue_.push_front(WriteOp{[](Txn& txn) {
                                txn.RequestFullRetry();
                                return absl::OkStatus();
                              },
                              [](const absl::Status&) {}});
  }
  writer_ = std::thread([this] { WriterLoop(); });
}

Coordinator::~Coordinator() {
  {
    absl::MutexLock lock(&queue_mu_);
    stopping_ = true;
  }
  if (writer_.joinable()) writer_.join();
}

absl::Status Coordinator::Resync(LoadStats* stats) {
  const absl::Time start = absl::Now();
  ASSIGN_OR_RETURN(storage::StoredState stored, store_->Load());
  const absl::Time read = absl::Now();
  const size_t nodes = stored.nodes.size();
  const size_t groups = stored.placement_groups.size();
  storage::Mutation repair;
  RETURN_IF_ERROR(machine_->Restore(std::move(stored), repair));
  if (stats != nullptr) {
    *stats = {.nodes = nodes,
              .placement_groups = groups,
              .read = read - start,
              .restore = absl::Now() - read};
  }
  return repair.empty() ? absl::OkStatus() : store_->Commit(repair);
}

void Coordinator::Submit(WriteOp op) {
  absl::Status refused;
  {
    absl::MutexLock lock(&queue_mu_);
    if (!refusal_.ok()) {
      refused = refusal_;
    } else if (!stopping_) {
      queue_.push_back(std::move(op));
      return;
    } else {
      refused = absl::UnavailableError("sliced is shutting down");
    }
  }
  op.done(refused);
}

void Coordinator::Refuse(const absl::Status& why) {
  std::deque<WriteOp> queued;
  {
    absl::MutexLock lock(&queue_mu_);
    refusal_ = why;
    queued.swap(queue_);
  }
  for (WriteOp& op : queued) op.done(why);
}

bool Coordinator::refusing() const {
  absl::MutexLock lock(&queue_mu_);
  return !refusal_.ok();
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
      const std::string why = absl::StrCat(
          "the store failed a commit and can't be re-read yet; nothing was "
          "applied: ",
          resynced.message());
      // A deposed leader's refusal stays one (the API tells clients so).
      const absl::Status refusal = storage::IsDeposed(resynced)
                                       ? storage::DeposedError(why)
                                       : absl::UnavailableError(why);
      for (WriteOp& op : ops) op.done(refusal);
      return;
    }
    needs_resync_ = false;
  }
  storage::Mutation writes;
  std::vector<WriteOp*> applied;
  // An op that failed is answered, like the applied ones, once the group's
  // commit is settled, and with why not if it failed: its failure may rest
  // on earlier ops of the group (a second remove of a group the first one
  // removed), which a failed commit undoes. On a shared store (etcd,
  // docs/ha.md) this daemon's state is current only while it leads, and
  // another daemon may lead before this one learns it: a group that wrote
  // nothing is answered once Confirm() says it still leads.
  const bool shared = store_->shared();
  std::vector<std::pair<WriteOp*, absl::Status>> failed;
  machine_->BeginGroup(Now());
  // An op the store could never commit (etcd: above one Txn's limits) fails
  // alone, before the commit, instead of failing its whole group.
  const Machine::UnitCheck check = [this](const storage::Mutation& unit) {
    return store_->CheckUnit(unit);
  };
  for (WriteOp& op : ops) {
    absl::Status status = machine_->RunOp(op.apply, writes, check);
    if (status.ok()) {
      applied.push_back(&op);
    } else {
      failed.emplace_back(&op, std::move(status));
    }
  }
  machine_->EndGroup(writes, check);

  // A group that wrote nothing (lease renewals, a queue retry that moved
  // nothing) has nothing to make durable: no commit.
  const absl::Time commit_start = absl::Now();
  const absl::Status committed =
      writes.empty() ? absl::OkStatus() : store_->Commit(writes);
  if (options_.observer != nullptr && !writes.empty()) {
    options_.observer->OnCommit(
        absl::Now() - commit_start, static_cast<int64_t>(applied.size()),
        static_cast<int64_t>(writes.size()), committed.ok());
  }
  // What the group answers: the commit's outcome, whose fence confirmed
  // this daemon's state; with nothing written on a shared store, Confirm().
  const absl::Status answer =
      writes.empty() && shared ? store_->Confirm() : committed;
  if (answer.ok()) {
    machine_->Install();
  } else {
    machine_->Abandon();
    // A failed commit may still have reached the store in part or whole (a
    // write that failed only its sync): re-read the store so that memory
    // matches what a restart would load, before anything else is decided.
    // Once refusing, nothing else is decided here: no re-read (a whole
    // etcd prefix) holding up the answers of this group. A failed Confirm()
    // wrote nothing: memory still matches the store, and nothing is re-read.
    if (!committed.ok()) needs_resync_ = refusing() || !Resync().ok();
  }
  for (auto& [op, status] : failed) {
    op->done(answer.ok() ? std::move(status) : answer);
  }
  for (WriteOp* op : applied) op->done(answer);
  if (answer.ok()) machine_->Answered();
}

}  // namespace sliced::server
