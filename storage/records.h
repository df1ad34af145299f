// The store's own format: domain types <-> the records of
// storage/proto/sliced/storage/records.proto (schema kSchemaVersion), and the
// parsing of stored values. Pure functions; thread-safe.
#ifndef SLICED_STORAGE_RECORDS_H_
#define SLICED_STORAGE_RECORDS_H_

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "google/protobuf/message_lite.h"
#include "scheduler/labels.h"
#include "scheduler/types.h"
#include "server/core/placement_group.h"
#include "server/core/telemetry.h"
#include "sliced/storage/records.pb.h"
#include "storage/store.h"

namespace sliced::storage {

// A node's record as a message. The daemon stores SerializeNodeRecord's
// bytes instead; records_test checks that they are this message's.
NodeRecord ToRecord(const scheduler::Node& node);
// Fills `record` (cleared or new; it may live on an arena).
void ToRecord(const server::PlacementGroup& group,
              PlacementGroupRecord* record);
ComputeClassRecord ToRecord(const server::ComputeClass& compute_class);
LogRecord ToRecord(const server::LogLine& line);

// `record`'s bytes as stored: deterministic, a map field's entries in key
// order, so one record is always the same bytes and a node's labels load
// without a sort.
std::string SerializeRecord(const google::protobuf::MessageLite& record);
// SerializeRecord(ToRecord(node)), byte for byte, written straight from the
// node: no message, no map of its labels, no sort (its maps are sorted
// already). What a registration stores for each node.
std::string SerializeNodeRecord(const scheduler::Node& node);

// Each returns DataLoss naming the record when it holds an unknown enum value
// or a selector that does not parse. A node's record is read as a
// NodeRecordLoad (NodeRecord's bytes), whose strings move into the node.
absl::StatusOr<scheduler::Node> FromRecord(NodeRecordLoad& record);
absl::StatusOr<server::PlacementGroup> FromRecord(
    const PlacementGroupRecord& record);
absl::StatusOr<server::ComputeClass> FromRecord(
    const ComputeClassRecord& record);
absl::StatusOr<server::LogLine> FromRecord(const LogRecord& record);

// A parsed selector as structured terms (schema 2).
void SelectorToRecord(const scheduler::LabelSelector& selector,
                      SelectorRecord* out);

// Parses `value` as the record type of `table` and appends its domain value
// to `state`. Returns DataLoss naming the table and key when it does not
// parse.
absl::Status AddRecord(Table table, const std::string& key,
                       const std::string& value, StoredState& state);

// One stored record as read: its key within its table, and its value.
struct RawRecord {
  std::string key;
  std::string value;
};

// What AddRecord does for every record of `tables` (each table's records in
// key order), in that order, with the parsing spread over `threads` threads
// (0: one per core, at least 2; a restart parses 100k nodes and 50k
// groups). On failure, the error of the first record in that order that does
// not parse.
absl::StatusOr<StoredState> DecodeRecords(
    std::vector<std::pair<Table, std::vector<RawRecord>>> tables,
    int threads = 0);

}  // namespace sliced::storage

#endif  // SLICED_STORAGE_RECORDS_H_
