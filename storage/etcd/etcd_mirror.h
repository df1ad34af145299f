// The hot standby's copy of the store (issue 19 item 4, docs/ha.md): a
// standby keeps every record of its cluster prefix in memory, parsed, so
// that on winning the election it serves without reading etcd again.
//
// Steps, on a thread of its own between Start() and Stop():
//  1. load: read the whole prefix at one revision R (a linearizable, paged
//     Range: EtcdClient::Scan) and parse every record;
//  2. watch the prefix from R+1 (etcd's Watch, one stream) and apply each
//     event, in revision order, to the copy;
//  3. when the watched revision was compacted away (etcd cancels the watch
//     with a compact revision), go back to 1; when the stream breaks (a
//     member died, or lost its raft leader: the stream asks etcd to cancel
//     it then), open a new one from the last applied revision + 1.
// The copy is exact at `revision` (the last revision applied): etcd sends
// each revision's events whole and in order.
//
// Take(): the new leader's catch-up. Its election key was created at
// revision K (the fence). Every write of an earlier leader is a Txn fenced
// on that leader's own election key, so it committed before that key was
// deleted. Hence once the copy has applied K and holds no election key
// created before K (their deletions are in the watched prefix too), it
// holds every write any earlier leader made; nobody else writes the
// prefix. Take waits (up to a timeout) for that, hands the records over as
// a StoredState and stops the mirror (the leader has its own state; the
// copy would only double the memory). No revision is trusted from etcd's
// progress notifications: etcd 3.4 may send one ahead of events still
// queued on the stream.
//
// Thread-safety: stats() may be called from any thread; Start, Stop and
// Take from one thread at a time (the daemon's HA loop). The copy's records
// are parsed with storage/records.h; a record that does not parse makes
// Take fail (the caller reads etcd itself and reports it).
#ifndef SLICED_STORAGE_ETCD_ETCD_MIRROR_H_
#define SLICED_STORAGE_ETCD_ETCD_MIRROR_H_

#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "storage/etcd/etcd_client.h"
#include "storage/store.h"

namespace sliced::storage {

struct EtcdMirrorOptions {
  // The cluster's key prefix, e.g. "/sliced/default/"; must end with '/'.
  std::string prefix = "";
  // The election's name (EtcdElectionOptions::name), under `prefix`, e.g.
  // "/sliced/default/leader"; its keys are name + "/<lease>".
  std::string election = "";
  // Pause before re-opening a broken watch or retrying a failed load
  // (default 200 ms).
  absl::Duration retry_pause = absl::Milliseconds(200);
};

// What the mirror is doing, for /metrics (docs/ha.md).
struct EtcdMirrorStats {
  bool running = false;   // between Start() and Stop() / Take()
  bool watching = false;  // loaded, and the watch stream is open
  int64_t revision = 0;   // the etcd revision the copy is exact at
  // etcd's revision in the latest watch message (>= revision; larger while
  // the watch catches up).
  int64_t head_revision = 0;
  int64_t records = 0;         // nodes + groups + classes held
  int64_t loads = 0;           // full reads: the first, after compaction
  int64_t events = 0;          // watch events applied
  int64_t watch_restarts = 0;  // streams re-opened after breaking
};

class EtcdMirror {
 public:
  EtcdMirror(std::shared_ptr<EtcdClient> client, EtcdMirrorOptions options);
  // Stops.
  ~EtcdMirror();

  // Starts loading and watching (a fresh copy) on the mirror's thread; a
  // no-op while running.
  void Start();

  // Ends the thread (a Range page or watch message in flight is cancelled
  // or waited for, at most the client's call timeout) and drops the copy.
  // A no-op when stopped.
  void Stop();

  // For the leader whose election key was created at `fence_revision`:
  // waits until the copy holds every earlier leader's writes (see the
  // header comment), then returns it and stops. Returns DeadlineExceeded
  // when that did not happen within `timeout` (the watch is broken or far
  // behind), FailedPrecondition when not running, DataLoss when a record
  // did not parse; in each case the mirror stops too and the caller reads
  // etcd instead. The returned state has no log lines (they are never in
  // etcd).
  absl::StatusOr<StoredState> Take(int64_t fence_revision,
                                   absl::Duration timeout);

  EtcdMirrorStats stats() const;

 private:
  // Records by key, parsed.
  struct Copy {
    std::map<std::string, scheduler::Node> nodes;
    std::map<std::string, server::PlacementGroup> placement_groups;
    std::map<std::string, server::ComputeClass> compute_classes;
    uint64_t next_pg_sequence = 0;
    // The election's keys and their creation revisions.
    std::map<std::string, int64_t> election_keys;
    // The first record that did not parse (OK when none).
    absl::Status broken;
  };

  void Run();
  // Step 1: a fresh copy at one revision, installed under mu_.
  absl::Status Load();
  // Step 2 until the stream ends; returns true when the watched revision
  // was compacted (load again).
  bool Watch();
  // Applies one key's put (value non-null) or delete to `copy`.
  void Apply(Copy& copy, const std::string& key, const std::string* value,
             int64_t create_revision) const;
  bool stopping() const { return stopping_.load(); }

  const std::shared_ptr<EtcdClient> client_;
  const EtcdMirrorOptions options_;
  const std::string election_prefix_;  // election + "/"

  std::atomic<bool> stopping_{false};
  std::thread thread_;  // Start/Stop/Take callers only

  mutable absl::Mutex mu_;
  bool running_ ABSL_GUARDED_BY(mu_) = false;
  bool loaded_ ABSL_GUARDED_BY(mu_) = false;
  bool watching_ ABSL_GUARDED_BY(mu_) = false;
  Copy copy_ ABSL_GUARDED_BY(mu_);
  int64_t revision_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t head_revision_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t loads_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t events_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t watch_restarts_ ABSL_GUARDED_BY(mu_) = 0;
  grpc::ClientContext* watch_context_ ABSL_GUARDED_BY(mu_) = nullptr;
};

}  // namespace sliced::storage

#endif  // SLICED_STORAGE_ETCD_ETCD_MIRROR_H_
