#include "scheduler/labels.h"

#include <algorithm>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "base/quote.h"
#include "base/status_macros.h"

namespace sliced::scheduler {
namespace {

constexpr size_t kMaxNameLength = 63;
constexpr size_t kMaxPrefixLength = 253;

bool IsAlnum(char c) {
  return absl::ascii_isalnum(static_cast<unsigned char>(c));
}

// Why `s` is not a valid label name / value body, or "" when it is.
// REQUIRES: !s.empty().
std::string NameSyntaxError(absl::string_view s) {
  if (s.size() > kMaxNameLength) {
    return absl::StrCat("must be at most 63 characters, got ", s.size());
  }
  if (!IsAlnum(s.front()) || !IsAlnum(s.back())) {
    return "must begin and end with a letter or digit";
  }
  for (char c : s) {
    if (!IsAlnum(c) && c != '-' && c != '_' && c != '.') {
      return absl::StrCat(
          "must contain only letters, digits, '-', '_' and "
          "'.', found '",
          absl::string_view(&c, 1), "'");
    }
  }
  return "";
}

// Why `prefix` is not a DNS subdomain (RFC 1123, lower case), or "".
std::string PrefixError(absl::string_view prefix) {
  if (prefix.empty()) return "prefix before '/' must not be empty";
  if (prefix.size() > kMaxPrefixLength) {
    return absl::StrCat("prefix must be at most 253 characters, got ",
                        prefix.size());
  }
  for (absl::string_view part : absl::StrSplit(prefix, '.')) {
    if (part.empty() || part.size() > 63) {
      return "prefix must be a DNS subdomain (dot-separated parts of 1..63 "
             "characters)";
    }
    auto ok_end = [](char c) {
      return absl::ascii_islower(static_cast<unsigned char>(c)) ||
             absl::ascii_isdigit(static_cast<unsigned char>(c));
    };
    if (!ok_end(part.front()) || !ok_end(part.back())) {
      return "prefix must be a DNS subdomain (lower-case letters, digits, "
             "'-' and '.', parts beginning and ending with a letter or digit)";
    }
    for (char c : part) {
      if (!ok_end(c) && c != '-') {
        return "prefix must be a DNS subdomain (lower-case letters, digits, "
               "'-' and '.')";
      }
    }
  }
  return "";
}

absl::Status KeyError(absl::string_view key, absl::string_view why) {
  return absl::InvalidArgumentError(
      absl::StrCat("invalid label key ", Quote(key), ": ", why));
}

absl::Status ValueError(absl::string_view key, absl::string_view value,
                        absl::string_view why) {
  return absl::InvalidArgumentError(absl::StrCat("invalid label value ",
                                                 Quote(value), " for key ",
                                                 Quote(key), ": ", why));
}

absl::StatusOr<SelectorTerm> ParseTerm(const std::string& key,
                                       absl::string_view expr) {
  SelectorTerm term;
  term.key = key;
  absl::string_view rest = absl::StripAsciiWhitespace(expr);
  const bool negated = absl::ConsumePrefix(&rest, "!");
  rest = absl::StripLeadingAsciiWhitespace(rest);
  if (absl::ConsumePrefix(&rest, "in(")) {
    if (!absl::ConsumeSuffix(&rest, ")")) {
      return absl::InvalidArgumentError(
          absl::StrCat("label selector for key ", Quote(key),
                       ": unbalanced parentheses in ", Quote(expr)));
    }
    term.op = negated ? SelectorOp::kNotIn : SelectorOp::kIn;
    if (absl::StripAsciiWhitespace(rest).empty()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "label selector for key ", Quote(key), ": ",
          negated ? "!in()" : "in()", " needs at least one value"));
    }
    for (absl::string_view v : absl::StrSplit(rest, ',')) {
      v = absl::StripAsciiWhitespace(v);
      if (v.empty()) {
        return absl::InvalidArgumentError(
            absl::StrCat("label selector for key ", Quote(key),
                         ": empty value in ", Quote(expr)));
      }
      if (absl::StrContains(v, "(") || absl::StrContains(v, ")")) {
        return absl::InvalidArgumentError(
            absl::StrCat("label selector for key ", Quote(key),
                         ": unbalanced parentheses in ", Quote(expr)));
      }
      std::string why = NameSyntaxError(v);
      if (!why.empty()) return ValueError(key, v, why);
      term.values.emplace_back(v);
    }
    std::sort(term.values.begin(), term.values.end());
    term.values.erase(std::unique(term.values.begin(), term.values.end()),
                      term.values.end());
    return term;
  }
  if (absl::StrContains(rest, "(") || absl::StrContains(rest, ")")) {
    return absl::InvalidArgumentError(
        absl::StrCat("label selector for key ", Quote(key),
                     ": unbalanced parentheses or unknown operator in ",
                     Quote(expr), " (expected v, !v, in(a,b) or !in(a,b))"));
  }
  term.op = negated ? SelectorOp::kNotEquals : SelectorOp::kEquals;
  absl::Status value_ok = ValidateLabelValue(rest);
  if (!value_ok.ok()) {
    return ValueError(key, rest, value_ok.message());
  }
  term.values.emplace_back(rest);
  return term;
}

}  // namespace

std::string TermToString(const SelectorTerm& term) {
  switch (term.op) {
    case SelectorOp::kEquals:
      return term.values.empty() ? "" : term.values[0];
    case SelectorOp::kNotEquals:
      return absl::StrCat("!", term.values.empty() ? "" : term.values[0]);
    case SelectorOp::kIn:
      return absl::StrCat("in(", absl::StrJoin(term.values, ","), ")");
    case SelectorOp::kNotIn:
      return absl::StrCat("!in(", absl::StrJoin(term.values, ","), ")");
  }
  return "";
}

absl::Status ValidateLabelKey(absl::string_view key) {
  if (key.empty()) return KeyError(key, "must not be empty");
  absl::string_view name = key;
  const size_t slash = key.find('/');
  if (slash != absl::string_view::npos) {
    if (key.find('/', slash + 1) != absl::string_view::npos) {
      return KeyError(key, "must contain at most one '/'");
    }
    std::string why = PrefixError(key.substr(0, slash));
    if (!why.empty()) return KeyError(key, why);
    name = key.substr(slash + 1);
  }
  if (name.empty()) return KeyError(key, "name must not be empty");
  std::string why = NameSyntaxError(name);
  if (!why.empty()) return KeyError(key, absl::StrCat("name ", why));
  return absl::OkStatus();
}

absl::Status ValidateLabelValue(absl::string_view value) {
  if (value.empty()) return absl::OkStatus();
  std::string why = NameSyntaxError(value);
  if (!why.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("invalid label value ", Quote(value), ": ", why));
  }
  return absl::OkStatus();
}

absl::Status ValidateLabels(const Labels& labels) {
  for (const auto& [key, value] : labels) {
    RETURN_IF_ERROR(ValidateLabelKey(key));
    std::string why = value.empty() ? "" : NameSyntaxError(value);
    if (!why.empty()) return ValueError(key, value, why);
  }
  return absl::OkStatus();
}

absl::StatusOr<LabelSelector> ParseLabelSelector(
    const absl::btree_map<std::string, std::string>& selector) {
  LabelSelector parsed;
  parsed.terms.reserve(selector.size());
  for (const auto& [key, expr] : selector) {
    RETURN_IF_ERROR(ValidateLabelKey(key));
    ASSIGN_OR_RETURN(SelectorTerm term, ParseTerm(key, expr));
    parsed.terms.push_back(std::move(term));
  }
  return parsed;
}

bool Matches(const LabelSelector& selector, const Labels& labels) {
  for (const SelectorTerm& term : selector.terms) {
    auto it = labels.find(term.key);
    const bool present = it != labels.end();
    switch (term.op) {
      case SelectorOp::kEquals:
        if (!present || it->second != term.values[0]) return false;
        break;
      case SelectorOp::kNotEquals:
        if (present && it->second == term.values[0]) return false;
        break;
      case SelectorOp::kIn:
        if (!present || !std::binary_search(term.values.begin(),
                                            term.values.end(), it->second)) {
          return false;
        }
        break;
      case SelectorOp::kNotIn:
        if (present && std::binary_search(term.values.begin(),
                                          term.values.end(), it->second)) {
          return false;
        }
        break;
    }
  }
  return true;
}

std::string SelectorToString(const LabelSelector& selector) {
  return absl::StrCat(
      "{",
      absl::StrJoin(selector.terms, ", ",
                    [](std::string* out, const SelectorTerm& term) {
                      absl::StrAppend(out, term.key, ": ", TermToString(term));
                    }),
      "}");
}

}  // namespace sliced::scheduler
