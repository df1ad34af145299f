// Kubernetes label syntax and Ray label selectors (DESIGN §2).
//
// A selector is a map key -> value expression, all entries ANDed:
//   "v"          key present and value == v
//   "!v"         key absent or value != v
//   "in(a,b)"    key present and value in {a, b}
//   "!in(a,b)"   key absent or value not in {a, b}
// Whitespace after commas is accepted. An empty selector matches every node.
//
// Parsed selectors are immutable values; safe to share between threads.
#ifndef SLICED_SCHEDULER_LABELS_H_
#define SLICED_SCHEDULER_LABELS_H_

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "scheduler/types.h"

namespace sliced::scheduler {

// Validates a label key: optional DNS-subdomain prefix (<= 253 chars) and '/',
// then a name of 1..63 chars matching [A-Za-z0-9]([A-Za-z0-9_.-]*[A-Za-z0-9])?.
// Returns InvalidArgument saying what is wrong with the key (the caller adds
// which field it came from).
absl::Status ValidateLabelKey(absl::string_view key);

// Validates a label value: empty, or 1..63 chars of the name syntax above.
absl::Status ValidateLabelValue(absl::string_view value);

// Validates every key and value of `labels`. The error names the key.
absl::Status ValidateLabels(const Labels& labels);

enum class SelectorOp { kEquals, kNotEquals, kIn, kNotIn };

struct SelectorTerm {
  std::string key;
  SelectorOp op = SelectorOp::kEquals;
  std::vector<std::string> values;  // one value for kEquals / kNotEquals

  friend bool operator==(const SelectorTerm&, const SelectorTerm&) = default;
};

// A parsed selector: terms sorted by key.
struct LabelSelector {
  std::vector<SelectorTerm> terms;

  bool empty() const { return terms.empty(); }
  friend bool operator==(const LabelSelector&, const LabelSelector&) = default;
};

// Parses a wire selector. Returns InvalidArgument naming the offending key and
// the rule it breaks (bad key, bad value, empty `in()`, unbalanced
// parentheses).
absl::StatusOr<LabelSelector> ParseLabelSelector(
    const absl::btree_map<std::string, std::string>& selector);

// True when `labels` satisfies every term of `selector`.
bool Matches(const LabelSelector& selector, const Labels& labels);

// A term's Ray expression, as ParseLabelSelector reads it: "v", "!v",
// "in(a,b)" or "!in(a,b)".
std::string TermToString(const SelectorTerm& term);

// Renders a selector back to its wire form (for diagnoses).
std::string SelectorToString(const LabelSelector& selector);

}  // namespace sliced::scheduler

#endif  // SLICED_SCHEDULER_LABELS_H_
