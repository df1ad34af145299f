// Closed-loop load on gRPC's callback API; see closed_loop.h.
#include "bench/load/closed_loop.h"

#include <sys/resource.h>

#include <atomic>
#include <chrono>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "bench/common/rng.h"
#include "bench/common/stats.h"
#include "grpc/health/v1/health.grpc.pb.h"
#include "grpcpp/client_context.h"
#include "sliced/v1/sliced.grpc.pb.h"

namespace sliced::bench {
namespace {

using Clock = std::chrono::steady_clock;
namespace v1 = ::sliced::v1;
namespace health = ::grpc::health::v1;

const char* CodeName(grpc::StatusCode code) {
  switch (code) {
    case grpc::StatusCode::OK: return "OK";
    case grpc::StatusCode::CANCELLED: return "CANCELLED";
    case grpc::StatusCode::INVALID_ARGUMENT: return "INVALID_ARGUMENT";
    case grpc::StatusCode::DEADLINE_EXCEEDED: return "DEADLINE_EXCEEDED";
    case grpc::StatusCode::NOT_FOUND: return "NOT_FOUND";
    case grpc::StatusCode::ALREADY_EXISTS: return "ALREADY_EXISTS";
    case grpc::StatusCode::RESOURCE_EXHAUSTED: return "RESOURCE_EXHAUSTED";
    case grpc::StatusCode::FAILED_PRECONDITION: return "FAILED_PRECONDITION";
    case grpc::StatusCode::UNIMPLEMENTED: return "UNIMPLEMENTED";
    case grpc::StatusCode::UNAVAILABLE: return "UNAVAILABLE";
    default: return "OTHER";
  }
}

class Runner;

// One closed-loop client: one RPC in flight at a time.
class Client {
 public:
  Client(Runner* runner, int index, const std::shared_ptr<grpc::Channel>& channel);
  void Issue();
  std::vector<double> latencies_us;
  int64_t errors = 0;
  std::map<std::string, int64_t> error_codes;
  std::map<std::string, int64_t> create_states;
  std::string first_error;

 private:
  void Done(const grpc::Status& status, bool created);
  void Start() {
    ctx_ = std::make_unique<grpc::ClientContext>();
    ctx_->set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(60));
    start_ = Clock::now();
  }

  Runner* runner_;
  int index_;
  Rng rng_;
  std::unique_ptr<v1::Placement::Stub> placement_;
  std::unique_ptr<health::Health::Stub> health_;
  std::unique_ptr<grpc::ClientContext> ctx_;
  Clock::time_point start_;
  int64_t seq_ = 0;
  std::string pending_remove_;
  v1::CreatePlacementGroupRequest create_req_;
  v1::SubmitScalingConfigRequest scaling_req_;
  v1::PlacementGroup pg_;
  v1::RemovePlacementGroupRequest remove_req_;
  v1::RemovePlacementGroupResponse remove_resp_;
  health::HealthCheckRequest health_req_;
  health::HealthCheckResponse health_resp_;
};

class Runner {
 public:
  explicit Runner(const LoadOptions& options) : options(options) {}
  const LoadOptions options;
  std::atomic<bool> stop{false};
  std::atomic<int64_t> creates_issued{0};
  Clock::time_point window_start, window_end;

  void Finished() {
    absl::MutexLock lock(&mu_);
    --active_;
  }
  void SetActive(int n) {
    absl::MutexLock lock(&mu_);
    active_ = n;
  }
  // Waits until every client finished or `deadline`; true when all did.
  bool WaitAll(absl::Time deadline) {
    absl::MutexLock lock(&mu_);
    auto done = [this]() ABSL_SHARED_LOCKS_REQUIRED(mu_) { return active_ == 0; };
    return mu_.AwaitWithDeadline(absl::Condition(&done), deadline);
  }

 private:
  absl::Mutex mu_;
  int active_ ABSL_GUARDED_BY(mu_) = 0;
};

Client::Client(Runner* runner, int index, const std::shared_ptr<grpc::Channel>& channel)
    : runner_(runner),
      index_(index),
      rng_(runner->options.seed * 1000003 + index),
      placement_(v1::Placement::NewStub(channel)),
      health_(health::Health::NewStub(channel)) {
  const std::string job = runner->options.job_per_client
                              ? "bench-" + std::to_string(index)
                              : std::string("bench");
  create_req_.set_job_id(job);
  scaling_req_.set_job_id(job);
}

void Client::Issue() {
  if (!pending_remove_.empty()) {
    Start();
    remove_req_.set_placement_group_id(pending_remove_);
    pending_remove_.clear();
    placement_->async()->RemovePlacementGroup(
        ctx_.get(), &remove_req_, &remove_resp_,
        [this](grpc::Status s) { Done(s, false); });
    return;
  }
  const std::string& workload = runner_->options.workload;
  const bool capped = runner_->options.max_ops > 0 &&
                      runner_->creates_issued.fetch_add(1) >= runner_->options.max_ops;
  if (runner_->stop.load() || capped) {
    runner_->Finished();
    return;
  }
  Start();
  if (workload == "health") {
    health_->async()->Check(ctx_.get(), &health_req_, &health_resp_,
                            [this](grpc::Status s) { Done(s, false); });
    return;
  }
  const bool scaling = workload == "scaling" || (workload == "mix" && rng_.Bernoulli(0.2));
  if (scaling) {
    v1::ScalingConfig* sc = scaling_req_.mutable_scaling_config();
    const bool big = rng_.Bernoulli(0.5);
    sc->set_use_tpu(true);
    sc->set_accelerator_type("TPU-V6E");
    sc->set_topology(big ? "4x4" : "2x4");
    sc->set_num_workers(big ? 4 : 1);
    scaling_req_.set_name(absl::StrCat("c", index_, "-", seq_++));
    placement_->async()->SubmitScalingConfig(
        ctx_.get(), &scaling_req_, &pg_, [this](grpc::Status s) { Done(s, true); });
    return;
  }
  create_req_.clear_bundles();
  const int bundles = workload == "create_only" ? 1 + static_cast<int>(rng_.Int(0, 1)) : 1;
  for (int b = 0; b < bundles; ++b) {
    (*create_req_.add_bundles()->mutable_resources())["CPU"] = 1;
  }
  create_req_.set_name(absl::StrCat("c", index_, "-", seq_++));
  placement_->async()->CreatePlacementGroup(
      ctx_.get(), &create_req_, &pg_, [this](grpc::Status s) { Done(s, true); });
}

void Client::Done(const grpc::Status& status, bool created) {
  const Clock::time_point end = Clock::now();
  const bool in_window = end >= runner_->window_start && end <= runner_->window_end;
  if (status.ok()) {
    if (in_window) {
      latencies_us.push_back(
          std::chrono::duration<double, std::micro>(end - start_).count());
    }
    if (created && in_window) {
      ++create_states[v1::PlacementGroupState_Name(pg_.state())];
    }
    if (created && runner_->options.workload != "create_only") {
      pending_remove_ = pg_.placement_group_id();
    }
  } else if (in_window || runner_->options.workload == "create_only") {
    ++errors;
    ++error_codes[CodeName(status.error_code())];
    if (first_error.empty()) first_error = status.error_message();
  }
  Issue();
}

}  // namespace

double ProcessCpuSeconds() {
  rusage u;
  getrusage(RUSAGE_SELF, &u);
  return u.ru_utime.tv_sec + u.ru_utime.tv_usec / 1e6 + u.ru_stime.tv_sec +
         u.ru_stime.tv_usec / 1e6;
}

LoadResult RunClosedLoop(const std::vector<std::shared_ptr<grpc::Channel>>& channels,
                         const LoadOptions& options, const DaemonProbe& probe) {
  using Metrics = std::map<std::string, double>;
  auto metrics = [&probe] { return probe.metrics ? probe.metrics() : Metrics(); };
  auto daemon_cpu = [&probe] { return probe.cpu_seconds ? probe.cpu_seconds() : 0.0; };
  Runner runner(options);
  const Clock::time_point t0 = Clock::now();
  runner.window_start = t0 + std::chrono::duration_cast<Clock::duration>(
                                 std::chrono::duration<double>(options.warmup_s));
  runner.window_end = runner.window_start +
                      std::chrono::duration_cast<Clock::duration>(
                          std::chrono::duration<double>(options.duration_s));
  std::vector<std::unique_ptr<Client>> clients;
  for (int i = 0; i < options.clients; ++i) {
    clients.push_back(std::make_unique<Client>(&runner, i, channels[i % channels.size()]));
  }
  runner.SetActive(options.clients);
  for (auto& c : clients) c->Issue();

  std::this_thread::sleep_until(runner.window_start);
  const double cpu0 = ProcessCpuSeconds();
  const double dcpu0 = daemon_cpu();
  const Metrics m0 = metrics();
  const Clock::time_point measured_start = Clock::now();
  // create_only may finish early (max_ops); otherwise wait out the window.
  const bool all_done = runner.WaitAll(
      absl::Now() + absl::FromChrono(runner.window_end - Clock::now()));
  const Clock::time_point measured_end = all_done ? Clock::now() : runner.window_end;
  const double cpu1 = ProcessCpuSeconds();
  const double dcpu1 = daemon_cpu();
  const Metrics m1 = metrics();
  runner.stop = true;
  runner.WaitAll(absl::InfiniteFuture());

  LoadResult r;
  r.workload = options.workload;
  r.clients = options.clients;
  r.window_s = std::chrono::duration<double>(measured_end - measured_start).count();
  std::vector<double> all;
  for (auto& c : clients) {
    all.insert(all.end(), c->latencies_us.begin(), c->latencies_us.end());
    r.errors += c->errors;
    for (const auto& [code, n] : c->error_codes) r.error_codes[code] += n;
    for (const auto& [state, n] : c->create_states) r.create_states[state] += n;
    if (r.first_error.empty()) r.first_error = c->first_error;
  }
  r.ops = static_cast<int64_t>(all.size());
  r.ops_per_s = r.window_s > 0 ? r.ops / r.window_s : 0;
  r.p50_us = Percentile(all, 0.5);
  r.p99_us = Percentile(all, 0.99);
  r.p999_us = Percentile(all, 0.999);
  r.client_cpu_cores = r.window_s > 0 ? (cpu1 - cpu0) / r.window_s : 0;
  r.daemon_cpu_cores = r.window_s > 0 ? (dcpu1 - dcpu0) / r.window_s : 0;
  auto delta = [&](const char* name) {
    auto a = m0.find(name), b = m1.find(name);
    return a == m0.end() || b == m1.end() ? 0.0 : b->second - a->second;
  };
  const double commits = delta("sliced_group_commit_ops_count");
  if (commits > 0 && r.window_s > 0) {
    r.commits_per_s = commits / r.window_s;
    r.ops_per_commit = delta("sliced_group_commit_ops_sum") / commits;
    const double timed = delta("sliced_commit_duration_seconds_count");
    r.commit_ms = timed > 0 ? 1000 * delta("sliced_commit_duration_seconds_sum") / timed : 0;
  }
  return r;
}

}  // namespace sliced::bench
