// Node leases: when each node last heartbeat. In memory only (a restart
// gives every node a fresh lease), and outside the cluster state, so that a
// heartbeat that only renews a lease takes neither the writer thread nor the
// cluster lock (issue 17, item 4).
//
// Thread-safe: sharded by node id, one mutex per shard.
#ifndef SLICED_SERVER_CORE_LEASES_H_
#define SLICED_SERVER_CORE_LEASES_H_

#include <array>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace sliced::server {

class Leases {
 public:
  // A node never renewed counts as renewed at `epoch` (the daemon's start).
  explicit Leases(absl::Time epoch) : epoch_(epoch) {}

  // Makes room for about `nodes` leases (before seeding a loaded inventory).
  void Reserve(size_t nodes);
  // Records a heartbeat of `node_id` at `at` (a later one is kept).
  void Renew(absl::string_view node_id, absl::Time at);
  // When `node_id` last heartbeat: the epoch if never.
  absl::Time Last(absl::string_view node_id) const;
  // Forgets a removed node.
  void Forget(absl::string_view node_id);
  // Forgets `node_id` only if its last heartbeat is before `deadline`: a
  // lease check that found no such node forgets its stale lease, not one a
  // registration renewed meanwhile.
  void ForgetIfStale(absl::string_view node_id, absl::Time deadline);
  // The nodes renewed (or recorded at the epoch) whose last heartbeat is
  // before `deadline`, in no order. Takes one shard lock at a time, never
  // all: a lease check does not hold up renewals (nor the cluster lock).
  std::vector<std::string> Stale(absl::Time deadline) const;

 private:
  static constexpr int kShards = 16;
  struct Shard {
    mutable absl::Mutex mu;
    absl::flat_hash_map<std::string, absl::Time> last ABSL_GUARDED_BY(mu);
  };
  Shard& ShardOf(absl::string_view node_id) const;

  const absl::Time epoch_;
  mutable std::array<Shard, kShards> shards_;
};

}  // namespace sliced::server

#endif  // SLICED_SERVER_CORE_LEASES_H_
