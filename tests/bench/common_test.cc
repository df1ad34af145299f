// The harness's small helpers: JSON writer, percentiles, SVG charts, RNG.
#include <string>
#include <vector>

#include "bench/common/json.h"
#include "bench/common/rng.h"
#include "bench/common/stats.h"
#include "bench/common/svg.h"
#include "gtest/gtest.h"

namespace sliced::bench {
namespace {

TEST(JsonWriterTest, NestsSeparatesAndEscapes) {
  JsonWriter j;
  j.BeginObject().Key("a").Number(1).Key("b").BeginArray().Number(0.5).String("x\"y\n")
      .Bool(true).EndArray().Key("c").BeginObject().EndObject().Key("nan").Number(NAN)
      .EndObject();
  EXPECT_EQ(j.str(), R"({"a":1,"b":[0.5,"x\"y\u000a",true],"c":{},"nan":null})");
}

TEST(StatsTest, MedianOfAnEvenCountIsTheMeanOfTheMiddleTwo) {
  EXPECT_EQ(Median({}), 0);
  EXPECT_EQ(Median({7}), 7);
  EXPECT_EQ(Median({5, 1, 3}), 3);
  EXPECT_EQ(Median({4, 1}), 2.5);
  EXPECT_EQ(Median({10, 2, 8, 4}), 6);
}

TEST(StatsTest, NearestRankPercentiles) {
  std::vector<double> v = {5, 1, 4, 2, 3};
  EXPECT_EQ(Percentile(v, 0.5), 3);
  EXPECT_EQ(Percentile(v, 0.99), 5);
  EXPECT_EQ(Percentile(v, 0.0), 1);
  std::vector<double> empty;
  EXPECT_EQ(Percentile(empty, 0.5), 0);
  EXPECT_EQ(Mean({1, 2, 3}), 2);
}

TEST(SvgTest, OnePolylinePerSeriesAndEscapedText) {
  SvgPanel panel{"y <units>", {{"a&b", {0, 1, 2}, {1, 3, 2}}, {"c", {0, 2}, {0, 1}}}};
  const std::string svg = RenderSvg("t", "x", {panel, panel});
  size_t lines = 0;
  for (size_t at = svg.find("<polyline"); at != std::string::npos;
       at = svg.find("<polyline", at + 1)) {
    ++lines;
  }
  EXPECT_EQ(lines, 4u);
  EXPECT_NE(svg.find("a&amp;b"), std::string::npos);
  EXPECT_NE(svg.find("y &lt;units&gt;"), std::string::npos);
  EXPECT_EQ(svg.rfind("</svg>\n"), svg.size() - 7);
}

TEST(RngTest, SameSeedSameSequenceAndUniformInRange) {
  Rng a(3), b(3);
  for (int i = 0; i < 100; ++i) EXPECT_EQ(a.Next(), b.Next());
  Rng r(9);
  for (int i = 0; i < 1000; ++i) {
    const double u = r.Uniform();
    EXPECT_GE(u, 0);
    EXPECT_LT(u, 1);
    const int64_t k = r.Int(2, 5);
    EXPECT_GE(k, 2);
    EXPECT_LE(k, 5);
  }
}

}  // namespace
}  // namespace sliced::bench
