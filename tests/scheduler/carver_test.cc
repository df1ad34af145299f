// Sub-slices (SliceRequirement::subslicing): aligned boxes of larger intact
// slices, physical worker order, the carving preference order, the
// subslicing modes, diagnosis, and a property test over carving sequences.
#include "scheduler/internal/carver.h"

#include <array>
#include <random>
#include <string>
#include <vector>

#include "absl/container/btree_set.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "gtest/gtest.h"
#include "scheduler/internal/slice_placer.h"
#include "scheduler/internal/snapshot_state.h"
#include "scheduler/slices.h"
#include "scheduler/solver.h"
#include "scheduler/subslices.h"
#include "tests/scheduler/builders.h"

namespace sliced::scheduler {
namespace {

using ::sliced::scheduler::testing::Cpu;
using ::sliced::scheduler::testing::Slice;
using ::sliced::scheduler::testing::Snap;
using ::sliced::scheduler::testing::Units;

// Host w of a v5p 4x4x4 pod (host grid 2x2x4) sits at position `coords[w]`.
std::vector<Node> Pod(const std::string& name,
                      const std::vector<std::string>& coords = {}) {
  std::vector<Node> hosts = Slice(name, "TPU-V5P", "4x4x4");
  for (size_t w = 0; w < coords.size(); ++w) {
    hosts[w].labels[std::string(kLabelTpuHostCoords)] = coords[w];
  }
  return hosts;
}

PlacementRequest Carve(const std::string& topology, int num_slices = 1,
                       Subslicing mode = Subslicing::kAllowed) {
  PlacementRequest r;
  SliceRequirement s;
  s.generation = TpuGeneration::kV5p;
  s.topology = topology;
  s.num_slices = num_slices;
  s.subslicing = mode;
  r.slice = s;
  return r;
}

// Allocations holding every bundle of `d` for group `pg`.
std::vector<Allocation> Hold(const Decision& d, const std::string& pg,
                             int64_t tpu = 4) {
  std::vector<Allocation> out;
  for (size_t b = 0; b < d.bundle_nodes.size(); ++b) {
    out.push_back({pg, static_cast<int>(b), d.bundle_nodes[b],
                   {{"TPU", Units(static_cast<double>(tpu))}}});
  }
  return out;
}

TEST(CarverTest, SubSliceOfAPodInPhysicalOrder) {
  auto snap = Snap(Pod("pod"));
  const Decision d = Solve(*snap, Carve("2x2x2"));
  ASSERT_EQ(d.outcome, Decision::kPlaced) << d.diagnosis.summary;
  EXPECT_EQ(d.slice_names, std::vector<std::string>{"pod/2x2x2@0-0-0"});
  // Positions assumed: worker w at cell w (x fastest): cells 0 and 4 are
  // (0,0,0) and (0,0,1).
  EXPECT_EQ(d.bundle_nodes, (std::vector<std::string>{"pod-w0", "pod-w4"}));
}

TEST(CarverTest, ReportedPositionsNotWorkerIdsOrderTheSubSlice) {
  // Workers numbered in reverse of their physical place.
  std::vector<std::string> coords;
  for (int w = 0; w < 16; ++w) {
    const int c = 15 - w;
    coords.push_back(absl::StrCat(c % 2, "-", (c / 2) % 2, "-", c / 4));
  }
  auto snap = Snap(Pod("pod", coords));
  const Decision d = Solve(*snap, Carve("2x2x2"));
  ASSERT_EQ(d.outcome, Decision::kPlaced) << d.diagnosis.summary;
  // Cell 0 (0,0,0) is worker 15, cell 4 (0,0,1) worker 11.
  EXPECT_EQ(d.bundle_nodes, (std::vector<std::string>{"pod-w15", "pod-w11"}));
}

TEST(CarverTest, SplitsTheSmallestFreeBlockBuddyStyle) {
  // One host busy at (0,0,2): a single-host sub-slice takes its buddy
  // (0,0,3), whose free block is that one host, not (0,0,0), which would
  // split a free 2x2x4 half of the pod.
  auto snap = Snap(Pod("pod"), {{"pg-x", 0, "pod-w8", {{"TPU", Units(4)}}}});
  const Decision d = Solve(*snap, Carve("2x2x1"));
  ASSERT_EQ(d.outcome, Decision::kPlaced) << d.diagnosis.summary;
  EXPECT_EQ(d.slice_names, std::vector<std::string>{"pod/2x2x1@0-0-3"});
  EXPECT_EQ(d.bundle_nodes, std::vector<std::string>{"pod-w12"});
  // A 2x2x2 next: the free 1x1x2 column above (0,0,0) is the smallest free
  // block that holds it.
  auto more = Snap(Pod("pod"), {{"pg-x", 0, "pod-w8", {{"TPU", Units(4)}}},
                                {"pg-y", 0, "pod-w12", {{"TPU", Units(4)}}}});
  const Decision two = Solve(*more, Carve("2x2x2"));
  ASSERT_EQ(two.outcome, Decision::kPlaced) << two.diagnosis.summary;
  EXPECT_EQ(two.slice_names, std::vector<std::string>{"pod/2x2x2@0-0-0"});
}

TEST(CarverTest, PreferenceOrder) {
  std::vector<Node> nodes = Pod("big");
  for (const Node& n : Slice("mid", "TPU-V5P", "2x2x4")) nodes.push_back(n);
  for (const Node& n : Slice("exact", "TPU-V5P", "2x2x2")) nodes.push_back(n);
  // 1. a whole free slice of the exact shape, worker-id order.
  auto snap = Snap(nodes);
  Decision d = Solve(*snap, Carve("2x2x2"));
  ASSERT_EQ(d.outcome, Decision::kPlaced);
  EXPECT_EQ(d.slice_names, std::vector<std::string>{"exact"});
  // 2. the smaller parent when both are untouched.
  snap = Snap(nodes, Hold(d, "pg-exact"));
  Decision second = Solve(*snap, Carve("2x2x2"));
  ASSERT_EQ(second.outcome, Decision::kPlaced);
  EXPECT_EQ(second.slice_names, std::vector<std::string>{"mid/2x2x2@0-0-0"});
  // 3. a parent already carved before an untouched one, even a bigger one.
  std::vector<Allocation> held = Hold(d, "pg-exact");
  held.push_back({"pg-big", 0, "big-w0", {{"TPU", Units(4)}}});
  snap = Snap(nodes, held);
  Decision third = Solve(*snap, Carve("2x2x2"));
  ASSERT_EQ(third.outcome, Decision::kPlaced);
  EXPECT_EQ(ParentSliceName(third.slice_names[0]), "big");
}

TEST(CarverTest, WholeRequestsNeverTakeACarvedParent) {
  auto snap = Snap(Pod("pod"));
  const Decision sub = Solve(*snap, Carve("2x2x2"));
  ASSERT_EQ(sub.outcome, Decision::kPlaced);
  auto carved = Snap(Pod("pod"), Hold(sub, "pg-sub"));
  const Decision whole = Solve(*carved, Carve("4x4x4"));
  EXPECT_EQ(whole.outcome, Decision::kUnschedulable) << whole.diagnosis.summary;
}

TEST(CarverTest, SubslicingModes) {
  std::vector<Node> nodes = Pod("pod");
  auto snap = Snap(nodes);
  // Never: the exact shape does not exist.
  const Decision never = Solve(*snap, Carve("2x2x2", 1, Subslicing::kNever));
  EXPECT_EQ(never.outcome, Decision::kInfeasible);
  // If no exact shape: none exists, so carve.
  const Decision carve =
      Solve(*snap, Carve("2x2x2", 1, Subslicing::kIfNoExactShape));
  EXPECT_EQ(carve.outcome, Decision::kPlaced) << carve.diagnosis.summary;
  // A busy 2x2x2 slice exists: wait for it rather than carve.
  std::vector<Node> with_exact = nodes;
  for (const Node& n : Slice("exact", "TPU-V5P", "2x2x2")) {
    with_exact.push_back(n);
  }
  auto busy = Snap(with_exact, {{"pg-e", 0, "exact-w0", {{"TPU", Units(4)}}},
                                {"pg-e", 1, "exact-w1", {{"TPU", Units(4)}}}});
  EXPECT_EQ(
      Solve(*busy, Carve("2x2x2", 1, Subslicing::kIfNoExactShape)).outcome,
      Decision::kUnschedulable);
  EXPECT_EQ(Solve(*busy, Carve("2x2x2", 1, Subslicing::kAllowed)).outcome,
            Decision::kPlaced);
  // One of the exact shape in a zone the request excludes does not count:
  // it could never take it.
  PlacementRequest in_z1 = Carve("2x2x2", 1, Subslicing::kIfNoExactShape);
  in_z1.slice->selector =
      *ParseLabelSelector({{"ray.io/availability-zone", "z1"},
                           {"ray.io/accelerator-type", "TPU-V5P"}});
  std::vector<Node> elsewhere = nodes;
  for (const Node& n : Slice("other-zone", "TPU-V5P", "2x2x2", "z2")) {
    elsewhere.push_back(n);
  }
  auto busy_elsewhere =
      Snap(elsewhere, {{"pg-e", 0, "other-zone-w0", {{"TPU", Units(4)}}},
                       {"pg-e", 1, "other-zone-w1", {{"TPU", Units(4)}}}});
  const Decision carved = Solve(*busy_elsewhere, in_z1);
  EXPECT_EQ(carved.outcome, Decision::kPlaced) << carved.diagnosis.summary;
  EXPECT_EQ(Solve(*busy, in_z1).outcome, Decision::kUnschedulable);
  // One in the tier of a later compute-class priority does count: the
  // request falls back to it, and does not carve the first tier's pod.
  std::vector<Node> tiers = Slice("spot-pod", "TPU-V5P", "4x4x4", "z1", "spot");
  for (const Node& n : Slice("exact", "TPU-V5P", "2x2x2", "z1", "reserved")) {
    tiers.push_back(n);
  }
  PlacementRequest classed = Carve("2x2x2", 1, Subslicing::kIfNoExactShape);
  for (const char* tier : {"spot", "reserved"}) {
    classed.priorities.push_back(
        *ParseLabelSelector({{"sliced.io/capacity-tier", tier}}));
  }
  const Decision fell_back = Solve(*Snap(tiers), classed);
  ASSERT_EQ(fell_back.outcome, Decision::kPlaced)
      << fell_back.diagnosis.summary;
  EXPECT_EQ(fell_back.priority_index, 1);
  EXPECT_EQ(fell_back.slice_names, std::vector<std::string>{"exact"});
}

TEST(CarverTest, MultiSliceIsAllOrNothing) {
  auto snap = Snap(Pod("pod"));
  const Decision eight = Solve(*snap, Carve("2x2x2", 8));
  ASSERT_EQ(eight.outcome, Decision::kPlaced) << eight.diagnosis.summary;
  EXPECT_EQ(absl::btree_set<std::string>(eight.bundle_nodes.begin(),
                                         eight.bundle_nodes.end())
                .size(),
            16u);
  const Decision nine = Solve(*snap, Carve("2x2x2", 9));
  EXPECT_NE(nine.outcome, Decision::kPlaced);
}

// A multi-slice job's sub-slices talk over the data-center network: they
// come from one zone when one zone holds them all, even when the best
// single box (in a parent already carved) is in another; else across zones.
TEST(CarverTest, MultiSliceSubSlicesComeFromOneZoneWhenOneHoldsThem) {
  std::vector<Node> nodes = Slice("a", "TPU-V5P", "4x4x4", "z-a");
  for (const Node& n : Slice("b", "TPU-V5P", "4x4x4", "z-b")) {
    nodes.push_back(n);
  }
  // Pod a is carved but for one 2x2x2 (hosts w0 and w4, cells (0,0,0) and
  // (0,0,1)); pod b is untouched, or carved the same way.
  auto carved = [&](bool b_too) {
    std::vector<Allocation> held;
    for (const char* pod : {"a", "b"}) {
      if (pod == std::string("b") && !b_too) continue;
      for (int w = 0; w < 16; ++w) {
        if (w == 0 || w == 4) continue;
        held.push_back({absl::StrCat("pg-", pod),
                        static_cast<int>(held.size()),
                        absl::StrCat(pod, "-w", w),
                        {{"TPU", Units(4)}}});
      }
    }
    return Snap(nodes, held);
  };
  const auto parents = [](const Decision& d) {
    std::vector<std::string> out;
    for (const std::string& name : d.slice_names) {
      out.emplace_back(ParentSliceName(name));
    }
    return out;
  };
  // Alone, the box of pod a is the best one.
  const Decision one = Solve(*carved(false), Carve("2x2x2"));
  ASSERT_EQ(one.outcome, Decision::kPlaced) << one.diagnosis.summary;
  EXPECT_EQ(parents(one), std::vector<std::string>{"a"});
  // Two: both from pod b, in z-b.
  const Decision two = Solve(*carved(false), Carve("2x2x2", 2));
  ASSERT_EQ(two.outcome, Decision::kPlaced) << two.diagnosis.summary;
  EXPECT_EQ(parents(two), (std::vector<std::string>{"b", "b"}));
  // Pod b carved too: no zone holds both, so they come from both.
  const Decision across = Solve(*carved(true), Carve("2x2x2", 2));
  ASSERT_EQ(across.outcome, Decision::kPlaced) << across.diagnosis.summary;
  EXPECT_EQ(parents(across), (std::vector<std::string>{"a", "b"}));
}

TEST(CarverTest, ExplainsWithRaysMessageAndCountsParents) {
  std::vector<Node> nodes = Pod("pod");
  nodes[5].state = NodeState::kDead;
  for (const Node& n : Slice("small", "TPU-V5P", "2x2x1")) nodes.push_back(n);
  auto snap = Snap(nodes);
  const Decision d = Solve(*snap, Carve("2x2x2"));
  EXPECT_EQ(d.outcome, Decision::kUnschedulable);
  EXPECT_NE(d.diagnosis.summary.find(
                "No subslice of '2x2x2' is schedulable across any of the "
                "candidate parent topologies: 2 v5p slices considered, 1 not "
                "intact, 1 too small or other hosts; 0 carved; largest free "
                "aligned box none"),
            std::string::npos)
      << d.diagnosis.summary;
  // A carved pod with room left, asked for more than it has: the largest
  // box it could still give is named.
  // Columns (0,0,*) and (1,1,*) held: no 2x4x4 half is free, two 2x2x4
  // columns are.
  std::vector<Allocation> held;
  for (int w : {0, 4, 8, 12, 3, 7, 11, 15}) {
    held.push_back({"pg-h", w, absl::StrCat("pod-w", w), {{"TPU", Units(4)}}});
  }
  auto carved = Snap(Pod("pod"), held);
  const Decision big = Solve(*carved, Carve("2x4x4"));
  EXPECT_NE(big.diagnosis.summary.find(
                "1 no free aligned box; 1 carved; largest free aligned box "
                "2x2x4"),
            std::string::npos)
      << big.diagnosis.summary;
  // Nothing of the generation could ever hold it: infeasible.
  auto small = Snap(Slice("small", "TPU-V5P", "2x2x1"));
  EXPECT_EQ(Solve(*small, Carve("2x2x2")).outcome, Decision::kInfeasible);
}

TEST(FreeSubslicesTest, CountsFreeAlignedBoxesPerShape) {
  auto free_pod = Snap(Pod("pod"));
  SubsliceCapacity all = FreeSubslices(*free_pod, "pod");
  EXPECT_EQ(all.free_boxes,
            (absl::btree_map<std::string, int64_t>{
                {"2x2x1", 16}, {"2x2x2", 8}, {"2x2x4", 4}, {"2x4x4", 2}}));
  EXPECT_EQ(all.largest_free, "2x4x4");
  // One host busy at (0,0,0): one box of each size fewer.
  auto busy = Snap(Pod("pod"), {{"pg-x", 0, "pod-w0", {{"TPU", Units(4)}}}});
  SubsliceCapacity some = FreeSubslices(*busy, "pod");
  EXPECT_EQ(some.free_boxes,
            (absl::btree_map<std::string, int64_t>{
                {"2x2x1", 15}, {"2x2x2", 7}, {"2x2x4", 3}, {"2x4x4", 1}}));
  EXPECT_TRUE(FreeSubslices(*busy, "nope").free_boxes.empty());
}

// Carving until nothing fits, with random shapes: no host twice, every
// sub-slice an aligned box of its parent's grid, whole requests never on a
// carved parent.
TEST(CarverPropertyTest, RandomCarvingSequences) {
  const std::vector<std::string> shapes = {"2x2x1", "2x2x2", "2x2x4", "2x4x4",
                                           "4x4x4"};
  for (int seed = 1; seed <= 20; ++seed) {
    std::mt19937 rng(seed);
    std::vector<Node> nodes = Pod("p1");
    for (const Node& n : Pod("p2")) nodes.push_back(n);
    std::vector<Allocation> held;
    absl::btree_set<std::string> carved_parents;
    for (int step = 0; step < 30; ++step) {
      auto snap = Snap(nodes, held);
      const std::string topology = shapes[rng() % shapes.size()];
      const Decision d = Solve(*snap, Carve(topology));
      if (d.outcome != Decision::kPlaced) continue;
      ASSERT_EQ(d.slice_names.size(), 1u);
      const std::string parent(ParentSliceName(d.slice_names[0]));
      if (topology == "4x4x4") {
        EXPECT_FALSE(carved_parents.contains(parent)) << seed << " " << step;
        EXPECT_EQ(d.slice_names[0], parent);
      }
      if (d.slice_names[0] != parent) {
        // "<parent>/<topology>@x-y-z": the origin is a multiple of the box.
        const auto shape = ResolveTpuShape(TpuGeneration::kV5p, topology);
        const std::string at = d.slice_names[0].substr(
            d.slice_names[0].find('@') + 1);
        const std::vector<std::string> xyz = absl::StrSplit(at, '-');
        ASSERT_EQ(xyz.size(), 3u);
        for (int a = 0; a < 3; ++a) {
          EXPECT_EQ(std::stoi(xyz[a]) % shape->host_grid[a], 0)
              << d.slice_names[0];
        }
      }
      carved_parents.insert(parent);
      const std::string pg = absl::StrCat("pg-", step);
      for (const Allocation& a : Hold(d, pg)) held.push_back(a);
      absl::btree_set<std::string> hosts;
      for (const Allocation& a : held) {
        EXPECT_TRUE(hosts.insert(a.node_id).second)
            << "host " << a.node_id << " held twice, seed " << seed;
      }
    }
  }
}

// A key's idle parents are read in slice order up to the first that holds
// a box: one without room (CPU work on every host, and a request for every
// CPU) must not hide the next one, which beats a bigger parent.
TEST(CarverTest, AnIdleParentWithoutRoomDoesNotHideTheNextOne) {
  std::vector<Node> nodes = Slice("a", "TPU-V5P", "2x2x2");
  for (Node& n : Slice("b", "TPU-V5P", "2x2x2")) nodes.push_back(n);
  for (Node& n : Pod("p")) nodes.push_back(n);
  auto snap =
      Snap(nodes, {{"cpu", 0, "a-w0", Cpu(1)}, {"cpu", 1, "a-w1", Cpu(1)}});
  PlacementRequest r = Carve("2x2x1");
  r.slice->resources_per_host = {{"TPU", Units(4)}, {"CPU", Units(96)}};
  const Decision d = Solve(*snap, r);
  ASSERT_EQ(d.outcome, Decision::kPlaced) << d.diagnosis.summary;
  EXPECT_EQ(d.slice_names, std::vector<std::string>{"b/2x2x1@0-0-0"});
}

// Everything an attempt says, as text.
std::string AttemptText(const internal::Attempt& a) {
  std::string out = absl::StrCat(a.placed, " ", a.infeasible, " ",
                                 absl::StrJoin(a.nodes, ","), " ",
                                 absl::StrJoin(a.slices, ","), " ", a.summary);
  for (const DiagnosisStep& step : a.steps) {
    absl::StrAppend(&out, " | ", step.step, " ", step.considered);
    for (const Rejection& r : step.rejected) {
      absl::StrAppend(&out, " ", r.reason, "=", r.count);
    }
  }
  return out;
}

// The carver's indexes (idle and partly busy slices per key) change what it
// reads, never what it chooses or says: random v5p pods and 2x2x2 slices in
// two zones and two tiers, partly held by carved groups and CPU work, some
// not intact (a dead host), against random requests, decided both ways.
TEST(CarverPropertyTest, TheIndexedScanChoosesWhatTheFullScanChooses) {
  const std::vector<std::string> shapes = {"2x2x1", "2x2x2", "2x2x4", "2x4x4",
                                           "4x4x4"};
  int placed = 0, failed = 0;
  for (int seed = 1; seed <= 40; ++seed) {
    std::mt19937 rng(seed);
    std::vector<Node> nodes;
    // Several slices per key. A dead host makes its slice not intact (in
    // neither index); a request for every CPU of a host makes an idle slice
    // with CPU work beside hold no box, where a later one of its key may.
    for (int p = 0; p < 8; ++p) {
      const std::string zone = rng() % 2 ? "z1" : "z2";
      const std::string tier = rng() % 4 == 0 ? "spot" : "on-demand";
      const bool pod = rng() % 3 != 0;
      for (Node& n : Slice(absl::StrCat("s", p), "TPU-V5P",
                           pod ? "4x4x4" : "2x2x2", zone, tier)) {
        if (rng() % 12 == 0) n.state = NodeState::kDead;
        nodes.push_back(std::move(n));
      }
    }
    std::vector<Allocation> held;
    for (int step = 0; step < 10; ++step) {  // carve and hold a few boxes
      auto snap = Snap(nodes, held);
      const Decision d = Solve(*snap, Carve(shapes[rng() % 3]));
      if (d.outcome != Decision::kPlaced) continue;
      for (const Allocation& a : Hold(d, absl::StrCat("pg-", step))) {
        held.push_back(a);
      }
    }
    for (int c = 0; c < 6; ++c) {  // CPU work beside
      held.push_back({absl::StrCat("cpu-", c), 0,
                      nodes[rng() % nodes.size()].node_id, Cpu(1)});
    }
    auto snap = Snap(nodes, held);
    const internal::SnapshotState& st = internal::StateOf(*snap);
    for (int r = 0; r < 12; ++r) {
      SliceRequirement req;
      req.generation = TpuGeneration::kV5p;
      req.topology = shapes[rng() % shapes.size()];
      req.num_slices = 1 + static_cast<int>(rng() % 3);
      req.subslicing = Subslicing::kAllowed;
      if (rng() % 3 == 0) {
        // Every CPU of each host: a host with CPU work beside takes no
        // worker, so an idle slice may hold no box.
        req.resources_per_host = {{"TPU", Units(4)}, {"CPU", Units(96)}};
      }
      switch (rng() % 4) {
        case 0:
          req.selector =
              *ParseLabelSelector({{"ray.io/availability-zone", "z2"}});
          break;
        case 1:
          req.selector =
              *ParseLabelSelector({{"sliced.io/capacity-tier", "spot"}});
          break;
        case 2:  // a host-level term
          req.selector =
              *ParseLabelSelector({{"ray.io/tpu-worker-id", "!in(3,7)"}});
          break;
        default:
          break;
      }
      const internal::SliceRequest request(req, {}, nullptr);
      const internal::Released none;
      const internal::Attempt indexed = internal::CarveSlices(
          st, none, request, "", internal::CarveScan::kIndexed);
      const internal::Attempt full = internal::CarveSlices(
          st, none, request, "", internal::CarveScan::kFull);
      ASSERT_EQ(AttemptText(indexed), AttemptText(full))
          << "seed " << seed << " request " << r << " " << req.topology << " x"
          << req.num_slices;
      (indexed.placed ? placed : failed) += 1;
    }
  }
  // Both outcomes were exercised.
  EXPECT_GT(placed, 50);
  EXPECT_GT(failed, 50);
}

}  // namespace
}  // namespace sliced::scheduler
