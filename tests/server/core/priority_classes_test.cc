#include "server/core/priority_classes.h"

#include <string>

#include "gtest/gtest.h"

namespace sliced::server {
namespace {

TEST(PriorityClassesTest, BuiltInTable) {
  const PriorityClasses classes;
  EXPECT_EQ(classes.Describe(),
            "production (1000), batch (100), best-effort (0)");
  EXPECT_EQ(classes.default_class(), "best-effort");
  ASSERT_NE(classes.Find("batch"), nullptr);
  EXPECT_EQ(classes.Find("batch")->value, 100);
  EXPECT_TRUE(classes.Find("batch")->preemptible);
  EXPECT_EQ(classes.Find("nope"), nullptr);
}

TEST(PriorityClassesTest, ParsesNonPreemptibleAndSortsByValue) {
  auto classes = PriorityClasses::Parse(
      " low=-5, serving=2000:non-preemptible ,training=500", "training");
  ASSERT_TRUE(classes.ok()) << classes.status();
  EXPECT_EQ(classes->Describe(),
            "serving (2000, non-preemptible), training (500), low (-5)");
  EXPECT_FALSE(classes->Find("serving")->preemptible);
  EXPECT_EQ(classes->default_class(), "training");
  auto none = PriorityClasses::Parse("", "");
  ASSERT_TRUE(none.ok());
  EXPECT_EQ(none->Describe(), "no classes");
}

TEST(PriorityClassesTest, BadFlagsNameTheRule) {
  struct Case {
    const char* spec;
    const char* default_class;
    const char* message;
  };
  const Case cases[] = {
      {"Prod=1", "", "--priority_classes: \"Prod=1\": a class name is 1-63"},
      {"prod", "", "--priority_classes: \"prod\": the value must be"},
      {"prod=high", "", "the value must be a 32-bit integer"},
      {"prod=1:sometimes", "", "the value must be a 32-bit integer"},
      {"prod=99999999999", "", "the value must be a 32-bit integer"},
      {"a=1,a=2", "", "\"a=2\": the name repeats"},
      {"a=1,b=1", "", "\"b=1\": another class has the same value"},
      {"a=1", "b",
       "--default_priority_class: \"b\" is not a class of --priority_classes "
       "(a (1))"},
  };
  for (const Case& c : cases) {
    auto parsed = PriorityClasses::Parse(c.spec, c.default_class);
    ASSERT_FALSE(parsed.ok()) << c.spec;
    EXPECT_EQ(parsed.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(parsed.status().message().find(c.message), std::string::npos)
        << parsed.status();
  }
}

TEST(PriorityClassesTest, Resolve) {
  const PriorityClasses classes;
  struct Case {
    std::string cls;
    int32_t priority;
    std::string want_cls;
    int32_t want_priority;
  };
  const Case ok[] = {
      {"production", 0, "production", 1000},
      {"production", 1000, "production", 1000},
      {"", 0, "best-effort", 0},  // the default class
      {"", 7, "", 7},             // a bare integer keeps no class
      {"", -3, "", -3},
  };
  for (const Case& c : ok) {
    std::string cls = c.cls;
    int32_t priority = c.priority;
    ASSERT_TRUE(classes.Resolve(cls, priority).ok()) << c.cls;
    EXPECT_EQ(cls, c.want_cls);
    EXPECT_EQ(priority, c.want_priority);
  }
  std::string cls = "urgent";
  int32_t priority = 0;
  absl::Status unknown = classes.Resolve(cls, priority);
  EXPECT_EQ(unknown.message(),
            "priority_class: unknown class \"urgent\"; this daemon has "
            "production (1000), batch (100), best-effort (0)");
  EXPECT_EQ(cls, "urgent");
  cls = "batch";
  priority = 5;
  absl::Status contradicts = classes.Resolve(cls, priority);
  EXPECT_EQ(contradicts.message(),
            "priority: 5 contradicts priority_class \"batch\" (100); give one "
            "or the other");
  EXPECT_EQ(priority, 5);  // unchanged

  auto no_default = PriorityClasses::Parse(PriorityClasses::kDefaultSpec, "");
  cls = "";
  priority = 0;
  ASSERT_TRUE(no_default->Resolve(cls, priority).ok());
  EXPECT_EQ(cls, "");
}

}  // namespace
}  // namespace sliced::server
