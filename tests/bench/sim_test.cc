// The simulator's results are sane for every policy: fractions in [0, 1],
// nothing placed that the engine would refuse (Apply checks every
// allocation), and no policy beats the max-flow bound.
#include "bench/sim/sim.h"

#include <algorithm>

#include "gtest/gtest.h"
#include "tests/scheduler/builders.h"

namespace sliced::bench {
namespace {

TEST(SimTest, ReplayIsSaneForEveryPolicy) {
  const Fleet fleet = GenerateFleet({600, 4});
  TraceOptions options;
  options.jobs = 400;
  options.seed = 4;
  const std::vector<Job> trace = GenerateTrace(fleet, options);
  const std::vector<bool> feasible = FeasibleJobs(fleet, trace);
  SimOptions sim;
  sim.samples = 20;
  for (PolicyKind kind : kAllPolicies) {
    const SimResult r = Replay(fleet, trace, feasible, kind, sim);
    SCOPED_TRACE(r.policy);
    EXPECT_GT(r.accepted, 0);
    EXPECT_LE(r.accepted, r.feasible);
    EXPECT_GE(r.utilization, 0);
    EXPECT_LE(r.utilization, 1);
    EXPECT_EQ(r.series.size(), 20u);
    for (const auto& s : r.series) EXPECT_LE(s.utilization, 1.0);
    for (const auto& f : r.fragmentation) {
      EXPECT_GE(f.stranded, 0);
      EXPECT_LE(f.stranded, 1);
    }
  }
  // Deterministic: the same replay twice gives the same numbers.
  const SimResult a = Replay(fleet, trace, feasible, PolicyKind::kRandom, sim);
  const SimResult b = Replay(fleet, trace, feasible, PolicyKind::kRandom, sim);
  EXPECT_EQ(a.accepted, b.accepted);
  EXPECT_EQ(a.utilization, b.utilization);
}

TEST(SimTest, NoPolicyBeatsTheMaxFlowBound) {
  const Fleet fleet = GenerateFleet({1000, 5});
  const std::vector<Job> batch = GenerateSliceBatch(fleet, 5, 1.3);
  const BatchComparison cmp = CompareSliceBatch(fleet, batch, 5);
  ASSERT_EQ(cmp.results.size(), 4u);
  EXPECT_GT(cmp.bound_slices, 0);
  EXPECT_LE(cmp.bound_slices, cmp.slices_asked);
  for (const BatchResult& r : cmp.results) {
    EXPECT_GT(r.slices_placed, 0) << r.policy;
    EXPECT_LE(r.slices_placed, cmp.bound_slices) << r.policy;
    EXPECT_LE(r.chips_placed, cmp.bound_chips) << r.policy;
  }
}

TEST(SimTest, FluidServedNeverIdlesWhileWorkWaits) {
  EXPECT_DOUBLE_EQ(FluidServed({}, 10, 8), 0);
  // 100 chip-seconds at t = 0 on 10 chips: half by 5, all by 10.
  EXPECT_DOUBLE_EQ(FluidServed({{0, 100}}, 10, 5), 50);
  EXPECT_DOUBLE_EQ(FluidServed({{0, 100}}, 10, 20), 100);
  // An idle gap is lost: 20 at 0 (done by 2), 30 at 10, end 12.
  EXPECT_DOUBLE_EQ(FluidServed({{0, 20}, {10, 30}}, 10, 12), 40);
  // A backlog carries over: 50 at 0 and 50 at 1, end 8.
  EXPECT_DOUBLE_EQ(FluidServed({{0, 50}, {1, 50}}, 10, 8), 80);
  // Work arriving after the end is not served.
  EXPECT_DOUBLE_EQ(FluidServed({{0, 10}, {9, 50}}, 10, 8), 10);
}

// On the mixed trace, overloaded so that the pools fill, no policy holds
// more chip-time than ChipHoursBound(), and the bound is not far above
// what they hold.
TEST(SimTest, NoPolicyBeatsTheChipHoursBoundOnTheMixedTrace) {
  FleetOptions fo;
  fo.nodes = 400;
  fo.seed = 3;
  fo.cpu_fraction = 0.05;
  fo.mix = FleetMix::kMixed;
  const Fleet fleet = GenerateFleet(fo);
  TraceOptions to;
  to.jobs = 1200;
  to.seed = 3;
  to.load = 1.2;
  to.cpu_load = 1.5;
  const std::vector<Job> trace = GenerateMixedTrace(fleet, to);
  const std::vector<bool> feasible = FeasibleJobs(fleet, trace);
  const double bound = ChipHoursBound(fleet, trace, feasible);
  ASSERT_GT(bound, 0);
  for (PolicyKind kind : kMixedPolicies) {
    const SimResult r = Replay(fleet, trace, feasible, kind, SimOptions{});
    SCOPED_TRACE(r.policy);
    EXPECT_LE(r.chip_hours, bound * (1 + 1e-9));
    EXPECT_GE(r.chip_hours, 0.95 * bound);
  }
}

// With single-slice jobs and no selector or class, the bound is exact: per
// shape, min(slices asked, slices free); first-fit reaches it.
TEST(SimTest, BoundIsExactForUnconstrainedSingleSlices) {
  const Fleet fleet = GenerateFleet({800, 6});
  std::vector<Job> batch = GenerateSliceBatch(fleet, 6, 1.3);
  std::vector<Job> single;
  for (Job& j : batch) {
    if (j.request.slice->num_slices != 1) continue;
    j.request.slice->selector = {};
    j.request.priorities.clear();
    j.compute_class.clear();
    j.id = static_cast<int64_t>(single.size());
    single.push_back(std::move(j));
  }
  int64_t expected = 0;
  for (const FleetShape& s : fleet.shapes) {
    int64_t asked = 0;
    for (const Job& j : single) {
      asked += j.request.slice->generation == s.shape.generation &&
               j.request.slice->topology == s.shape.topology;
    }
    expected += std::min(asked, s.slices);
  }
  const BatchComparison cmp = CompareSliceBatch(fleet, single, 6);
  EXPECT_EQ(cmp.bound_slices, expected);
  EXPECT_EQ(cmp.results[1].policy, "first-fit");
  EXPECT_EQ(cmp.results[1].slices_placed, expected);
}

// tiered-first-fit on a fleet whose TPU hosts come first in node-id order
// (so plain first-fit takes them first): the v6e 4x4 slice "a" (hosts
// a-w0..a-w3, 96 CPU each), the single-host v6e 2x4 node "b-w0" (96 CPU) and
// the CPU node "z-cpu" (32 CPU).
class TieredFirstFitTest : public ::testing::Test {
 protected:
  void SetUp() override {
    using scheduler::testing::Slice;
    for (auto nodes : {Slice("a", "TPU-V6E", "4x4"), Slice("b", "TPU-V6E", "2x4"),
                       std::vector<scheduler::Node>{scheduler::testing::CpuNode("z-cpu", 32)}}) {
      fleet_.nodes.insert(fleet_.nodes.end(), nodes.begin(), nodes.end());
    }
    auto snap = scheduler::InventorySnapshot::Build(fleet_.nodes, {});
    ASSERT_TRUE(snap.ok()) << snap.status();
    snap_ = *std::move(snap);
  }

  static Job CpuGang(int bundles, double cpu, scheduler::Strategy strategy) {
    Job job;
    for (int b = 0; b < bundles; ++b) {
      job.request.bundles.push_back({{{"CPU", scheduler::testing::Units(cpu)}}, {}, ""});
    }
    job.request.strategy = strategy;
    return job;
  }

  // The node ids of a placement, bundle order.
  std::vector<std::string> Nodes(PolicyKind kind, const Job& job) const {
    std::vector<std::string> ids;
    for (uint32_t n : MakePolicy(kind, 1)->Place(*snap_, job).nodes) {
      ids.push_back(snap_->node(n).node.node_id);
    }
    return ids;
  }

  Fleet fleet_;
  std::shared_ptr<const scheduler::InventorySnapshot> snap_;
};

TEST_F(TieredFirstFitTest, CpuGangTakesTheCpuNodeBeforeTpuHosts) {
  using V = std::vector<std::string>;
  // SPREAD would like two nodes, but the CPU node holds both bundles.
  const Job gang = CpuGang(2, 8, scheduler::Strategy::kSpread);
  EXPECT_EQ(Nodes(PolicyKind::kTieredFirstFit, gang), (V{"z-cpu", "z-cpu"}));
  EXPECT_EQ(Nodes(PolicyKind::kFirstFit, gang), (V{"a-w0", "a-w1"}));
  const Job pack = CpuGang(3, 8, scheduler::Strategy::kPack);
  EXPECT_EQ(Nodes(PolicyKind::kTieredFirstFit, pack), (V{"z-cpu", "z-cpu", "z-cpu"}));
}

TEST_F(TieredFirstFitTest, SingleHostTpuNodeBeforeHostsOfMultiHostSlices) {
  using V = std::vector<std::string>;
  // Too big for the CPU node: the single-host node, not a host of "a".
  EXPECT_EQ(Nodes(PolicyKind::kTieredFirstFit, CpuGang(1, 64, scheduler::Strategy::kPack)),
            (V{"b-w0"}));
  // Only the last tier holds three of 64: lower tiers still come first in it.
  EXPECT_EQ(Nodes(PolicyKind::kTieredFirstFit, CpuGang(3, 64, scheduler::Strategy::kSpread)),
            (V{"b-w0", "a-w0", "a-w1"}));
}

}  // namespace
}  // namespace sliced::bench
