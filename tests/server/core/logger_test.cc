// The daemon's log: one line per message, levels filtered, and the lines of
// one batch written together under one timestamp.
#include "server/core/logger.h"

#include <cstdio>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_split.h"
#include "gtest/gtest.h"

namespace sliced::server {
namespace {

// What `log` wrote to `file`.
std::string Contents(std::FILE* file) {
  std::string out;
  std::rewind(file);
  char buf[256];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof(buf), file)) > 0) out.append(buf, n);
  return out;
}

TEST(LoggerTest, LogAllWritesEnabledLinesUnderOneTimestamp) {
  std::FILE* file = std::tmpfile();
  ASSERT_NE(file, nullptr);
  Logger log(Logger::Level::kInfo, file);
  log.LogAll({{Logger::Level::kInfo, "placement group pg-1 CREATED"},
              {Logger::Level::kDebug, "placement group pg-2 PENDING: why"},
              {Logger::Level::kError, "a failure"}});
  log.LogAll({});
  const std::vector<std::string> lines =
      absl::StrSplit(Contents(file), '\n', absl::SkipEmpty());
  ASSERT_EQ(lines.size(), 2u) << Contents(file);
  // "2026-11-24T03:00:00.000Z <message>"
  const std::string stamp = lines[0].substr(0, lines[0].find(' '));
  EXPECT_EQ(stamp.size(), 24u) << lines[0];
  EXPECT_EQ(stamp.back(), 'Z');
  EXPECT_EQ(lines[0], stamp + " placement group pg-1 CREATED");
  EXPECT_EQ(lines[1], stamp + " a failure");
  std::fclose(file);
}

TEST(LoggerTest, DebugLevelKeepsDebugLines) {
  std::FILE* file = std::tmpfile();
  ASSERT_NE(file, nullptr);
  Logger log(Logger::Level::kDebug, file);
  log.LogAll({{Logger::Level::kDebug, "x"}});
  log.Debug("y");
  const std::vector<std::string> lines =
      absl::StrSplit(Contents(file), '\n', absl::SkipEmpty());
  ASSERT_EQ(lines.size(), 2u);
  EXPECT_TRUE(absl::EndsWith(lines[0], " x"));
  EXPECT_TRUE(absl::EndsWith(lines[1], " y"));
  std::fclose(file);
}

}  // namespace
}  // namespace sliced::server
