// The etcd store: the Store contract (storage/store.h) over an etcd cluster,
// for high availability (docs/ha.md).
//
// Layout: every record under `prefix` (default "/sliced/default/"), as
// <prefix><table>/<key> holding the same serialized storage record RocksDB
// holds; <prefix>meta/schema_version holds kSchemaVersion (written on open);
// <prefix>meta/writer holds the write token of the leader's store.
// Facts only: nodes, placement groups with their placed hosts, compute
// classes, counters. The log-line table (libtpu lines, a per-node ring that
// changes at log rate) is NOT written to etcd: the store keeps it in this
// process's memory, so Load returns it until the process exits and a new
// leader starts with none (the agents keep shipping new lines).
//
// Load reads every table at one revision (a linearizable read, paged). A
// leader's first Load may instead take the standby's copy (`mirror`,
// storage/etcd/etcd_mirror.h), which holds the same records without reading
// etcd again; when the copy has not caught up within `mirror_wait` (or
// failed), Load reads etcd as above. Later Loads (a resync after a failed
// commit) always read etcd, except on a fenced store: Unavailable at once
// (the daemon is stepping down; a new leader loads its own).
// Commit turns a Mutation into Txns, later writes to a key winning:
//  - one Txn when the mutation fits etcd's limits (max_txn_ops keys,
//    max_request_bytes); otherwise consecutive Txns split only between
//    units (Mutation::Append, one coordinator op each), in order, so a crash
//    between two leaves a prefix of whole ops; a single unit above the limits
//    is refused (FailedPrecondition naming the flags to raise) before
//    anything is sent;
//  - with a fence, each Txn is guarded by compare CREATE(fence_key) ==
//    fence_revision (the election key of this leader: storage/etcd/
//    etcd_election.h), and by compare VALUE(meta/writer) == the token this
//    store put at its last Load (each Load of a fenced store puts a new one,
//    retried until etcd confirms it, before it reads). A failed compare
//    means another daemon leads: Commit returns Unavailable and calls
//    on_fenced; nothing more is written. The token makes a Txn that was
//    sent before a Load (whose outcome etcd never confirmed) fail if it
//    arrives after that Load's read;
//  - an ambiguous failure (timeout, lost connection) is retried with the
//    same Txn until it succeeds or `retry_for` has passed (then
//    Unavailable: the outcome is unknown, so the caller must not acknowledge
//    and must re-read). Re-sending is safe: a Txn's puts and deletes are
//    idempotent, and the fence makes a deposed leader's retry fail.
//
// Thread-compatible, like every Store: one writer (the coordinator).
#ifndef SLICED_STORAGE_ETCD_ETCD_STORE_H_
#define SLICED_STORAGE_ETCD_ETCD_STORE_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "storage/etcd/etcd_client.h"
#include "storage/etcd/etcd_mirror.h"
#include "storage/store.h"

namespace sliced::storage {

// etcd's defaults: --max-txn-ops=128, --max-request-bytes=1572864.
inline constexpr int kEtcdDefaultMaxTxnOps = 128;
inline constexpr int64_t kEtcdDefaultMaxRequestBytes = 1572864;

struct EtcdStoreOptions {
  // Key prefix of this cluster's records; must end with '/'.
  std::string prefix = "/sliced/default/";
  // The fencing token: when fence_key is set, every Txn is guarded by
  // CREATE(fence_key) == fence_revision.
  std::string fence_key = "";
  int64_t fence_revision = 0;
  // Called (on the committing thread) when the fence fails.
  std::function<void(absl::string_view why)> on_fenced = nullptr;
  // etcd's limits, as the cluster is configured (--max-txn-ops,
  // --max-request-bytes); defaults are etcd's.
  int max_txn_ops = kEtcdDefaultMaxTxnOps;
  int64_t max_request_bytes = kEtcdDefaultMaxRequestBytes;
  // How long an ambiguous Txn is re-sent (default 5 s, one lease TTL).
  absl::Duration retry_for = absl::Seconds(5);
  // Compacts etcd's history (to `keep_revisions` behind the newest) once it
  // has grown by that much again; 0 never compacts. The leader's job
  // (docs/ha.md).
  int64_t keep_revisions = 10000;
  // The standby's copy, taken (and stopped) by the first Load; requires a
  // fence (it catches up to fence_revision). A Commit before the first Load
  // stops it unused. Null: Load reads etcd.
  std::shared_ptr<EtcdMirror> mirror = nullptr;
  // How long the first Load waits for the copy to catch up (default 2 s).
  absl::Duration mirror_wait = absl::Seconds(2);
  // Set by the first Load: how it loaded and how long that took ("the
  // standby's copy (watched to revision N, taken in T)", "etcd in T", or
  // "etcd (why the copy was not used) in T"). May be null; must outlive
  // the first Load.
  std::string* loaded_from = nullptr;
};

// Opens the store: checks (or writes, on an empty prefix) the schema version.
// Returns FailedPrecondition for data of another schema version, and
// Unavailable when etcd can't be reached within the client's call timeout.
absl::StatusOr<std::unique_ptr<Store>> OpenEtcdStore(
    std::shared_ptr<EtcdClient> client, const EtcdStoreOptions& options);

}  // namespace sliced::storage

#endif  // SLICED_STORAGE_ETCD_ETCD_STORE_H_
