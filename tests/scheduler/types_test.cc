#include "scheduler/types.h"

#include <cmath>
#include <limits>

#include "gtest/gtest.h"

namespace sliced::scheduler {
namespace {

TEST(FixedPointTest, ConvertsExactValues) {
  EXPECT_EQ(*ToFixedPoint(1, "CPU"), 10000);
  EXPECT_EQ(*ToFixedPoint(0.5, "CPU"), 5000);
  EXPECT_EQ(*ToFixedPoint(0.1, "CPU"), 1000);
  EXPECT_EQ(*ToFixedPoint(0.0001, "CPU"), 1);
  EXPECT_EQ(*ToFixedPoint(64e9, "memory"), 640000000000000);
  EXPECT_DOUBLE_EQ(FromFixedPoint(2500), 0.25);
}

TEST(FixedPointTest, RejectsBadValuesNamingTheField) {
  struct Case {
    double value;
    const char* rule;
  };
  const Case cases[] = {
      {-1, ">= 0"},
      {std::nan(""), "finite"},
      {std::numeric_limits<double>::infinity(), "finite"},
      {1e15, "<="},
      {0.00005, "0.0001"},
  };
  for (const Case& c : cases) {
    auto fixed = ToFixedPoint(c.value, "resources[CPU]");
    ASSERT_FALSE(fixed.ok()) << c.value;
    EXPECT_EQ(fixed.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(fixed.status().message().find("resources[CPU]"),
                      absl::string_view::npos);
    EXPECT_NE(fixed.status().message().find(c.rule), absl::string_view::npos)
        << fixed.status();
  }
}

}  // namespace
}  // namespace sliced::scheduler
