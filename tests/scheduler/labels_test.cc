#include "scheduler/labels.h"

#include <string>

#include "base/quote.h"
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
      EXPECT_NE(s.message().find(Quote(c.key)), absl::string_view::npos) << s;
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

TEST(QuoteTest, Table) {
  struct Case {
    std::string value;
    char quote;
    std::string want;
  };
  const std::string at_limit(64, 'a');
  // 63 ASCII bytes then a two-byte 'é': byte 64 is inside the character.
  const std::string utf8 = std::string(63, 'a') + "\xc3\xa9" + "zz";
  const Case cases[] = {
      {"", '"', "\"\""},
      {"v6e", '"', "\"v6e\""},
      {"a b", '\'', "'a b'"},
      {at_limit, '"', "\"" + at_limit + "\""},
      {at_limit + "b", '"', "\"" + at_limit + "\"... (65 bytes)"},
      {std::string(5 << 20, 'p'), '"',
       "\"" + std::string(64, 'p') + "\"... (5242880 bytes)"},
      {utf8, '\'', "'" + std::string(63, 'a') + "'... (67 bytes)"},
  };
  for (const Case& c : cases) {
    EXPECT_EQ(Quote(c.value, c.quote), c.want) << c.value.substr(0, 80);
  }
}

// A huge input is rejected with a short message that says how long it was.
TEST(LabelsTest, ErrorsQuoteAtMost64BytesOfAValue) {
  const std::string big(5 << 20, 'x');
  struct Case {
    const char* name;
    absl::Status status;
  };
  const Case cases[] = {
      {"key", ValidateLabelKey(big)},
      {"value", ValidateLabelValue(big + "-")},
      {"labels value", ValidateLabels({{"k", big + "-"}})},
      {"selector value", ParseLabelSelector({{"k", "!" + big + "-"}}).status()},
      {"selector in()", ParseLabelSelector({{"k", "in(a," + big + "-)"}}).status()},
      {"selector empty in() value",
       ParseLabelSelector({{"k", "in(a,," + big + ")"}}).status()},
      {"selector parentheses",
       ParseLabelSelector({{"k", "in(a," + big}}).status()},
      {"selector operator", ParseLabelSelector({{"k", "x(" + big}}).status()},
      {"selector key", ParseLabelSelector({{big, "v"}}).status()},
  };
  for (const Case& c : cases) {
    EXPECT_EQ(c.status.code(), absl::StatusCode::kInvalidArgument) << c.name;
    EXPECT_LT(c.status.message().size(), 400u) << c.name << ": " << c.status;
    EXPECT_NE(c.status.message().find("bytes)"), absl::string_view::npos)
        << c.name << ": " << c.status;
  }
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
