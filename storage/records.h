// Conversions between domain types (scheduler/) and on-disk records, and the
// parsing of stored values. Pure functions; thread-safe.
#ifndef SLICED_STORAGE_RECORDS_H_
#define SLICED_STORAGE_RECORDS_H_

#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "scheduler/types.h"
#include "sliced/storage/records.pb.h"
#include "storage/store.h"

namespace sliced::storage {

NodeRecord ToRecord(const scheduler::Node& node);

// Returns DataLoss when the record holds an unknown state.
absl::StatusOr<scheduler::Node> FromRecord(const NodeRecord& record);

// Parses `value` as the record type of `table` and appends it to `state`.
// Returns DataLoss naming the table and key when it does not parse.
absl::Status AddRecord(Table table, const std::string& key,
                       const std::string& value, StoredState& state);

}  // namespace sliced::storage

#endif  // SLICED_STORAGE_RECORDS_H_
