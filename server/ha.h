// High availability on etcd (issue 19, docs/ha.md): one daemon of several
// leads and serves; the others stand by.
//
// Each daemon runs this loop:
//  1. standby: serve the gRPC port with a redirect only — every call is
//     answered UNAVAILABLE "not the leader; the leader is at ADDR", ADDR
//     also in the trailing metadata key `sliced-leader`
//     (api::kLeaderMetadataKey), and health is NOT_SERVING — and the
//     metrics port with this daemon's
//     series only (its role, its copy, the process: docs/ha.md lists them;
//     the leader exports them too, beside its own);
//     keep a hot copy of the cluster's records (storage/etcd/etcd_mirror.h:
//     loaded at a revision, then tailed with a watch); and campaign in
//     etcd's election /sliced/<cluster>/leader under a lease
//     (storage/etcd/etcd_election.h);
//  2. on winning: open the etcd store fenced on the leader key's creation
//     revision, whose first Load takes the copy once it has caught up with
//     the election (every earlier leader's writes applied) — or reads etcd
//     when it has not within 2 s — meanwhile the standby's port answers
//     "elected, loading; retry" (an empty `sliced-leader`: clients wait);
//     then stop the standby's ports and serve on them as SlicedServer does;
//  3. on losing leadership (the lease lapsed, a commit failed the fence, or
//     Shutdown()): refuse new calls and queued writes at once, naming no
//     leader (SlicedServer::Refuse), then revoke the lease and ask etcd for
//     the new leader, then step down (SlicedServer::StepDown) — new calls,
//     queued writes and open streams are answered as the standby answers
//     them (UNAVAILABLE naming the new leader); a write being committed gets
//     its commit's answer, so none is acknowledged unless committed; the
//     calls in flight finish before the server stops, while the standby's
//     port already answers (it opens as soon as the server's closes) — and
//     go back to 1 (a fresh copy).
//
// Thread-safe: Shutdown() and ReloadAuth() may be called from any thread.
#ifndef SLICED_SERVER_HA_H_
#define SLICED_SERVER_HA_H_

#include <cstdint>
#include <memory>
#include <string>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "server/api/http_server.h"
#include "server/server.h"
#include "storage/etcd/etcd_election.h"
#include "storage/etcd/etcd_mirror.h"
#include "storage/etcd/etcd_store.h"

namespace sliced::server {

struct HaOptions {
  // etcd members, host:port, comma-separated (--etcd_endpoints). Required.
  std::string etcd_endpoints = "";
  // Keys live under /sliced/<cluster>/ (--etcd_cluster).
  std::string cluster = "default";
  // The address this daemon proclaims as leader, for clients to follow
  // (--advertise); default: the listen address with its bound port.
  std::string advertise = "";
  // Election lease TTL (default 5 s), kept alive every TTL/3.
  absl::Duration lease_ttl = absl::Seconds(5);
  // etcd's limits as its members are configured (--max-txn-ops,
  // --max-request-bytes); larger commits are split between operations.
  int max_txn_ops = storage::kEtcdDefaultMaxTxnOps;
  int64_t max_request_bytes = storage::kEtcdDefaultMaxRequestBytes;
  // Keep a hot copy while standing by (default true); false: a new leader
  // reads everything from etcd (the behaviour before the copy existed).
  bool hot_standby = true;
};

class HaDaemon {
 public:
  // Connects to etcd and starts the loop (standby first). Returns
  // InvalidArgument for bad options, Unavailable when the port can't be
  // bound.
  static absl::StatusOr<std::unique_ptr<HaDaemon>> Start(
      const ServerOptions& server_options, const HaOptions& options);
  ~HaDaemon();

  // Leaves: shuts the server (or the standby) down and revokes the lease, so
  // that a standby takes over at once.
  void Shutdown();

  // SIGHUP: re-reads the auth files of the serving leader;
  // FailedPrecondition on a standby.
  absl::Status ReloadAuth();

 private:
  class Redirect;
  class Collector;
  HaDaemon(const ServerOptions& server_options, const HaOptions& options,
           std::shared_ptr<storage::EtcdClient> client);
  void Loop();
  // One term as leader: returns once leadership is lost or Shutdown() was
  // called. Errors that make serving impossible end the process.
  void Lead(const storage::Leadership& leadership);
  // The standby's ports: the redirect (gRPC) and /metrics (when
  // --metrics_listen is set); those already up stay. Returns Unavailable
  // when one can't be bound (yet), InvalidArgument for bad TLS files.
  absl::Status StartStandbyPorts();
  void StopStandbyPorts();

  ServerOptions server_options_;
  HaOptions options_;
  const std::shared_ptr<storage::EtcdClient> client_;
  storage::EtcdElection election_;
  // Null without hot_standby.
  const std::shared_ptr<storage::EtcdMirror> mirror_;
  std::shared_ptr<Collector> collector_;

  absl::Mutex mu_;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::unique_ptr<SlicedServer> server_ ABSL_GUARDED_BY(mu_);
  // Loop thread only (and Start, before the loop runs).
  std::unique_ptr<Redirect> redirect_;
  std::unique_ptr<api::HttpServer> standby_http_;
  // The last term's SlicedServer::StepDown (Lead starts it, Loop joins it).
  std::thread stepping_down_;
  std::thread loop_;
};

}  // namespace sliced::server

#endif  // SLICED_SERVER_HA_H_
