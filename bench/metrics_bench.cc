// What the metrics interceptor costs per RPC (issue 17, item 2): counting a
// call by method and status code and timing it, as RpcInterceptor does at
// PRE_SEND_STATUS, from 1 and 2 threads.
//
//   build/bench/sliced_metrics_bench
#include <benchmark/benchmark.h>

#include "server/api/metrics.h"

namespace sliced::server::api {
namespace {

constexpr char kMethod[] = "/sliced.v1.Placement/CreatePlacementGroup";

void BM_ObserveRpc(benchmark::State& state) {
  static Metrics* metrics = new Metrics();
  for (auto _ : state) {
    metrics->ObserveRpc(kMethod, "OK", 0.0012);
  }
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_ObserveRpc)->Threads(1)->Threads(2);

}  // namespace
}  // namespace sliced::server::api

BENCHMARK_MAIN();
