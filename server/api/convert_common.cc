#include "server/api/convert_common.h"

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "google/protobuf/util/time_util.h"

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

absl::Time FromTimestamp(const google::protobuf::Timestamp& timestamp) {
  return absl::FromUnixNanos(TimeUtil::TimestampToNanoseconds(timestamp));
}

absl::StatusOr<int> PageSizeFromProto(int32_t page_size, const Limits& limits) {
  if (page_size < 0 || page_size > limits.max_page_size) {
    return absl::InvalidArgumentError(absl::StrCat(
        "page_size: must be 0..", limits.max_page_size, ", got ", page_size));
  }
  return page_size == 0 ? limits.default_page_size : page_size;
}

}  // namespace sliced::server::api
