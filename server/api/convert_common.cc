#include "server/api/convert_common.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "google/protobuf/util/time_util.h"

namespace sliced::server::api {

using google::protobuf::util::TimeUtil;

namespace {

std::string TermExpression(const scheduler::SelectorTerm& t) {
  const std::string first = t.values.empty() ? "" : t.values[0];
  switch (t.op) {
    case scheduler::SelectorOp::kEquals:
      return first;
    case scheduler::SelectorOp::kNotEquals:
      return absl::StrCat("!", first);
    case scheduler::SelectorOp::kIn:
      return absl::StrCat("in(", absl::StrJoin(t.values, ","), ")");
    case scheduler::SelectorOp::kNotIn:
      return absl::StrCat("!in(", absl::StrJoin(t.values, ","), ")");
  }
  return "";
}

}  // namespace

void SelectorToProto(const scheduler::LabelSelector& selector,
                     google::protobuf::Map<std::string, std::string>* out) {
  for (const scheduler::SelectorTerm& t : selector.terms) {
    (*out)[t.key] = TermExpression(t);
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

}  // namespace sliced::server::api
