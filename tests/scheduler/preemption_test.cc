#include "scheduler/preemption.h"

#include <algorithm>
#include <array>
#include <random>
#include <string>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "gtest/gtest.h"
#include "tests/scheduler/builders.h"

namespace sliced::scheduler {
namespace {

using ::sliced::scheduler::testing::Append;
using ::sliced::scheduler::testing::Cpu;
using ::sliced::scheduler::testing::CpuNode;
using ::sliced::scheduler::testing::Slice;
using ::sliced::scheduler::testing::Snap;
using ::sliced::scheduler::testing::Tpu;
using ::sliced::scheduler::testing::Units;

PlacementRequest SliceRequest(std::string topology, int num_slices = 1) {
  PlacementRequest r;
  SliceRequirement s;
  s.topology = std::move(topology);
  s.num_slices = num_slices;
  r.slice = s;
  return r;
}

PlacementRequest Gang(Strategy strategy, std::vector<ResourceSet> bundles) {
  PlacementRequest r;
  r.strategy = strategy;
  for (ResourceSet& b : bundles)
    r.bundles.push_back(Bundle{std::move(b), {}, ""});
  return r;
}

// `pg` holds `chips` TPU on each of the given hosts.
void Hold(std::vector<Allocation>& out, const std::string& pg,
          const std::vector<std::string>& hosts, double chips = 4) {
  for (size_t i = 0; i < hosts.size(); ++i) {
    out.push_back(Allocation{pg, static_cast<int>(i), hosts[i], Tpu(chips)});
  }
}

std::string Ids(const PreemptionPlan& plan) {
  return absl::StrJoin(plan.victims, ",", [](std::string* o, const Victim& v) {
    o->append(v.pg_id);
  });
}

// Two free-standing v6e-16 slices "a" and "b" (4 hosts of 4 chips each).
std::vector<Node> TwoSlices() {
  std::vector<Node> nodes = Slice("a", "TPU-V6E", "4x4");
  Append(nodes, Slice("b", "TPU-V6E", "4x4"));
  return nodes;
}

// The topology-blind trap (kueue #10815): freeing the two smallest groups
// frees 16 chips, but half of slice a and half of slice b, so the v6e-16
// request still does not fit. The plan frees one whole slice instead.
TEST(PreemptionTest, OneWholeSliceBeatsTwoHalfSlices) {
  std::vector<Allocation> held;
  Hold(held, "small-a", {"a-w0", "a-w1"});
  Hold(held, "small-b", {"b-w0", "b-w1"});
  Hold(held, "half-a", {"a-w2", "a-w3"});
  Hold(held, "half-b", {"b-w2", "b-w3"});
  auto snap = Snap(TwoSlices(), held);
  const PlacementRequest want = SliceRequest("4x4");
  ASSERT_NE(Solve(*snap, want).outcome, Decision::kPlaced);

  // Youngest first in a chip-counting baseline: small-a, small-b.
  PreemptionPlan plan = PlanPreemption(*snap, want,
                                       {{"half-a", 0, 1, ""},
                                        {"half-b", 0, 2, ""},
                                        {"small-a", 0, 3, ""},
                                        {"small-b", 0, 4, ""}});
  ASSERT_TRUE(plan.found) << plan.summary;
  EXPECT_EQ(plan.decision.outcome, Decision::kPlaced);
  ASSERT_EQ(plan.victims.size(), 2u) << plan.summary;
  // Both victims on one slice, and the request lands on that slice.
  EXPECT_EQ(plan.victims[0].slices, plan.victims[1].slices) << plan.summary;
  ASSERT_EQ(plan.decision.slice_names.size(), 1u);
  EXPECT_EQ(plan.victims[0].slices,
            std::vector<std::string>{plan.decision.slice_names[0]});
  // Of the two whole slices, the younger victims (slice b's) go.
  EXPECT_EQ(Ids(plan), "half-b,small-b");
  EXPECT_EQ(plan.summary,
            "preempting 2 group(s) of priority <= 0 makes room: half-b (8 TPU "
            "on slice b), small-b (8 TPU on slice b)");
}

TEST(PreemptionTest, OneVictimHoldingAWholeSliceBeatsTwo) {
  std::vector<Allocation> held;
  Hold(held, "x", {"a-w0", "a-w1"});
  Hold(held, "y", {"a-w2", "a-w3"});
  Hold(held, "whole", {"b-w0", "b-w1", "b-w2", "b-w3"});
  auto snap = Snap(TwoSlices(), held);
  PreemptionPlan plan =
      PlanPreemption(*snap, SliceRequest("4x4"),
                     {{"whole", 0, 1, ""}, {"x", 0, 2, ""}, {"y", 0, 3, ""}});
  ASSERT_TRUE(plan.found) << plan.summary;
  EXPECT_EQ(Ids(plan), "whole");
  EXPECT_EQ(plan.victims[0].tpu, 16);
}

TEST(PreemptionTest, LowerPriorityBeatsFewerVictims) {
  std::vector<Allocation> held;
  Hold(held, "lo-1", {"a-w0", "a-w1"});
  Hold(held, "lo-2", {"a-w2", "a-w3"});
  Hold(held, "batch", {"b-w0", "b-w1", "b-w2", "b-w3"});
  auto snap = Snap(TwoSlices(), held);
  PreemptionPlan plan = PlanPreemption(
      *snap, SliceRequest("4x4"),
      {{"batch", 100, 1, ""}, {"lo-1", 0, 2, ""}, {"lo-2", 0, 3, ""}});
  ASSERT_TRUE(plan.found) << plan.summary;
  EXPECT_EQ(Ids(plan), "lo-1,lo-2");  // the older first on ties
  EXPECT_EQ(plan.victims[0].priority, 0);
}

TEST(PreemptionTest, HigherLevelOnlyWhenTheLowerCannotMakeRoom) {
  std::vector<Allocation> held;
  Hold(held, "lo", {"a-w0"}, 1);  // a's other chips are a higher group's
  Hold(held, "prod", {"a-w1", "a-w2", "a-w3"});
  Hold(held, "batch", {"b-w0", "b-w1", "b-w2", "b-w3"});
  auto snap = Snap(TwoSlices(), held);
  // "prod" is not a candidate (equal or higher priority than the
  // preemptor): freeing "lo" does not free slice a, so batch goes.
  PreemptionPlan plan = PlanPreemption(
      *snap, SliceRequest("4x4"), {{"batch", 100, 1, ""}, {"lo", 0, 2, ""}});
  ASSERT_TRUE(plan.found) << plan.summary;
  EXPECT_EQ(Ids(plan), "batch");
}

TEST(PreemptionTest, NoCandidateHoldingTheRightCapacity) {
  std::vector<Allocation> held;
  Hold(held, "prod-a", {"a-w0", "a-w1", "a-w2", "a-w3"});
  Hold(held, "prod-b", {"b-w0"}, 1);
  std::vector<Node> nodes = TwoSlices();
  nodes.push_back(CpuNode("cpu"));
  held.push_back(Allocation{"cpu-job", 0, "cpu", Cpu(8)});
  auto snap = Snap(nodes, held);
  PreemptionPlan plan =
      PlanPreemption(*snap, SliceRequest("4x4"), {{"cpu-job", 0, 1, ""}});
  EXPECT_FALSE(plan.found);
  EXPECT_TRUE(plan.victims.empty());
  EXPECT_NE(plan.decision.outcome, Decision::kPlaced);
  EXPECT_TRUE(absl::StartsWith(
      plan.summary,
      "preempting all 1 running group(s) of lower priority would not make "
      "room: "))
      << plan.summary;

  PreemptionPlan none = PlanPreemption(*snap, SliceRequest("4x4"), {});
  EXPECT_FALSE(none.found);
  EXPECT_EQ(none.solves, 0);
}

// Where a request could go, so that only groups holding capacity there are
// candidates: slice hosts of its generation, or nodes that match a bundle's
// selector and have what it asks (primary or fallback).
TEST(PreemptionTest, NodesARequestMayUse) {
  std::vector<Node> nodes = Slice("a", "TPU-V6E", "4x4");
  Append(nodes, Slice("v4", "TPU-V4", "2x2x2"));
  nodes.push_back(CpuNode("cpu1", 8, "z1"));
  nodes.push_back(CpuNode("cpu2", 8, "z2"));
  auto snap = Snap(nodes);
  auto ids = [&](const PlacementRequest& r) {
    std::vector<std::string> out;
    for (uint32_t i : NodesARequestMayUse(*snap, r)) {
      out.push_back(snap->node(i).node.node_id);
    }
    return absl::StrJoin(out, ",");
  };
  EXPECT_EQ(ids(SliceRequest("4x4")), "a-w0,a-w1,a-w2,a-w3");
  PlacementRequest v4 = SliceRequest("2x2x2");
  v4.slice->generation = TpuGeneration::kV4;
  EXPECT_EQ(ids(v4), "v4-w0,v4-w1");
  // TPU bundles: TPU hosts only; CPU bundles: every node with CPUs.
  EXPECT_EQ(ids(Gang(Strategy::kPack, {Tpu(4)})),
            "a-w0,a-w1,a-w2,a-w3,v4-w0,v4-w1");
  EXPECT_EQ(ids(Gang(Strategy::kPack, {Cpu(1)})),
            "a-w0,a-w1,a-w2,a-w3,cpu1,cpu2,v4-w0,v4-w1");
  // A selector narrows; a fallback adds its own nodes.
  PlacementRequest zoned = Gang(Strategy::kPack, {Cpu(1)});
  zoned.bundles[0].selector =
      *ParseLabelSelector({{std::string(kLabelZone), "z2"}});
  EXPECT_EQ(ids(zoned), "cpu2");
  zoned.fallbacks = {{Bundle{Tpu(4), {}, ""}}};
  EXPECT_EQ(ids(zoned), "a-w0,a-w1,a-w2,a-w3,cpu2,v4-w0,v4-w1");
  // Bundles that differ only in amounts count once; one that asks for other
  // resources under the same selector counts on its own.
  EXPECT_EQ(ids(Gang(Strategy::kPack, {Cpu(1), Cpu(3), Cpu(2)})),
            ids(Gang(Strategy::kPack, {Cpu(1)})));
  EXPECT_EQ(ids(Gang(Strategy::kPack, {Tpu(4), Cpu(1)})),
            "a-w0,a-w1,a-w2,a-w3,cpu1,cpu2,v4-w0,v4-w1");
}

TEST(PreemptionTest, MultiSliceTakesAFreeSliceAndFreesTheCheapestOther) {
  std::vector<Node> nodes = TwoSlices();
  Append(nodes, Slice("c", "TPU-V6E", "4x4"));
  std::vector<Allocation> held;
  Hold(held, "old", {"a-w0", "a-w1", "a-w2", "a-w3"});
  Hold(held, "young", {"b-w0", "b-w1", "b-w2", "b-w3"});
  auto snap = Snap(nodes, held);
  PreemptionPlan plan = PlanPreemption(
      *snap, SliceRequest("4x4", 2), {{"old", 0, 1, ""}, {"young", 0, 2, ""}});
  ASSERT_TRUE(plan.found) << plan.summary;
  EXPECT_EQ(Ids(plan), "young");
  std::vector<std::string> slices = plan.decision.slice_names;
  std::sort(slices.begin(), slices.end());
  EXPECT_EQ(slices, (std::vector<std::string>{"b", "c"}));
}

TEST(PreemptionTest, PlainGangFreesOnlyWhatItNeeds) {
  std::vector<Node> nodes = {CpuNode("n1"), CpuNode("n2"), CpuNode("n3")};
  std::vector<Allocation> held = {
      Allocation{"g1", 0, "n1", Cpu(6)}, Allocation{"g2", 0, "n2", Cpu(6)},
      Allocation{"g3", 0, "n3", Cpu(2)}, Allocation{"g4", 0, "n3", Cpu(2)}};
  auto snap = Snap(nodes, held);
  const std::vector<VictimCandidate> all = {
      {"g1", 0, 1, ""}, {"g2", 0, 2, ""}, {"g3", 0, 3, ""}, {"g4", 0, 4, ""}};

  // One bundle of 6 CPU: any one group makes room (g3 or g4 leaves 6 free
  // on n3); the youngest goes.
  const PlacementRequest one = Gang(Strategy::kPack, {Cpu(6)});
  ASSERT_NE(Solve(*snap, one).outcome, Decision::kPlaced);
  PreemptionPlan plan = PlanPreemption(*snap, one, all);
  ASSERT_TRUE(plan.found) << plan.summary;
  EXPECT_EQ(Ids(plan), "g4");
  EXPECT_EQ(plan.decision.bundle_nodes, std::vector<std::string>{"n3"});
  EXPECT_EQ(plan.victims[0].tpu, 0);

  // Two on distinct nodes: two victims are needed, never three.
  const PlacementRequest two = Gang(Strategy::kStrictSpread, {Cpu(6), Cpu(6)});
  PreemptionPlan pair = PlanPreemption(*snap, two, all);
  ASSERT_TRUE(pair.found) << pair.summary;
  EXPECT_EQ(pair.victims.size(), 2u) << pair.summary;
}

TEST(PreemptionTest, BoundIsSaidInTheSummary) {
  std::vector<Allocation> held;
  Hold(held, "x", {"a-w0", "a-w1"});
  Hold(held, "y", {"a-w2", "a-w3"});
  Hold(held, "z", {"b-w0", "b-w1", "b-w2", "b-w3"});
  auto snap = Snap(TwoSlices(), held);
  PreemptionOptions tight;
  tight.max_solves = 1;
  PreemptionPlan plan = PlanPreemption(
      *snap, SliceRequest("4x4"),
      {{"x", 0, 1, ""}, {"y", 0, 2, ""}, {"z", 0, 3, ""}}, tight);
  ASSERT_TRUE(plan.found) << plan.summary;
  EXPECT_TRUE(plan.bound_hit);
  EXPECT_NE(plan.summary.find("(search bounded at 4096 candidates / 1 solves: "
                              "the set may not be minimal)"),
            std::string::npos)
      << plan.summary;

  PreemptionOptions few;
  few.max_candidates = 1;  // keeps only the lowest-priority, youngest: z
  PreemptionPlan cut =
      PlanPreemption(*snap, SliceRequest("4x4"),
                     {{"x", 0, 1, ""}, {"y", 0, 2, ""}, {"z", 0, 3, ""}}, few);
  EXPECT_TRUE(cut.bound_hit);
  EXPECT_EQ(Ids(cut), "z");
}

// --- Properties
// ---------------------------------------------------------------

// The allocations a placed decision stands for (slice bundles expanded).
std::vector<Allocation> Placed(const PlacementRequest& r, const Decision& d,
                               const std::string& pg) {
  std::vector<Allocation> out;
  for (size_t i = 0; i < d.bundle_nodes.size(); ++i) {
    ResourceSet res;
    if (r.slice.has_value()) {
      const TpuShape shape =
          *ResolveTpuShape(r.slice->generation, r.slice->topology);
      res = Tpu(shape.chips_per_host);
    } else {
      res = r.bundles[i].resources;
    }
    out.push_back(Allocation{pg, static_cast<int>(i), d.bundle_nodes[i], res});
  }
  return out;
}

TEST(PreemptionPropertyTest, VictimsMakeRoomAndNoneCanBeSpared) {
  int planned = 0;
  for (uint32_t seed = 1; seed <= 120; ++seed) {
    SCOPED_TRACE(absl::StrCat("seed ", seed));
    std::mt19937 rng(seed);
    std::vector<Node> nodes;
    for (int i = 0, n = 1 + rng() % 4; i < n; ++i) {
      Append(nodes, Slice(absl::StrCat("s", i), "TPU-V6E", "4x4"));
    }
    for (int i = 0, n = rng() % 4; i < n; ++i) {
      nodes.push_back(CpuNode(absl::StrCat("cpu", i), 8));
    }
    // Fill the cluster with groups of random priority: slice jobs of 1-4
    // hosts holding 1-4 chips each, and CPU jobs.
    auto snap = Snap(nodes);
    std::vector<VictimCandidate> candidates;
    absl::flat_hash_set<std::string> higher;
    const int32_t preemptor = 100;
    for (int g = 0; g < 40; ++g) {
      const std::string pg = absl::StrCat("g", g);
      PlacementRequest r;
      if (rng() % 3 == 0) {
        r = Gang(Strategy::kPack, {Cpu(1 + rng() % 6)});
      } else {
        std::vector<ResourceSet> bundles(1 + rng() % 4, Tpu(1 + rng() % 4));
        r = Gang(Strategy::kStrictSpread, bundles);
      }
      const Decision d = Solve(*snap, r);
      if (d.outcome != Decision::kPlaced) continue;
      SnapshotDelta delta;
      delta.add_allocations = Placed(r, d, pg);
      snap = *snap->Apply(delta);
      const int32_t prio = std::array<int32_t, 3>{0, 50, 100}[rng() % 3];
      if (prio < preemptor) {
        candidates.push_back({pg, prio, static_cast<uint64_t>(g), ""});
      } else {
        higher.insert(pg);
      }
    }
    const PlacementRequest want =
        rng() % 2 ? SliceRequest("4x4", 1 + rng() % 2)
                  : Gang(Strategy::kSpread,
                         std::vector<ResourceSet>(1 + rng() % 4, Tpu(4)));
    if (Solve(*snap, want).outcome == Decision::kPlaced) continue;
    const PreemptionPlan plan = PlanPreemption(*snap, want, candidates);
    // Deterministic, whatever the candidates' order.
    std::vector<VictimCandidate> shuffled = candidates;
    std::shuffle(shuffled.begin(), shuffled.end(), rng);
    EXPECT_EQ(PlanPreemption(*snap, want, shuffled), plan);
    if (!plan.found) continue;
    ++planned;
    ASSERT_FALSE(plan.bound_hit);
    // Only candidates, each once; never a group of the preemptor's level.
    absl::flat_hash_set<std::string> victims;
    for (const Victim& v : plan.victims) {
      EXPECT_TRUE(victims.insert(v.pg_id).second) << v.pg_id;
      EXPECT_FALSE(higher.contains(v.pg_id)) << v.pg_id;
      EXPECT_LT(v.priority, preemptor);
    }
    // The request fits once they go, and no chip is held twice.
    SnapshotDelta release;
    release.release_pg_ids.assign(victims.begin(), victims.end());
    auto freed = *snap->Apply(release);
    ASSERT_EQ(plan.decision.outcome, Decision::kPlaced) << plan.summary;
    EXPECT_EQ(Solve(*freed, want), plan.decision);
    SnapshotDelta take;
    take.add_allocations = Placed(want, plan.decision, "preemptor");
    auto after = freed->Apply(take);
    ASSERT_TRUE(after.ok()) << after.status();
    EXPECT_TRUE((*after)->CheckNotOverCommitted().ok());
    // Irreducible: sparing any one victim leaves no room.
    for (const Victim& spare : plan.victims) {
      SnapshotDelta fewer;
      for (const Victim& v : plan.victims) {
        if (v.pg_id != spare.pg_id) fewer.release_pg_ids.push_back(v.pg_id);
      }
      EXPECT_NE(Solve(**snap->Apply(fewer), want).outcome, Decision::kPlaced)
          << "could spare " << spare.pg_id << " of " << plan.summary;
    }
    // No victim of a level above the lowest that makes room.
    SnapshotDelta below;
    for (const VictimCandidate& c : candidates) {
      if (c.priority < plan.victims.front().priority) {
        below.release_pg_ids.push_back(c.pg_id);
      }
    }
    EXPECT_NE(Solve(**snap->Apply(below), want).outcome, Decision::kPlaced)
        << plan.summary;
  }
  EXPECT_GT(planned, 20);
}

}  // namespace
}  // namespace sliced::scheduler
