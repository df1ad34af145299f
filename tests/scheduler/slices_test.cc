#include "scheduler/slices.h"

#include <array>
#include <functional>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "tests/scheduler/builders.h"

namespace sliced::scheduler {
namespace {

using ::sliced::scheduler::testing::CpuNode;
using ::sliced::scheduler::testing::Pointers;
using ::sliced::scheduler::testing::Slice;
using ::sliced::scheduler::testing::TpuHost;

TEST(DeriveSlicesTest, IntactShapes) {
  struct Case {
    const char* accelerator;
    const char* topology;
    int64_t hosts;
    const char* pod_type;
  };
  const Case cases[] = {
      {"TPU-V6E", "4x4", 4, "v6e-16"},
      {"TPU-V4", "2x2x2", 2, "v4-16"},
      {"TPU-V5P", "2x2x1", 1, "v5p-8"},
      {"TPU-V6E", "8x16", 32, "v6e-128"},
      {"TPU-V6E", "2x4", 1, "v6e-8"},
      {"TPU-V7X", "2x2x2", 2, "v7x-16"},
      {"TPU-V5LITEPOD", "4x8", 8, "v5litepod-32"},
  };
  for (const Case& c : cases) {
    std::vector<Node> nodes = Slice("s", c.accelerator, c.topology);
    auto slices = DeriveSlices(Pointers(nodes));
    ASSERT_EQ(slices.size(), 1u);
    const SliceInfo& s = slices[0];
    EXPECT_TRUE(s.intact) << c.topology << ": " << s.reason;
    EXPECT_EQ(s.expected_hosts, c.hosts);
    EXPECT_EQ(s.pod_type, c.pod_type);
    ASSERT_EQ(s.node_ids.size(), static_cast<size_t>(c.hosts));
    for (int64_t i = 0; i < c.hosts; ++i) {
      EXPECT_EQ(s.node_ids[i], absl::StrCat("s-w", i));
    }
  }
}

TEST(DeriveSlicesTest, BrokenSlices) {
  struct Case {
    const char* name;
    std::function<void(std::vector<Node>&)> mutate;
    const char* reason;
  };
  const Case cases[] = {
      {"missing host", [](std::vector<Node>& n) { n.erase(n.begin() + 2); },
       "missing worker 2 of 4"},
      {"duplicate worker id",
       [](std::vector<Node>& n) {
         n[2].labels[std::string(kLabelTpuWorkerId)] = "1";
       },
       "duplicate worker id 1 (nodes s-w1, s-w2)"},
      {"dead host", [](std::vector<Node>& n) { n[3].state = NodeState::kDead; },
       "node s-w3 is DEAD"},
      {"draining host",
       [](std::vector<Node>& n) { n[0].state = NodeState::kDraining; },
       "node s-w0 is DRAINING"},
      {"two dead hosts and a draining one",
       [](std::vector<Node>& n) {
         n[3].state = NodeState::kDead;
         n[0].state = NodeState::kDraining;
         n[1].state = NodeState::kDead;
       },
       "node s-w0 is DRAINING; 2 of 4 hosts are DEAD (s-w1, s-w3)"},
      {"tpu count mismatch",
       [](std::vector<Node>& n) { n[1].resources["TPU"] = 0; },
       "TPU chips add up to 12, expected 16"},
      {"worker id out of range",
       [](std::vector<Node>& n) {
         n[3].labels[std::string(kLabelTpuWorkerId)] = "7";
       },
       "worker id 7"},
      {"bad worker id",
       [](std::vector<Node>& n) {
         n[3].labels[std::string(kLabelTpuWorkerId)] = "x";
       },
       "no valid worker id"},
      {"unknown topology",
       [](std::vector<Node>& n) {
         for (Node& h : n) h.labels[std::string(kLabelTpuTopology)] = "3x3";
       },
       "unknown topology 3x3 for v6e"},
      {"disagreeing hosts",
       [](std::vector<Node>& n) {
         n[1].labels[std::string(kLabelTpuTopology)] = "4x8";
       },
       "disagree"},
      {"unknown accelerator",
       [](std::vector<Node>& n) {
         for (Node& h : n) h.labels[std::string(kLabelAcceleratorType)] = "GPU";
       },
       "unknown accelerator type GPU"},
  };
  for (const Case& c : cases) {
    std::vector<Node> nodes = Slice("s", "TPU-V6E", "4x4");
    c.mutate(nodes);
    auto slices = DeriveSlices(Pointers(nodes));
    ASSERT_EQ(slices.size(), 1u) << c.name;
    EXPECT_FALSE(slices[0].intact) << c.name;
    EXPECT_NE(slices[0].reason.find(c.reason), std::string::npos)
        << c.name << ": " << slices[0].reason;
  }
}

// A slice whose hosts all went is one line, the first hosts named in worker
// order (s-w0, s-w1, s-w2; not s-w10 after s-w1), not a line per host: the
// reason Explain and a pending group quote.
TEST(DeriveSlicesTest, ManyHostsAlikeAreSaidOnce) {
  std::vector<Node> nodes = Slice("s", "TPU-V6E", "8x16");  // 32 hosts
  for (Node& n : nodes) n.state = NodeState::kDead;
  nodes[5].state = NodeState::kDraining;
  auto slices = DeriveSlices(Pointers(nodes));
  ASSERT_EQ(slices.size(), 1u);
  EXPECT_EQ(slices[0].reason,
            "31 of 32 hosts are DEAD (s-w0, s-w1, s-w2 and 28 more); "
            "node s-w5 is DRAINING");
}

// Ray's tpu_resource_per_chip=2: v7x hosts may advertise two TPU devices
// per chip (one per TensorCore); other generations may not.
TEST(DeriveSlicesTest, V7xHostsMayCountTwoDevicesPerChip) {
  std::vector<Node> v7x = Slice("x", "TPU-V7X", "2x2x2");
  for (Node& h : v7x) h.resources["TPU"] = 8 * kResourceScale;
  auto slices = DeriveSlices(Pointers(v7x));
  ASSERT_EQ(slices.size(), 1u);
  EXPECT_TRUE(slices[0].intact) << slices[0].reason;

  std::vector<Node> v6e = Slice("s", "TPU-V6E", "4x4");
  for (Node& h : v6e) h.resources["TPU"] = 8 * kResourceScale;
  slices = DeriveSlices(Pointers(v6e));
  ASSERT_EQ(slices.size(), 1u);
  EXPECT_FALSE(slices[0].intact);
  EXPECT_NE(slices[0].reason.find("TPU chips add up to 32, expected 16"),
            std::string::npos)
      << slices[0].reason;
}

// Positions come from sliced.io/tpu-host-coords; without it on every host,
// worker-id order is assumed. Worker ids follow pod creation on GKE, so they
// need not match the positions.
TEST(DeriveSlicesTest, HostPositionsFromTheCoordinateLabel) {
  std::vector<Node> nodes = Slice("s", "TPU-V6E", "4x4");  // a 2x2x1 grid
  auto derive = [&] {
    auto slices = DeriveSlices(Pointers(nodes));
    EXPECT_EQ(slices.size(), 1u);
    return slices[0];
  };
  SliceInfo assumed = derive();
  EXPECT_TRUE(assumed.intact);
  EXPECT_TRUE(assumed.positions_assumed);
  EXPECT_EQ(assumed.host_positions, std::vector<std::string>(4, ""));

  const char* cells[] = {"1-1-0", "0-0-0", "1-0-0", "0-1"};
  for (int w = 0; w < 4; ++w) {
    nodes[w].labels[std::string(kLabelTpuHostCoords)] = cells[w];
  }
  SliceInfo known = derive();
  EXPECT_TRUE(known.intact) << known.reason;
  EXPECT_FALSE(known.positions_assumed);
  EXPECT_EQ(known.host_positions,
            (std::vector<std::string>{"1-1-0", "0-0-0", "1-0-0", "0-1-0"}));

  nodes[3].labels[std::string(kLabelTpuHostCoords)] = "1-1-0";  // s-w0's cell
  SliceInfo twice = derive();
  EXPECT_FALSE(twice.intact);
  EXPECT_TRUE(twice.positions_assumed);
  EXPECT_NE(twice.reason.find("nodes s-w0 and s-w3 both report position 1-1-0"),
            std::string::npos)
      << twice.reason;

  nodes[3].labels[std::string(kLabelTpuHostCoords)] = "2-0-0";
  SliceInfo outside = derive();
  EXPECT_FALSE(outside.intact);
  EXPECT_NE(
      outside.reason.find("node s-w3: sliced.io/tpu-host-coords \"2-0-0\" "
                          "is outside the slice's 2x2x1 host grid"),
      std::string::npos)
      << outside.reason;

  nodes[3].labels.erase(std::string(kLabelTpuHostCoords));  // one unknown
  SliceInfo partial = derive();
  EXPECT_TRUE(partial.intact) << partial.reason;
  EXPECT_TRUE(partial.positions_assumed);
}

TEST(ParseHostCoordsTest, FormatAndGrid) {
  const std::vector<int> grid = {1, 1, 4};  // v4 2x2x4
  EXPECT_EQ(*ParseHostCoords("0-0-3", grid), (std::array<int, 3>{0, 0, 3}));
  EXPECT_EQ(*ParseHostCoords("0-0", grid), (std::array<int, 3>{0, 0, 0}));
  for (const char* bad : {"", "0,0,0", "0-0-0-0", "a-0-0", "-1-0-0", "0-0-"}) {
    EXPECT_NE(
        ParseHostCoords(bad, grid).status().message().find("is not a position"),
        std::string::npos)
        << bad;
  }
  EXPECT_NE(ParseHostCoords("0-0-4", grid)
                .status()
                .message()
                .find("outside the slice's 1x1x4 host grid"),
            std::string::npos);
}

TEST(SubsliceNameTest, CarvedNamesAreToldFromStitchedAndWholeOnes) {
  const std::string carved = FormatSubsliceName("pod-a", "4x4x4", {0, 0, 2});
  EXPECT_TRUE(IsCarvedSubsliceName(carved)) << carved;
  EXPECT_EQ(ParentSliceName(carved), "pod-a");
  // Stitched from whole cubes of a block: the part before '/' is a block.
  EXPECT_FALSE(IsCarvedSubsliceName("block-a/4x4x8@p-a1+p-a2"));
  EXPECT_FALSE(IsCarvedSubsliceName("block-a/4x4x8@p-1-2+p-1-3"));
  for (const char* other : {"pod-a", "", "pod@0-0-0", "pod-a/2x2x2@0-0",
                            "pod-a/2x2x2@0-0-0-0", "pod-a/2x2x2@0--1-0"}) {
    EXPECT_FALSE(IsCarvedSubsliceName(other)) << other;
  }
}

TEST(DeriveSlicesTest, MissingHostLeavesAHole) {
  std::vector<Node> nodes = Slice("s", "TPU-V6E", "4x4");
  nodes.erase(nodes.begin() + 1);
  auto slices = DeriveSlices(Pointers(nodes));
  ASSERT_EQ(slices.size(), 1u);
  EXPECT_EQ(slices[0].node_ids,
            (std::vector<std::string>{"s-w0", "", "s-w2", "s-w3"}));
}

TEST(DeriveSlicesTest, SingleHostNodeWithoutSliceNameIsItsOwnSlice) {
  std::vector<Node> nodes = {
      TpuHost("solo", "", "TPU-V6E", "2x4", 0, 8),
      TpuHost("solo4", "", "v5e", "2x2", 0, 4),
      CpuNode("cpu"),
      // Multi-host shape without a slice name: not a slice.
      TpuHost("orphan", "", "TPU-V6E", "4x4", 0, 4),
  };
  nodes[0].labels.erase(std::string(kLabelTpuWorkerId));
  auto slices = DeriveSlices(Pointers(nodes));
  ASSERT_EQ(slices.size(), 2u);
  EXPECT_EQ(slices[0].name, "solo");
  EXPECT_TRUE(slices[0].intact) << slices[0].reason;
  EXPECT_EQ(slices[0].pod_type, "v6e-8");
  EXPECT_EQ(slices[0].node_ids, std::vector<std::string>{"solo"});
  EXPECT_EQ(slices[1].name, "solo4");
  EXPECT_TRUE(slices[1].intact) << slices[1].reason;
}

TEST(DeriveSlicesTest, SortedByNameAndIndependentOfInputOrder) {
  std::vector<Node> nodes = Slice("b", "TPU-V6E", "4x4");
  for (Node& n : Slice("a", "TPU-V4", "2x2x2")) nodes.push_back(n);
  auto forward = DeriveSlices(Pointers(nodes));
  std::reverse(nodes.begin(), nodes.end());
  auto backward = DeriveSlices(Pointers(nodes));
  ASSERT_EQ(forward.size(), 2u);
  EXPECT_EQ(forward[0].name, "a");
  EXPECT_EQ(forward, backward);
}

}  // namespace
}  // namespace sliced::scheduler
