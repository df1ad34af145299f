#include "scheduler/labels.h"

#include <string>

#include "gtest/gtest.h"

namespace sliced::scheduler {
namespace {

TEST(LabelKeyTest, Table) {
  struct Case {
    std::string key;
    bool ok;
    const char* why;  // substring of the error
  };
  const Case cases[] = {
      {"ray.io/accelerator-type", true, ""},
      {"zone", true, ""},
      {"a", true, ""},
      {"A_b.c-9", true, ""},
      {"sliced.io/capacity-tier", true, ""},
      {"-bad", false, "begin and end"},
      {"bad-", false, "begin and end"},
      {"", false, "empty"},
      {"ray.io/", false, "name must not be empty"},
      {"/name", false, "prefix"},
      {"a/b/c", false, "at most one '/'"},
      {"Ray.io/x", false, "DNS subdomain"},
      {"ray..io/x", false, "DNS subdomain"},
      {"has space", false, "found ' '"},
      {std::string(63, 'k'), true, ""},
      {std::string(64, 'k'), false, "at most 63"},
      {std::string(253, 'p') + "/x", false, "DNS subdomain"},  // part > 63
      {std::string(254, 'p') + "/x", false, "253"},
  };
  for (const Case& c : cases) {
    absl::Status s = ValidateLabelKey(c.key);
    EXPECT_EQ(s.ok(), c.ok) << c.key << ": " << s;
    if (!c.ok) {
      EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
      EXPECT_NE(s.message().find(c.why), absl::string_view::npos)
          << c.key << ": " << s;
      EXPECT_NE(s.message().find(c.key), absl::string_view::npos) << s;
    }
  }
}

TEST(LabelValueTest, Table) {
  struct Case {
    std::string value;
    bool ok;
  };
  const Case cases[] = {
      {"", true},
      {"v6e", true},
      {"TPU-V6E", true},
      {"4x4", true},
      {"a.b_c-d", true},
      {std::string(63, 'v'), true},
      {"-x", false},
      {"x-", false},
      {"a b", false},
      {"a/b", false},
      {std::string(64, 'v'), false},
  };
  for (const Case& c : cases) {
    EXPECT_EQ(ValidateLabelValue(c.value).ok(), c.ok) << c.value;
  }
}

TEST(LabelsTest, ValidateLabelsNamesTheKey) {
  Labels labels = {{"good", "ok"}, {"zone", "bad value"}};
  absl::Status s = ValidateLabels(labels);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("zone"), absl::string_view::npos) << s;
  EXPECT_TRUE(ValidateLabels({{"empty-ok", ""}}).ok());
}

TEST(SelectorParseTest, Table) {
  struct Case {
    absl::btree_map<std::string, std::string> wire;
    bool ok;
    const char* why;
  };
  const Case cases[] = {
      {{}, true, ""},
      {{{"zone", "us-east5-a"}}, true, ""},
      {{{"zone", "!us-east5-a"}}, true, ""},
      {{{"zone", "in(a,b)"}}, true, ""},
      {{{"zone", "in(a, b,  c)"}}, true, ""},
      {{{"zone", "!in(a, b)"}}, true, ""},
      {{{"zone", "in()"}}, false, "at least one value"},
      {{{"zone", "!in( )"}}, false, "at least one value"},
      {{{"zone", "in(a,,b)"}}, false, "empty value"},
      {{{"zone", "in(a,b"}}, false, "unbalanced"},
      {{{"zone", "a)"}}, false, "unbalanced"},
      {{{"zone", "in((a)"}}, false, "unbalanced"},
      {{{"-bad", "x"}}, false, "-bad"},
      {{{"zone", std::string(64, 'v')}}, false, "63"},
      {{{"zone", "in(ok," + std::string(64, 'v') + ")"}}, false, "63"},
      {{{"zone", "bad value"}}, false, "zone"},
  };
  for (const Case& c : cases) {
    auto parsed = ParseLabelSelector(c.wire);
    EXPECT_EQ(parsed.ok(), c.ok)
        << (c.wire.empty() ? "" : c.wire.begin()->second) << ": "
        << parsed.status();
    if (!c.ok && !parsed.ok()) {
      EXPECT_EQ(parsed.status().code(), absl::StatusCode::kInvalidArgument);
      EXPECT_NE(parsed.status().message().find(c.why), absl::string_view::npos)
          << parsed.status();
    }
  }
}

TEST(SelectorParseTest, ParsesTermsSortedByKey) {
  auto parsed = ParseLabelSelector(
      {{"zone", "!in(b, a)"}, {"ray.io/accelerator-type", "TPU-V6E"}});
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  ASSERT_EQ(parsed->terms.size(), 2u);
  EXPECT_EQ(parsed->terms[0].key, "ray.io/accelerator-type");
  EXPECT_EQ(parsed->terms[0].op, SelectorOp::kEquals);
  EXPECT_EQ(parsed->terms[1].op, SelectorOp::kNotIn);
  EXPECT_EQ(parsed->terms[1].values, (std::vector<std::string>{"a", "b"}));
  EXPECT_EQ(SelectorToString(*parsed),
            "{ray.io/accelerator-type: TPU-V6E, zone: !in(a,b)}");
}

TEST(SelectorMatchTest, Table) {
  const Labels node = {{"zone", "a"}, {"tier", "spot"}, {"empty", ""}};
  struct Case {
    absl::btree_map<std::string, std::string> wire;
    bool matches;
  };
  const Case cases[] = {
      {{}, true},
      {{{"zone", "a"}}, true},
      {{{"zone", "b"}}, false},
      {{{"zone", "!a"}}, false},
      {{{"zone", "!b"}}, true},
      {{{"absent", "!x"}}, true},  // !v on absent key
      {{{"absent", "x"}}, false},
      {{{"zone", "in(a,b)"}}, true},
      {{{"zone", "in(b,c)"}}, false},
      {{{"absent", "in(a)"}}, false},
      {{{"zone", "!in(b, c)"}}, true},
      {{{"zone", "!in(a, c)"}}, false},
      {{{"absent", "!in(a)"}}, true},  // !in on absent key
      {{{"zone", "a"}, {"tier", "spot"}}, true},
      {{{"zone", "a"}, {"tier", "!spot"}}, false},
      {{{"empty", ""}}, true},
      {{{"absent", ""}}, false},
  };
  for (const Case& c : cases) {
    auto parsed = ParseLabelSelector(c.wire);
    ASSERT_TRUE(parsed.ok()) << parsed.status();
    EXPECT_EQ(Matches(*parsed, node), c.matches) << SelectorToString(*parsed);
  }
}

}  // namespace
}  // namespace sliced::scheduler
