// The closed-loop gRPC load generator: N clients, each with exactly one RPC
// in flight, issuing the next as soon as the previous completes, on gRPC's
// callback API (no thread per client; the generator stays cheap).
//
// Workloads (one "op" = one RPC; every mutation is a durable commit):
//   health        grpc.health.v1.Health/Check, the no-op ceiling
//   create_remove CreatePlacementGroup of one {CPU: 1} bundle, then
//                 RemovePlacementGroup of it
//   scaling       SubmitScalingConfig (TPU v6e: 4 workers of 4x4, or 1 of
//                 2x4), then RemovePlacementGroup
//   mix           per pair: 80 % create_remove, 20 % scaling
//   create_only   CreatePlacementGroup of 1-2 {CPU: 1} bundles, never
//                 removed (filling a daemon for the scaling runs)
//
// Thread-safety: Run() blocks the calling thread; callbacks run on gRPC's
// threads, each client's state touched by one callback at a time.
#ifndef SLICED_BENCH_LOAD_CLOSED_LOOP_H_
#define SLICED_BENCH_LOAD_CLOSED_LOOP_H_

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "grpcpp/channel.h"

namespace sliced::bench {

struct LoadOptions {
  std::string workload = "health";
  int clients = 16;
  double duration_s = 2;     // measured window
  double warmup_s = 0.3;     // before the window; not counted
  int64_t max_ops = 0;       // create_only: stop after this many (0: no cap)
  uint64_t seed = 1;
  // Job ids of the groups created: "bench", or "bench-<client index>" when
  // true (one job per client, as Ray drivers would).
  bool job_per_client = false;
};

struct LoadResult {
  std::string workload;
  int clients = 0;
  int64_t ops = 0;            // completed OK in the window
  int64_t errors = 0;         // non-OK in the window
  std::map<std::string, int64_t> error_codes;  // by gRPC code name
  // States the successful creates came back in (CREATED, PENDING, ...).
  std::map<std::string, int64_t> create_states;
  double window_s = 0;
  double ops_per_s = 0;
  double p50_us = 0, p99_us = 0, p999_us = 0;
  double client_cpu_cores = 0;  // this process's CPU over the window / wall
  double daemon_cpu_cores = 0;  // when the caller can read the daemon's CPU
  // From the daemon's /metrics over the window, when readable: group
  // commits, mean operations per commit, mean synced commit time.
  double commits_per_s = 0, ops_per_commit = 0, commit_ms = 0;
  std::string first_error;
  // Filled by the caller: the health check's ops/s in the phase run just
  // before this one, at the same concurrency (the ratio's denominator).
  double paired_health_ops_per_s = 0;
};

// What the caller can read from the daemon, sampled at the window's edges.
struct DaemonProbe {
  std::function<double()> cpu_seconds;                       // may be empty
  std::function<std::map<std::string, double>()> metrics;    // may be empty
};

// This process's CPU time (user + system), in seconds.
double ProcessCpuSeconds();

// Runs one phase against `channels` (client i uses channels[i % size]).
LoadResult RunClosedLoop(const std::vector<std::shared_ptr<grpc::Channel>>& channels,
                         const LoadOptions& options, const DaemonProbe& probe = {});

}  // namespace sliced::bench

#endif  // SLICED_BENCH_LOAD_CLOSED_LOOP_H_
