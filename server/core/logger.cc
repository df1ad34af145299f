#include "server/core/logger.h"

#include <string>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "base/quote.h"

namespace sliced::server {

absl::StatusOr<Logger::Level> Logger::ParseLevel(absl::string_view text) {
  if (text == "error") return Level::kError;
  if (text == "info") return Level::kInfo;
  if (text == "debug") return Level::kDebug;
  return absl::InvalidArgumentError(absl::StrCat(
      "--log_level: want error, info or debug, got ", Quote(text)));
}

namespace {

std::string Timestamp() {
  return absl::FormatTime("%Y-%m-%dT%H:%M:%E3SZ", absl::Now(),
                          absl::UTCTimeZone());
}

}  // namespace

void Logger::Log(Level level, absl::string_view message) {
  if (!enabled(level)) return;
  Write(absl::StrCat(Timestamp(), " ", message, "\n"));
}

void Logger::LogAll(
    const std::vector<std::pair<Level, std::string>>& messages) {
  if (messages.empty()) return;
  std::string lines;
  const std::string stamp = Timestamp();
  for (const auto& [level, message] : messages) {
    if (enabled(level)) absl::StrAppend(&lines, stamp, " ", message, "\n");
  }
  if (!lines.empty()) Write(lines);
}

void Logger::Write(const std::string& lines) {
  absl::MutexLock lock(&mu_);
  std::fwrite(lines.data(), 1, lines.size(), out_);
  std::fflush(out_);
}

}  // namespace sliced::server
