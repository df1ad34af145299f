// The RocksDB store: one column family per table plus "meta" (schema
// version); every Commit is one WriteBatch with the WAL synced.
//
// A failed write (a full disk, an I/O error) fences the DB instance: no write
// touches it again until Recover() has run RocksDB's own recovery (Resume())
// and then closed and reopened it, because RocksDB 7.8 keeps using the WAL
// writer that saw the error when its memtables were empty, and its next append
// to that writer aborts the process. For the same reason RocksDB's info log is
// a FileLogger that tolerates write errors, and RocksDB's automatic recovery
// is off: it waits for free space of a whole write buffer (64 MiB) and would
// resume behind the store's back.
//
// Thread-compatible (the coordinator is its single writer). rocksdb::Status is
// converted to absl::Status in this file only.
#include <algorithm>
#include <array>
#include <cstdarg>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "base/status_macros.h"
#include "rocksdb/db.h"
#include "rocksdb/env.h"
#include "rocksdb/listener.h"
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
                             Table::kComputeClasses, Table::kLogs,
                             Table::kCounters};

absl::Status FromRocks(const rocksdb::Status& s, absl::string_view context) {
  if (s.ok()) return absl::OkStatus();
  std::string message = absl::StrCat(context, ": ", s.ToString());
  if (s.IsCorruption()) return absl::DataLossError(message);
  if (s.IsInvalidArgument() || s.IsNotSupported()) {
    return absl::FailedPreconditionError(message);
  }
  return absl::UnavailableError(message);
}

// RocksDB's info log ("LOG" in the data dir), written with stdio. RocksDB's
// own logger aborts on the first line after a failed write (a full disk);
// this one drops the lines it cannot write and goes on once space is back.
// Past kMaxBytes the file is moved to `path`.old (replacing the last one)
// and a new one begins, at open and while the daemon runs (RocksDB's stats
// dumps alone add a few MB a day). Thread-safe.
class FileLogger : public rocksdb::Logger {
 public:
  // Appends to `path`.
  explicit FileLogger(const std::string& path)
      : rocksdb::Logger(rocksdb::InfoLogLevel::INFO_LEVEL), path_(path) {
    std::error_code ec;
    const uintmax_t size = std::filesystem::file_size(path, ec);
    if (!ec) bytes_ = size;
    file_ = std::fopen(path.c_str(), "a");
    if (bytes_ > kMaxBytes) Rotate();
  }
  ~FileLogger() override {
    if (file_ != nullptr) std::fclose(file_);
  }

  using rocksdb::Logger::Logv;
  void Logv(const char* format, va_list ap) override {
    char line[4096];
    const std::string now = absl::FormatTime("%Y/%m/%d-%H:%M:%E6S ",
                                             absl::Now(), absl::UTCTimeZone());
    va_list copy;
    va_copy(copy, ap);
    int n = std::vsnprintf(line, sizeof(line) - 1, format, copy);
    va_end(copy);
    if (n < 0) return;
    size_t len = std::min(static_cast<size_t>(n), sizeof(line) - 2);
    line[len++] = '\n';
    std::string out = absl::StrCat(now, absl::string_view(line, len));
    absl::MutexLock lock(&mu_);
    if (bytes_ + out.size() > kMaxBytes) Rotate();
    if (file_ == nullptr) return;
    if (std::fwrite(out.data(), 1, out.size(), file_) != out.size() ||
        std::fflush(file_) != 0) {
      std::clearerr(file_);
    } else {
      bytes_ += out.size();
    }
  }

 private:
  static constexpr uintmax_t kMaxBytes = 8 << 20;

  void Rotate() ABSL_NO_THREAD_SAFETY_ANALYSIS {  // mu_ held, or constructing
    if (file_ != nullptr) std::fclose(file_);
    std::error_code ec;
    std::filesystem::rename(path_, path_ + ".old", ec);
    file_ = std::fopen(path_.c_str(), "a");
    bytes_ = 0;
  }

  const std::string path_;
  absl::Mutex mu_;
  std::FILE* file_ = nullptr;
  uintmax_t bytes_ = 0;
};

// Turns RocksDB's automatic error recovery off: the store recovers itself.
class NoAutoRecovery : public rocksdb::EventListener {
 public:
  void OnErrorRecoveryBegin(rocksdb::BackgroundErrorReason /*reason*/,
                            rocksdb::Status /*bg_error*/,
                            bool* auto_recovery) override {
    *auto_recovery = false;
  }
};

// Memtable size per table (column family).
constexpr size_t kWriteBufferBytes = 8 << 20;

// The DB options every open uses.
rocksdb::DBOptions MakeDbOptions(const std::string& path) {
  rocksdb::DBOptions db_options;
  db_options.create_if_missing = true;
  db_options.create_missing_column_families = true;
  db_options.max_background_jobs = 2;
  db_options.keep_log_file_num = 3;
  db_options.max_bgerror_resume_count = 0;
  db_options.listeners.push_back(std::make_shared<NoAutoRecovery>());
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec)) {
    db_options.info_log = std::make_shared<FileLogger>(path + "/LOG");
  }
  return db_options;
}

// Opens the database at `path` with every family of the store; handles[0] is
// default, [1] meta, [2 + table] each table.
rocksdb::Status OpenDb(const std::string& path,
                       const rocksdb::DBOptions& db_options,
                       std::unique_ptr<rocksdb::DB>* db,
                       std::vector<rocksdb::ColumnFamilyHandle*>* handles) {
  rocksdb::ColumnFamilyOptions cf_options;
  // The daemon holds every record in its own state, so a memtable only
  // buffers writes on their way to an SST: a small one is enough, and 64 MB
  // (RocksDB's default) per table would be ~0.6 KB per node at 100k nodes.
  cf_options.write_buffer_size = kWriteBufferBytes;
  std::vector<rocksdb::ColumnFamilyDescriptor> descriptors;
  descriptors.emplace_back(rocksdb::kDefaultColumnFamilyName, cf_options);
  descriptors.emplace_back(std::string(kMetaFamily), cf_options);
  for (Table table : kTables) {
    descriptors.emplace_back(std::string(TableName(table)), cf_options);
  }
  rocksdb::DB* raw = nullptr;
  rocksdb::Status s =
      rocksdb::DB::Open(db_options, path, descriptors, handles, &raw);
  if (s.ok()) db->reset(raw);
  return s;
}

class RocksDbStore : public Store {
 public:
  RocksDbStore(std::unique_ptr<rocksdb::DB> db,
               std::vector<rocksdb::ColumnFamilyHandle*> handles,
               RocksDbStoreOptions options)
      : db_(std::move(db)),
        handles_(std::move(handles)),
        options_(std::move(options)) {}

  ~RocksDbStore() override { CloseDb(); }

  // handles_[0] is default, [1] meta, [2 + table] each table.
  rocksdb::ColumnFamilyHandle* Family(Table table) const {
    return handles_[2 + static_cast<int>(table)];
  }
  rocksdb::ColumnFamilyHandle* Meta() const { return handles_[1]; }
  rocksdb::DB* db() const { return db_.get(); }

  absl::StatusOr<StoredState> Load() override {
    // After a failed write, only a reopen reads what a restart would: the
    // failed batch may be whole in the WAL (a write whose sync failed),
    // which a reopen replays, though this instance never applied it. Until
    // the store can be reopened (disk still full) it can't be read either.
    if (db_ == nullptr || failed_) {
      absl::Status recovered = Recover();
      if (!recovered.ok()) return recovered;
    }
    // A restart reads 100k nodes and 50k groups. This thread reads the nodes
    // (kTables[0], most of it), then parses them on every core; meanwhile a
    // second thread reads the other tables and parses them as they come.
    // The first error in table order wins.
    static_assert(kTables[0] == Table::kNodes);
    absl::StatusOr<StoredState> others;
    std::vector<std::pair<Table, std::vector<RawRecord>>> nodes(1);
    absl::StatusOr<StoredState> state = [&]() -> absl::StatusOr<StoredState> {
      std::jthread rest([&] {
        std::vector<std::pair<Table, std::vector<RawRecord>>> raw(
            std::size(kTables) - 1);
        for (size_t i = 1; i < std::size(kTables); ++i) {
          absl::Status read = ReadTable(i, raw[i - 1]);
          if (!read.ok()) {
            others = read;
            return;
          }
        }
        others = DecodeRecords(std::move(raw), /*threads=*/1);
      });
      RETURN_IF_ERROR(ReadTable(0, nodes[0]));
      return DecodeRecords(std::move(nodes));
    }();
    if (!state.ok()) return state;
    if (!others.ok()) return others;
    others->nodes = std::move(state->nodes);
    return others;
  }

  // Reads table kTables[i] into `out`.
  absl::Status ReadTable(size_t i,
                         std::pair<Table, std::vector<RawRecord>>& out) {
    out.first = kTables[i];
    std::unique_ptr<rocksdb::Iterator> it(
        db_->NewIterator(rocksdb::ReadOptions(), Family(out.first)));
    for (it->SeekToFirst(); it->Valid(); it->Next()) {
      out.second.push_back({it->key().ToString(), it->value().ToString()});
    }
    return FromRocks(it->status(), "reading the store");
  }

  absl::Status Commit(const Mutation& mutation) override {
    if (mutation.empty()) return absl::OkStatus();
    if (failed_) {
      absl::Status recovered = Recover();
      if (!recovered.ok()) return recovered;
    }
    rocksdb::WriteBatch batch;
    for (const Mutation::Write& w : mutation.writes()) {
      rocksdb::Status s = w.is_delete
                              ? batch.Delete(Family(w.table), w.key)
                              : batch.Put(Family(w.table), w.key, w.value);
      if (!s.ok()) return FromRocks(s, "building the write batch");
    }
    rocksdb::WriteOptions options;
    options.sync = options_.sync;
    rocksdb::Status s = db_->Write(options, &batch);
    if (!s.ok()) {
      // Whatever went wrong (disk full, I/O error), the batch is not applied
      // (RocksDB inserts into the memtable only after the WAL write and sync
      // succeed). Don't write to this instance again before Recover().
      failed_ = true;
      return absl::UnavailableError(
          absl::StrCat("committing to the store failed: ", s.ToString()));
    }
    return absl::OkStatus();
  }

 private:
  // After a failed write: RocksDB's Resume() flushes the memtables (what was
  // acknowledged) and clears its background error, then the DB is closed and
  // reopened so that writes go to a new WAL, never to the writer that failed.
  // When Resume() fails for lack of space the DB stays open, unread (Load
  // calls this too), and the next Commit or Load tries again; any other
  // Resume() failure goes straight to close and reopen.
  // Returns Unavailable while the store can't be written (disk still full,
  // reopen failed).
  absl::Status Recover() {
    if (db_ != nullptr) {
      rocksdb::Status resumed = db_->Resume();
      if (resumed.IsNoSpace()) {
        return absl::UnavailableError(
            absl::StrCat("the store failed a write and can't recover yet: ",
                         resumed.ToString()));
      }
      CloseDb();
    }
    std::vector<rocksdb::ColumnFamilyHandle*> handles;
    rocksdb::Status s =
        OpenDb(options_.path, MakeDbOptions(options_.path), &db_, &handles);
    if (!s.ok()) {
      return absl::UnavailableError(
          absl::StrCat("the store failed a write and can't be reopened yet: ",
                       s.ToString()));
    }
    handles_ = std::move(handles);
    failed_ = false;
    return absl::OkStatus();
  }

  void CloseDb() {
    if (db_ == nullptr) return;
    for (rocksdb::ColumnFamilyHandle* h : handles_) {
      db_->DestroyColumnFamilyHandle(h).PermitUncheckedError();
    }
    handles_.clear();
    db_->Close().PermitUncheckedError();
    db_.reset();
  }

  std::unique_ptr<rocksdb::DB> db_;  // null after a failed reopen
  std::vector<rocksdb::ColumnFamilyHandle*> handles_;
  const RocksDbStoreOptions options_;
  bool failed_ = false;  // a write failed; Recover() before the next one
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

// Whether the store holds no record at all (nor any meta key).
bool HoldsNothing(RocksDbStore& store) {
  std::vector<rocksdb::ColumnFamilyHandle*> families = {store.Meta()};
  for (Table table : kTables) families.push_back(store.Family(table));
  for (rocksdb::ColumnFamilyHandle* family : families) {
    std::unique_ptr<rocksdb::Iterator> it(
        store.db()->NewIterator(rocksdb::ReadOptions(), family));
    it->SeekToFirst();
    if (it->Valid() || !it->status().ok()) return false;
  }
  return true;
}

absl::Status CheckSchema(RocksDbStore& store, bool created,
                         const std::string& path) {
  std::string value;
  rocksdb::Status s =
      store.db()->Get(rocksdb::ReadOptions(), store.Meta(), kSchemaKey, &value);
  if (s.IsNotFound()) {
    // A first start stopped (kill -9, power) between creating the database
    // and writing its schema version left it empty: it is still new.
    if (!created && !HoldsNothing(store)) {
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

// Every open starts a new write-ahead log, and RocksDB 7.8 lets the older
// ones go only once a memtable flush moves its minimum log number past them
// (changed upstream later: facebook/rocksdb#11409). An open that wrote
// nothing (a daemon in a crash loop, an idle one restarted) therefore left
// its empty log behind for good, and every later open read them all. When
// more than the current log is in the directory, this rewrites the schema
// key and flushes it (one small table, which compaction merges), then has
// RocksDB scan the directory: it deletes the logs whose data is in tables,
// by its own rules (after recovery, that is every older one). A failure here
// fails the open, as a failed write in RocksDB's own open does.
absl::Status ReleaseOldLogs(RocksDbStore& store, const std::string& path) {
  int logs = 0;
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator(path, ec)) {
    if (e.path().extension() == ".log") ++logs;
  }
  if (logs <= 1) return absl::OkStatus();
  auto in_context = [&path](const rocksdb::Status& s, absl::string_view step) {
    return FromRocks(s, absl::StrCat("data dir ", path,
                                     ": releasing old write-ahead logs: ",
                                     step));
  };
  std::string value;
  rocksdb::Status s =
      store.db()->Get(rocksdb::ReadOptions(), store.Meta(), kSchemaKey, &value);
  if (!s.ok()) return in_context(s, "reading the schema version");
  rocksdb::WriteOptions sync;
  sync.sync = true;
  s = store.db()->Put(sync, store.Meta(), kSchemaKey, value);
  if (!s.ok()) return in_context(s, "rewriting the schema version");
  // The flush moves the minimum log number past the old logs.
  s = store.db()->Flush(rocksdb::FlushOptions(), store.Meta());
  if (!s.ok()) return in_context(s, "flushing");
  // The empty logs are not among those RocksDB tracks after recovery: only
  // a full scan of the directory, which re-enabling deletions runs, finds
  // them. (Either step alone leaves them.)
  s = store.db()->DisableFileDeletions();
  if (s.ok()) s = store.db()->EnableFileDeletions(/*force=*/true);
  return in_context(s, "rescanning the directory");
}

// Whether a directory without CURRENT holds only what a first open leaves
// before it writes CURRENT (the info log, the lock, a manifest, options; the
// first write-ahead log comes after CURRENT): such an open failed (ENOSPC)
// or was killed, and nothing was ever stored. Anything else (a table, a
// write-ahead log, a file of someone else's) is not ours to take over.
bool OnlyAnUnfinishedFirstOpen(const std::string& path) {
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator(path, ec)) {
    const std::string name = e.path().filename().string();
    const bool leftover =
        name == "LOG" || name == "LOCK" || name == "IDENTITY" ||
        absl::StartsWith(name, "LOG.old.") ||
        absl::StartsWith(name, "MANIFEST-") ||
        absl::StartsWith(name, "OPTIONS-") || absl::EndsWith(name, ".dbtmp");
    if (!leftover || ec) return false;
  }
  return !ec;
}

}  // namespace

absl::StatusOr<std::unique_ptr<Store>> OpenRocksDbStore(
    const RocksDbStoreOptions& options) {
  namespace fs = std::filesystem;
  std::error_code ec;
  const bool exists = fs::exists(fs::path(options.path) / "CURRENT", ec);
  if (!exists && fs::exists(options.path, ec) &&
      !fs::is_empty(options.path, ec) &&
      !OnlyAnUnfinishedFirstOpen(options.path)) {
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

  rocksdb::DBOptions db_options = MakeDbOptions(options.path);
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

  std::unique_ptr<rocksdb::DB> db;
  std::vector<rocksdb::ColumnFamilyHandle*> handles;
  rocksdb::Status s = OpenDb(options.path, db_options, &db, &handles);
  if (!s.ok()) {
    if (s.IsIOError() && absl::StrContains(s.ToString(), "lock")) {
      return absl::FailedPreconditionError(absl::StrCat(
          "data dir ", options.path,
          " is locked: another sliced is running on it (", s.ToString(), ")"));
    }
    return FromRocks(s, absl::StrCat("opening data dir ", options.path));
  }
  auto store = std::make_unique<RocksDbStore>(std::move(db), std::move(handles),
                                              options);
  absl::Status schema = CheckSchema(*store, !exists, options.path);
  if (!schema.ok()) return schema;
  RETURN_IF_ERROR(ReleaseOldLogs(*store, options.path));
  return std::unique_ptr<Store>(std::move(store));
}

}  // namespace sliced::storage
