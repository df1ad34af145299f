#include "bench/load/beats.h"

#include <algorithm>
#include <chrono>
#include <thread>

#include "absl/synchronization/mutex.h"
#include "bench/common/stats.h"
#include "sliced/v1/sliced.grpc.pb.h"

namespace sliced::bench {
namespace {

using Clock = std::chrono::steady_clock;

// What the calls in flight report back, and how many there are.
struct Tally {
  absl::Mutex mu;
  int64_t in_flight ABSL_GUARDED_BY(mu) = 0;
  int64_t beats ABSL_GUARDED_BY(mu) = 0;
  int64_t rpcs ABSL_GUARDED_BY(mu) = 0;
  int64_t errors ABSL_GUARDED_BY(mu) = 0;
  std::string first_error ABSL_GUARDED_BY(mu);
  std::vector<double> ms ABSL_GUARDED_BY(mu);
};

// One Heartbeat RPC in flight (deletes itself when answered).
struct Call {
  grpc::ClientContext ctx;
  v1::HeartbeatRequest req;
  v1::HeartbeatResponse resp;
  Clock::time_point sent;
};

}  // namespace

BeatResult RunBeats(const std::shared_ptr<grpc::Channel>& channel,
                    const BeatOptions& options, const std::atomic<bool>& stop) {
  BeatResult result;
  const int64_t n = static_cast<int64_t>(options.node_ids.size());
  const int batch = std::max(1, options.batch);
  if (n == 0 || options.lease_s <= 0) return result;
  // RPC k is due at start + k / rpc_rate and carries nodes k*batch ... One
  // thread sends each when it is due, with gRPC's callback API: the RPCs
  // overlap as they would from many agents, and the sender costs the
  // machine little beside the daemon it measures.
  const double rpc_rate = static_cast<double>(n) / batch / options.lease_s;
  auto stub = v1::Inventory::NewStub(channel);
  Tally tally;
  const auto start = Clock::now();
  for (int64_t k = 0; !stop.load(); ++k) {
    const auto due = start + std::chrono::duration_cast<Clock::duration>(
                                 std::chrono::duration<double>(k / rpc_rate));
    while (!stop.load() && Clock::now() < due) {
      std::this_thread::sleep_until(
          std::min(due, Clock::now() + std::chrono::milliseconds(5)));
    }
    if (stop.load()) break;
    auto* call = new Call;
    for (int j = 0; j < batch; ++j) {
      call->req.add_heartbeats()->set_node_id(
          options.node_ids[(k * batch + j) % n]);
    }
    call->ctx.set_deadline(std::chrono::system_clock::now() +
                           std::chrono::seconds(10));
    {
      absl::MutexLock lock(&tally.mu);
      ++tally.in_flight;
    }
    call->sent = Clock::now();
    stub->async()->Heartbeat(&call->ctx, &call->req, &call->resp,
                             [call, batch, &tally](grpc::Status s) {
                               const double ms =
                                   std::chrono::duration<double, std::milli>(
                                       Clock::now() - call->sent)
                                       .count();
                               delete call;
                               absl::MutexLock lock(&tally.mu);
                               ++tally.rpcs;
                               if (s.ok()) {
                                 tally.beats += batch;
                                 tally.ms.push_back(ms);
                               } else {
                                 ++tally.errors;
                                 if (tally.first_error.empty())
                                   tally.first_error = s.error_message();
                               }
                               --tally.in_flight;
                             });
  }
  // Every call ends by its deadline.
  absl::MutexLock lock(&tally.mu);
  tally.mu.Await(absl::Condition(
      +[](int64_t* in_flight) { return *in_flight == 0; }, &tally.in_flight));
  result.window_s = std::chrono::duration<double>(Clock::now() - start).count();
  result.beats = tally.beats;
  result.rpcs = tally.rpcs;
  result.errors = tally.errors;
  result.first_error = tally.first_error;
  result.beats_per_s = result.window_s > 0 ? result.beats / result.window_s : 0;
  result.p50_ms = Percentile(tally.ms, 0.5);
  result.p99_ms = Percentile(tally.ms, 0.99);
  return result;
}

}  // namespace sliced::bench
