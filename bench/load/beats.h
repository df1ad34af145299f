// Open-loop node heartbeats for sliced_load (issue 17, item 4): every node
// once per lease, as its agent would, either one node per Heartbeat RPC or
// `batch` nodes per RPC (an aggregating agent), paced evenly over the lease.
//
// Thread-safe to call from one thread at a time; RunBeats sends from the
// calling thread (gRPC's callback API) and returns when `stop` is set and
// every call it sent has ended.
#ifndef SLICED_BENCH_LOAD_BEATS_H_
#define SLICED_BENCH_LOAD_BEATS_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "grpcpp/channel.h"

namespace sliced::bench {

struct BeatOptions {
  std::vector<std::string> node_ids;  // each beats once per lease
  double lease_s = 10;
  int batch = 1;  // heartbeats per RPC
};

struct BeatResult {
  int64_t beats = 0, rpcs = 0, errors = 0;
  double window_s = 0;
  double beats_per_s = 0;
  double p50_ms = 0, p99_ms = 0;  // per RPC
  std::string first_error;
};

// Sends heartbeats on `channel` until `stop`.
BeatResult RunBeats(const std::shared_ptr<grpc::Channel>& channel,
                    const BeatOptions& options, const std::atomic<bool>& stop);

}  // namespace sliced::bench

#endif  // SLICED_BENCH_LOAD_BEATS_H_
