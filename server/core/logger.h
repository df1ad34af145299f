// Logger: the daemon's log of the state changes an operator needs to follow
// the cluster (a node turning DEAD, ALIVE or DRAINING and why; a placement
// group placed, rescheduled or removed), one line each on stderr with a UTC
// timestamp:
//
//   2026-11-23T02:57:01.123Z node "v6e-a-w0" DEAD: lease expired
//   2026-11-23T02:57:01.124Z placement group pg-000000000001 RESCHEDULING: lost
//   node(s) v6e-a-w0
//
// The managers log after a commit (never from inside an op, which may still
// fail, and never from the solver). Levels (--log_level):
//   error  failures only
//   info   (default) plus the state changes above
//   debug  plus every new reason of a waiting group
//
// Thread-safe: a line is written whole under a mutex.
#ifndef SLICED_SERVER_CORE_LOGGER_H_
#define SLICED_SERVER_CORE_LOGGER_H_

#include <cstdio>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"

namespace sliced::server {

class Logger {
 public:
  enum class Level { kError = 0, kInfo = 1, kDebug = 2 };

  // "error", "info" or "debug"; InvalidArgument names the values otherwise.
  static absl::StatusOr<Level> ParseLevel(absl::string_view text);

  // Lines at `level` and below go to `out` (not owned; stderr by default).
  explicit Logger(Level level, std::FILE* out = stderr)
      : level_(level), out_(out) {}

  bool enabled(Level level) const { return level <= level_; }

  // Writes "<timestamp> <message>\n" when `level` is enabled.
  void Log(Level level, absl::string_view message);
  // Writes each message whose level is enabled, with one timestamp and one
  // write for all: the lines of one commit (a busy commit has hundreds).
  void LogAll(const std::vector<std::pair<Level, std::string>>& messages);
  void Info(absl::string_view message) { Log(Level::kInfo, message); }
  void Debug(absl::string_view message) { Log(Level::kDebug, message); }

 private:
  // Writes `lines` (whole lines) and flushes.
  void Write(const std::string& lines);

  const Level level_;
  absl::Mutex mu_;
  std::FILE* const out_ ABSL_GUARDED_BY(mu_);
};

}  // namespace sliced::server

#endif  // SLICED_SERVER_CORE_LOGGER_H_
