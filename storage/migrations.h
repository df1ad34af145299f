// Schema migrations: rewriting records written by an older sliced into the
// current format (kSchemaVersion). Store implementations call this on open,
// before Load, and commit the rewritten records together with the new
// version in one atomic, synced write.
//
//   1 -> 2  selectors from maps of Ray expressions to structured terms;
//           placement groups gain requested_bundles (the version-1 bundle
//           list without node ids: for a group placed on a fallback that is
//           the fallback's list, which is what version 1 re-placed too);
//           enum numbers are unchanged (version 1's sliced.v1 numbers are the
//           storage enums' numbers).
//
// Pure functions; thread-safe.
#ifndef SLICED_STORAGE_MIGRATIONS_H_
#define SLICED_STORAGE_MIGRATIONS_H_

#include <cstdint>
#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "storage/store.h"

namespace sliced::storage {

// The value of record `key` in `table` written at schema `from_version`, as
// kSchemaVersion writes it; nullopt when it needs no change.
// Returns DataLoss naming the record when it does not parse, and
// FailedPrecondition for a version this binary cannot migrate.
// REQUIRES: 1 <= from_version <= kSchemaVersion.
absl::StatusOr<std::optional<std::string>> UpgradeRecord(
    int64_t from_version, Table table, const std::string& key,
    const std::string& value);

}  // namespace sliced::storage

#endif  // SLICED_STORAGE_MIGRATIONS_H_
