// The command-line plumbing of slicectl, kept apart from the commands so that
// it can be tested: a small flag parser with per-command specs (so every
// command has its own --help), aligned tables with optional colour, and the
// exit codes.
//
// Flags: `--name value`, `--name=value`, `-f value` for a flag with a short
// name, bare `--name` for a switch; a repeated flag keeps every value in order.
// `--` ends the flags. Global flags may stand anywhere on the line. A flag
// that is not `repeated` and given twice keeps its last value.
//
// Everything here is plain data and pure functions; thread-compatible.
#ifndef SLICED_CLIENT_SLICECTL_CLI_H_
#define SLICED_CLIENT_SLICECTL_CLI_H_

#include <map>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"

namespace sliced::slicectl {

// Exit codes (documented in docs/clients.md).
enum ExitCode : int {
  kExitOk = 0,
  kExitUsage = 2,        // bad flags, unknown command, unreadable file
  kExitRejected = 3,     // the server said no (its code and message printed)
  kExitUnreachable = 4,  // UNAVAILABLE / DEADLINE_EXCEEDED: no answer
  kExitWaitTimeout = 5,  // --wait gave up; the placement group still waits
};

struct FlagSpec {
  std::string name;        // long name without the dashes: "num-workers"
  std::string value_name;  // "N"; empty for a switch (no value)
  std::string help;
  bool repeated = false;  // may be given many times
  char short_name = 0;    // e.g. 'f' for -f; 0: none
};

struct CommandSpec {
  std::string name;     // "pg list"; words separated by one space
  std::string args;     // positional arguments for the usage line: "ID"
  int num_args = 0;     // exactly this many positional arguments
  std::string summary;  // one line
  std::string details;  // more help text (may be empty)
  std::vector<FlagSpec> flags;
};

// The result of parsing one command line.
class ParsedFlags {
 public:
  bool Has(absl::string_view name) const;
  // The last value given, or `fallback`.
  std::string Get(absl::string_view name,
                  absl::string_view fallback = "") const;
  // Every value given, in order (empty when absent).
  const std::vector<std::string>& GetAll(absl::string_view name) const;

  std::vector<std::string> args;  // positional arguments
  void Add(const std::string& name, std::string value);

 private:
  std::map<std::string, std::vector<std::string>, std::less<>> values_;
};

// Parses `argv` (the words after the command name) against the command's
// flags plus the global ones. INVALID_ARGUMENT with a message saying what to
// fix: unknown flag, missing value, value given to a switch, wrong number of
// positional arguments. `--help` / `-h` is reported as the flag "help" and
// skips the argument-count check.
absl::StatusOr<ParsedFlags> ParseFlags(const CommandSpec& command,
                                       const std::vector<FlagSpec>& globals,
                                       const std::vector<std::string>& argv);

// Splits a command line into the command's words and the rest: the leading
// words (skipping global flags and their values) that name one of `commands`,
// longest match first. Returns the matched command's index and the remaining
// words (global flags included), or -1 when no command matches.
struct CommandMatch {
  int index = -1;
  std::string unknown;  // the first non-flag word, when nothing matched
  std::vector<std::string> rest;
};
CommandMatch MatchCommand(const std::vector<CommandSpec>& commands,
                          const std::vector<FlagSpec>& globals,
                          const std::vector<std::string>& argv);

// "Usage: slicectl pg list [flags]" + summary + flags + globals.
std::string CommandHelp(const CommandSpec& command,
                        const std::vector<FlagSpec>& globals);

// "K=V" pairs -> map. INVALID_ARGUMENT naming `flag` for an entry without '='
// or with an empty key. Values may contain '=' (split at the first one).
absl::StatusOr<std::map<std::string, std::string>> ParseKeyValues(
    absl::string_view flag, const std::vector<std::string>& entries);
// As ParseKeyValues, the values numbers ("TPU=4", "CPU=0.5").
absl::StatusOr<std::map<std::string, double>> ParseResources(
    absl::string_view flag, const std::vector<std::string>& entries);
// "30s", "500ms", "2m", or a bare number of seconds.
absl::StatusOr<absl::Duration> ParseDurationFlag(absl::string_view flag,
                                                 absl::string_view value);
absl::StatusOr<int> ParseIntFlag(absl::string_view flag,
                                 absl::string_view value);

// An aligned text table. Cells may carry an ANSI colour, applied only when
// Render(color=true); widths are computed from the plain text.
class Table {
 public:
  struct Cell {
    Cell(std::string t) : text(std::move(t)) {}  // NOLINT: implicit on purpose
    Cell(const char* t) : text(t) {}             // NOLINT
    Cell(std::string t, const char* c) : text(std::move(t)), color(c) {}
    std::string text;
    const char* color = nullptr;  // e.g. "32" (green); nullptr: none
  };
  explicit Table(std::vector<std::string> header)
      : header_(std::move(header)) {}
  void AddRow(std::vector<Cell> row) { rows_.push_back(std::move(row)); }
  bool empty() const { return rows_.empty(); }
  // Columns separated by two spaces, no trailing blanks, each line prefixed
  // with `indent`.
  std::string Render(bool color, absl::string_view indent = "") const;

 private:
  std::vector<std::string> header_;
  std::vector<std::vector<Cell>> rows_;
};

// The ANSI colour for a state word (node, placement group or slice state), or
// nullptr.
const char* StateColor(absl::string_view state);

}  // namespace sliced::slicectl

#endif  // SLICED_CLIENT_SLICECTL_CLI_H_
