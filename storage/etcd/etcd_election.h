// Leader election on etcd (etcd's v3 election API, v3electionpb): which of
// several sliced daemons on one cluster prefix serves, and the fencing token
// its store writes under (docs/ha.md).
//
// Campaign() grants a lease (TTL default 5 s), keeps it alive every TTL/3 on
// a thread of its own, and campaigns with the daemon's advertised address as
// the value; it returns once this process leads, with the leader key and its
// creation revision (EtcdStoreOptions::fence_key / fence_revision). If the
// lease can't be renewed for a whole TTL (counted from when the last renewal
// that etcd answered was sent, so it ends here before etcd lets the lease
// go, a renewal in flight or not), or etcd says it has expired, or
// the leader key was deleted (read at every renewal, so a leader that does
// not write notices within TTL/3), or the store's fence failed (MarkLost),
// leadership is lost: AwaitLost() returns why. A process that was paused
// past its TTL therefore wakes up deposed, and its first commit fails the
// fence before it notices. A lease lost while Campaign waits ends that
// campaign (etcd's would go on, and be won on a dead key): Campaign starts
// over on a new lease.
//
// Thread-safe. Campaign and AwaitLost block; Stop() ends both from another
// thread.
#ifndef SLICED_STORAGE_ETCD_ETCD_ELECTION_H_
#define SLICED_STORAGE_ETCD_ETCD_ELECTION_H_

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "storage/etcd/etcd_client.h"

namespace sliced::storage {

struct EtcdElectionOptions {
  // The election's name (a key prefix), e.g. "/sliced/default/leader".
  std::string name = "";
  // What the leader proclaims: its gRPC address, for followers to redirect.
  std::string value = "";
  // Lease TTL (default 5 s; etcd counts whole seconds). Renewed every TTL/3.
  absl::Duration ttl = absl::Seconds(5);
};

struct Leadership {
  std::string key;       // the leader key; deleted when leadership ends
  int64_t revision = 0;  // its creation revision: the fencing token
  int64_t lease = 0;
};

class EtcdElection {
 public:
  EtcdElection(std::shared_ptr<EtcdClient> client, EtcdElectionOptions options);
  // Stops, revoking the lease (a standby takes over at once).
  ~EtcdElection();

  // Blocks until this process leads. Returns Cancelled after Stop().
  // REQUIRES: not leading (first call, or AwaitLost returned).
  absl::StatusOr<Leadership> Campaign();

  // The current leader's proclaimed value; NotFound when there is none.
  absl::StatusOr<std::string> LeaderValue();

  // Replaces what the next Campaign proclaims (EtcdElectionOptions::value).
  void set_value(absl::string_view value);
  // What this process proclaims.
  std::string value();

  // Leadership is gone (the store's fence failed): wakes AwaitLost.
  void MarkLost(absl::string_view why);

  // Blocks while this process leads; returns why it stopped ("" after
  // Stop()). Then the lease is revoked (best effort): WaitLost(), then
  // EndTerm().
  std::string AwaitLost();

  // AwaitLost in two steps, for a leader that must stop serving before it
  // talks to etcd: WaitLost() blocks while this process leads and returns
  // why it stopped ("" after Stop()), still renewing the lease; EndTerm()
  // then stops renewing and revokes it (best effort: when etcd can't be
  // reached it waits for the renewal and the revocation to time out, up to
  // TTL/3 each). Only on the thread that campaigns, WaitLost() first.
  std::string WaitLost();
  void EndTerm();

  // Ends Campaign and AwaitLost (which then stop renewing and revoke the
  // lease). May be called from any thread.
  void Stop();

 private:
  using SteadyTime = std::chrono::steady_clock::time_point;
  // Renews `lease`, granted by a request sent at `granted`, every TTL/3
  // until leadership is lost or Stop().
  void KeepAliveLoop(int64_t lease, SteadyTime granted);
  // Cancels the campaign in flight, if any.
  void CancelCampaign() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // While leading: why the election key is not ours any more (deleted, or
  // deleted and made again), read from etcd; "" while it is, or when etcd
  // does not answer.
  std::string KeyGone() ABSL_LOCKS_EXCLUDED(mu_);
  // Joins the keep-alive thread and revokes its lease (or leaves it to the
  // next Campaign, when etcd can't be reached). Only on the thread that
  // campaigns (Campaign, AwaitLost, the destructor).
  void StopKeepAlive();
  // Revokes `lease`; false when etcd could not be reached.
  bool Revoke(int64_t lease);

  const std::shared_ptr<EtcdClient> client_;
  const EtcdElectionOptions options_;

  absl::Mutex mu_;
  bool stopped_ ABSL_GUARDED_BY(mu_) = false;
  std::string value_ ABSL_GUARDED_BY(mu_);
  int64_t lease_ ABSL_GUARDED_BY(mu_) = 0;
  // A lost term's lease that etcd could not be asked to revoke (0: none).
  int64_t unrevoked_ ABSL_GUARDED_BY(mu_) = 0;
  // The key won by the last Campaign; empty while campaigning.
  Leadership leading_ ABSL_GUARDED_BY(mu_);
  // Why the current lease's leadership (or campaign) ended; empty while
  // it holds.
  std::string lost_ ABSL_GUARDED_BY(mu_);
  grpc::ClientContext* campaign_context_ ABSL_GUARDED_BY(mu_) = nullptr;
  std::thread keep_alive_;
};

}  // namespace sliced::storage

#endif  // SLICED_STORAGE_ETCD_ETCD_ELECTION_H_
