// TPU7x dynamic slicing: larger v7x slices stitched from whole free 4x4x4
// cubes of one block, best fit across blocks, never across blocks, in the
// stitched physical order.
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "scheduler/solver.h"
#include "tests/scheduler/builders.h"

namespace sliced::scheduler {
namespace {

using ::sliced::scheduler::testing::Slice;
using ::sliced::scheduler::testing::Snap;
using ::sliced::scheduler::testing::Units;

// A 4x4x4 cube (16 hosts) named `name` in block `block`.
std::vector<Node> Cube(const std::string& name, const std::string& block) {
  std::vector<Node> hosts = Slice(name, "TPU-V7X", "4x4x4");
  for (Node& n : hosts) n.labels[std::string(kLabelTpuBlock)] = block;
  return hosts;
}

void Add(std::vector<Node>& to, const std::vector<Node>& more) {
  to.insert(to.end(), more.begin(), more.end());
}

PlacementRequest V7x(const std::string& topology, int num_slices = 1) {
  PlacementRequest r;
  SliceRequirement s;
  s.generation = TpuGeneration::kV7x;
  s.topology = topology;
  s.num_slices = num_slices;
  r.slice = s;
  return r;
}

TEST(StitcherTest, TwoCubesOfTheBestFitBlockInStitchedOrder) {
  std::vector<Node> nodes;
  Add(nodes, Cube("a1", "b1"));
  Add(nodes, Cube("a2", "b1"));
  Add(nodes, Cube("a3", "b1"));
  Add(nodes, Cube("c1", "b2"));
  Add(nodes, Cube("c2", "b2"));
  auto snap = Snap(nodes);
  const Decision d = Solve(*snap, V7x("4x4x8"));
  ASSERT_EQ(d.outcome, Decision::kPlaced) << d.diagnosis.summary;
  EXPECT_EQ(d.slice_names, std::vector<std::string>{"b2/4x4x8@c1+c2"});
  ASSERT_EQ(d.bundle_nodes.size(), 32u);
  // Cube 0 is z 0-3 of the stitched grid (bundles 0-15), cube 1 z 4-7.
  EXPECT_EQ(d.bundle_nodes[0], "c1-w0");
  EXPECT_EQ(d.bundle_nodes[15], "c1-w15");
  EXPECT_EQ(d.bundle_nodes[16], "c2-w0");
  EXPECT_EQ(d.bundle_nodes[31], "c2-w15");
}

TEST(StitcherTest, NeverAcrossBlocks) {
  std::vector<Node> nodes;
  Add(nodes, Cube("a1", "b1"));
  Add(nodes, Cube("c1", "b2"));
  auto snap = Snap(nodes);
  const Decision d = Solve(*snap, V7x("4x4x8"));
  EXPECT_EQ(d.outcome, Decision::kInfeasible);
  EXPECT_NE(d.diagnosis.summary.find(
                "no block has 2 free whole 4x4x4 cubes for a 4x4x8"),
            std::string::npos)
      << d.diagnosis.summary;
  EXPECT_NE(d.diagnosis.summary.find("b1 1/1, b2 1/1"), std::string::npos)
      << d.diagnosis.summary;
}

TEST(StitcherTest, HeldOrUnhealthyCubesAreNotFree) {
  std::vector<Node> nodes;
  Add(nodes, Cube("a1", "b1"));
  Add(nodes, Cube("a2", "b1"));
  Add(nodes, Cube("a3", "b1"));
  // a1 held, a3 unhealthy: only a2 is free.
  nodes[40].labels[std::string(kLabelTpuPartitionState)] = "DEGRADED";
  auto snap =
      Snap(nodes, {{"pg-x", 0, "a1-w0", {{"TPU", Units(4)}}}});
  const Decision d = Solve(*snap, V7x("4x4x8"));
  EXPECT_EQ(d.outcome, Decision::kUnschedulable) << d.diagnosis.summary;
  EXPECT_NE(d.diagnosis.summary.find("b1 1/3"), std::string::npos)
      << d.diagnosis.summary;
}

TEST(StitcherTest, EightCubesFormAnEightCubedSliceAndMultiSliceIsAllOrNone) {
  std::vector<Node> nodes;
  for (int i = 0; i < 9; ++i) Add(nodes, Cube(absl::StrCat("k", i), "b1"));
  auto snap = Snap(nodes);
  const Decision d = Solve(*snap, V7x("8x8x8"));
  ASSERT_EQ(d.outcome, Decision::kPlaced) << d.diagnosis.summary;
  ASSERT_EQ(d.bundle_nodes.size(), 128u);
  // Host grid 4x4x8: cube 1 sits at x 2-3, so its worker 0 is bundle 2.
  EXPECT_EQ(d.bundle_nodes[0], "k0-w0");
  EXPECT_EQ(d.bundle_nodes[2], "k1-w0");
  // Two 8x8x8 need 16 cubes; 9 do not do.
  EXPECT_NE(Solve(*snap, V7x("8x8x8", 2)).outcome, Decision::kPlaced);
  // A single cube is a whole slice, and cubes carve like any v7x slice.
  const Decision cube = Solve(*snap, V7x("4x4x4"));
  ASSERT_EQ(cube.outcome, Decision::kPlaced);
  EXPECT_EQ(cube.slice_names, std::vector<std::string>{"k0"});
}

}  // namespace
}  // namespace sliced::scheduler
