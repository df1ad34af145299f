#include "client/slicectl_cli.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"

namespace sliced::slicectl {
namespace {

const FlagSpec* FindFlag(const std::vector<const FlagSpec*>& flags,
                         absl::string_view word) {
  for (const FlagSpec* f : flags) {
    if (absl::StartsWith(word, "--") && word.substr(2) == f->name) return f;
    if (f->short_name != 0 && word.size() == 2 && word[0] == '-' &&
        word[1] == f->short_name) {
      return f;
    }
  }
  return nullptr;
}

const FlagSpec kHelpFlag{"help", "", "show this help", false, 'h'};

std::string FlagUsage(const FlagSpec& f) {
  std::string s = f.short_name ? absl::StrCat("-", std::string(1, f.short_name),
                                              ", --", f.name)
                               : absl::StrCat("    --", f.name);
  if (!f.value_name.empty()) absl::StrAppend(&s, " ", f.value_name);
  if (f.repeated) absl::StrAppend(&s, " ...");
  return s;
}

void AppendFlagLines(const std::vector<FlagSpec>& flags, std::string* out) {
  size_t width = 0;
  for (const FlagSpec& f : flags) width = std::max(width, FlagUsage(f).size());
  for (const FlagSpec& f : flags) {
    std::string usage = FlagUsage(f);
    absl::StrAppend(out, "  ", usage,
                    std::string(width - usage.size() + 2, ' '), f.help, "\n");
  }
}

}  // namespace

bool ParsedFlags::Has(absl::string_view name) const {
  return values_.find(name) != values_.end();
}

std::string ParsedFlags::Get(absl::string_view name,
                             absl::string_view fallback) const {
  auto it = values_.find(name);
  if (it == values_.end() || it->second.empty()) return std::string(fallback);
  return it->second.back();
}

const std::vector<std::string>& ParsedFlags::GetAll(
    absl::string_view name) const {
  static const std::vector<std::string>* const kNone =
      new std::vector<std::string>();
  auto it = values_.find(name);
  return it == values_.end() ? *kNone : it->second;
}

void ParsedFlags::Add(const std::string& name, std::string value) {
  values_[name].push_back(std::move(value));
}

absl::StatusOr<ParsedFlags> ParseFlags(const CommandSpec& command,
                                       const std::vector<FlagSpec>& globals,
                                       const std::vector<std::string>& argv) {
  std::vector<const FlagSpec*> flags = {&kHelpFlag};
  for (const FlagSpec& f : command.flags) flags.push_back(&f);
  for (const FlagSpec& f : globals) flags.push_back(&f);
  const std::string see =
      absl::StrCat(" (see: slicectl ", command.name, " --help)");

  ParsedFlags parsed;
  bool flags_done = false;
  for (size_t i = 0; i < argv.size(); ++i) {
    const std::string& word = argv[i];
    if (flags_done || word == "-" || word.empty() || word[0] != '-') {
      parsed.args.push_back(word);
      continue;
    }
    if (word == "--") {
      flags_done = true;
      continue;
    }
    std::string name_part = word;
    std::string value;
    bool has_inline_value = false;
    if (size_t eq = word.find('=');
        absl::StartsWith(word, "--") && eq != std::string::npos) {
      name_part = word.substr(0, eq);
      value = word.substr(eq + 1);
      has_inline_value = true;
    }
    const FlagSpec* flag = FindFlag(flags, name_part);
    if (flag == nullptr) {
      return absl::InvalidArgumentError(absl::StrCat(
          "unknown flag ", name_part, " for '", command.name, "'", see));
    }
    if (flag->value_name.empty()) {
      if (has_inline_value) {
        return absl::InvalidArgumentError(absl::StrCat(
            "--", flag->name, " takes no value, got \"", value, "\"", see));
      }
    } else if (!has_inline_value) {
      if (i + 1 >= argv.size()) {
        return absl::InvalidArgumentError(absl::StrCat(
            "--", flag->name, " needs a value (", flag->value_name, ")", see));
      }
      value = argv[++i];
    }
    parsed.Add(flag->name, std::move(value));
  }
  if (parsed.Has("help")) return parsed;
  if (static_cast<int>(parsed.args.size()) != command.num_args) {
    if (command.num_args == 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("'", command.name, "' takes no arguments, got \"",
                       parsed.args[0], "\"", see));
    }
    return absl::InvalidArgumentError(absl::StrCat(
        "'", command.name, "' needs ", command.args,
        parsed.args.empty()
            ? ""
            : absl::StrCat(", got ", parsed.args.size(), " arguments"),
        see));
  }
  return parsed;
}

CommandMatch MatchCommand(const std::vector<CommandSpec>& commands,
                          const std::vector<FlagSpec>& globals,
                          const std::vector<std::string>& argv) {
  // Positions of the non-flag words, skipping global flags' values.
  std::vector<size_t> words;
  for (size_t i = 0; i < argv.size(); ++i) {
    const std::string& w = argv[i];
    if (w.empty() || w[0] != '-') {
      words.push_back(i);
      continue;
    }
    for (const FlagSpec& g : globals) {
      if (w == "--" + g.name && !g.value_name.empty()) {
        ++i;
        break;
      }
    }
  }
  CommandMatch match;
  size_t best_words = 0;
  for (size_t c = 0; c < commands.size(); ++c) {
    std::vector<std::string> name = absl::StrSplit(commands[c].name, ' ');
    if (name.size() > words.size() || name.size() <= best_words) continue;
    bool same = true;
    for (size_t k = 0; k < name.size() && same; ++k) {
      same = argv[words[k]] == name[k];
    }
    if (same) {
      match.index = static_cast<int>(c);
      best_words = name.size();
    }
  }
  if (match.index < 0) {
    if (!words.empty()) match.unknown = argv[words[0]];
    return match;
  }
  for (size_t i = 0; i < argv.size(); ++i) {
    if (std::find(words.begin(), words.begin() + best_words, i) ==
        words.begin() + best_words) {
      match.rest.push_back(argv[i]);
    }
  }
  return match;
}

std::string CommandHelp(const CommandSpec& command,
                        const std::vector<FlagSpec>& globals) {
  std::string out = absl::StrCat("Usage: slicectl ", command.name,
                                 command.args.empty() ? "" : " ", command.args,
                                 command.flags.empty() ? "" : " [flags]",
                                 "\n\n", command.summary, "\n");
  if (!command.details.empty())
    absl::StrAppend(&out, "\n", command.details, "\n");
  if (!command.flags.empty()) {
    absl::StrAppend(&out, "\nFlags:\n");
    AppendFlagLines(command.flags, &out);
  }
  absl::StrAppend(&out, "\nGlobal flags:\n");
  std::vector<FlagSpec> all = globals;
  all.push_back(kHelpFlag);
  AppendFlagLines(all, &out);
  return out;
}

absl::StatusOr<std::map<std::string, std::string>> ParseKeyValues(
    absl::string_view flag, const std::vector<std::string>& entries) {
  std::map<std::string, std::string> out;
  for (const std::string& entry : entries) {
    size_t eq = entry.find('=');
    if (eq == std::string::npos || eq == 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("--", flag, ": want KEY=VALUE, got \"", entry, "\""));
    }
    const std::string key = entry.substr(0, eq);
    if (!out.emplace(key, entry.substr(eq + 1)).second) {
      return absl::InvalidArgumentError(
          absl::StrCat("--", flag, ": ", key, " given twice"));
    }
  }
  return out;
}

absl::StatusOr<std::map<std::string, double>> ParseResources(
    absl::string_view flag, const std::vector<std::string>& entries) {
  absl::StatusOr<std::map<std::string, std::string>> pairs =
      ParseKeyValues(flag, entries);
  if (!pairs.ok()) return pairs.status();
  std::map<std::string, double> out;
  for (const auto& [key, value] : *pairs) {
    double number = 0;
    if (!absl::SimpleAtod(value, &number) || !std::isfinite(number)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "--", flag, ": ", key, " wants a number, got \"", value, "\""));
    }
    out[key] = number;
  }
  return out;
}

absl::StatusOr<absl::Duration> ParseDurationFlag(absl::string_view flag,
                                                 absl::string_view value) {
  absl::Duration d;
  double seconds = 0;
  const bool number = absl::SimpleAtod(value, &seconds);
  if (number) d = absl::Seconds(seconds);
  // Finite only: "inf" or "nan" would never time out.
  if ((number && !std::isfinite(seconds)) ||
      (!number && !absl::ParseDuration(value, &d)) ||
      d == absl::InfiniteDuration() || d == -absl::InfiniteDuration()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--", flag, ": want a duration like 30s, 500ms or 2m, got \"", value,
        "\""));
  }
  if (d < absl::ZeroDuration()) {
    return absl::InvalidArgumentError(
        absl::StrCat("--", flag, ": must not be negative"));
  }
  return d;
}

absl::StatusOr<int> ParseIntFlag(absl::string_view flag,
                                 absl::string_view value) {
  int n = 0;
  if (!absl::SimpleAtoi(value, &n)) {
    return absl::InvalidArgumentError(
        absl::StrCat("--", flag, ": want an integer, got \"", value, "\""));
  }
  return n;
}

std::string Table::Render(bool color, absl::string_view indent) const {
  std::vector<size_t> widths(header_.size(), 0);
  for (size_t c = 0; c < header_.size(); ++c) widths[c] = header_[c].size();
  for (const auto& row : rows_) {
    for (size_t c = 0; c < row.size() && c < widths.size(); ++c) {
      widths[c] = std::max(widths[c], row[c].text.size());
    }
  }
  std::string out;
  auto line = [&](const std::vector<Cell>& cells) {
    std::string text(indent);
    for (size_t c = 0; c < cells.size() && c < widths.size(); ++c) {
      const Cell& cell = cells[c];
      if (color && cell.color != nullptr) {
        absl::StrAppend(&text, "\033[", cell.color, "m", cell.text, "\033[0m");
      } else {
        absl::StrAppend(&text, cell.text);
      }
      if (c + 1 < cells.size()) {
        text.append(widths[c] - cell.text.size() + 2, ' ');
      }
    }
    while (!text.empty() && text.back() == ' ') text.pop_back();
    absl::StrAppend(&out, text, "\n");
  };
  std::vector<Cell> head(header_.begin(), header_.end());
  line(head);
  for (const auto& row : rows_) line(row);
  return out;
}

const char* StateColor(absl::string_view state) {
  std::string s = absl::AsciiStrToUpper(state);
  if (s == "ALIVE" || s == "CREATED" || s == "FREE") return "32";  // green
  if (s == "DRAINING" || s == "PENDING" || s == "RESCHEDULING" ||
      s == "PREEMPTING") {
    return "33";  // yellow
  }
  if (s == "DEAD" || s == "INFEASIBLE" || s == "BROKEN") return "31";  // red
  if (s == "HELD") return "36";                                        // cyan
  if (s == "REMOVED") return "2";                                      // dim
  return nullptr;
}

}  // namespace sliced::slicectl
