// RPCs and decisions are counted in the cell of their own labels, from any
// thread, however the cells are cached.
#include "server/api/metrics.h"

#include <string>
#include <thread>
#include <vector>

#include "gtest/gtest.h"
#include "prometheus/text_serializer.h"

namespace sliced::server::api {
namespace {

std::string Exposition(const Metrics& metrics) {
  return prometheus::TextSerializer().Serialize(metrics.registry()->Collect());
}

TEST(MetricsTest, OnlyTheDaemonsOwnMethodsNameASeries) {
  EXPECT_EQ(RpcMethodLabel("/sliced.v1.Placement/CreatePlacementGroup"),
            "/sliced.v1.Placement/CreatePlacementGroup");
  EXPECT_EQ(RpcMethodLabel("/sliced.v1.Telemetry/TailLogs"),
            "/sliced.v1.Telemetry/TailLogs");
  EXPECT_EQ(RpcMethodLabel("/grpc.health.v1.Health/Check"),
            "/grpc.health.v1.Health/Check");
  // Any other path a client makes up (answered UNIMPLEMENTED) is one series.
  for (const char* path :
       {"/x/random-1", "/sliced.v1.Placement/Nope", "", "/"}) {
    EXPECT_EQ(RpcMethodLabel(path), "unknown") << path;
  }
}

TEST(MetricsTest, EachRpcAndDecisionCountsInItsOwnSeries) {
  Metrics metrics;
  constexpr char kCreate[] = "/sliced.v1.Placement/CreatePlacementGroup";
  constexpr char kGet[] = "/sliced.v1.Inventory/GetNode";
  std::vector<std::thread> threads;
  for (int t = 0; t < 2; ++t) {
    threads.emplace_back([&] {
      for (int i = 0; i < 500; ++i) {
        metrics.ObserveRpc(kCreate, "OK", 0.001);
        if (i % 5 == 0) metrics.ObserveRpc(kCreate, "RESOURCE_EXHAUSTED", 1);
        if (i % 10 == 0) metrics.ObserveRpc(kGet, "OK", 0.0001);
        metrics.ObserveDecision("placed", i % 2 == 0 ? -1 : 3, 0.0001);
        if (i % 50 == 0) metrics.ObserveDecision("unschedulable", 3, 0.0001);
      }
    });
  }
  for (std::thread& t : threads) t.join();
  const std::string text = Exposition(metrics);
  for (const std::string& series : {
           std::string("sliced_rpcs_total{code=\"OK\",method=\"") + kCreate +
               "\"} 1000",
           std::string("sliced_rpcs_total{code=\"RESOURCE_EXHAUSTED\","
                       "method=\"") +
               kCreate + "\"} 200",
           std::string("sliced_rpcs_total{code=\"OK\",method=\"") + kGet +
               "\"} 100",
           std::string("sliced_rpc_duration_seconds_count{method=\"") +
               kCreate + "\"} 1200",
           std::string("sliced_rpc_duration_seconds_count{method=\"") + kGet +
               "\"} 100",
           std::string("sliced_placement_decisions_total{outcome=\"placed\","
                       "priority=\"none\"} 500"),
           std::string("sliced_placement_decisions_total{outcome=\"placed\","
                       "priority=\"3\"} 500"),
           std::string("sliced_placement_decisions_total{outcome="
                       "\"unschedulable\",priority=\"3\"} 20"),
           std::string("sliced_solve_duration_seconds_count 1020"),
       }) {
    EXPECT_NE(text.find(series + "\n"), std::string::npos) << series;
  }
}

}  // namespace
}  // namespace sliced::server::api
