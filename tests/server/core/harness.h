// The core of the daemon, wired as server.cc wires it but without gRPC, on a
// MemoryStore behind a FaultInjectingStore, with a clock the test moves.
// Calls block until the op is committed (synchronising on its callback,
// never on sleep).
//
// Not thread-safe; one per test.
#ifndef SLICED_TESTS_SERVER_CORE_HARNESS_H_
#define SLICED_TESTS_SERVER_CORE_HARNESS_H_

#include <atomic>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/functional/function_ref.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/notification.h"
#include "absl/time/time.h"
#include "server/core/cluster.h"
#include "server/core/coordinator.h"
#include "server/core/log_store.h"
#include "server/core/node_manager.h"
#include "server/core/placement_manager.h"
#include "server/core/telemetry_manager.h"
#include "server/core/telemetry_store.h"
#include "storage/fault_injecting_store.h"

namespace sliced::server::testing {

struct CoreOptions {
  PlacementManager::Options placement;
  // Zero: no lease thread (tests call CheckLeases themselves).
  absl::Duration heartbeat_timeout = absl::ZeroDuration();
  // Told of every solve (optional; must outlive the core).
  PlacementManager::DecisionObserver* decisions = nullptr;
};

class Core {
 public:
  // Opens the core on `memory` (which must outlive it).
  static absl::StatusOr<std::unique_ptr<Core>> Start(
      storage::MemoryStore& memory, CoreOptions options = {}) {
    std::unique_ptr<Core> core(new Core());
    auto store = std::make_unique<storage::FaultInjectingStore>(&memory);
    core->faults_ = store.get();
    core->cluster_ = std::make_unique<Cluster>(&core->logs_);
    auto coordinator =
        Coordinator::Open(std::move(store), core->cluster_.get(),
                          {.clock = core->Clock(), .observer = nullptr});
    if (!coordinator.ok()) return coordinator.status();
    core->coordinator_ = *std::move(coordinator);
    core->placement_ = std::make_unique<PlacementManager>(
        core->coordinator_.get(), core->cluster_.get(), options.placement,
        options.decisions);
    core->cluster_->set_observer(core->placement_.get());
    core->nodes_ = std::make_unique<NodeManager>(
        core->coordinator_.get(), core->cluster_.get(), core->placement_.get(),
        &core->logs_, &core->telemetry_,
        NodeManager::Options{.heartbeat_timeout = options.heartbeat_timeout,
                             .lease_check_interval = absl::Seconds(1)});
    core->logging_ = std::make_unique<TelemetryManager>(
        core->coordinator_.get(), core->cluster_.get(), &core->telemetry_,
        &core->logs_);
    core->coordinator_->Run();
    return core;
  }

  ~Core() {
    if (nodes_ != nullptr) nodes_->StopLeases();  // drain while managers live
    if (placement_ != nullptr) placement_->StopPreemptionChecks();
    coordinator_.reset();
  }

  // ---- the clock
  absl::Time now() const { return absl::FromUnixMillis(now_ms_.load()); }
  void Advance(absl::Duration d) { now_ms_ += absl::ToInt64Milliseconds(d); }

  // ---- blocking calls
  absl::Status Register(std::vector<scheduler::Node> nodes) {
    return Wait<std::vector<NodeView>>([&](auto done) {
             nodes_->Register(std::move(nodes), std::move(done));
           })
        .status();
  }
  absl::StatusOr<PlacementGroupView> Create(PgSpec spec) {
    return Wait<PlacementGroupView>([&](auto done) {
      placement_->Create(std::move(spec), std::move(done));
    });
  }
  absl::Status Remove(const std::string& id) {
    return WaitStatus([&](auto done) { placement_->Remove(id, done); });
  }
  absl::Status Heartbeat(std::vector<NodeBeat> beats) {
    return WaitStatus(
        [&](auto done) { nodes_->Heartbeat(std::move(beats), done); });
  }
  absl::StatusOr<NodeView> Drain(const std::string& id) {
    return Wait<NodeView>([&](auto done) { nodes_->Drain(id, done); });
  }
  absl::StatusOr<NodeView> Undrain(const std::string& id) {
    return Wait<NodeView>([&](auto done) { nodes_->Undrain(id, done); });
  }
  absl::Status RemoveNode(const std::string& id, bool force) {
    return WaitStatus([&](auto done) { nodes_->Remove(id, force, done); });
  }
  absl::Status PutClass(ComputeClass cls) {
    return WaitStatus(
        [&](auto done) { placement_->PutClass(std::move(cls), done); });
  }
  absl::Status CompletePreemptions() {
    return WaitStatus(
        [&](auto done) { placement_->CompletePreemptions(done); });
  }
  absl::Status CheckLeases() {
    return WaitStatus([&](auto done) { nodes_->CheckLeases(done); });
  }
  absl::Status AppendLogs(const std::string& node_id,
                          std::vector<std::string> texts) {
    return WaitStatus([&](auto done) {
      logging_->AppendLogs(node_id, Lines(std::move(texts)), done);
    });
  }
  // The texts of the node's log lines, oldest first.
  std::vector<std::string> LogTexts(const std::string& node_id) {
    std::vector<std::string> texts;
    logs_.Read(
        {node_id}, [](const LogLine&) { return true; },
        [&](const LogLine& line) { texts.push_back(line.text); }, nullptr);
    return texts;
  }
  static std::vector<LogLine> Lines(std::vector<std::string> texts) {
    std::vector<LogLine> lines;
    for (std::string& text : texts) {
      lines.emplace_back().text = std::move(text);
    }
    return lines;
  }
  // Runs `apply` as one op and waits for its commit.
  absl::Status Op(std::function<absl::Status(Txn&)> apply) {
    return WaitStatus([&](auto done) {
      coordinator_->Submit(WriteOp{std::move(apply), done});
    });
  }
  // Holds the writer (inside an op that writes nothing) until `submit`
  // returns, so that what `submit` queues runs in one commit group.
  void InOneGroup(absl::FunctionRef<void()> submit) {
    absl::Notification held, go, released;
    coordinator_->Submit(WriteOp{[&](Txn&) {
                                   held.Notify();
                                   go.WaitForNotification();
                                   return absl::OkStatus();
                                 },
                                 [&](const absl::Status&) {
                                   released.Notify();
                                 }});
    held.WaitForNotification();
    submit();
    go.Notify();
    released.WaitForNotification();  // the writer is done with these
  }

  PgState StateOf(const std::string& id) const {
    auto view = placement_->Get(id);
    return view.ok() ? view->group.state : PgState::kRemoved;
  }

  Cluster& cluster() { return *cluster_; }
  Coordinator& coordinator() { return *coordinator_; }
  PlacementManager& placement() { return *placement_; }
  NodeManager& nodes() { return *nodes_; }
  TelemetryManager& logging() { return *logging_; }
  TelemetryStore& telemetry() { return telemetry_; }
  storage::FaultInjectingStore& faults() { return *faults_; }

 private:
  Core() : telemetry_(absl::Seconds(60)), logs_(100) {}

  std::function<absl::Time()> Clock() {
    return [this] { return now(); };
  }

  template <typename T, typename Start>
  absl::StatusOr<T> Wait(Start start) {
    absl::Notification finished;
    absl::StatusOr<T> result = absl::UnknownError("not run");
    start([&](absl::StatusOr<T> r) {
      result = std::move(r);
      finished.Notify();
    });
    finished.WaitForNotification();
    return result;
  }
  template <typename Start>
  absl::Status WaitStatus(Start start) {
    absl::Notification finished;
    absl::Status result;
    start([&](const absl::Status& s) {
      result = s;
      finished.Notify();
    });
    finished.WaitForNotification();
    return result;
  }

  std::atomic<int64_t> now_ms_{1'800'000'000'000};
  TelemetryStore telemetry_;
  LogStore logs_;
  storage::FaultInjectingStore* faults_ = nullptr;
  std::unique_ptr<Cluster> cluster_;
  std::unique_ptr<Coordinator> coordinator_;
  std::unique_ptr<PlacementManager> placement_;
  std::unique_ptr<NodeManager> nodes_;
  std::unique_ptr<TelemetryManager> logging_;
};

}  // namespace sliced::server::testing

#endif  // SLICED_TESTS_SERVER_CORE_HARNESS_H_
