// Label-domain gangs (PlacementRequest::topology): domain choice, groups,
// several levels, intactness, pins, soft levels, diagnosis and validation.
#include <string>
#include <vector>

#include "absl/container/btree_set.h"
#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "scheduler/solver.h"
#include "tests/scheduler/builders.h"

namespace sliced::scheduler {
namespace {

using ::sliced::scheduler::testing::CpuNode;
using ::sliced::scheduler::testing::Slice;
using ::sliced::scheduler::testing::Snap;
using ::sliced::scheduler::testing::Tpu;
using ::sliced::scheduler::testing::Units;

constexpr char kGpuDomain[] = "ray.io/gpu-domain";

ResourceSet Gpu(double n) { return {{"GPU", Units(n)}, {"CPU", Units(1)}}; }

// A GPU node with 8 GPUs in NVLink domain `domain`.
Node GpuNode(const std::string& id, const std::string& domain,
             const std::string& zone = "z1") {
  Node n = CpuNode(id, 32, zone);
  n.resources["GPU"] = Units(8);
  if (!domain.empty()) n.labels[kGpuDomain] = domain;
  return n;
}

// `count` GPU nodes "<domain>-<i>".
void AddDomain(std::vector<Node>& nodes, const std::string& domain, int count,
               const std::string& zone = "z1") {
  for (int i = 0; i < count; ++i) {
    nodes.push_back(GpuNode(absl::StrCat(domain, "-", i), domain, zone));
  }
}

PlacementRequest Gang(int bundles, const ResourceSet& each,
                      std::vector<TopologyLevel> levels,
                      Strategy strategy = Strategy::kPack) {
  PlacementRequest r;
  r.strategy = strategy;
  r.bundles.assign(bundles, Bundle{each, {}, ""});
  r.topology = std::move(levels);
  return r;
}

// The value of `label` on each placed bundle's node.
std::vector<std::string> ValuesOf(const InventorySnapshot& snap,
                                  const Decision& d, const std::string& label) {
  std::vector<std::string> out;
  for (const std::string& id : d.bundle_nodes) {
    const Node& n = snap.node(snap.NodeIndex(id)).node;
    auto it = n.labels.find(label);
    out.push_back(it == n.labels.end() ? "" : it->second);
  }
  return out;
}

absl::btree_set<std::string> Distinct(const std::vector<std::string>& v) {
  return absl::btree_set<std::string>(v.begin(), v.end());
}

const DiagnosisStep* StepNamed(const Decision& d, const std::string& part) {
  for (const DiagnosisStep& s : d.diagnosis.steps) {
    if (s.step.find(part) != std::string::npos) return &s;
  }
  return nullptr;
}

int64_t Rejected(const DiagnosisStep& step, const std::string& reason) {
  for (const Rejection& r : step.rejected) {
    if (r.reason == reason) return r.count;
  }
  return 0;
}

TEST(TopologyTest, WholeGangInTheFullestDomainThatHoldsIt) {
  std::vector<Node> nodes;
  AddDomain(nodes, "nvl-a", 4);  // 32 GPUs free
  AddDomain(nodes, "nvl-b", 2);  // 16: too small
  AddDomain(nodes, "nvl-c", 6);  // 48
  auto snap = Snap(nodes);
  const Decision d =
      Solve(*snap, Gang(4, Gpu(8), {{kGpuDomain, Strategy::kStrictPack, 0}}));
  ASSERT_EQ(d.outcome, Decision::kPlaced) << d.diagnosis.summary;
  EXPECT_EQ(Distinct(ValuesOf(*snap, d, kGpuDomain)),
            absl::btree_set<std::string>{"nvl-a"});
  EXPECT_NE(d.diagnosis.summary.find("ray.io/gpu-domain=nvl-a"),
            std::string::npos)
      << d.diagnosis.summary;
}

// Inside a label domain too, CPU-only bundles go on a whole free slice only
// when nothing else holds them, and the decision says how many did.
TEST(TopologyTest, CpuBundlesOnAWholeSliceInTheirDomainAreNoted) {
  std::vector<Node> nodes = {CpuNode("cpu", 8, "z1"), CpuNode("far", 8, "z2")};
  for (Node& n : Slice("s", "TPU-V6E", "4x4", "z1")) nodes.push_back(n);
  auto snap = Snap(nodes);
  const ResourceSet one_cpu = {{"CPU", Units(1)}};
  const std::string zone(kLabelZone);
  const Decision d =
      Solve(*snap, Gang(3, one_cpu, {{zone, Strategy::kStrictPack, 0}},
                        Strategy::kStrictSpread));
  ASSERT_EQ(d.outcome, Decision::kPlaced) << d.diagnosis.summary;
  EXPECT_EQ(Distinct(ValuesOf(*snap, d, zone)),
            absl::btree_set<std::string>{"z1"});
  EXPECT_EQ(d.placement_note,
            "2 CPU-only bundle(s) on whole free TPU capacity: no other node "
            "fits them");
  EXPECT_NE(d.diagnosis.summary.find(d.placement_note), std::string::npos);
  // One bundle fits a CPU node: no note.
  const Decision one =
      Solve(*snap, Gang(1, one_cpu, {{zone, Strategy::kStrictPack, 0}},
                        Strategy::kStrictSpread));
  ASSERT_EQ(one.outcome, Decision::kPlaced) << one.diagnosis.summary;
  EXPECT_EQ(one.placement_note, "");
}

TEST(TopologyTest, FullestMeansLeastFreeNotLeastTotal) {
  std::vector<Node> nodes;
  AddDomain(nodes, "nvl-a", 4);  // 32 free
  AddDomain(nodes, "nvl-b", 8);  // 64 total, 3 nodes taken: 40 free
  std::vector<Allocation> held;
  for (int i = 0; i < 3; ++i) {
    held.push_back({"pg-other", i, absl::StrCat("nvl-b-", i), Gpu(8)});
  }
  auto snap = Snap(nodes, held);
  const Decision d =
      Solve(*snap, Gang(2, Gpu(8), {{kGpuDomain, Strategy::kStrictPack, 0}}));
  ASSERT_EQ(d.outcome, Decision::kPlaced) << d.diagnosis.summary;
  EXPECT_EQ(Distinct(ValuesOf(*snap, d, kGpuDomain)),
            absl::btree_set<std::string>{"nvl-a"});
}

TEST(TopologyTest, NodeLevelStrategyHoldsInsideTheDomain) {
  std::vector<Node> nodes;
  AddDomain(nodes, "nvl-a", 4);
  AddDomain(nodes, "nvl-b", 4);
  auto snap = Snap(nodes);
  const Decision d =
      Solve(*snap, Gang(4, Gpu(2), {{kGpuDomain, Strategy::kStrictPack, 0}},
                        Strategy::kStrictSpread));
  ASSERT_EQ(d.outcome, Decision::kPlaced) << d.diagnosis.summary;
  EXPECT_EQ(Distinct(ValuesOf(*snap, d, kGpuDomain)).size(), 1u);
  EXPECT_EQ(Distinct(d.bundle_nodes).size(), 4u);
}

TEST(TopologyTest, GroupsGetDistinctDomainsBestFitFirst) {
  std::vector<Node> nodes;
  AddDomain(nodes, "big", 8);    // could hold both groups
  AddDomain(nodes, "small", 4);  // holds one, fullest
  auto snap = Snap(nodes);
  const Decision d =
      Solve(*snap, Gang(8, Gpu(8), {{kGpuDomain, Strategy::kStrictPack, 4}}));
  ASSERT_EQ(d.outcome, Decision::kPlaced) << d.diagnosis.summary;
  const std::vector<std::string> values = ValuesOf(*snap, d, kGpuDomain);
  EXPECT_EQ(values, (std::vector<std::string>{"small", "small", "small",
                                              "small", "big", "big", "big",
                                              "big"}));
}

TEST(TopologyTest, TooFewDomainsForTheGroupsIsInfeasible) {
  std::vector<Node> nodes;
  AddDomain(nodes, "big", 8);
  auto snap = Snap(nodes);
  const Decision d =
      Solve(*snap, Gang(8, Gpu(8), {{kGpuDomain, Strategy::kStrictPack, 4}}));
  EXPECT_EQ(d.outcome, Decision::kInfeasible) << d.diagnosis.summary;
  EXPECT_NE(d.diagnosis.summary.find("no ray.io/gpu-domain domain holds "
                                     "bundles 4-7 (STRICT_PACK)"),
            std::string::npos)
      << d.diagnosis.summary;
  const DiagnosisStep* step = StepNamed(d, "topology level 0");
  ASSERT_NE(step, nullptr);
  EXPECT_EQ(Rejected(*step, "taken by another group of this gang"), 1);
}

// Groups that ask different amounts are not counted against one group's
// domains: a big bundle with one zone big enough and a small one that fits
// another zone are only busy, not infeasible, while the big zone is held.
TEST(TopologyTest, AMixedGangIsInfeasibleOnlyIfAnEmptyClusterCannotHoldIt) {
  Node a = CpuNode("n-a", 100, "a");
  Node b = CpuNode("n-b", 1, "b");
  PlacementRequest r;
  r.bundles = {Bundle{{{"CPU", Units(100)}}, {}, ""},
               Bundle{{{"CPU", Units(1)}}, {}, ""}};
  r.topology = {{std::string(kLabelZone), Strategy::kStrictSpread, 0}};
  auto held =
      Snap({a, b}, {{"pg-1", 0, "n-a", ResourceSet{{"CPU", Units(100)}}}});
  const Decision busy = Solve(*held, r);
  EXPECT_EQ(busy.outcome, Decision::kUnschedulable) << busy.diagnosis.summary;
  auto empty = Snap({a, b});
  EXPECT_EQ(Solve(*empty, r).outcome, Decision::kPlaced);
  // Two alike big bundles with one zone big enough never fit.
  r.bundles[1] = r.bundles[0];
  EXPECT_EQ(Solve(*empty, r).outcome, Decision::kInfeasible);
}

TEST(TopologyTest, BusyDomainsAreUnschedulableWithCountsPerReason) {
  std::vector<Node> nodes;
  AddDomain(nodes, "nvl-a", 4);  // one node taken: 24 free
  AddDomain(nodes, "nvl-b", 5);  // 32 free, but on 3 nodes with 8 each
  AddDomain(nodes, "nvl-c", 1);  // 8 in all
  nodes.push_back(GpuNode("loose", ""));  // in no domain
  std::vector<Allocation> held = {
      {"pg-1", 0, "nvl-a-0", Gpu(8)},
      {"pg-2", 0, "nvl-b-3", Gpu(4)},
      {"pg-3", 0, "nvl-b-4", Gpu(4)},
  };
  auto snap = Snap(nodes, held);
  const Decision d =
      Solve(*snap, Gang(4, Gpu(8), {{kGpuDomain, Strategy::kStrictPack, 0}}));
  EXPECT_EQ(d.outcome, Decision::kUnschedulable) << d.diagnosis.summary;
  const DiagnosisStep* step = StepNamed(d, "topology level 0");
  ASSERT_NE(step, nullptr);
  EXPECT_EQ(step->considered, 3);
  EXPECT_EQ(step->accepted, 1);  // nvl-b: enough GPUs free in sum
  EXPECT_EQ(Rejected(*step, "too little total GPU"), 1);  // nvl-c
  EXPECT_EQ(Rejected(*step, "too little free GPU"), 1);   // nvl-a
  EXPECT_EQ(Rejected(*step, "bundles do not fit"), 1);    // nvl-b
  EXPECT_NE(d.diagnosis.summary.find("3 considered"), std::string::npos)
      << d.diagnosis.summary;
}

TEST(TopologyTest, ZoneThenSlicePerGroupForMultiSlice) {
  std::vector<Node> nodes;
  for (const auto& s : {Slice("a1", "TPU-V6E", "4x4", "z1"),
                        Slice("b1", "TPU-V6E", "4x4", "z2"),
                        Slice("b2", "TPU-V6E", "4x4", "z2")}) {
    nodes.insert(nodes.end(), s.begin(), s.end());
  }
  auto snap = Snap(nodes);
  const Decision d = Solve(
      *snap,
      Gang(8, Tpu(4),
           {{std::string(kLabelZone), Strategy::kStrictPack, 0},
            {std::string(kLabelTpuSliceName), Strategy::kStrictPack, 4}},
           Strategy::kStrictSpread));
  ASSERT_EQ(d.outcome, Decision::kPlaced) << d.diagnosis.summary;
  EXPECT_EQ(Distinct(ValuesOf(*snap, d, std::string(kLabelZone))),
            absl::btree_set<std::string>{"z2"});
  const std::vector<std::string> slices =
      ValuesOf(*snap, d, std::string(kLabelTpuSliceName));
  EXPECT_EQ(Distinct({slices.begin(), slices.begin() + 4}).size(), 1u);
  EXPECT_EQ(Distinct({slices.begin() + 4, slices.end()}).size(), 1u);
  EXPECT_NE(slices[0], slices[4]);
  EXPECT_EQ(Distinct(d.bundle_nodes).size(), 8u);
}

TEST(TopologyTest, SlicesThatAreNotIntactAreNoDomain) {
  std::vector<Node> nodes = Slice("a", "TPU-V6E", "4x4");
  std::vector<Node> b = Slice("b", "TPU-V6E", "4x4");
  nodes.insert(nodes.end(), b.begin(), b.end());
  nodes[3].state = NodeState::kDead;  // a-w3
  auto snap = Snap(nodes);
  const Decision d = Solve(
      *snap, Gang(2, Tpu(4),
                  {{std::string(kLabelTpuSliceName), Strategy::kStrictPack, 0}}));
  ASSERT_EQ(d.outcome, Decision::kPlaced) << d.diagnosis.summary;
  EXPECT_EQ(Distinct(ValuesOf(*snap, d, std::string(kLabelTpuSliceName))),
            absl::btree_set<std::string>{"b"});

  // With b taken, a (3 live hosts, enough chips) is still not offered.
  std::vector<Allocation> held;
  for (int i = 0; i < 4; ++i) {
    held.push_back({"pg-b", i, absl::StrCat("b-w", i), Tpu(4)});
  }
  auto busy = Snap(nodes, held);
  const Decision waits = Solve(
      *busy, Gang(2, Tpu(4),
                  {{std::string(kLabelTpuSliceName), Strategy::kStrictPack, 0}}));
  EXPECT_EQ(waits.outcome, Decision::kUnschedulable);
  const DiagnosisStep* step = StepNamed(waits, "topology level 0");
  ASSERT_NE(step, nullptr);
  EXPECT_EQ(Rejected(*step, "slice not intact"), 1);
}

TEST(TopologyTest, ADomainsTotalsOfTheLargestAmountsDoNotWrap) {
  // Twelve nodes of the largest `memory` (1e18 units each): the domain's
  // total and free memory are past int64. Wrapped, they read negative, and
  // the domain "has too little total memory".
  std::vector<Node> nodes;
  AddDomain(nodes, "big", 12);
  for (Node& n : nodes) n.resources["memory"] = Units(1e14);
  auto snap = Snap(nodes);
  ResourceSet each = Gpu(8);
  each["memory"] = Units(1e14);
  const Decision d =
      Solve(*snap, Gang(2, each, {{kGpuDomain, Strategy::kStrictPack, 0}}));
  ASSERT_EQ(d.outcome, Decision::kPlaced) << d.diagnosis.summary;
}

TEST(TopologyTest, PinnedBundlesKeepTheirGroupsDomain) {
  std::vector<Node> nodes;
  AddDomain(nodes, "nvl-a", 4);
  AddDomain(nodes, "nvl-b", 2);  // the best fit for 2 x 8 GPUs
  auto snap = Snap(nodes, {{"pg-1", 0, "nvl-a-0", Gpu(8)}});
  PlacementRequest r =
      Gang(2, Gpu(8), {{kGpuDomain, Strategy::kStrictPack, 0}});
  r.replacing_pg_id = "pg-1";
  r.bundles[0].pinned_node_id = "nvl-a-0";
  const Decision d = Solve(*snap, r);
  ASSERT_EQ(d.outcome, Decision::kPlaced) << d.diagnosis.summary;
  EXPECT_EQ(d.bundle_nodes[0], "nvl-a-0");
  EXPECT_EQ(Distinct(ValuesOf(*snap, d, kGpuDomain)),
            absl::btree_set<std::string>{"nvl-a"});
}

// A surviving bundle on a DRAINING node keeps its place (a drain moves
// nothing), and its room counts for its domain: the lost bundle goes beside
// it. (The domain looked too small, and the group stayed RESCHEDULING.)
TEST(TopologyTest, ASurvivorOnADrainingNodeKeepsItsDomain) {
  std::vector<Node> nodes = {CpuNode("x", 8, "a"), CpuNode("z", 8, "a"),
                             CpuNode("far", 8, "b")};
  nodes[0].state = NodeState::kDraining;
  auto snap = Snap(nodes, {{"pg-1", 0, "x", ResourceSet{{"CPU", Units(8)}}}});
  PlacementRequest r;
  r.strategy = Strategy::kSpread;
  r.bundles.assign(2, Bundle{{{"CPU", Units(8)}}, {}, ""});
  r.topology = {{std::string(kLabelZone), Strategy::kStrictPack, 0}};
  r.replacing_pg_id = "pg-1";
  r.bundles[0].pinned_node_id = "x";
  const Decision d = Solve(*snap, r);
  ASSERT_EQ(d.outcome, Decision::kPlaced) << d.diagnosis.summary;
  EXPECT_EQ(d.bundle_nodes, (std::vector<std::string>{"x", "z"}));
}

TEST(TopologyTest, ALostGroupNeverTakesTheDomainOfAGroupThatStays) {
  std::vector<Node> nodes;
  AddDomain(nodes, "a", 2);  // group 1 stays here; the best fit for 2 x 8
  AddDomain(nodes, "b", 4);
  AddDomain(nodes, "d", 2);  // group 0 was here; both nodes died
  for (Node& n : nodes) {
    if (n.labels[kGpuDomain] == "d") n.state = NodeState::kDead;
  }
  auto snap = Snap(nodes, {{"pg-1", 0, "d-0", Gpu(8)},
                           {"pg-1", 1, "d-1", Gpu(8)},
                           {"pg-1", 2, "a-0", Gpu(8)},
                           {"pg-1", 3, "a-1", Gpu(8)}});
  PlacementRequest r =
      Gang(4, Gpu(8), {{kGpuDomain, Strategy::kStrictPack, 2}});
  r.replacing_pg_id = "pg-1";
  r.bundles[2].pinned_node_id = "a-0";
  r.bundles[3].pinned_node_id = "a-1";
  const Decision d = Solve(*snap, r);
  ASSERT_EQ(d.outcome, Decision::kPlaced) << d.diagnosis.summary;
  EXPECT_EQ(ValuesOf(*snap, d, kGpuDomain),
            (std::vector<std::string>{"b", "b", "a", "a"}));
}

TEST(TopologyTest, SoftPackSpansDomainsOnlyWhenNoneHoldsTheGang) {
  std::vector<Node> nodes;
  AddDomain(nodes, "nvl-a", 2);
  AddDomain(nodes, "nvl-b", 2);
  auto snap = Snap(nodes);
  const Decision strict =
      Solve(*snap, Gang(3, Gpu(8), {{kGpuDomain, Strategy::kStrictPack, 0}}));
  EXPECT_EQ(strict.outcome, Decision::kInfeasible);
  const Decision soft =
      Solve(*snap, Gang(3, Gpu(8), {{kGpuDomain, Strategy::kPack, 0}}));
  ASSERT_EQ(soft.outcome, Decision::kPlaced) << soft.diagnosis.summary;
  EXPECT_EQ(Distinct(ValuesOf(*snap, soft, kGpuDomain)).size(), 2u);
  const Decision fits =
      Solve(*snap, Gang(2, Gpu(8), {{kGpuDomain, Strategy::kPack, 0}}));
  ASSERT_EQ(fits.outcome, Decision::kPlaced);
  EXPECT_EQ(Distinct(ValuesOf(*snap, fits, kGpuDomain)).size(), 1u);
}

TEST(TopologyTest, StrictSpreadPutsEveryBundleInItsOwnDomain) {
  std::vector<Node> nodes;
  AddDomain(nodes, "a", 2, "z1");
  AddDomain(nodes, "b", 2, "z2");
  AddDomain(nodes, "c", 2, "z3");
  auto snap = Snap(nodes);
  const Decision d = Solve(
      *snap, Gang(3, Gpu(1),
                  {{std::string(kLabelZone), Strategy::kStrictSpread, 0}}));
  ASSERT_EQ(d.outcome, Decision::kPlaced) << d.diagnosis.summary;
  EXPECT_EQ(Distinct(ValuesOf(*snap, d, std::string(kLabelZone))).size(), 3u);
  EXPECT_EQ(Solve(*snap, Gang(4, Gpu(1), {{std::string(kLabelZone),
                                           Strategy::kStrictSpread, 0}}))
                .outcome,
            Decision::kInfeasible);
}

TEST(TopologyTest, SameRequestSameDecision) {
  std::vector<Node> nodes;
  AddDomain(nodes, "nvl-a", 4);
  AddDomain(nodes, "nvl-b", 4);
  AddDomain(nodes, "nvl-c", 4);
  auto snap = Snap(nodes);
  const PlacementRequest r =
      Gang(8, Gpu(4), {{kGpuDomain, Strategy::kStrictPack, 4}});
  EXPECT_EQ(Solve(*snap, r), Solve(*snap, r));
}

TEST(TopologyValidationTest, Table) {
  struct Case {
    std::string name;
    PlacementRequest request;
    std::string message;  // "" = valid
  };
  auto gang = [](int n, std::vector<TopologyLevel> levels) {
    return Gang(n, Gpu(1), std::move(levels));
  };
  const std::string zone(kLabelZone);
  PlacementRequest with_slice = gang(4, {{zone, Strategy::kStrictPack, 0}});
  with_slice.slice.emplace();
  with_slice.slice->topology = "4x4";
  with_slice.bundles.clear();
  PlacementRequest fallback = gang(4, {{zone, Strategy::kStrictPack, 2}});
  fallback.fallbacks.push_back(std::vector<Bundle>(3, Bundle{Gpu(1), {}, ""}));
  const std::vector<Case> cases = {
      {"ok", gang(8, {{zone, Strategy::kStrictPack, 4}}), ""},
      {"nested ok",
       gang(8, {{zone, Strategy::kStrictPack, 4},
                {kGpuDomain, Strategy::kStrictPack, 2}}),
       ""},
      {"node id", gang(2, {{"ray.io/node-id", Strategy::kStrictPack, 0}}),
       "topology_strategy[0].label: ray.io/node-id is the node level"},
      {"bad key", gang(2, {{"-bad", Strategy::kStrictPack, 0}}),
       "topology_strategy[0].label: "},
      {"twice",
       gang(2, {{zone, Strategy::kStrictPack, 0},
                {zone, Strategy::kStrictPack, 0}}),
       "topology_strategy[1].label: \"ray.io/availability-zone\" is already "
       "level 0"},
      {"negative", gang(2, {{zone, Strategy::kStrictPack, -1}}),
       "topology_strategy[0].bundles_per_domain: must be >= 0, got -1"},
      {"spread groups", gang(2, {{zone, Strategy::kStrictSpread, 1}}),
       "topology_strategy[0].bundles_per_domain: only with PACK or "
       "STRICT_PACK"},
      {"indivisible", gang(6, {{zone, Strategy::kStrictPack, 4}}),
       "topology_strategy[0].bundles_per_domain: 4 does not divide the 6 "
       "bundles of each domain above it (bundles)"},
      {"inner indivisible",
       gang(8, {{zone, Strategy::kStrictPack, 4},
                {kGpuDomain, Strategy::kStrictPack, 3}}),
       "topology_strategy[1].bundles_per_domain: 3 does not divide the 4"},
      {"fallback", fallback,
       "topology_strategy[0].bundles_per_domain: 2 does not divide the 3 "
       "bundles of each domain above it (fallback_strategy[0].bundles)"},
      {"slice", with_slice,
       "topology_strategy: not allowed with a slice requirement"},
      {"too many",
       gang(2, {{"a", Strategy::kPack, 0},
                {"b", Strategy::kPack, 0},
                {"c", Strategy::kPack, 0},
                {"d", Strategy::kPack, 0},
                {"e", Strategy::kPack, 0}}),
       "topology_strategy: at most 4 levels, got 5"},
  };
  for (const Case& c : cases) {
    const absl::Status s = ValidateRequest(c.request);
    if (c.message.empty()) {
      EXPECT_TRUE(s.ok()) << c.name << ": " << s;
      continue;
    }
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << c.name;
    EXPECT_NE(s.message().find(c.message), std::string::npos)
        << c.name << ": " << s.message();
  }
}

}  // namespace
}  // namespace sliced::scheduler
