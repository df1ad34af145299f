#include "scheduler/solver.h"

#include <string>

#include "absl/container/flat_hash_set.h"
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
using ::sliced::scheduler::testing::TpuHost;
using ::sliced::scheduler::testing::Units;

using Wire = absl::btree_map<std::string, std::string>;

LabelSelector Sel(const Wire& wire) { return *ParseLabelSelector(wire); }

Bundle B(ResourceSet resources, const Wire& selector = {},
         std::string pinned = "") {
  return Bundle{std::move(resources), Sel(selector), std::move(pinned)};
}

PlacementRequest SliceRequest(TpuGeneration gen, std::string topology,
                              int num_slices = 1, const Wire& selector = {}) {
  PlacementRequest r;
  SliceRequirement s;
  s.generation = gen;
  s.topology = std::move(topology);
  s.num_slices = num_slices;
  s.selector = Sel(selector);
  r.slice = s;
  return r;
}

PlacementRequest Generic(Strategy strategy, std::vector<Bundle> bundles) {
  PlacementRequest r;
  r.strategy = strategy;
  r.bundles = std::move(bundles);
  return r;
}

std::string Nodes(const Decision& d) {
  return absl::StrJoin(d.bundle_nodes, ",");
}

// --- Slices -----------------------------------------------------------------

TEST(SolverSliceTest, PlacesWholeSliceInWorkerOrder) {
  std::vector<Node> nodes = Slice("a", "TPU-V6E", "4x4", "z1");
  std::reverse(nodes.begin(), nodes.end());
  auto snap = Snap(nodes);
  Decision d = Solve(*snap, SliceRequest(TpuGeneration::kV6e, "4x4"));
  ASSERT_EQ(d.outcome, Decision::kPlaced) << d.diagnosis.summary;
  EXPECT_EQ(Nodes(d), "a-w0,a-w1,a-w2,a-w3");
  EXPECT_EQ(d.slice_names, std::vector<std::string>{"a"});
  EXPECT_EQ(d.diagnosis.summary, "placed 1 v6e-16 slice in zone z1");
}

TEST(SolverSliceTest, Table) {
  // z1: a (free), b (one host held), c (host dead); z2: d, e (free);
  // z3: f (free, spot).
  std::vector<Node> nodes;
  Append(nodes, Slice("a", "TPU-V6E", "4x4", "z1"));
  Append(nodes, Slice("b", "TPU-V6E", "4x4", "z1"));
  Append(nodes, Slice("c", "TPU-V6E", "4x4", "z1"));
  Append(nodes, Slice("d", "TPU-V6E", "4x4", "z2"));
  Append(nodes, Slice("e", "TPU-V6E", "4x4", "z2"));
  Append(nodes, Slice("f", "TPU-V6E", "4x4", "z3", "spot"));
  Append(nodes, Slice("g", "TPU-V4", "2x2x2", "z1"));
  for (Node& n : nodes) {
    if (n.node_id == "c-w2") n.state = NodeState::kDead;
  }
  auto snap = Snap(nodes, {Allocation{"held", 0, "b-w1", Tpu(1)}});
  struct Case {
    std::string name;
    PlacementRequest request;
    Decision::Outcome outcome;
    std::string slices;   // comma-joined, when placed
    std::string summary;  // substring
  };
  const Case cases[] = {
      {"single slice: from the zone with the most free slices (z2 has 2)",
       SliceRequest(TpuGeneration::kV6e, "4x4"), Decision::kPlaced, "d",
       "zone z2"},
      {"single slice, selector keeps it to z1 and z3: tie, first by name",
       SliceRequest(TpuGeneration::kV6e, "4x4", 1,
                    {{"ray.io/availability-zone", "!z2"}}),
       Decision::kPlaced, "a", "zone z1"},
      {"two slices: one zone that holds both (z2)",
       SliceRequest(TpuGeneration::kV6e, "4x4", 2), Decision::kPlaced, "d,e",
       "zone z2"},
      {"four slices: no zone holds them, largest pools first",
       SliceRequest(TpuGeneration::kV6e, "4x4", 4), Decision::kPlaced,
       "d,e,a,f", "zones z1, z2, z3"},
      {"five slices: only four free",
       SliceRequest(TpuGeneration::kV6e, "4x4", 5), Decision::kUnschedulable,
       "", "4/6 v6e-16 slices free, 5 needed: 1 held, 1 not intact"},
      {"seven slices can never fit six",
       SliceRequest(TpuGeneration::kV6e, "4x4", 7), Decision::kInfeasible, "",
       "only 6 could ever match"},
      {"zone selector",
       SliceRequest(TpuGeneration::kV6e, "4x4", 1,
                    {{"ray.io/availability-zone", "z3"}}),
       Decision::kPlaced, "f", ""},
      {"selector excludes by zone; held and broken ones counted",
       SliceRequest(TpuGeneration::kV6e, "4x4", 1,
                    {{"ray.io/availability-zone", "z1"},
                     {"sliced.io/capacity-tier", "on-demand"}}),
       Decision::kPlaced, "a", ""},
      {"nothing free in zone z1 for two",
       SliceRequest(TpuGeneration::kV6e, "4x4", 2,
                    {{"ray.io/availability-zone", "!in(z2, z3)"}}),
       Decision::kUnschedulable, "",
       "1/6 v6e-16 slices free, 2 needed: 1 held, 1 not intact (c: node c-w2 "
       "is DEAD), 2 in zone z2 excluded by selector, 1 in zone z3 excluded by "
       "selector"},
      {"no slice of the shape", SliceRequest(TpuGeneration::kV6e, "8x8"),
       Decision::kInfeasible, "",
       "no v6e-64 slice (v6e 8x8) exists in this inventory"},
      {"v4 3-D slice", SliceRequest(TpuGeneration::kV4, "2x2x2"),
       Decision::kPlaced, "g", ""},
      {"invalid topology", SliceRequest(TpuGeneration::kV6e, "3x3"),
       Decision::kInfeasible, "", "invalid request: slice.topology"},
  };
  for (const Case& c : cases) {
    Decision d = Solve(*snap, c.request);
    EXPECT_EQ(d.outcome, c.outcome) << c.name << ": " << d.diagnosis.summary;
    EXPECT_EQ(absl::StrJoin(d.slice_names, ","), c.slices) << c.name;
    EXPECT_NE(d.diagnosis.summary.find(c.summary), std::string::npos)
        << c.name << ": " << d.diagnosis.summary;
    if (d.outcome == Decision::kPlaced) {
      const size_t hosts =
          d.slice_names == std::vector<std::string>{"g"} ? 2 : 4;
      ASSERT_EQ(d.bundle_nodes.size(), hosts * d.slice_names.size());
      for (size_t k = 0; k < d.bundle_nodes.size(); ++k) {
        EXPECT_EQ(d.bundle_nodes[k],
                  absl::StrCat(d.slice_names[k / hosts], "-w", k % hosts))
            << c.name;
      }
    }
  }
}

TEST(SolverSliceTest, SummaryReadsLikeTheIssue) {
  std::vector<Node> nodes;
  for (int i = 0; i < 12; ++i) {
    Append(nodes, Slice(absl::StrCat("s", i), "TPU-V6E", "4x4",
                        i == 11 ? "us-east5-a" : "us-east5-b"));
  }
  for (Node& n : nodes) {
    if (n.node_id == "s9-w0" || n.node_id == "s10-w3")
      n.state = NodeState::kDead;
  }
  std::vector<Allocation> held;
  for (int i = 0; i < 9; ++i)
    held.push_back(
        {absl::StrCat("pg", i), 0, absl::StrCat("s", i, "-w0"), Tpu(4)});
  auto snap = Snap(nodes, held);
  Decision d =
      Solve(*snap, SliceRequest(TpuGeneration::kV6e, "4x4", 1,
                                {{"ray.io/availability-zone", "!us-east5-a"}}));
  EXPECT_EQ(d.outcome, Decision::kUnschedulable);
  EXPECT_EQ(d.diagnosis.summary,
            "0/12 v6e-16 slices free: 9 held, 2 not intact (s10: node s10-w3 "
            "is DEAD; ...), 1 in zone us-east5-a excluded by selector");
  ASSERT_EQ(d.diagnosis.steps.size(), 1u);
  EXPECT_EQ(d.diagnosis.steps[0].considered, 12);
}

// A slice with one host short of the request is too small, whatever its
// other hosts hold; with the short host mended (an upsert: the slice is
// re-derived) it is held, as the others. The diagnosis reads a slice's
// hosts only when its least host could be short (SliceEntry::host_min).
TEST(SolverSliceTest, OneShortHostMakesTheSliceTooSmall) {
  std::vector<Node> nodes;
  for (int i = 0; i < 3; ++i) {
    Append(nodes, Slice(absl::StrCat("s", i), "TPU-V6E", "4x4"));
  }
  for (Node& n : nodes) {
    if (n.node_id == "s1-w2") n.resources["TPU"] = Units(2);
  }
  std::vector<Allocation> held = {{"pg0", 0, "s0-w0", Tpu(4)},
                                  {"pg2", 0, "s2-w3", Tpu(4)}};
  auto snap = Snap(nodes, held);
  const PlacementRequest r = SliceRequest(TpuGeneration::kV6e, "4x4");
  Decision d = Solve(*snap, r);
  EXPECT_EQ(d.outcome, Decision::kUnschedulable);
  EXPECT_EQ(d.diagnosis.summary,
            "0/3 v6e-16 slices free: 2 held, 1 with hosts too small for the "
            "bundles");

  Node mended = *snap->FindNode("s1-w2");
  mended.resources["TPU"] = Units(4);
  SnapshotDelta delta;
  delta.upsert_nodes = {mended};
  auto next = snap->Apply(delta);
  ASSERT_TRUE(next.ok()) << next.status();
  d = Solve(**next, r);
  EXPECT_EQ(d.outcome, Decision::kPlaced) << d.diagnosis.summary;
  EXPECT_EQ(d.slice_names, std::vector<std::string>{"s1"});

  // And short again: the diagnosis sees the change too.
  mended.resources.erase("TPU");
  delta.upsert_nodes = {mended};
  next = (*next)->Apply(delta);
  ASSERT_TRUE(next.ok()) << next.status();
  EXPECT_EQ(Solve(**next, r).diagnosis.summary,
            "0/3 v6e-16 slices free: 2 held, 1 with hosts too small for the "
            "bundles");
}

// Explicit bundles of eight kinds, one repeating beyond the request's
// look-back for equal bundles: each lands on its own worker, and a host
// too small for its worker's bundle (and only that) rules its slice out.
TEST(SolverSliceTest, BundlesOfManyKindsEachGoToTheirWorker) {
  std::vector<Node> nodes;
  for (const char* name : {"a", "b"}) {
    for (Node& n : Slice(name, "TPU-V6E", "4x8")) {
      const int w = std::stoi(n.labels[std::string(kLabelTpuWorkerId)]);
      n.resources["CPU"] = Units(10 + w);
      nodes.push_back(std::move(n));
    }
  }
  ASSERT_EQ(nodes.size(), 16u);
  PlacementRequest r = SliceRequest(TpuGeneration::kV6e, "4x8");
  r.slice->num_slices = 2;
  for (int k = 0; k < 2; ++k) {
    for (int w = 0; w < 8; ++w) {
      Bundle bundle;
      bundle.resources = {{"TPU", Units(4)}, {"CPU", Units(10 + w % 6)}};
      r.bundles.push_back(std::move(bundle));
    }
  }
  auto snap = Snap(nodes);
  Decision d = Solve(*snap, r);
  ASSERT_EQ(d.outcome, Decision::kPlaced) << d.diagnosis.summary;
  for (int k = 0; k < 2; ++k) {
    for (int w = 0; w < 8; ++w) {
      EXPECT_EQ(d.bundle_nodes[k * 8 + w],
                absl::StrCat(k == 0 ? "a" : "b", "-w", w));
    }
  }
  // b-w7 shrinks to what its bundle asks: still placed. b-w5 one CPU short
  // of its bundle: b is too small.
  for (Node& n : nodes) {
    if (n.node_id == "b-w7") n.resources["CPU"] = Units(11);
  }
  EXPECT_EQ(Solve(*Snap(nodes), r).outcome, Decision::kPlaced);
  for (Node& n : nodes) {
    if (n.node_id == "b-w5") n.resources["CPU"] = Units(14);
  }
  d = Solve(*Snap(nodes), r);
  EXPECT_EQ(d.outcome, Decision::kInfeasible);
  EXPECT_EQ(d.diagnosis.summary,
            "1/2 v6e-32 slices free, 2 needed: 1 with hosts too small for "
            "the bundles; only 1 could ever match this request");
}

TEST(SolverSliceTest, PerHostResourcesAndExplicitBundles) {
  std::vector<Node> nodes = Slice("a", "TPU-V6E", "4x4");
  auto snap = Snap(nodes);
  PlacementRequest r = SliceRequest(TpuGeneration::kV6e, "4x4");
  r.slice->resources_per_host = {{"TPU", Units(4)}, {"CPU", Units(200)}};
  Decision d = Solve(*snap, r);
  EXPECT_EQ(d.outcome, Decision::kInfeasible) << d.diagnosis.summary;
  EXPECT_NE(d.diagnosis.summary.find("hosts too small"), std::string::npos);

  r.slice->resources_per_host = {{"TPU", Units(4)}, {"CPU", Units(8)}};
  EXPECT_EQ(Solve(*snap, r).outcome, Decision::kPlaced);

  r.bundles = {B(Tpu(4)), B(Tpu(4))};  // wrong count
  d = Solve(*snap, r);
  EXPECT_EQ(d.outcome, Decision::kInfeasible);
  EXPECT_NE(d.diagnosis.summary.find("needs one bundle per host (4), got 2"),
            std::string::npos)
      << d.diagnosis.summary;
  r.bundles = {B(Tpu(4)), B(Tpu(4)), B(Tpu(4)),
               B(Tpu(4), {{"ray.io/tpu-worker-id", "3"}})};
  EXPECT_EQ(Solve(*snap, r).outcome, Decision::kPlaced);
  r.bundles[3] = B(Tpu(4), {{"ray.io/tpu-worker-id", "2"}});
  EXPECT_EQ(Solve(*snap, r).outcome, Decision::kInfeasible);
}

TEST(SolverSliceTest, TwoTpuDevicesPerChipOnV7x) {
  std::vector<Node> nodes = Slice("x", "TPU-V7X", "2x2x2");
  for (Node& h : nodes) h.resources["TPU"] = Units(8);  // 2 per chip
  auto snap = Snap(nodes);
  PlacementRequest r = SliceRequest(TpuGeneration::kV7x, "2x2x2");
  r.slice->tpu_resource_per_chip = 2;  // default host bundle {TPU: 8}
  Decision d = Solve(*snap, r);
  ASSERT_EQ(d.outcome, Decision::kPlaced) << d.diagnosis.summary;
  EXPECT_EQ(Nodes(d), "x-w0,x-w1");
  // A request that counts 1 per chip would hold {TPU: 4} of each host's 8,
  // and leave the other 4, on the same chips, to the next group: it does
  // not take these hosts, whole or as a sub-slice. Nor does a request of 2
  // per chip take hosts that count 1.
  PlacementRequest one = SliceRequest(TpuGeneration::kV7x, "2x2x2");
  const Decision never = Solve(*snap, one);
  EXPECT_EQ(never.outcome, Decision::kInfeasible) << never.diagnosis.summary;
  EXPECT_NE(never.diagnosis.summary.find(
                "1 whose hosts count TPU per chip otherwise (the request "
                "counts 1: tpu_resource_per_chip)"),
            std::string::npos)
      << never.diagnosis.summary;
  one.slice->topology = "2x2x1";
  one.slice->subslicing = Subslicing::kAllowed;
  EXPECT_NE(Solve(*snap, one).outcome, Decision::kPlaced);
  std::vector<Node> ones = Slice("y", "TPU-V7X", "2x2x2");
  EXPECT_NE(Solve(*Snap(ones), r).outcome, Decision::kPlaced);
  EXPECT_EQ(
      Solve(*Snap(ones), SliceRequest(TpuGeneration::kV7x, "2x2x2")).outcome,
      Decision::kPlaced);
  // Two per chip is v7x's alone.
  PlacementRequest v6e = SliceRequest(TpuGeneration::kV6e, "4x4");
  v6e.slice->tpu_resource_per_chip = 2;
  EXPECT_NE(ValidateRequest(v6e).message().find(
                "slice.tpu_resource_per_chip: must be 1 on v6e"),
            std::string::npos);
}

// The diagnosis counts a key's slices from its per-key sets only when every
// host of the key counts its chips as the request does; in a key whose
// hosts count them both ways, slice by slice.
TEST(SolverSliceTest, AV7xKeyWhoseHostsCountChipsBothWaysIsToldSliceBySlice) {
  std::vector<Node> nodes = Slice("x", "TPU-V7X", "2x2x2");
  for (Node& h : nodes) h.resources["TPU"] = Units(8);  // 2 per chip
  for (Node& h : Slice("y", "TPU-V7X", "2x2x2")) nodes.push_back(h);
  auto snap = Snap(nodes, {Allocation{"held", 0, "y-w0", Tpu(4)}});
  const PlacementRequest one = SliceRequest(TpuGeneration::kV7x, "2x2x2");
  Decision d = Solve(*snap, one);
  EXPECT_EQ(d.outcome, Decision::kUnschedulable) << d.diagnosis.summary;
  EXPECT_EQ(d.diagnosis.summary,
            "0/2 v7x-16 slices free: 1 held, 1 whose hosts count TPU per "
            "chip otherwise (the request counts 1: tpu_resource_per_chip)");
  PlacementRequest two = one;
  two.slice->tpu_resource_per_chip = 2;
  d = Solve(*snap, two);
  EXPECT_EQ(d.outcome, Decision::kPlaced) << d.diagnosis.summary;
  EXPECT_EQ(Nodes(d), "x-w0,x-w1");
  // Every host counting 1 per chip: the key's sets tell the same.
  std::vector<Node> ones = Slice("y", "TPU-V7X", "2x2x2");
  d = Solve(*Snap(ones, {Allocation{"held", 0, "y-w0", Tpu(4)}}), one);
  EXPECT_EQ(d.diagnosis.summary, "0/1 v7x-16 slices free: 1 held");
  d = Solve(*Snap(ones), two);
  EXPECT_EQ(d.outcome, Decision::kInfeasible);
  EXPECT_EQ(d.diagnosis.summary,
            "0/1 v7x-16 slices free: 1 whose hosts count TPU per chip "
            "otherwise (the request counts 2: tpu_resource_per_chip)");
}

TEST(SolverSliceTest, AV7xShapeWithNoCubesToStitchIsCarvedWhenAllowed) {
  // One intact v7x 8x8x8 (a fixed pool: no partitions to stitch). A 4x4x8
  // is stitched from 4x4x4 cubes where there are some, and else carved
  // from it, as a v5p 4x4x8 would be.
  auto snap = Snap(Slice("big", "TPU-V7X", "8x8x8"));
  PlacementRequest r = SliceRequest(TpuGeneration::kV7x, "4x4x8");
  EXPECT_NE(Solve(*snap, r).outcome, Decision::kPlaced);
  r.slice->subslicing = Subslicing::kAllowed;
  const Decision d = Solve(*snap, r);
  ASSERT_EQ(d.outcome, Decision::kPlaced) << d.diagnosis.summary;
  EXPECT_EQ(d.bundle_nodes.size(), 32u);
  ASSERT_EQ(d.slice_names.size(), 1u);
  EXPECT_EQ(d.slice_names[0].rfind("big/4x4x8@", 0), 0u) << d.slice_names[0];
}

TEST(SolverSliceTest, SingleHostSlices) {
  std::vector<Node> nodes = {
      TpuHost("solo-b", "", "TPU-V6E", "2x4", 0, 8, "z1"),
      TpuHost("solo-a", "", "TPU-V6E", "2x4", 0, 8, "z1")};
  auto snap = Snap(nodes, {Allocation{"pg", 0, "solo-a", Tpu(1)}});
  Decision d = Solve(*snap, SliceRequest(TpuGeneration::kV6e, "2x4"));
  ASSERT_EQ(d.outcome, Decision::kPlaced) << d.diagnosis.summary;
  EXPECT_EQ(Nodes(d), "solo-b");
  EXPECT_EQ(d.slice_names, std::vector<std::string>{"solo-b"});
}

// --- Plain bundles: ranks
// -----------------------------------------------------

TEST(SolverRankTest, Table) {
  // free multi-host slice "m", held slice "h" (one host busy), single-host
  // "solo", CPU node "cpu".
  auto cluster = [](bool with_cpu, bool with_solo, bool hold_h) {
    std::vector<Node> nodes = Slice("m", "TPU-V6E", "4x4");
    Append(nodes, Slice("h", "TPU-V6E", "4x4"));
    if (with_solo) nodes.push_back(TpuHost("solo", "", "TPU-V6E", "2x4", 0, 8));
    if (with_cpu) nodes.push_back(CpuNode("cpu", 8));
    std::vector<Allocation> held;
    if (hold_h) held.push_back({"other", 0, "h-w2", Tpu(4)});
    return Snap(nodes, held);
  };
  struct Case {
    std::string name;
    std::shared_ptr<const InventorySnapshot> snap;
    Bundle bundle;
    std::string node;
  };
  const Case cases[] = {
      {"TPU bundle prefers single-host node", cluster(true, true, true),
       B(Tpu(1)), "solo"},
      {"TPU bundle: held slice host before breaking a free slice",
       cluster(true, false, true), B(Tpu(1)), "h-w0"},
      {"TPU bundle: breaks a free slice only when nothing else fits",
       cluster(true, false, false), B(Tpu(1)), "h-w0"},
      {"CPU bundle stays off TPU nodes", cluster(true, true, true), B(Cpu(4)),
       "cpu"},
      {"CPU bundle: a free single-host node before a slice only TPU work "
       "holds (whole again when that work ends)",
       cluster(false, true, true), B(Cpu(4)), "solo"},
      {"CPU bundle goes to a slice only TPU work holds "
       "before breaking a free one",
       cluster(false, false, true), B(Cpu(4)), "h-w0"},
      {"CPU bundle: a free single-host slice before a free multi-host one",
       cluster(false, true, false), B(Cpu(4)), "solo"},
      {"CPU bundle too big for the CPU node", cluster(true, true, true),
       B(Cpu(16)), "solo"},
      {"CPU bundle with a TPU selector", cluster(true, true, true),
       B(Cpu(1), {{"ray.io/accelerator-type", "TPU-V6E"}}), "solo"},
      {"TPU bundle: free single-host slice before breaking a multi-host one",
       cluster(true, true, false), B(Tpu(1)), "solo"},
  };
  for (const Case& c : cases) {
    Decision d = Solve(*c.snap, Generic(Strategy::kPack, {c.bundle}));
    ASSERT_EQ(d.outcome, Decision::kPlaced)
        << c.name << ": " << d.diagnosis.summary;
    EXPECT_EQ(Nodes(d), c.node) << c.name;
  }
}

TEST(SolverRankTest, BreaksTheSmallestFreeSliceWhenItMust) {
  std::vector<Node> nodes = Slice("a-big", "TPU-V6E", "8x8");  // 16 hosts
  Append(nodes, Slice("z-small", "TPU-V6E", "4x4"));           // 4 hosts
  auto snap = Snap(nodes);
  EXPECT_EQ(Nodes(Solve(*snap, Generic(Strategy::kPack, {B(Tpu(1))}))),
            "z-small-w0");
  EXPECT_EQ(Nodes(Solve(*snap, Generic(Strategy::kPack, {B(Cpu(1))}))),
            "z-small-w0");
}

// Issue 13: four CPU-only SPREAD bundles, one CPU node and a free v6e 4x4
// slice. Strategies are soft, whole slices are not: they share the CPU node,
// for every strategy; a free single-host TPU node comes before a slice host;
// only when nothing else fits do they land on the slice, and say so.
TEST(SolverRankTest, CpuBundlesKeepWholeFreeSlicesWholeWhateverTheStrategy) {
  std::vector<Node> nodes = Slice("s", "TPU-V6E", "4x4");
  nodes.push_back(CpuNode("cpu", 8));
  auto snap = Snap(nodes);
  const std::vector<Bundle> four = {B(Cpu(1)), B(Cpu(1)), B(Cpu(1)), B(Cpu(1))};
  for (Strategy strategy : {Strategy::kPack, Strategy::kSpread}) {
    Decision d = Solve(*snap, Generic(strategy, four));
    ASSERT_EQ(d.outcome, Decision::kPlaced) << d.diagnosis.summary;
    EXPECT_EQ(Nodes(d), "cpu,cpu,cpu,cpu") << StrategyName(strategy);
    EXPECT_EQ(d.placement_note, "");
  }
  // STRICT_SPREAD needs 4 distinct nodes: only then are slice hosts used,
  // and the decision says why.
  Decision strict = Solve(*snap, Generic(Strategy::kStrictSpread, four));
  ASSERT_EQ(strict.outcome, Decision::kPlaced);
  EXPECT_EQ(strict.placement_note,
            "3 CPU-only bundle(s) on whole free TPU capacity: no other node "
            "fits them");
  EXPECT_NE(strict.diagnosis.summary.find(strict.placement_note),
            std::string::npos)
      << strict.diagnosis.summary;
  // A free single-host TPU node is offered before a multi-host slice host.
  std::vector<Node> more = nodes;
  Append(more, Slice("one", "TPU-V6E", "2x4"));  // a single-host slice
  auto snap2 = Snap(more);
  Decision d =
      Solve(*snap2, Generic(Strategy::kSpread, {B(Cpu(8)), B(Cpu(8))}));
  ASSERT_EQ(d.outcome, Decision::kPlaced) << d.diagnosis.summary;
  EXPECT_EQ(Nodes(d), "cpu,one-w0");
}

// A slice that only TPU work holds is whole again when that work ends: a
// spilled CPU bundle goes to a free single-host TPU node first (sliced_sim's
// mixed trace, bench/RESULTS.md). Once CPU work already sits on the slice,
// more of it costs nothing there, and the busy slice host comes first.
TEST(SolverRankTest, CpuBundlesLeaveSlicesThatOnlyTpuWorkHolds) {
  std::vector<Node> nodes = Slice("s", "TPU-V6E", "4x4");
  Append(nodes, Slice("one", "TPU-V6E", "2x4"));  // a single-host slice
  std::vector<Allocation> tpu_job;
  for (int w = 0; w < 4; ++w) {
    tpu_job.push_back({"slice-job", w, absl::StrCat("s-w", w), Tpu(4)});
  }
  auto held = Snap(nodes, tpu_job);
  Decision d = Solve(*held, Generic(Strategy::kPack, {B(Cpu(1))}));
  ASSERT_EQ(d.outcome, Decision::kPlaced) << d.diagnosis.summary;
  EXPECT_EQ(Nodes(d), "one-w0");
  EXPECT_EQ(d.diagnosis.summary.find("whole free TPU capacity"),
            std::string::npos)
      << d.diagnosis.summary;

  std::vector<Allocation> mixed = tpu_job;
  mixed.push_back({"cpu-job", 0, "s-w2", Cpu(1)});
  auto broken = Snap(nodes, mixed);
  Decision d2 = Solve(*broken, Generic(Strategy::kPack, {B(Cpu(1))}));
  ASSERT_EQ(d2.outcome, Decision::kPlaced) << d2.diagnosis.summary;
  EXPECT_EQ(Nodes(d2), "s-w2");
}

// --- Strategies -------------------------------------------------------------

TEST(SolverStrategyTest, Table) {
  std::vector<Node> nodes = {CpuNode("n1", 8), CpuNode("n2", 8),
                             CpuNode("n3", 8), CpuNode("n4", 4, "z2")};
  nodes[1].state = NodeState::kDraining;
  // n3 has 5 of 8 CPUs in use: the tightest fit for 3 CPUs.
  auto snap = Snap(nodes, {Allocation{"x", 0, "n3", Cpu(5)}});
  struct Case {
    std::string name;
    PlacementRequest request;
    Decision::Outcome outcome;
    std::string nodes;
    std::string summary;
  };
  const Case cases[] = {
      {"PACK puts the gang on one node when it can",
       Generic(Strategy::kPack, {B(Cpu(2)), B(Cpu(2)), B(Cpu(2))}),
       Decision::kPlaced, "n1,n1,n1", ""},
      {"PACK one node, best fit",
       Generic(Strategy::kPack, {B(Cpu(2)), B(Cpu(2))}), Decision::kPlaced,
       "n4,n4", ""},
      {"PACK best fit", Generic(Strategy::kPack, {B(Cpu(3))}),
       Decision::kPlaced, "n3", ""},
      {"PACK overflows, largest first, tightest node",
       Generic(Strategy::kPack, {B(Cpu(3)), B(Cpu(4)), B(Cpu(6))}),
       Decision::kPlaced, "n3,n4,n1", ""},
      {"SPREAD distinct nodes, tightest first",
       Generic(Strategy::kSpread, {B(Cpu(1)), B(Cpu(1)), B(Cpu(1))}),
       Decision::kPlaced, "n3,n4,n1", ""},
      {"SPREAD reuses nodes when it must",
       Generic(Strategy::kSpread,
               {B(Cpu(1)), B(Cpu(1)), B(Cpu(1)), B(Cpu(1)), B(Cpu(1))}),
       Decision::kPlaced, "n3,n4,n1,n3,n4", ""},
      {"STRICT_PACK one node",
       Generic(Strategy::kStrictPack, {B(Cpu(2)), B(Cpu(2))}),
       Decision::kPlaced, "n4,n4", ""},
      {"STRICT_PACK too big ever",
       Generic(Strategy::kStrictPack, {B(Cpu(8)), B(Cpu(4))}),
       Decision::kInfeasible, "", "insufficient total CPU"},
      {"STRICT_SPREAD",
       Generic(Strategy::kStrictSpread, {B(Cpu(1)), B(Cpu(1)), B(Cpu(1))}),
       Decision::kPlaced, "n3,n4,n1", ""},
      {"STRICT_SPREAD more bundles than nodes",
       Generic(Strategy::kStrictSpread,
               {B(Cpu(1)), B(Cpu(1)), B(Cpu(1)), B(Cpu(1)), B(Cpu(1))}),
       Decision::kInfeasible, "",
       "STRICT_SPREAD needs 5 distinct nodes, only 4"},
      {"STRICT_SPREAD needs the draining node: wait",
       Generic(Strategy::kStrictSpread,
               {B(Cpu(1)), B(Cpu(1)), B(Cpu(1)), B(Cpu(1))}),
       Decision::kUnschedulable, "", "1 DRAINING"},
      {"STRICT_SPREAD matching: greedy would take n4 for the free bundle",
       Generic(Strategy::kStrictSpread,
               {B(Cpu(1)), B(Cpu(1), {{"ray.io/availability-zone", "z2"}}),
                B(Cpu(4), {{"ray.io/availability-zone", "z1"}})}),
       Decision::kPlaced, "n3,n4,n1", ""},
      {"selector",
       Generic(Strategy::kPack,
               {B(Cpu(1), {{"ray.io/availability-zone", "z2"}})}),
       Decision::kPlaced, "n4", ""},
      {"no node ever big enough", Generic(Strategy::kPack, {B(Cpu(9))}),
       Decision::kInfeasible, "",
       "bundle 0 {CPU: 9}: 0/4 nodes fit: 4 insufficient total CPU"},
      {"unknown resource", Generic(Strategy::kPack, {B({{"GPU", Units(1)}})}),
       Decision::kInfeasible, "", "insufficient total GPU"},
      {"fits only later", Generic(Strategy::kPack, {B(Cpu(8)), B(Cpu(8))}),
       Decision::kUnschedulable, "", "bundle 1 {CPU: 8}: 0/4 nodes fit"},
      {"empty request", Generic(Strategy::kPack, {}), Decision::kInfeasible, "",
       "invalid request: bundles: at least one bundle is required"},
      {"empty fallback of a slice request (it placed nothing, and held no "
       "chip)",
       [] {
         PlacementRequest r = SliceRequest(TpuGeneration::kV6e, "2x4");
         r.fallbacks.push_back({});
         return r;
       }(),
       Decision::kInfeasible, "",
       "fallback_strategy[0].bundles: at least one bundle is required (with a "
       "slice "
       "requirement, one per host)"},
      {"negative", Generic(Strategy::kPack, {B({{"CPU", -1}})}),
       Decision::kInfeasible, "", "bundles[0].resources[CPU]: must be >= 0"},
  };
  for (const Case& c : cases) {
    Decision d = Solve(*snap, c.request);
    EXPECT_EQ(d.outcome, c.outcome) << c.name << ": " << d.diagnosis.summary;
    EXPECT_EQ(Nodes(d), c.nodes) << c.name;
    EXPECT_NE(d.diagnosis.summary.find(c.summary), std::string::npos)
        << c.name << ": " << d.diagnosis.summary;
  }
}

TEST(SolverZoneTest, SmallGangsPreferOneZone) {
  // Two used nodes in different zones each hold one {CPU: 3}; zone z1 also
  // has an idle node. Staying in z1 costs one idle node and no more nodes.
  std::vector<Node> nodes = {CpuNode("a", 4, "z1"), CpuNode("b", 4, "z2"),
                             CpuNode("c", 4, "z1")};
  auto snap = Snap(nodes, {Allocation{"x", 0, "a", Cpu(0.5)},
                           Allocation{"y", 0, "b", Cpu(0.5)}});
  Decision d = Solve(*snap, Generic(Strategy::kPack, {B(Cpu(3)), B(Cpu(3))}));
  ASSERT_EQ(d.outcome, Decision::kPlaced) << d.diagnosis.summary;
  EXPECT_EQ(Nodes(d), "a,c");
  EXPECT_NE(d.diagnosis.summary.find("in zone z1"), std::string::npos)
      << d.diagnosis.summary;

  // But not at the price of putting a CPU bundle on a TPU host.
  std::vector<Node> tpu = {CpuNode("a", 4, "z1"), CpuNode("b", 4, "z2")};
  Append(tpu, Slice("s", "TPU-V6E", "4x4", "z1"));
  auto snap2 = Snap(tpu, {Allocation{"held", 0, "s-w3", Tpu(4)}});
  d = Solve(*snap2, Generic(Strategy::kPack, {B(Cpu(3)), B(Cpu(3))}));
  EXPECT_EQ(Nodes(d), "a,b");

  // SPREAD keeps distinct nodes before one zone.
  d = Solve(*snap,
            Generic(Strategy::kSpread, {B(Cpu(1)), B(Cpu(1)), B(Cpu(1))}));
  EXPECT_EQ(Nodes(d), "a,b,c");
}

// --- Priorities, fallbacks, pinned bundles ----------------------------------

TEST(SolverPriorityTest, WholeGangOnFirstPriorityThatHoldsIt) {
  std::vector<Node> nodes = {CpuNode("spot1", 4, "z1", "spot"),
                             CpuNode("flex1", 8, "z1", "flex-start"),
                             CpuNode("res1", 8, "z1", "reserved"),
                             CpuNode("res2", 8, "z1", "reserved")};
  auto snap = Snap(nodes);
  PlacementRequest r = Generic(Strategy::kStrictSpread, {B(Cpu(2)), B(Cpu(2))});
  r.priorities = {Sel({{"sliced.io/capacity-tier", "spot"}}),
                  Sel({{"sliced.io/capacity-tier", "flex-start"}}),
                  Sel({{"sliced.io/capacity-tier", "reserved"}})};
  Decision d = Solve(*snap, r);
  ASSERT_EQ(d.outcome, Decision::kPlaced) << d.diagnosis.summary;
  EXPECT_EQ(d.priority_index, 2);
  EXPECT_EQ(d.fallback_index, -1);
  EXPECT_EQ(Nodes(d), "res1,res2");
  // Failed priorities leave their diagnosis steps behind.
  EXPECT_EQ(d.diagnosis.steps.size(), 2u);

  r.strategy = Strategy::kPack;
  d = Solve(*snap, r);
  EXPECT_EQ(d.priority_index, 0);
  EXPECT_EQ(Nodes(d), "spot1,spot1");

  r.bundles = {B(Cpu(64))};
  d = Solve(*snap, r);
  EXPECT_EQ(d.outcome, Decision::kInfeasible);
  EXPECT_NE(d.diagnosis.summary.find(
                "priority 2 {sliced.io/capacity-tier: reserved}"),
            std::string::npos)
      << d.diagnosis.summary;
}

TEST(SolverPriorityTest, LostBundlesGoToTheSurvivorsPriority) {
  // The survivor is on spot, whose only node is full: the lost bundle may
  // not go to flex-start (a gang stays in one tier), and the survivor's
  // own selector, which its node's labels no longer match, does not count.
  std::vector<Node> nodes = {CpuNode("spot1", 4, "z1", "spot"),
                             CpuNode("flex1", 8, "z2", "flex-start")};
  auto snap = Snap(nodes, {Allocation{"pg", 0, "spot1", Cpu(3)},
                           Allocation{"other", 0, "spot1", Cpu(1)}});
  PlacementRequest r = Generic(
      Strategy::kSpread,
      {B(Cpu(3), {{"ray.io/availability-zone", "z9"}}, "spot1"), B(Cpu(1))});
  r.replacing_pg_id = "pg";
  r.priorities = {Sel({{"sliced.io/capacity-tier", "spot"}}),
                  Sel({{"sliced.io/capacity-tier", "flex-start"}})};
  Decision d = Solve(*snap, r);
  EXPECT_EQ(d.outcome, Decision::kUnschedulable) << d.diagnosis.summary;
  EXPECT_NE(d.diagnosis.summary.find(
                "pinned to node spot1, which is outside this priority "
                "({sliced.io/capacity-tier: flex-start})"),
            std::string::npos)
      << d.diagnosis.summary;
  // Room on spot: the lost bundle joins its survivor there.
  snap = Snap(
      {CpuNode("spot1", 4, "z1", "spot"), CpuNode("spot2", 4, "z2", "spot"),
       CpuNode("flex1", 8, "z2", "flex-start")},
      {Allocation{"pg", 0, "spot1", Cpu(3)},
       Allocation{"other", 0, "spot1", Cpu(1)}});
  d = Solve(*snap, r);
  ASSERT_EQ(d.outcome, Decision::kPlaced) << d.diagnosis.summary;
  EXPECT_EQ(d.priority_index, 0);
  EXPECT_EQ(Nodes(d), "spot1,spot2");
}

TEST(SolverPriorityTest, SlicesHonourPriorities) {
  std::vector<Node> nodes = Slice("od", "TPU-V6E", "4x4", "z1", "on-demand");
  Append(nodes, Slice("sp", "TPU-V6E", "4x4", "z2", "spot"));
  auto snap = Snap(nodes);
  PlacementRequest r = SliceRequest(TpuGeneration::kV6e, "4x4");
  r.priorities = {Sel({{"sliced.io/capacity-tier", "spot"}}),
                  Sel({{"sliced.io/capacity-tier", "on-demand"}})};
  Decision d = Solve(*snap, r);
  EXPECT_EQ(d.slice_names, std::vector<std::string>{"sp"});
  EXPECT_EQ(d.priority_index, 0);
  // Two slices exist, but never both in one priority: the gang is not split.
  r.slice->num_slices = 2;
  d = Solve(*snap, r);
  EXPECT_EQ(d.outcome, Decision::kInfeasible) << d.diagnosis.summary;
}

TEST(SolverFallbackTest, FallbacksOnlyWhenPrimaryFails) {
  auto snap = Snap({CpuNode("a", 4, "z1"), CpuNode("b", 4, "z2")});
  PlacementRequest r = Generic(
      Strategy::kPack, {B(Cpu(2), {{"ray.io/availability-zone", "z1"}})});
  r.fallbacks = {{B(Cpu(2), {{"ray.io/availability-zone", "z2"}})}};
  Decision d = Solve(*snap, r);
  EXPECT_EQ(d.fallback_index, -1);
  EXPECT_EQ(Nodes(d), "a");
  r.bundles = {B(Cpu(8), {{"ray.io/availability-zone", "z1"}})};
  d = Solve(*snap, r);
  EXPECT_EQ(d.outcome, Decision::kPlaced);
  EXPECT_EQ(d.fallback_index, 0);
  EXPECT_EQ(Nodes(d), "b");
  EXPECT_NE(d.diagnosis.summary.find("fallback 0"), std::string::npos);
}

TEST(SolverPinnedTest, Table) {
  std::vector<Node> nodes = {CpuNode("a", 4), CpuNode("b", 4),
                             CpuNode("dead", 4), CpuNode("draining", 4),
                             CpuNode("sick", 4)};
  nodes[2].state = NodeState::kDead;
  nodes[3].state = NodeState::kDraining;
  nodes[4].state = NodeState::kDraining;
  nodes[4].quarantine_reason = "hbm ecc";
  auto snap = Snap(nodes, {Allocation{"pg", 0, "a", Cpu(3)},
                           Allocation{"pg", 1, "dead", Cpu(1)},
                           Allocation{"pg", 2, "draining", Cpu(2)}});
  struct Case {
    std::string name;
    PlacementRequest request;
    Decision::Outcome outcome;
    std::string nodes;
    std::string summary;
  };
  PlacementRequest replace =
      Generic(Strategy::kSpread, {B(Cpu(3), {}, "a"), B(Cpu(1))});
  replace.replacing_pg_id = "pg";
  PlacementRequest replace_pack =
      Generic(Strategy::kStrictPack, {B(Cpu(3), {}, "a"), B(Cpu(1))});
  replace_pack.replacing_pg_id = "pg";
  const Case cases[] = {
      {"re-place a lost bundle, keep the survivor", replace, Decision::kPlaced,
       "a,b", ""},
      {"strict pack next to the survivor", replace_pack, Decision::kPlaced,
       "a,a", ""},
      {"without releasing the old PG the survivor does not fit",
       Generic(Strategy::kSpread, {B(Cpu(3), {}, "a"), B(Cpu(1))}),
       Decision::kUnschedulable, "", "has no room"},
      {"pinned to a dead node",
       Generic(Strategy::kPack, {B(Cpu(1), {}, "dead")}),
       Decision::kUnschedulable, "", "pinned to node dead, which is DEAD"},
      {"a draining node keeps its bundle; the lost one goes elsewhere",
       [] {
         PlacementRequest r = Generic(
             Strategy::kSpread,
             {B(Cpu(3), {}, "a"), B(Cpu(1)), B(Cpu(2), {}, "draining")});
         r.replacing_pg_id = "pg";
         return r;
       }(),
       Decision::kPlaced, "a,b,draining", ""},
      {"pinned to a quarantined draining node",
       Generic(Strategy::kPack, {B(Cpu(1), {}, "sick")}),
       Decision::kUnschedulable, "", "which is DRAINING"},
      {"pinned to an unknown node",
       Generic(Strategy::kPack, {B(Cpu(1), {}, "zz")}), Decision::kInfeasible,
       "", "is not in the inventory"},
      {"a pin stays on a node whose labels no longer match its selector",
       Generic(
           Strategy::kPack,
           {B(Cpu(1), {{"ray.io/availability-zone", "z9"}}, "b"), B(Cpu(1))}),
       Decision::kPlaced, "b,b", ""},
  };
  for (const Case& c : cases) {
    Decision d = Solve(*snap, c.request);
    EXPECT_EQ(d.outcome, c.outcome) << c.name << ": " << d.diagnosis.summary;
    EXPECT_EQ(Nodes(d), c.nodes) << c.name;
    EXPECT_NE(d.diagnosis.summary.find(c.summary), std::string::npos)
        << c.name << ": " << d.diagnosis.summary;
  }
  PlacementRequest slice_pinned = SliceRequest(TpuGeneration::kV6e, "2x4");
  slice_pinned.bundles = {B(Tpu(8), {}, "a")};
  EXPECT_NE(Solve(*snap, slice_pinned).diagnosis.summary.find("pinned_node_id"),
            std::string::npos);
}

TEST(SolverStrategyTest, StrictSpreadFallsBackToMatching) {
  // Each bundle can use two of three nodes; best fit sends bundle 0 to x and
  // bundle 1 to z, leaving bundle 2 nothing: augmenting paths repair it.
  std::vector<Node> nodes = {CpuNode("x", 2), CpuNode("y", 8), CpuNode("z", 2)};
  for (auto [node, label] :
       {std::pair{0, "p"}, {0, "r"}, {1, "p"}, {1, "q"}, {2, "q"}, {2, "r"}}) {
    nodes[node].labels[label] = "1";
  }
  auto snap = Snap(nodes);
  Decision d =
      Solve(*snap, Generic(Strategy::kStrictSpread,
                           {B(Cpu(1), {{"p", "1"}}), B(Cpu(1), {{"q", "1"}}),
                            B(Cpu(1), {{"r", "1"}})}));
  ASSERT_EQ(d.outcome, Decision::kPlaced) << d.diagnosis.summary;
  absl::flat_hash_set<std::string> distinct(d.bundle_nodes.begin(),
                                            d.bundle_nodes.end());
  EXPECT_EQ(distinct.size(), 3u) << Nodes(d);
}

// Gangs past the gang placer's inline size (8 nodes, then a hash set):
// STRICT_SPREAD keeps 20 bundles on 20 distinct nodes, says 21 cannot have
// them, and refuses two of 12 pinned bundles on one node; SPREAD puts 12 on
// 12 nodes while it has them.
TEST(SolverStrategyTest, LargeGangsKeepTheirNodesApart) {
  auto name = [](int i) { return absl::StrCat("n", i < 10 ? "0" : "", i); };
  std::vector<Node> nodes;
  for (int i = 0; i < 20; ++i) nodes.push_back(CpuNode(name(i), 8));
  auto snap = Snap(nodes);
  auto gang = [](int n, std::vector<std::string> pins = {}) {
    std::vector<Bundle> bundles;
    for (int b = 0; b < n; ++b) {
      bundles.push_back(
          B(Cpu(1), {}, b < static_cast<int>(pins.size()) ? pins[b] : ""));
    }
    return bundles;
  };
  for (Strategy strategy : {Strategy::kStrictSpread, Strategy::kSpread}) {
    const int n = strategy == Strategy::kStrictSpread ? 20 : 12;
    Decision d = Solve(*snap, Generic(strategy, gang(n)));
    ASSERT_EQ(d.outcome, Decision::kPlaced) << d.diagnosis.summary;
    absl::flat_hash_set<std::string> distinct(d.bundle_nodes.begin(),
                                              d.bundle_nodes.end());
    EXPECT_EQ(distinct.size(), static_cast<size_t>(n)) << Nodes(d);
  }
  Decision too_many = Solve(*snap, Generic(Strategy::kStrictSpread, gang(21)));
  EXPECT_EQ(too_many.outcome, Decision::kInfeasible);
  EXPECT_NE(too_many.diagnosis.summary.find(
                "STRICT_SPREAD needs 21 distinct nodes, only 20"),
            std::string::npos)
      << too_many.diagnosis.summary;

  std::vector<std::string> pins;
  for (int i = 9; i < 20; ++i) pins.push_back(name(i));  // 11 nodes
  pins.push_back(name(12));  // pinned twice: the 12th bundle's node is taken
  Decision pinned =
      Solve(*snap, Generic(Strategy::kStrictSpread, gang(12, pins)));
  EXPECT_EQ(pinned.outcome, Decision::kInfeasible);
  EXPECT_NE(pinned.diagnosis.summary.find("already holds another pinned"),
            std::string::npos)
      << pinned.diagnosis.summary;
}

TEST(SolverStrategyTest, StrictPackWaitsForRoom) {
  auto snap = Snap({CpuNode("a", 4)}, {Allocation{"x", 0, "a", Cpu(2)}});
  Decision d =
      Solve(*snap, Generic(Strategy::kStrictPack, {B(Cpu(2)), B(Cpu(1))}));
  EXPECT_EQ(d.outcome, Decision::kUnschedulable);
  EXPECT_EQ(
      d.diagnosis.summary,
      "gang (STRICT_PACK) {CPU: 3}: 0/1 nodes fit: 1 insufficient free CPU");
}

TEST(SolverStrategyTest, SumsOfTheLargestBundlesDoNotWrap) {
  // Ten bundles of the largest amount sum to 1e19 units, past int64: a sum
  // that wrapped (negative) would fit on any node.
  auto snap = Snap({CpuNode("a", 1e14), CpuNode("b", 1e14)});
  const std::vector<Bundle> ten(10, B(Cpu(1e14)));
  for (Strategy s : {Strategy::kStrictPack, Strategy::kPack}) {
    Decision d = Solve(*snap, Generic(s, ten));
    EXPECT_NE(d.outcome, Decision::kPlaced) << static_cast<int>(s);
  }
}

TEST(SolverTest, EmptyInventory) {
  auto snap = InventorySnapshot::Empty();
  Decision d = Solve(*snap, Generic(Strategy::kSpread, {B(Cpu(1))}));
  EXPECT_EQ(d.outcome, Decision::kInfeasible);
  EXPECT_EQ(d.diagnosis.summary, "bundle 0 {CPU: 1}: 0/0 nodes fit");
  d = Solve(*snap, SliceRequest(TpuGeneration::kV6e, "2x4"));
  EXPECT_EQ(d.outcome, Decision::kInfeasible);
  EXPECT_EQ(d.diagnosis.summary,
            "no v6e-8 slice (v6e 2x4) exists in this inventory");
}

// Bundles that ask nearly the same (equal to six digits) are not one
// candidate group: the larger one's cursor skipped the node only the
// smaller one fits, and the gang stayed unplaced.
TEST(SolverTest, NearlyEqualBundlesKeepTheirOwnCandidates) {
  Node small = CpuNode("n-a", 1);
  small.resources["memory"] = Units(8589930000.0);
  Node large = CpuNode("n-b", 1);
  large.resources["memory"] = Units(8589934592.0);
  auto snap = Snap({small, large});
  for (Strategy s : {Strategy::kPack, Strategy::kSpread}) {
    const Decision d =
        Solve(*snap, Generic(s, {B({{"memory", Units(8589934592.0)}}),
                                 B({{"memory", Units(8589930000.0)}})}));
    EXPECT_EQ(d.outcome, Decision::kPlaced)
        << static_cast<int>(s) << ": " << d.diagnosis.summary;
    EXPECT_EQ(d.bundle_nodes, (std::vector<std::string>{"n-b", "n-a"}));
  }
}

// The not-placed summary becomes a group's stored pending reason, in every
// reply and watch event: it is bounded however many lists and selectors.
TEST(SolverTest, TheSummaryOfManyFailedListsIsBounded) {
  auto snap = Snap({CpuNode("a", 4)});
  PlacementRequest r = Generic(Strategy::kPack, {B(Cpu(8))});
  for (int f = 0; f < 200; ++f) r.fallbacks.push_back({B(Cpu(8))});
  const Decision d = Solve(*snap, r);
  EXPECT_EQ(d.outcome, Decision::kInfeasible);
  EXPECT_LE(d.diagnosis.summary.size(), kMaxSummaryBytes + 40);
  EXPECT_NE(d.diagnosis.summary.find(" bytes in all)"), std::string::npos)
      << d.diagnosis.summary.substr(d.diagnosis.summary.size() - 80);
  EXPECT_EQ(d.diagnosis.steps.size(), 201u);  // every attempt kept
}

TEST(SolverTest, DoesNotMutateTheSnapshot) {
  auto snap = Snap({CpuNode("a", 4)});
  PlacementRequest r = Generic(Strategy::kPack, {B(Cpu(4))});
  EXPECT_EQ(Solve(*snap, r).outcome, Decision::kPlaced);
  EXPECT_EQ(Solve(*snap, r).outcome, Decision::kPlaced);
  EXPECT_EQ((*snap->FreeResources("a"))["CPU"], Units(4));
}

}  // namespace
}  // namespace sliced::scheduler
