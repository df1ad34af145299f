// Tests of the solver's pipeline steps (scheduler/internal/) on their own:
// candidates, matching, diagnosis and the slice placer. Solve() as a whole is
// tested in solver_test.cc and solver_property_test.cc.
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "scheduler/internal/candidates.h"
#include "scheduler/internal/diagnosis.h"
#include "scheduler/internal/matching.h"
#include "scheduler/internal/slice_placer.h"
#include "scheduler/internal/snapshot_state.h"
#include "scheduler/internal/solver_util.h"
#include "tests/scheduler/builders.h"

namespace sliced::scheduler::internal {
namespace {

using ::sliced::scheduler::testing::CpuNode;
using ::sliced::scheduler::testing::Slice;
using ::sliced::scheduler::testing::Units;

LabelSelector Sel(const std::string& key, const std::string& value) {
  return *ParseLabelSelector({{key, value}});
}

Node Pooled(Node n, const std::string& pool) {
  n.labels["pool"] = pool;
  return n;
}

std::vector<uint32_t> Walk(const CandidateGroups& groups, int g) {
  std::vector<uint32_t> out;
  for (std::optional<Cursor> c = groups.Next(groups.group(g), Cursor{}); c;
       c = groups.Next(groups.group(g), Cursor{c->rank, c->pos + 1})) {
    out.push_back(static_cast<uint32_t>(c->pos));
  }
  return out;
}

TEST(CandidatesTest, WalksMatchingNodesInRankOrder) {
  // cpu-a is in use (rank 0), cpu-b idle (rank 1), a's hosts are a free
  // intact slice (last for CPU bundles); cpu-c does not match.
  std::vector<Node> nodes = Slice("a", "TPU-V6E", "2x4", "z1");
  nodes.push_back(Pooled(CpuNode("cpu-a"), "x"));
  nodes.push_back(Pooled(CpuNode("cpu-b"), "x"));
  nodes.push_back(Pooled(CpuNode("cpu-c"), "y"));
  for (Node& n : nodes) {
    if (n.node_id.rfind("a-", 0) == 0) n.labels["pool"] = "x";
  }
  auto snap = *InventorySnapshot::Build(
      nodes, {{"pg", 0, "cpu-a", {{"CPU", Units(1)}}}});
  const SnapshotState& state = StateOf(*snap);
  CandidateGroups groups(state);
  const ResourceSet cpu = {{"CPU", Units(1)}};
  const int g = groups.GroupFor(Sel("pool", "x"), BundleKind::kCpuOnly, cpu);
  EXPECT_EQ(groups.GroupFor(Sel("pool", "x"), BundleKind::kCpuOnly, cpu), g);
  std::vector<std::string> ids;
  for (uint32_t i : Walk(groups, g)) ids.push_back(state.node(i).node.node_id);
  EXPECT_EQ(ids, (std::vector<std::string>{"cpu-a", "cpu-b", "a-w0"}));
  EXPECT_EQ(groups.Reach(groups.group(g)), 3);
}

TEST(CandidatesTest, ReachWithoutASelectorCountsEveryRankedNode) {
  // A group without a selector reads the rank sets' kept counts; a walk
  // visits the same nodes one by one: with every rank, and with the ranks
  // cut at 2 (cpu-a in use, cpu-b idle; not the slice's hosts).
  std::vector<Node> nodes = Slice("a", "TPU-V6E", "2x4", "z1");
  nodes.push_back(CpuNode("cpu-a"));
  nodes.push_back(CpuNode("cpu-b"));
  auto snap = *InventorySnapshot::Build(
      nodes, {{"pg", 0, "cpu-a", {{"CPU", Units(1)}}}});
  const SnapshotState& state = StateOf(*snap);
  const ResourceSet cpu = {{"CPU", Units(1)}};
  for (int limit : {kNumRanks, 2}) {
    CandidateGroups groups(state, limit);
    const int all = groups.GroupFor(LabelSelector(), BundleKind::kCpuOnly, cpu);
    const int64_t walked = static_cast<int64_t>(Walk(groups, all).size());
    EXPECT_EQ(groups.Reach(groups.group(all)), walked) << "limit " << limit;
    const int tpu = groups.GroupFor(LabelSelector(), BundleKind::kTpu, cpu);
    EXPECT_EQ(groups.Reach(groups.group(tpu)),
              static_cast<int64_t>(Walk(groups, tpu).size()))
        << "limit " << limit;
  }
  CandidateGroups groups(state);
  EXPECT_EQ(groups.Reach(groups.group(
                groups.GroupFor(LabelSelector(), BundleKind::kCpuOnly, cpu))),
            static_cast<int64_t>(nodes.size()));
}

TEST(CandidatesTest, GroupsThatDifferInAmountsReachAlike) {
  // STRICT_SPREAD counts a group's candidates only when the gang's groups
  // differ in more than their amounts (SameReach).
  std::vector<Node> nodes = {Pooled(CpuNode("c1", 8), "x"),
                             Pooled(CpuNode("c2", 2), "y"),
                             Pooled(CpuNode("c3", 8), "x")};
  auto snap = *InventorySnapshot::Build(nodes, {});
  CandidateGroups groups(StateOf(*snap));
  const int small = groups.GroupFor(Sel("pool", "x"), BundleKind::kCpuOnly,
                                    {{"CPU", Units(1)}});
  const int large = groups.GroupFor(Sel("pool", "x"), BundleKind::kCpuOnly,
                                    {{"CPU", Units(4)}});
  const int other = groups.GroupFor(Sel("pool", "y"), BundleKind::kCpuOnly,
                                    {{"CPU", Units(1)}});
  const int any = groups.GroupFor(LabelSelector(), BundleKind::kCpuOnly,
                                  {{"CPU", Units(1)}});
  ASSERT_NE(small, large);
  EXPECT_TRUE(
      CandidateGroups::SameReach(groups.group(small), groups.group(large)));
  EXPECT_EQ(groups.Reach(groups.group(small)), 2);
  EXPECT_EQ(groups.Reach(groups.group(large)), 2);
  EXPECT_FALSE(
      CandidateGroups::SameReach(groups.group(small), groups.group(other)));
  EXPECT_EQ(groups.Reach(groups.group(other)), 1);
  EXPECT_FALSE(
      CandidateGroups::SameReach(groups.group(small), groups.group(any)));
  EXPECT_EQ(groups.Reach(groups.group(any)), 3);
}

TEST(CandidatesTest, CandidateBitsAreTheNodesTheSelectorMatches) {
  // A term on a bitset key (the zone) with one value is one pass over its
  // bitset; with several values, or on another key, the values are ORed
  // first. Either way a node's bit is Matches() on its labels, and a gap (a
  // removed node's index) is never a candidate.
  std::vector<Node> nodes = {CpuNode("c1", 8, "z1"), CpuNode("c2", 8, "z2"),
                             CpuNode("c3", 8, "z3"), CpuNode("c4", 8, "z1")};
  nodes[0].labels["pool"] = "x";
  nodes[1].labels["pool"] = "y";
  nodes[3].labels["pool"] = "y";
  auto built = *InventorySnapshot::Build(nodes, {});
  SnapshotDelta remove;
  remove.remove_node_ids = {"c4"};
  auto snap = *built->Apply(remove);
  const SnapshotState& state = StateOf(*snap);
  const std::string zone(kLabelZone);
  const std::vector<absl::btree_map<std::string, std::string>> selectors = {
      {{zone, "z1"}},
      {{zone, "!z1"}},
      {{zone, "z9"}},
      {{zone, "!z9"}},
      {{zone, "in(z1,z3)"}},
      {{zone, "!in(z2,z9)"}},
      {{"pool", "y"}},
      {{"pool", "!y"}},
      {{zone, "!z3"}, {"pool", "in(x,y)"}},
  };
  for (const auto& spec : selectors) {
    const LabelSelector selector = *ParseLabelSelector(spec);
    const Bits bits = CandidateBits(state, selector);
    std::vector<std::string> got, want;
    for (size_t i = 0; i < state.index_end(); ++i) {
      if ((bits[i >> 6] >> (i & 63)) & 1) {
        got.push_back(state.node(i).node.node_id);
      }
      if (state.node_bits().Test(i) &&
          Matches(selector, state.node(i).node.labels)) {
        want.push_back(state.node(i).node.node_id);
      }
    }
    EXPECT_EQ(got, want) << SelectorToString(selector);
  }
}

TEST(MatchingTest, RehomesAGreedyBundleToPlaceAnother) {
  auto snap = *InventorySnapshot::Build(
      {Pooled(CpuNode("n1"), "a"), Pooled(CpuNode("n2"), "b")}, {});
  const SnapshotState& state = StateOf(*snap);
  CandidateGroups groups(state);
  std::vector<Bundle> bundles(2);
  bundles[0].resources = {{"CPU", Units(1)}};
  bundles[1].resources = {{"CPU", Units(1)}};
  bundles[1].selector = Sel("pool", "a");  // only n1
  const std::vector<int> group = {
      groups.GroupFor(LabelSelector(), BundleKind::kCpuOnly,
                      bundles[0].resources),
      groups.GroupFor(bundles[1].selector, BundleKind::kCpuOnly,
                      bundles[1].resources)};
  // Greedy put bundle 0 on n1 and left bundle 1 without a node.
  const std::vector<int64_t> start = {state.NodeIndex("n1"), -1};
  const Released released;
  const std::optional<std::vector<uint32_t>> matched =
      MatchDistinct(state, released, {&bundles, group, &groups, start});
  ASSERT_TRUE(matched.has_value());
  EXPECT_EQ(*matched, (std::vector<uint32_t>{
                          static_cast<uint32_t>(state.NodeIndex("n2")),
                          static_cast<uint32_t>(state.NodeIndex("n1"))}));

  bundles[0].pinned_node_id = "n1";  // a pinned bundle never moves
  EXPECT_FALSE(MatchDistinct(state, released, {&bundles, group, &groups, start})
                   .has_value());
}

TEST(MatchingTest, HallsConditionDecidesBeforeAnySearch) {
  // Three nodes; a {CPU: 6} bundle fits only big1 and big2, {CPU: 1}
  // bundles fit all three. Greedy left the two large bundles without a
  // node. With three bundles the nodes are exactly enough (a matching
  // re-homes the small one); a fourth bundle makes them too few (decided by
  // the search when greedy placed the small ones, by the count when it left
  // one), and a third large one makes its group's nodes too few.
  auto snap = *InventorySnapshot::Build(
      {CpuNode("big1", 8), CpuNode("big2", 8), CpuNode("small", 2)}, {});
  const SnapshotState& state = StateOf(*snap);
  CandidateGroups groups(state);
  const ResourceSet large = {{"CPU", Units(6)}};
  const ResourceSet small = {{"CPU", Units(1)}};
  const int g_large =
      groups.GroupFor(LabelSelector(), BundleKind::kCpuOnly, large);
  const int g_small =
      groups.GroupFor(LabelSelector(), BundleKind::kCpuOnly, small);
  const Released released;
  auto match = [&](const std::vector<ResourceSet>& shapes,
                   const std::vector<int64_t>& start) {
    std::vector<Bundle> bundles(shapes.size());
    std::vector<int> group;
    for (size_t b = 0; b < shapes.size(); ++b) {
      bundles[b].resources = shapes[b];
      group.push_back(shapes[b] == large ? g_large : g_small);
    }
    return MatchDistinct(state, released, {&bundles, group, &groups, start});
  };
  const int64_t big1 = state.NodeIndex("big1");
  const int64_t big2 = state.NodeIndex("big2");
  const int64_t small_node = state.NodeIndex("small");
  const std::optional<std::vector<uint32_t>> three =
      match({small, large, large}, {big1, -1, -1});
  ASSERT_TRUE(three.has_value());
  EXPECT_EQ((*three)[0], static_cast<uint32_t>(small_node));
  EXPECT_EQ(std::set<uint32_t>({(*three)[1], (*three)[2]}),
            std::set<uint32_t>(
                {static_cast<uint32_t>(big1), static_cast<uint32_t>(big2)}));
  EXPECT_FALSE(match({small, large, large, small}, {big1, -1, -1, small_node})
                   .has_value());
  EXPECT_FALSE(
      match({small, large, large, small}, {big1, -1, -1, -1}).has_value());
  EXPECT_FALSE(match({small, large, large, large}, {small_node, big1, big2, -1})
                   .has_value());
}

TEST(DiagnosisTest, CountsEachNodeByTheFirstCheckItFails) {
  Node dead = CpuNode("dead");
  dead.state = NodeState::kDead;
  auto snap = *InventorySnapshot::Build(
      {CpuNode("small", 2), CpuNode("busy", 8), dead, CpuNode("ok", 8)},
      {{"pg", 0, "busy", {{"CPU", Units(6)}}}});
  const SnapshotState& state = StateOf(*snap);
  const Overlay overlay(state, nullptr);
  const ResourceSet four = {{"CPU", Units(4)}};
  const LabelSelector any;
  const Failure failure =
      ExplainBundle(state, overlay, {}, "p: ", {1, &four, &any, false});
  EXPECT_FALSE(failure.infeasible);
  EXPECT_EQ(failure.summary,
            "bundle 1 {CPU: 4}: 1/4 nodes fit: 1 insufficient total CPU, "
            "1 DEAD, 1 insufficient free CPU");
  ASSERT_EQ(failure.steps.size(), 1u);
  EXPECT_EQ(failure.steps[0].step, "p: bundle 1 {CPU: 4}");

  const ResourceSet huge = {{"CPU", Units(64)}};
  EXPECT_TRUE(ExplainBundle(state, overlay, {}, "", {0, &huge, &any, false})
                  .infeasible);
}

TEST(SlicePlacerTest, OneSliceComesFromTheZoneWithTheMostFree) {
  std::vector<Node> nodes;
  for (const char* name : {"s1", "s2"}) {
    for (Node& n : Slice(name, "TPU-V6E", "4x4", "z1")) nodes.push_back(n);
  }
  for (const char* name : {"s3", "s4", "s5"}) {
    for (Node& n : Slice(name, "TPU-V6E", "4x4", "z2")) nodes.push_back(n);
  }
  auto snap = *InventorySnapshot::Build(nodes, {});
  const Released released;
  SliceRequirement req;
  req.topology = "4x4";
  const std::vector<Bundle> no_bundles;
  const SliceRequest one(req, no_bundles, nullptr);
  const Attempt placed = SlicePlacer(StateOf(*snap), released).Place(one, "");
  ASSERT_TRUE(placed.placed);
  EXPECT_EQ(placed.slices, (std::vector<std::string>{"s3"}));

  req.num_slices = 2;  // best fit: the smallest zone that holds both
  const SliceRequest two(req, no_bundles, nullptr);
  EXPECT_EQ(SlicePlacer(StateOf(*snap), released).Place(two, "").slices,
            (std::vector<std::string>{"s1", "s2"}));

  req.num_slices = 6;
  const SliceRequest six(req, no_bundles, nullptr);
  const Attempt failed = SlicePlacer(StateOf(*snap), released).Place(six, "");
  EXPECT_FALSE(failed.placed);
  EXPECT_TRUE(failed.infeasible);
  EXPECT_EQ(failed.summary,
            "5/5 v6e-16 slices free, 6 needed; only 5 could ever match this "
            "request");
}

}  // namespace
}  // namespace sliced::scheduler::internal
