#include "scheduler/tpu.h"

#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace sliced::scheduler {
namespace {

TEST(ParseTpuGenerationTest, AcceptsRaySpellings) {
  struct Case {
    const char* name;
    TpuGeneration want;
  };
  const Case cases[] = {
      {"TPU-V6E", TpuGeneration::kV6e},
      {"v6e", TpuGeneration::kV6e},
      {"tpu-v6e", TpuGeneration::kV6e},
      {"TPU-V5LITEPOD", TpuGeneration::kV5e},
      {"v5litepod", TpuGeneration::kV5e},
      {"v5e", TpuGeneration::kV5e},
      {"tpu7x", TpuGeneration::kV7x},
      {"v7x", TpuGeneration::kV7x},
      {"TPU-V7X", TpuGeneration::kV7x},
      {"TPU-V4", TpuGeneration::kV4},
      {"v5p", TpuGeneration::kV5p},
      {"TPU-V5P", TpuGeneration::kV5p},
      {"v2", TpuGeneration::kV2},
      {"TPU-V3", TpuGeneration::kV3},
  };
  for (const Case& c : cases) {
    auto g = ParseTpuGeneration(c.name);
    ASSERT_TRUE(g.ok()) << c.name << ": " << g.status();
    EXPECT_EQ(*g, c.want) << c.name;
    // Round trip through Ray's label value.
    EXPECT_EQ(*ParseTpuGeneration(TpuAcceleratorType(*g)), *g);
    EXPECT_EQ(*ParseTpuGeneration(TpuGenerationName(*g)), *g);
  }
}

TEST(ParseTpuGenerationTest, ErrorListsAcceptedSet) {
  for (const char* bad : {"", "v8", "gpu", "TPU-V5", "v6"}) {
    auto g = ParseTpuGeneration(bad);
    ASSERT_FALSE(g.ok()) << bad;
    EXPECT_EQ(g.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(g.status().message().find("TPU-V6E"), absl::string_view::npos);
    EXPECT_NE(g.status().message().find("TPU-V5LITEPOD"),
              absl::string_view::npos);
  }
}

TEST(ResolveTpuShapeTest, ValidShapes) {
  struct Case {
    TpuGeneration gen;
    const char* topology;
    int64_t chips;
    int64_t hosts;
    int64_t chips_per_host;
    const char* pod_type;
  };
  const Case cases[] = {
      {TpuGeneration::kV6e, "4x4", 16, 4, 4, "v6e-16"},
      {TpuGeneration::kV6e, "8x16", 128, 32, 4, "v6e-128"},
      {TpuGeneration::kV6e, "2x4", 8, 1, 8, "v6e-8"},
      {TpuGeneration::kV6e, "1x1", 1, 1, 1, "v6e-1"},
      {TpuGeneration::kV6e, "2x2", 4, 1, 4, "v6e-4"},
      {TpuGeneration::kV5e, "2x8", 16, 4, 4, "v5litepod-16"},
      {TpuGeneration::kV4, "2x2x2", 8, 2, 4, "v4-16"},
      {TpuGeneration::kV4, "2x2x1", 4, 1, 4, "v4-8"},
      {TpuGeneration::kV4, "4x4x4", 64, 16, 4, "v4-128"},
      {TpuGeneration::kV4, "12x12x16", 2304, 576, 4, "v4-4608"},
      {TpuGeneration::kV5p, "2x2x1", 4, 1, 4, "v5p-8"},
      {TpuGeneration::kV5p, "16x16x24", 6144, 1536, 4, "v5p-12288"},
      {TpuGeneration::kV7x, "2x2x1", 4, 1, 4, "v7x-8"},
      {TpuGeneration::kV7x, "4x4x8", 128, 32, 4, "v7x-256"},
      {TpuGeneration::kV2, "4x4", 16, 4, 4, "v2-32"},
      {TpuGeneration::kV3, "32x32", 1024, 256, 4, "v3-2048"},
  };
  for (const Case& c : cases) {
    auto shape = ResolveTpuShape(c.gen, c.topology);
    ASSERT_TRUE(shape.ok()) << c.topology << ": " << shape.status();
    EXPECT_EQ(shape->topology, c.topology);
    EXPECT_EQ(shape->chips, c.chips) << c.topology;
    EXPECT_EQ(shape->hosts, c.hosts) << c.topology;
    EXPECT_EQ(shape->chips_per_host, c.chips_per_host) << c.topology;
    EXPECT_EQ(shape->pod_type, c.pod_type) << c.topology;
  }
}

TEST(ResolveTpuShapeTest, HostBoxAndGrid) {
  struct Case {
    TpuGeneration generation;
    const char* topology;
    std::vector<int> box, grid;
  };
  const Case cases[] = {
      {TpuGeneration::kV6e, "4x4", {2, 2, 1}, {2, 2, 1}},
      {TpuGeneration::kV6e, "2x4", {2, 4, 1}, {1, 1, 1}},
      {TpuGeneration::kV4, "2x2x4", {2, 2, 1}, {1, 1, 4}},
      {TpuGeneration::kV5p, "4x4x4", {2, 2, 1}, {2, 2, 4}},
      {TpuGeneration::kV5p, "2x2x1", {2, 2, 1}, {1, 1, 1}},
  };
  for (const Case& c : cases) {
    auto shape = ResolveTpuShape(c.generation, c.topology);
    ASSERT_TRUE(shape.ok()) << c.topology;
    EXPECT_EQ(shape->host_box, c.box) << c.topology;
    EXPECT_EQ(shape->host_grid, c.grid) << c.topology;
  }
}

// As GKE's TPU device plugin sets TPU_TOPOLOGY_WRAP: v5e/v6e wrap on an
// axis of 16 chips, the 3D generations on every axis once each is >= 4.
TEST(ResolveTpuShapeTest, WrapAround) {
  struct Case {
    TpuGeneration generation;
    const char* topology;
    std::vector<bool> wrap;
  };
  const Case cases[] = {
      {TpuGeneration::kV6e, "16x16", {true, true, false}},
      {TpuGeneration::kV6e, "8x16", {false, true, false}},
      {TpuGeneration::kV5e, "8x8", {false, false, false}},
      {TpuGeneration::kV5p, "4x4x4", {true, true, true}},
      {TpuGeneration::kV4, "4x4x8", {true, true, true}},
      {TpuGeneration::kV5p, "2x4x4", {false, false, false}},
      {TpuGeneration::kV7x, "2x2x2", {false, false, false}},
  };
  for (const Case& c : cases) {
    auto shape = ResolveTpuShape(c.generation, c.topology);
    ASSERT_TRUE(shape.ok()) << c.topology;
    EXPECT_EQ(shape->wrap, c.wrap) << c.topology;
  }
}

// A carved box wraps only on the axes where its own shape would and where it
// spans the whole parent: the links at its ends lead back into it there.
TEST(CarvedWrapTest, OnlyOnThePartsWholeAxes) {
  struct Case {
    TpuGeneration generation;
    const char* sub;
    const char* parent;
    std::vector<bool> wrap;
  };
  const Case cases[] = {
      {TpuGeneration::kV5p, "4x4x4", "4x4x8", {true, true, false}},
      {TpuGeneration::kV4, "4x4x8", "8x8x8", {false, false, true}},
      {TpuGeneration::kV5p, "4x4x4", "8x8x8", {false, false, false}},
      {TpuGeneration::kV5p, "2x2x2", "4x4x4", {false, false, false}},
      // Its own shape does not wrap, whole axes or not.
      {TpuGeneration::kV5p, "2x4x4", "4x4x4", {false, false, false}},
      {TpuGeneration::kV6e, "8x16", "16x16", {false, true, false}},
      {TpuGeneration::kV6e, "4x4", "16x16", {false, false, false}},
  };
  for (const Case& c : cases) {
    auto sub = ResolveTpuShape(c.generation, c.sub);
    auto parent = ResolveTpuShape(c.generation, c.parent);
    ASSERT_TRUE(sub.ok() && parent.ok()) << c.sub << " of " << c.parent;
    EXPECT_EQ(CarvedWrap(*sub, *parent), c.wrap) << c.sub << " of " << c.parent;
  }
}

TEST(ResolveTpuShapeTest, InvalidShapesNameTheValidSet) {
  struct Case {
    TpuGeneration gen;
    const char* topology;
    const char* why;
  };
  const Case cases[] = {
      {TpuGeneration::kV6e, "3x3", "2x4"},
      {TpuGeneration::kV6e, "4x4x4", "16x16"},
      {TpuGeneration::kV4, "4x4", "multiple of 4"},
      {TpuGeneration::kV4, "4x4x6", "multiple of 4"},
      {TpuGeneration::kV4, "16x4x4", "X and Y <= 12"},
      {TpuGeneration::kV4, "4x4x20", "Z <= 16"},
      {TpuGeneration::kV5p, "4x4x28", "Z <= 24"},
      {TpuGeneration::kV7x, "4x4x12", "8x16x16"},
      {TpuGeneration::kV2, "2x2", "4x4"},
      {TpuGeneration::kV6e, "", "AxB"},
      {TpuGeneration::kV6e, "4x", "AxB"},
      {TpuGeneration::kV6e, "x4", "AxB"},
      {TpuGeneration::kV6e, "0x4", "AxB"},
      {TpuGeneration::kV6e, "4", "AxB"},
      {TpuGeneration::kV6e, "-4x4", "AxB"},
  };
  for (const Case& c : cases) {
    auto shape = ResolveTpuShape(c.gen, c.topology);
    ASSERT_FALSE(shape.ok()) << c.topology;
    EXPECT_EQ(shape.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(shape.status().message().find(c.why), absl::string_view::npos)
        << shape.status();
  }
  // v5p allows what v4 refuses.
  EXPECT_TRUE(ResolveTpuShape(TpuGeneration::kV5p, "16x16x24").ok());
  EXPECT_FALSE(ResolveTpuShape(TpuGeneration::kV4, "16x16x24").ok());
}

}  // namespace
}  // namespace sliced::scheduler
