// The durable store behind sliced's coordinator.
//
// A Store loads everything at start-up and commits mutations atomically: a
// Mutation is an ordered list of puts and deletes over the record tables,
// applied all-or-nothing, durable (synced) before Commit returns OK. Several
// mutations may be concatenated into one (group commit); later writes to the
// same key win.
//
// The store speaks the domain (scheduler::Node, and the placement groups,
// compute classes and log lines of server/core); how they are written is the
// store's own business: the records of storage/proto/sliced/storage/
// records.proto, mapped in storage/records.h, never API types.
//
// Implementations are thread-compatible: the coordinator is the single writer;
// Load is called before any Commit.
#ifndef SLICED_STORAGE_STORE_H_
#define SLICED_STORAGE_STORE_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/container/inlined_vector.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "scheduler/types.h"
#include "server/core/placement_group.h"
#include "server/core/telemetry.h"

namespace sliced::storage {

// On-disk schema version written by this binary. Opening data written with a
// higher version fails; lower versions are migrated on open
// (storage/migrations.h).
inline constexpr int64_t kSchemaVersion = 2;

// kCounters holds counters that must outlive the records that used them (the
// next placement-group sequence, so that a restart never hands out the id of
// a group removed before it).
enum class Table {
  kNodes,
  kPlacementGroups,
  kComputeClasses,
  kLogs,
  kCounters
};
inline constexpr int kNumTables = 5;
// kCounters' key for the next placement-group sequence (decimal).
inline constexpr absl::string_view kCounterNextPgSequence = "next_pg_sequence";

absl::string_view TableName(Table table);

// An ordered batch of writes, applied all-or-nothing.
class Mutation {
 public:
  struct Write {
    Table table;
    std::string key;
    std::string value;  // serialized record; unused for deletes
    bool is_delete = false;
  };

  void PutNode(const scheduler::Node& node);
  void DeleteNode(absl::string_view node_id);
  void PutPlacementGroup(const server::PlacementGroup& group);
  void DeletePlacementGroup(absl::string_view placement_group_id);
  void PutComputeClass(const server::ComputeClass& compute_class);
  void DeleteComputeClass(absl::string_view name);
  void PutLog(absl::string_view key, const server::LogLine& line);
  void DeleteLog(absl::string_view key);
  // The next placement-group sequence to hand out (a high-water mark).
  void PutNextPgSequence(uint64_t next);

  // Appends `other`'s writes after this one's, as a unit of its own: a
  // store that must split a large mutation (etcd's per-Txn limits) splits it
  // only between such units, so each one (one coordinator op) is applied
  // whole.
  // The second form moves the writes out of `other`, which is left empty.
  void Append(const Mutation& other);
  void Append(Mutation&& other);

  bool empty() const { return writes_.empty(); }
  size_t size() const { return writes_.size(); }
  absl::Span<const Write> writes() const { return writes_; }
  // The ends of the units, ascending; the last is size() (empty when
  // empty()). Writes added by Put*/Delete* between two Appends form a unit.
  std::vector<size_t> UnitEnds() const;

 private:
  // Closes the unit of the writes added since the last boundary, if any.
  void CloseUnit();

  // Inline for one op's few writes (a create writes its group and the
  // sequence); a commit group's spill to the heap.
  absl::InlinedVector<Write, 2> writes_;
  std::vector<size_t> unit_ends_;
};

// Everything the store holds, as loaded at start-up. Each table is sorted by
// key.
struct StoredState {
  std::vector<scheduler::Node> nodes;
  std::vector<server::PlacementGroup> placement_groups;
  std::vector<server::ComputeClass> compute_classes;
  std::vector<std::pair<std::string, server::LogLine>> logs;  // key, line
  // The stored high-water mark; 0 when none was written (data from before
  // it existed: the largest stored sequence + 1 stands in).
  uint64_t next_pg_sequence = 0;
};

class Store {
 public:
  virtual ~Store() = default;

  // Reads every record.
  // Returns DataLoss naming the table and key when a record does not parse,
  // Unavailable on I/O trouble.
  virtual absl::StatusOr<StoredState> Load() = 0;

  // Applies `mutation` atomically and durably.
  // Returns Unavailable when the write or the sync fails; then nothing of the
  // mutation is applied, unless the message says otherwise: a sync that
  // failed, or a mutation above etcd's limits sent as several Txns of whole
  // units, may have left some or all of it applied. A DeposedError (below)
  // applied nothing.
  virtual absl::Status Commit(const Mutation& mutation) = 0;

  // Whether `unit` (one coordinator op's writes) can be committed at all:
  // FailedPrecondition naming the limit when it can't (etcd: one Txn's ops
  // and bytes), so that the op fails alone, before its group's commit.
  virtual absl::Status CheckUnit(const Mutation& unit) const {
    (void)unit;
    return absl::OkStatus();
  }

  // Whether other processes may write this store too (etcd under an
  // election): then what this process loaded and committed is current only
  // while it still leads, and an answer read from it needs that confirmed —
  // by a Commit, whose fence checks it, or by Confirm().
  virtual bool shared() const { return false; }
  // For a shared store: OK while this process still leads (one round trip);
  // Unavailable once it does not, or when that can't be known. A store only
  // this process writes: OK.
  virtual absl::Status Confirm() { return absl::OkStatus(); }
};

// The error of a shared store whose process no longer leads (another
// process does) for a call that wrote nothing: Unavailable, and marked so
// that the daemon can answer it as a refusal after which nothing was done
// (docs/ha.md), which sends its clients to look for the leader.
absl::Status DeposedError(absl::string_view message);
// Whether `status` is a DeposedError (or carries its mark on).
bool IsDeposed(const absl::Status& status);

// Options for the RocksDB store.
struct RocksDbStoreOptions {
  // Directory of the database; created if missing.
  std::string path;
  // Sync the WAL before Commit returns (default true). Tests that measure
  // nothing about durability may turn it off.
  bool sync = true;
};

// Opens (creating if needed) the RocksDB store at options.path.
// Returns FailedPrecondition when another process holds the directory's lock,
// when the data was written by a newer schema, or when the directory is not a
// sliced database; Unavailable/DataLoss when it can't be read.
absl::StatusOr<std::unique_ptr<Store>> OpenRocksDbStore(
    const RocksDbStoreOptions& options);

// A store in memory, for tests (wrap it in FaultInjectingStore for faults).
class MemoryStore : public Store {
 public:
  absl::StatusOr<StoredState> Load() override;
  absl::Status Commit(const Mutation& mutation) override;

 private:
  struct Tables;
  std::shared_ptr<Tables> tables_;
};

}  // namespace sliced::storage

#endif  // SLICED_STORAGE_STORE_H_
