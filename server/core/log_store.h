// libtpu log lines per node: a bounded ring per node, persisted in the
// store's "logs" table (key = node id, '\0', 16 hex digits of a per-node
// sequence) through the coordinator, mirrored in memory for TailLogs, and
// fanned out to followers.
//
// Thread-safe. Stage() runs inside a coordinator op (writer thread);
// Install() after that op's commit; Restore() from the coordinator's
// Machine (start-up, resync).
#ifndef SLICED_SERVER_CORE_LOG_STORE_H_
#define SLICED_SERVER_CORE_LOG_STORE_H_

#include <cstdint>
#include <deque>
#include <functional>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/btree_map.h"
#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "server/core/held_until_sent.h"
#include "server/core/telemetry.h"
#include "server/core/txn.h"
#include "storage/store.h"

namespace sliced::server {

class LogStore {
 public:
  // Keeps at most `lines_per_node` lines per node (> 0). A follower may
  // have at most `max_held_bytes` of lines held for it while Read() emits
  // its stored lines (--max_watch_buffer_bytes).
  explicit LogStore(int lines_per_node, size_t max_held_bytes = 4 << 20)
      : lines_per_node_(lines_per_node), max_held_bytes_(max_held_bytes) {}

  // Replaces the rings with the stored lines (sorted by key) of the nodes
  // `known` says exist; appends to `repair` the deletes of the other
  // nodes' lines, of lines beyond the ring bound and of keys that are not
  // ours, and moves of kept lines that leave a gap in a ring's keys. Ends
  // every follower (Follower::End).
  void Restore(const std::vector<std::pair<std::string, LogLine>>& stored,
               const std::function<bool(const std::string&)>& known,
               storage::Mutation& repair);

  // Writes `lines` of `node_id` into `txn` (puts, and deletes of what falls
  // out of the ring) and returns them with node id and time filled in.
  std::vector<LogLine> Stage(Txn& txn, const std::string& node_id,
                             std::vector<LogLine> lines);
  // After the commit: the lines join the ring and go to followers.
  void Install(const std::string& node_id, std::vector<LogLine> lines);

  // Deletes every line of a removed node from `txn` and empties its ring;
  // Forget() it after the commit unless it was registered again.
  void StageForget(Txn& txn, const std::string& node_id);
  void Forget(const std::string& node_id);

  using Filter = std::function<bool(const LogLine&)>;

  class Follower {
   public:
    virtual ~Follower() = default;
    // Whether it takes `line` (Deliver then gets it).
    virtual bool Wants(const LogLine& /*line*/) const { return true; }
    virtual void Deliver(const LogLine& line) = 0;
    // The rings were replaced (Restore after a failed commit): lines may be
    // missing from what it was given, or come twice. It ends (ABORTED).
    virtual void End(const absl::Status& why) = 0;
  };
  // Emits the stored lines of `node_ids` that match `filter`, oldest first
  // (only the newest `last` of them), and, when `follower` is not null,
  // registers it for every later line, so that no line is missed, doubled
  // or reordered. Only the filter and the copy of the emitted lines run
  // under the lock (O(lines), and what AppendLogs commits wait for); they
  // are sorted and emitted after it is released, the lines the follower
  // wants installed meanwhile held for it (past max_held_bytes it ends
  // ABORTED) and delivered after them.
  void Read(const std::vector<std::string>& node_ids, const Filter& filter,
            const std::function<void(const LogLine&)>& emit, Follower* follower,
            size_t last = std::numeric_limits<size_t>::max());
  void Unfollow(Follower* follower);

 private:
  struct Ring {
    uint64_t next_seq = 0;      // writer side
    uint64_t oldest_seq = 0;    // writer side: oldest key still on disk
    std::deque<LogLine> lines;  // installed, oldest first
  };
  static std::string Key(const std::string& node_id, uint64_t seq);
  // Delivers `line` to `follower`, or holds it while the follower's Read()
  // emits the stored lines (ends it past max_held_bytes_).
  void DeliverOrHold(Follower& follower, const LogLine& line)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const int lines_per_node_;
  const size_t max_held_bytes_;
  mutable absl::Mutex mu_;
  absl::btree_map<std::string, Ring> rings_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_set<Follower*> followers_ ABSL_GUARDED_BY(mu_);
  // Followers whose Read() is emitting the stored lines: the lines they
  // want installed since (bytes counted by their text).
  absl::flat_hash_map<Follower*, HeldUntilSent<LogLine>> held_
      ABSL_GUARDED_BY(mu_);
};

}  // namespace sliced::server

#endif  // SLICED_SERVER_CORE_LOG_STORE_H_
