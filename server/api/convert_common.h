// Wire <-> domain conversions shared by the per-concern conversion files
// (convert_nodes, convert_placement, convert_telemetry): resource maps,
// label maps, timestamps and page sizes. Pure functions; thread-safe.
#ifndef SLICED_SERVER_API_CONVERT_COMMON_H_
#define SLICED_SERVER_API_CONVERT_COMMON_H_

#include <string>

#include "absl/container/btree_map.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "google/protobuf/map.h"
#include "google/protobuf/timestamp.pb.h"
#include "scheduler/labels.h"
#include "scheduler/types.h"
#include "server/core/limits.h"

namespace sliced::server::api {

// A proto map as an ordered map (the core's input type).
template <typename V>
absl::btree_map<std::string, V> ToBtree(
    const google::protobuf::Map<std::string, V>& map) {
  return absl::btree_map<std::string, V>(map.begin(), map.end());
}

// A parsed selector as its wire map: key -> "v", "!v", "in(a,b)" or
// "!in(a,b)" (the inverse of scheduler::ParseLabelSelector).
void SelectorToProto(const scheduler::LabelSelector& selector,
                     google::protobuf::Map<std::string, std::string>* out);

// Fixed point -> wire values.
void ResourcesToProto(const scheduler::ResourceSet& resources,
                      google::protobuf::Map<std::string, double>* out);

// Timestamps. ToTimestamp keeps milliseconds (what the store keeps).
void ToTimestamp(absl::Time time, google::protobuf::Timestamp* out);
// InvalidArgument naming `field` outside Timestamp's range (years 1 to 9999,
// nanos 0 to 999999999).
absl::StatusOr<absl::Time> FromTimestamp(
    const google::protobuf::Timestamp& timestamp, absl::string_view field);

// A list request's page_size: 0 for the default; InvalidArgument naming
// the field outside 0..max.
absl::StatusOr<int> PageSizeFromProto(int32_t page_size, const Limits& limits);

// A wire selector within limits.max_selector_keys keys and
// limits.max_selector_values values in one in(...), then parsed; errors
// name `field`.
absl::StatusOr<scheduler::LabelSelector> SelectorFromProto(
    const google::protobuf::Map<std::string, std::string>& map,
    absl::string_view field, const Limits& limits);

}  // namespace sliced::server::api

#endif  // SLICED_SERVER_API_CONVERT_COMMON_H_
