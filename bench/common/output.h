// Output helpers shared by the benchmark tools: progress lines on a TTY and
// writing result files into an output directory.
//
// Progress() writes to stderr only when stderr is a terminal. Not
// thread-safe; call from the tool's main thread.
#ifndef SLICED_BENCH_COMMON_OUTPUT_H_
#define SLICED_BENCH_COMMON_OUTPUT_H_

#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_format.h"

namespace sliced::bench {

// Rewrites the current terminal line with the formatted text ("" clears it).
template <typename... Args>
void Progress(const absl::FormatSpec<Args...>& format, const Args&... args) {
  static const bool tty = isatty(2);
  if (!tty) return;
  std::fprintf(stderr, "\r\033[K%s", absl::StrFormat(format, args...).c_str());
  std::fflush(stderr);
}

// Creates `dir` if needed and writes each (file name, text) into it.
// Returns false (after printing which file to stderr) when one fails.
inline bool WriteOutputs(const std::string& dir,
                         const std::vector<std::pair<std::string, std::string>>& files) {
  std::error_code ignored;
  std::filesystem::create_directories(dir, ignored);
  for (const auto& [name, text] : files) {
    std::ofstream f(dir + "/" + name);
    f << text;
    if (!f) {
      std::fprintf(stderr, "cannot write %s/%s\n", dir.c_str(), name.c_str());
      return false;
    }
  }
  return true;
}

}  // namespace sliced::bench

#endif  // SLICED_BENCH_COMMON_OUTPUT_H_
