// The RocksDB store: one column family per table plus "meta" (schema
// version); every Commit is one WriteBatch with the WAL synced.
//
// Thread-compatible (the coordinator is its single writer). rocksdb::Status is
// converted to absl::Status in this file only.
#include <cstdio>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "rocksdb/db.h"
#include "rocksdb/options.h"
#include "rocksdb/write_batch.h"
#include "storage/migrations.h"
#include "storage/records.h"
#include "storage/store.h"

namespace sliced::storage {
namespace {

constexpr absl::string_view kMetaFamily = "meta";
constexpr char kSchemaKey[] = "schema_version";
constexpr Table kTables[] = {Table::kNodes, Table::kPlacementGroups,
                             Table::kComputeClasses, Table::kLogs};

absl::Status FromRocks(const rocksdb::Status& s, absl::string_view context) {
  if (s.ok()) return absl::OkStatus();
  std::string message = absl::StrCat(context, ": ", s.ToString());
  if (s.IsCorruption()) return absl::DataLossError(message);
  if (s.IsInvalidArgument() || s.IsNotSupported()) {
    return absl::FailedPreconditionError(message);
  }
  return absl::UnavailableError(message);
}

class RocksDbStore : public Store {
 public:
  RocksDbStore(std::unique_ptr<rocksdb::DB> db,
               std::vector<rocksdb::ColumnFamilyHandle*> handles, bool sync)
      : db_(std::move(db)), handles_(std::move(handles)), sync_(sync) {}

  ~RocksDbStore() override {
    for (rocksdb::ColumnFamilyHandle* h : handles_) {
      db_->DestroyColumnFamilyHandle(h).PermitUncheckedError();
    }
    db_->Close().PermitUncheckedError();
  }

  // handles_[0] is default, [1] meta, [2 + table] each table.
  rocksdb::ColumnFamilyHandle* Family(Table table) const {
    return handles_[2 + static_cast<int>(table)];
  }
  rocksdb::ColumnFamilyHandle* Meta() const { return handles_[1]; }
  rocksdb::DB* db() const { return db_.get(); }

  absl::StatusOr<StoredState> Load() override {
    StoredState state;
    for (Table table : kTables) {
      std::unique_ptr<rocksdb::Iterator> it(
          db_->NewIterator(rocksdb::ReadOptions(), Family(table)));
      for (it->SeekToFirst(); it->Valid(); it->Next()) {
        absl::Status added = AddRecord(table, it->key().ToString(),
                                       it->value().ToString(), state);
        if (!added.ok()) return added;
      }
      absl::Status s = FromRocks(it->status(), "reading the store");
      if (!s.ok()) return s;
    }
    return state;
  }

  absl::Status Commit(const Mutation& mutation) override {
    if (mutation.empty()) return absl::OkStatus();
    rocksdb::WriteBatch batch;
    for (const Mutation::Write& w : mutation.writes()) {
      rocksdb::Status s = w.is_delete
                              ? batch.Delete(Family(w.table), w.key)
                              : batch.Put(Family(w.table), w.key, w.value);
      if (!s.ok()) return FromRocks(s, "building the write batch");
    }
    rocksdb::WriteOptions options;
    options.sync = sync_;
    rocksdb::Status s = db_->Write(options, &batch);
    if (!s.ok()) {
      // Whatever went wrong (disk full, I/O error), the batch is not applied.
      return absl::UnavailableError(
          absl::StrCat("committing to the store failed: ", s.ToString()));
    }
    return absl::OkStatus();
  }

 private:
  std::unique_ptr<rocksdb::DB> db_;
  std::vector<rocksdb::ColumnFamilyHandle*> handles_;
  bool sync_;
};

// Rewrites every record written at schema `from` into the current format,
// in one synced batch that also records the new version: a crash leaves
// either the old data and version or the new ones.
absl::Status Migrate(RocksDbStore& store, int64_t from,
                     const std::string& path) {
  rocksdb::WriteBatch batch;
  for (Table table : kTables) {
    std::unique_ptr<rocksdb::Iterator> it(
        store.db()->NewIterator(rocksdb::ReadOptions(), store.Family(table)));
    for (it->SeekToFirst(); it->Valid(); it->Next()) {
      const std::string key = it->key().ToString();
      absl::StatusOr<std::optional<std::string>> value =
          UpgradeRecord(from, table, key, it->value().ToString());
      if (!value.ok()) return value.status();
      if (*value) {
        rocksdb::Status s = batch.Put(store.Family(table), key, **value);
        if (!s.ok()) return FromRocks(s, "building the migration batch");
      }
    }
    absl::Status s = FromRocks(it->status(), "reading the store to migrate");
    if (!s.ok()) return s;
  }
  rocksdb::Status s =
      batch.Put(store.Meta(), kSchemaKey, std::to_string(kSchemaVersion));
  if (!s.ok()) return FromRocks(s, "building the migration batch");
  rocksdb::WriteOptions options;
  options.sync = true;
  std::fprintf(stderr,
               "sliced: migrating data dir %s from schema %lld to %lld\n",
               path.c_str(), static_cast<long long>(from),
               static_cast<long long>(kSchemaVersion));
  return FromRocks(store.db()->Write(options, &batch),
                   "writing the migrated records");
}

absl::Status CheckSchema(RocksDbStore& store, bool created,
                         const std::string& path) {
  std::string value;
  rocksdb::Status s =
      store.db()->Get(rocksdb::ReadOptions(), store.Meta(), kSchemaKey, &value);
  if (s.IsNotFound()) {
    if (!created) {
      return absl::FailedPreconditionError(absl::StrCat(
          "data dir ", path,
          " holds a RocksDB database without a sliced schema version; "
          "refusing to use it"));
    }
    rocksdb::WriteOptions options;
    options.sync = true;
    return FromRocks(store.db()->Put(options, store.Meta(), kSchemaKey,
                                     std::to_string(kSchemaVersion)),
                     "writing the schema version");
  }
  if (!s.ok()) return FromRocks(s, "reading the schema version");
  int64_t version = 0;
  if (!absl::SimpleAtoi(value, &version)) {
    return absl::DataLossError(absl::StrCat(
        "data dir ", path, ": unreadable schema version '", value, "'"));
  }
  if (version > kSchemaVersion) {
    return absl::FailedPreconditionError(absl::StrCat(
        "data dir ", path, " was written with schema version ", version,
        " by a newer sliced; this binary reads up to version ",
        kSchemaVersion));
  }
  if (version < 1) {
    return absl::DataLossError(
        absl::StrCat("data dir ", path, ": invalid schema version ", version));
  }
  if (version < kSchemaVersion) return Migrate(store, version, path);
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::unique_ptr<Store>> OpenRocksDbStore(
    const RocksDbStoreOptions& options) {
  namespace fs = std::filesystem;
  std::error_code ec;
  const bool exists = fs::exists(fs::path(options.path) / "CURRENT", ec);
  if (!exists && fs::exists(options.path, ec) &&
      !fs::is_empty(options.path, ec)) {
    return absl::FailedPreconditionError(absl::StrCat(
        "data dir ", options.path,
        " is not empty and holds no sliced database; pick an empty or new "
        "directory"));
  }
  fs::create_directories(options.path, ec);
  if (ec) {
    return absl::UnavailableError(absl::StrCat(
        "cannot create data dir ", options.path, ": ", ec.message()));
  }

  rocksdb::DBOptions db_options;
  db_options.create_if_missing = true;
  db_options.create_missing_column_families = true;
  db_options.max_background_jobs = 2;
  db_options.keep_log_file_num = 3;
  if (exists) {
    // Every family must already be there; a missing one means a foreign or
    // damaged database, which we refuse rather than silently extend.
    std::vector<std::string> families;
    rocksdb::Status s =
        rocksdb::DB::ListColumnFamilies(db_options, options.path, &families);
    if (!s.ok()) {
      return absl::FailedPreconditionError(absl::StrCat(
          "data dir ", options.path, " is unreadable: ", s.ToString()));
    }
    if (std::find(families.begin(), families.end(), std::string(kMetaFamily)) ==
        families.end()) {
      return absl::FailedPreconditionError(absl::StrCat(
          "data dir ", options.path,
          " holds a RocksDB database that is not sliced's (no meta column "
          "family); refusing to use it"));
    }
  }

  rocksdb::ColumnFamilyOptions cf_options;
  std::vector<rocksdb::ColumnFamilyDescriptor> descriptors;
  descriptors.emplace_back(rocksdb::kDefaultColumnFamilyName, cf_options);
  descriptors.emplace_back(std::string(kMetaFamily), cf_options);
  for (Table table : kTables) {
    descriptors.emplace_back(std::string(TableName(table)), cf_options);
  }
  std::vector<rocksdb::ColumnFamilyHandle*> handles;
  rocksdb::DB* raw = nullptr;
  rocksdb::Status s =
      rocksdb::DB::Open(db_options, options.path, descriptors, &handles, &raw);
  if (!s.ok()) {
    if (s.IsIOError() && absl::StrContains(s.ToString(), "lock")) {
      return absl::FailedPreconditionError(absl::StrCat(
          "data dir ", options.path,
          " is locked: another sliced is running on it (", s.ToString(), ")"));
    }
    return FromRocks(s, absl::StrCat("opening data dir ", options.path));
  }
  auto store = std::make_unique<RocksDbStore>(std::unique_ptr<rocksdb::DB>(raw),
                                              std::move(handles), options.sync);
  absl::Status schema = CheckSchema(*store, !exists, options.path);
  if (!schema.ok()) return schema;
  return std::unique_ptr<Store>(std::move(store));
}

}  // namespace sliced::storage
