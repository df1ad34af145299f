#include "client/slicectl_cli.h"

#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace sliced::slicectl {
namespace {

const std::vector<FlagSpec>& Globals() {
  static const auto* const kGlobals = new std::vector<FlagSpec>{
      {"server", "HOST:PORT", "the daemon"},
      {"json", "", "JSON output"},
  };
  return *kGlobals;
}

CommandSpec Submit() {
  CommandSpec spec;
  spec.name = "submit";
  spec.summary = "Submit.";
  spec.flags = {{"num-workers", "N", "workers"},
                {"use-tpu", "", "TPUs"},
                {"resources-per-worker", "K=V", "resources", true},
                {"file", "FILE", "a file", false, 'f'}};
  return spec;
}

CommandSpec PgGet() {
  CommandSpec spec;
  spec.name = "pg get";
  spec.args = "ID";
  spec.num_args = 1;
  spec.summary = "Get.";
  return spec;
}

TEST(ParseFlagsTest, AcceptsEveryFlagForm) {
  auto parsed =
      ParseFlags(Submit(), Globals(),
                 {"--num-workers", "4", "--use-tpu",
                  "--resources-per-worker=TPU=4", "--resources-per-worker",
                  "CPU=8", "-f", "x.json", "--server=h:1", "--json"});
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  EXPECT_EQ(parsed->Get("num-workers"), "4");
  EXPECT_TRUE(parsed->Has("use-tpu"));
  EXPECT_EQ(parsed->GetAll("resources-per-worker"),
            (std::vector<std::string>{"TPU=4", "CPU=8"}));
  EXPECT_EQ(parsed->Get("file"), "x.json");
  EXPECT_EQ(parsed->Get("server"), "h:1");
  EXPECT_TRUE(parsed->Has("json"));
  EXPECT_FALSE(parsed->Has("topology"));
  EXPECT_EQ(parsed->Get("topology", "none"), "none");
  EXPECT_TRUE(parsed->GetAll("topology").empty());
}

TEST(ParseFlagsTest, PositionalArgumentsAndDoubleDash) {
  auto parsed = ParseFlags(PgGet(), Globals(), {"--json", "--", "-odd-id"});
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  EXPECT_EQ(parsed->args, std::vector<std::string>{"-odd-id"});
}

TEST(ParseFlagsTest, HelpSkipsTheArgumentCheck) {
  auto parsed = ParseFlags(PgGet(), Globals(), {"-h"});
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  EXPECT_TRUE(parsed->Has("help"));
}

TEST(ParseFlagsTest, ErrorsSayWhatToFix) {
  struct Case {
    CommandSpec spec;
    std::vector<std::string> argv;
    const char* expect;
  };
  const Case cases[] = {
      {Submit(), {"--bogus"}, "unknown flag --bogus for 'submit'"},
      {Submit(), {"--num-workers"}, "--num-workers needs a value (N)"},
      {Submit(), {"--use-tpu=yes"}, "--use-tpu takes no value"},
      {Submit(), {"extra"}, "'submit' takes no arguments, got \"extra\""},
      {PgGet(), {}, "'pg get' needs ID"},
      {PgGet(), {"a", "b"}, "'pg get' needs ID, got 2 arguments"},
  };
  for (const Case& c : cases) {
    auto parsed = ParseFlags(c.spec, Globals(), c.argv);
    ASSERT_FALSE(parsed.ok()) << c.expect;
    EXPECT_EQ(parsed.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(parsed.status().message().find(c.expect), std::string::npos)
        << parsed.status();
    EXPECT_NE(parsed.status().message().find("--help"), std::string::npos);
  }
}

TEST(MatchCommandTest, LongestMatchSkippingGlobalFlags) {
  std::vector<CommandSpec> commands = {Submit(), PgGet()};
  CommandSpec pg_list = PgGet();
  pg_list.name = "pg";  // a one-word prefix must lose to "pg get"
  commands.push_back(pg_list);
  CommandMatch m = MatchCommand(
      commands, Globals(), {"--server", "pg", "pg", "get", "ID1", "--json"});
  ASSERT_EQ(m.index, 1);
  EXPECT_EQ(m.rest,
            (std::vector<std::string>{"--server", "pg", "ID1", "--json"}));

  m = MatchCommand(commands, Globals(), {"--json", "frob", "x"});
  EXPECT_EQ(m.index, -1);
  EXPECT_EQ(m.unknown, "frob");
}

TEST(ValueParsersTest, KeyValuesResourcesDurationsInts) {
  auto kv = ParseKeyValues("selector", {"a=b", "k=in(x,y)", "e=", "q=a=b"});
  ASSERT_TRUE(kv.ok()) << kv.status();
  EXPECT_EQ(kv->at("k"), "in(x,y)");
  EXPECT_EQ(kv->at("e"), "");
  EXPECT_EQ(kv->at("q"), "a=b");
  EXPECT_FALSE(ParseKeyValues("selector", {"novalue"}).ok());
  EXPECT_FALSE(ParseKeyValues("selector", {"=v"}).ok());

  auto res = ParseResources("resources-per-worker", {"TPU=4", "CPU=0.5"});
  ASSERT_TRUE(res.ok()) << res.status();
  EXPECT_EQ(res->at("CPU"), 0.5);
  auto bad = ParseResources("resources-per-worker", {"TPU=four"});
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("TPU wants a number"),
            std::string::npos);

  EXPECT_EQ(*ParseDurationFlag("timeout", "30s"), absl::Seconds(30));
  EXPECT_EQ(*ParseDurationFlag("timeout", "500ms"), absl::Milliseconds(500));
  EXPECT_EQ(*ParseDurationFlag("timeout", "2.5"), absl::Milliseconds(2500));
  EXPECT_FALSE(ParseDurationFlag("timeout", "soon").ok());
  EXPECT_FALSE(ParseDurationFlag("timeout", "-1s").ok());
  EXPECT_EQ(*ParseIntFlag("n", "12"), 12);
  EXPECT_FALSE(ParseIntFlag("n", "1.5").ok());
}

TEST(TableTest, AlignsOnPlainTextAndColoursOnlyWhenAsked) {
  Table table({"NAME", "STATE", "NOTE"});
  table.AddRow({"a", Table::Cell("ALIVE", StateColor("ALIVE")), ""});
  table.AddRow({"long-name", Table::Cell("DEAD", StateColor("DEAD")), "why"});
  EXPECT_EQ(table.Render(false),
            "NAME       STATE  NOTE\n"
            "a          ALIVE\n"
            "long-name  DEAD   why\n");
  EXPECT_EQ(table.Render(true, "  "),
            "  NAME       STATE  NOTE\n"
            "  a          \033[32mALIVE\033[0m\n"
            "  long-name  \033[31mDEAD\033[0m   why\n");
}

TEST(StateColorTest, KnownStates) {
  EXPECT_STREQ(StateColor("CREATED"), "32");
  EXPECT_STREQ(StateColor("pending"), "33");
  EXPECT_STREQ(StateColor("INFEASIBLE"), "31");
  EXPECT_EQ(StateColor("whatever"), nullptr);
}

TEST(CommandHelpTest, ListsUsageFlagsAndGlobals) {
  std::string help = CommandHelp(Submit(), Globals());
  EXPECT_EQ(help.rfind("Usage: slicectl submit [flags]\n", 0), 0u) << help;
  EXPECT_NE(help.find("--resources-per-worker K=V ..."), std::string::npos)
      << help;
  EXPECT_NE(help.find("-f, --file FILE"), std::string::npos) << help;
  EXPECT_NE(help.find("Global flags:"), std::string::npos);
  EXPECT_NE(help.find("--server HOST:PORT"), std::string::npos);
  EXPECT_NE(help.find("-h, --help"), std::string::npos);
}

}  // namespace
}  // namespace sliced::slicectl
