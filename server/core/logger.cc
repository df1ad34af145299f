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

void Logger::Log(Level level, absl::string_view message) {
  if (!enabled(level)) return;
  const std::string line =
      absl::StrCat(absl::FormatTime("%Y-%m-%dT%H:%M:%E3SZ", absl::Now(),
                                    absl::UTCTimeZone()),
                   " ", message, "\n");
  absl::MutexLock lock(&mu_);
  std::fwrite(line.data(), 1, line.size(), out_);
  std::fflush(out_);
}

}  // namespace sliced::server
