#include "bench/load/beats.h"

#include <algorithm>
#include <chrono>
#include <thread>

#include "absl/synchronization/mutex.h"
#include "bench/common/stats.h"
#include "sliced/v1/sliced.grpc.pb.h"

namespace sliced::bench {

BeatResult RunBeats(const std::shared_ptr<grpc::Channel>& channel,
                    const BeatOptions& options, const std::atomic<bool>& stop) {
  using Clock = std::chrono::steady_clock;
  BeatResult result;
  const int64_t n = static_cast<int64_t>(options.node_ids.size());
  const int batch = std::max(1, options.batch);
  const int threads = std::max(1, options.threads);
  if (n == 0 || options.lease_s <= 0) return result;
  // RPC k is due at start + k / rpc_rate and carries nodes k*batch ...
  const double rpc_rate = static_cast<double>(n) / batch / options.lease_s;
  const auto start = Clock::now();
  absl::Mutex mu;
  std::vector<double> ms;
  std::vector<std::thread> senders;
  for (int t = 0; t < threads; ++t) {
    senders.emplace_back([&, t] {
      auto stub = v1::Inventory::NewStub(channel);
      std::vector<double> mine;
      int64_t beats = 0, rpcs = 0, errors = 0;
      std::string first_error;
      for (int64_t k = t; !stop.load(); k += threads) {
        const auto due =
            start + std::chrono::duration_cast<Clock::duration>(
                        std::chrono::duration<double>(k / rpc_rate));
        while (!stop.load() && Clock::now() < due) {
          std::this_thread::sleep_for(std::min<Clock::duration>(
              due - Clock::now(), std::chrono::milliseconds(5)));
        }
        if (stop.load()) break;
        v1::HeartbeatRequest req;
        for (int j = 0; j < batch; ++j) {
          req.add_heartbeats()->set_node_id(
              options.node_ids[(k * batch + j) % n]);
        }
        v1::HeartbeatResponse resp;
        grpc::ClientContext ctx;
        ctx.set_deadline(std::chrono::system_clock::now() +
                         std::chrono::seconds(10));
        const auto sent = Clock::now();
        const grpc::Status s = stub->Heartbeat(&ctx, req, &resp);
        ++rpcs;
        if (s.ok()) {
          beats += batch;
          mine.push_back(
              std::chrono::duration<double, std::milli>(Clock::now() - sent)
                  .count());
        } else {
          ++errors;
          if (first_error.empty()) first_error = s.error_message();
        }
      }
      absl::MutexLock lock(&mu);
      ms.insert(ms.end(), mine.begin(), mine.end());
      result.beats += beats;
      result.rpcs += rpcs;
      result.errors += errors;
      if (result.first_error.empty()) result.first_error = first_error;
    });
  }
  for (std::thread& s : senders) s.join();
  result.window_s = std::chrono::duration<double>(Clock::now() - start).count();
  result.beats_per_s = result.window_s > 0 ? result.beats / result.window_s : 0;
  result.p50_ms = Percentile(ms, 0.5);
  result.p99_ms = Percentile(ms, 0.99);
  return result;
}

}  // namespace sliced::bench
