#include "server/api/convert_common.h"

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "google/protobuf/util/time_util.h"
#include "server/core/validation.h"

namespace sliced::server::api {

using google::protobuf::util::TimeUtil;

void SelectorToProto(const scheduler::LabelSelector& selector,
                     google::protobuf::Map<std::string, std::string>* out) {
  for (const scheduler::SelectorTerm& t : selector.terms) {
    (*out)[t.key] = scheduler::TermToString(t);
  }
}

void ResourcesToProto(const scheduler::ResourceSet& resources,
                      google::protobuf::Map<std::string, double>* out) {
  for (const auto& [name, amount] : resources) {
    (*out)[name] = scheduler::FromFixedPoint(amount);
  }
}

void ToTimestamp(absl::Time time, google::protobuf::Timestamp* out) {
  // Milliseconds: what the store keeps, so a reply reads the same before
  // and after a restart.
  *out = TimeUtil::MillisecondsToTimestamp(absl::ToUnixMillis(time));
}

absl::StatusOr<absl::Time> FromTimestamp(
    const google::protobuf::Timestamp& timestamp, absl::string_view field) {
  // google.protobuf.Timestamp's range: 0001-01-01 to 9999-12-31.
  constexpr int64_t kMinSeconds = -62135596800;
  constexpr int64_t kMaxSeconds = 253402300799;
  if (timestamp.seconds() < kMinSeconds || timestamp.seconds() > kMaxSeconds ||
      timestamp.nanos() < 0 || timestamp.nanos() > 999999999) {
    return absl::InvalidArgumentError(absl::StrCat(
        field, ": not a valid timestamp (years 1 to 9999, nanos 0 to ",
        "999999999), got seconds ", timestamp.seconds(), ", nanos ",
        timestamp.nanos()));
  }
  // In absl::Time: past 2262 no int64 count of nanoseconds holds it.
  return absl::FromUnixSeconds(timestamp.seconds()) +
         absl::Nanoseconds(timestamp.nanos());
}

absl::StatusOr<int> PageSizeFromProto(int32_t page_size, const Limits& limits) {
  if (page_size < 0 || page_size > limits.max_page_size) {
    return absl::InvalidArgumentError(absl::StrCat(
        "page_size: must be 0..", limits.max_page_size, ", got ", page_size));
  }
  return page_size == 0 ? limits.default_page_size : page_size;
}

absl::StatusOr<scheduler::LabelSelector> SelectorFromProto(
    const google::protobuf::Map<std::string, std::string>& map,
    absl::string_view field, const Limits& limits) {
  if (static_cast<int>(map.size()) > limits.max_selector_keys) {
    return absl::InvalidArgumentError(absl::StrCat(field, ": at most ",
                                                   limits.max_selector_keys,
                                                   " keys, got ", map.size()));
  }
  auto parsed = scheduler::ParseLabelSelector(ToBtree(map));
  if (!parsed.ok()) return WithFieldPrefix(field, parsed.status());
  for (const scheduler::SelectorTerm& term : parsed->terms) {
    if (static_cast<int>(term.values.size()) > limits.max_selector_values) {
      return absl::InvalidArgumentError(absl::StrCat(
          field, "[\"", term.key, "\"]: at most ", limits.max_selector_values,
          " values in in(...), got ", term.values.size()));
    }
  }
  return parsed;
}

}  // namespace sliced::server::api
