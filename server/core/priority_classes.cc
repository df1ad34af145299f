#include "server/core/priority_classes.h"

#include <algorithm>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "base/quote.h"

namespace sliced::server {
namespace {

constexpr char kNonPreemptible[] = "non-preemptible";

bool ValidName(absl::string_view name) {
  if (name.empty() || name.size() > 63) return false;
  if (name.front() == '-' || name.back() == '-') return false;
  return std::all_of(name.begin(), name.end(), [](char c) {
    return absl::ascii_islower(c) || absl::ascii_isdigit(c) || c == '-';
  });
}

absl::Status Bad(absl::string_view entry, absl::string_view rule) {
  return absl::InvalidArgumentError(
      absl::StrCat("--priority_classes: \"", entry, "\": ", rule,
                   " (the form is name=value[:non-preemptible],...)"));
}

}  // namespace

PriorityClasses::PriorityClasses() {
  *this = *Parse(kDefaultSpec, kDefaultClass);
}

absl::StatusOr<PriorityClasses> PriorityClasses::Parse(
    absl::string_view spec, absl::string_view default_class) {
  PriorityClasses out{NoClasses{}};
  for (absl::string_view entry :
       absl::StrSplit(spec, ',', absl::SkipWhitespace())) {
    entry = absl::StripAsciiWhitespace(entry);
    std::pair<absl::string_view, absl::string_view> kv =
        absl::StrSplit(entry, absl::MaxSplits('=', 1));
    PriorityClass c;
    c.name = std::string(absl::StripAsciiWhitespace(kv.first));
    absl::string_view value = absl::StripAsciiWhitespace(kv.second);
    if (absl::ConsumeSuffix(&value, absl::StrCat(":", kNonPreemptible))) {
      c.preemptible = false;
    }
    if (!ValidName(c.name)) {
      return Bad(entry,
                 "a class name is 1-63 lower-case letters, digits or '-', "
                 "not starting or ending with '-'");
    }
    if (!absl::SimpleAtoi(value, &c.value)) {
      return Bad(entry,
                 absl::StrCat("the value must be a 32-bit integer, optionally "
                              "followed by :",
                              kNonPreemptible));
    }
    if (out.Find(c.name) != nullptr) return Bad(entry, "the name repeats");
    if (std::any_of(out.classes_.begin(), out.classes_.end(),
                    [&](const PriorityClass& o) { return o.value == c.value; })) {
      return Bad(entry, "another class has the same value");
    }
    out.classes_.push_back(std::move(c));
  }
  std::sort(out.classes_.begin(), out.classes_.end(),
            [](const PriorityClass& a, const PriorityClass& b) {
              return a.value > b.value;
            });
  if (!default_class.empty() && out.Find(default_class) == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--default_priority_class: \"", default_class,
        "\" is not a class of --priority_classes (", out.Describe(), ")"));
  }
  out.default_ = std::string(default_class);
  return out;
}

const PriorityClass* PriorityClasses::Find(absl::string_view name) const {
  for (const PriorityClass& c : classes_) {
    if (c.name == name) return &c;
  }
  return nullptr;
}

std::string PriorityClasses::Describe() const {
  if (classes_.empty()) return "no classes";
  return absl::StrJoin(
      classes_, ", ", [](std::string* out, const PriorityClass& c) {
        absl::StrAppend(out, c.name, " (", c.value,
                        c.preemptible ? "" : ", non-preemptible", ")");
      });
}

absl::Status PriorityClasses::Resolve(std::string& priority_class,
                                      int32_t& priority) const {
  if (priority_class.empty()) {
    if (priority != 0 || default_.empty()) return absl::OkStatus();
    priority_class = default_;
    priority = Find(default_)->value;
    return absl::OkStatus();
  }
  const PriorityClass* c = Find(priority_class);
  if (c == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat("priority_class: unknown class ", Quote(priority_class),
                     "; this daemon has ", Describe()));
  }
  if (priority != 0 && priority != c->value) {
    return absl::InvalidArgumentError(
        absl::StrCat("priority: ", priority, " contradicts priority_class \"",
                     c->name, "\" (", c->value, "); give one or the other"));
  }
  priority = c->value;
  return absl::OkStatus();
}

}  // namespace sliced::server
