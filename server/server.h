// SlicedServer: the daemon minus its flags. Opens the store, starts the
// coordinator, serves the gRPC services (Inventory, Placement, Telemetry,
// health, reflection) and the HTTP port: Prometheus /metrics and the web
// view (/ui, /api/v1; server/api/http_server.h).
//
// Thread-safe. Flags are parsed only in main.cc, which fills ServerOptions.
#ifndef SLICED_SERVER_SERVER_H_
#define SLICED_SERVER_SERVER_H_

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "server/core/coordinator.h"
#include "server/core/limits.h"
#include "server/core/logger.h"
#include "server/core/priority_classes.h"
#include "storage/store.h"

namespace grpc {
class ServerCredentials;
}  // namespace grpc
namespace prometheus {
class Collectable;
}  // namespace prometheus

namespace sliced::server {

struct ServerOptions {
  // gRPC address; port 0 picks a free port (see SlicedServer::port()).
  std::string listen = "127.0.0.1:50051";
  // RocksDB directory, created if missing.
  std::string data_dir = "./data";
  // The HTTP port (/metrics, the web view's /ui and /api/v1; HTTPS with
  // tls_cert/tls_key); empty disables it; port 0 picks one.
  std::string metrics_listen = "127.0.0.1:9464";
  // Lease: a node without a heartbeat for this long turns DEAD; 0 disables.
  absl::Duration heartbeat_timeout = absl::Seconds(10);
  // A group pending this long blocks later ones until placed; 0 disables.
  absl::Duration starvation_bound = absl::Minutes(5);
  // Slice requests may be carved out of larger slices when they allow it;
  // false: never (--subslicing).
  bool subslicing = true;
  // Named priorities (--priority_classes, --default_priority_class).
  PriorityClasses priority_classes;
  // Preemption (docs/preemption.md): on/off, the victims' grace period, and
  // how long a newly placed group is safe from it.
  bool preemption = true;
  absl::Duration preemption_grace = absl::Seconds(30);
  absl::Duration preemption_cooldown = absl::ZeroDuration();
  // TPU telemetry older than this is dropped from /metrics.
  absl::Duration telemetry_max_age = absl::Seconds(60);
  // libtpu log lines kept per node (a ring).
  int log_lines_per_node = 1000;
  // Transport security: PEM files. cert+key turn TLS on; client_ca also
  // requires and verifies client certificates (mutual TLS).
  std::string tls_cert;
  std::string tls_key;
  std::string tls_client_ca;
  // Bearer tokens and roles (server/api/auth.h); empty: no authentication.
  std::string auth_tokens;
  // Secret for per-node agent tokens "<node_id>.<hex HMAC-SHA256>"
  // (server/api/auth.h); turns authentication on too.
  std::string agent_token_secret_file;
  // Without TLS and tokens the daemon only listens on loopback, unless this.
  bool insecure_listen_any = false;
  Limits limits;
  // What the daemon logs on stderr (server/core/logger.h): kError failures
  // only, kInfo (default) also node and placement-group state changes,
  // kDebug also every new reason of a waiting group.
  Logger::Level log_level = Logger::Level::kInfo;
  // More series for /metrics, after the daemon's own (server/ha.h adds its
  // role and process series); none by default. Not a flag.
  std::vector<std::shared_ptr<prometheus::Collectable>> extra_metrics;
};

// The gRPC credentials the TLS options name (insecure without them).
// InvalidArgument names the flag.
absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> ServerCredentials(
    const ServerOptions& options);

class SlicedServer {
 public:
  // Opens the RocksDB store at options.data_dir and starts serving.
  // Returns FailedPrecondition for a locked, foreign or newer-schema data dir,
  // Unavailable when a port can't be bound.
  static absl::StatusOr<std::unique_ptr<SlicedServer>> Start(
      const ServerOptions& options);

  // Same, on a given store (tests use the in-memory one); data_dir unused.
  // `before_listen`, when set, runs once the state is loaded, just before
  // the ports are bound (server/ha.cc: a new leader's standby keeps its
  // ports answering until then).
  static absl::StatusOr<std::unique_ptr<SlicedServer>> StartWithStore(
      const ServerOptions& options, std::unique_ptr<storage::Store> store,
      const std::function<void()>& before_listen = nullptr);

  ~SlicedServer();

  // The bound gRPC port, and the metrics port (0 when disabled).
  int port() const;
  int metrics_port() const;
  // Nodes loaded or registered so far.
  size_t node_count() const;
  // What the start loaded from the store, and how long that took.
  const Coordinator::LoadStats& loaded() const;

  // Re-reads the auth tokens file (SIGHUP). FailedPrecondition when auth is
  // off; the file's error otherwise (the old tokens stay in force).
  absl::Status ReloadAuth();

  // Whether TLS / token authentication are on.
  bool tls() const;
  bool auth() const;

  // Stops accepting calls, ends the watch and log streams (UNAVAILABLE),
  // finishes the calls in flight, stops the writer.
  void Shutdown();

  // Leadership is gone, and etcd has not named the next leader yet
  // (server/ha.h): every new call and every queued write is answered
  // `refusal` from now on. Open streams stay open until StepDown, whose
  // refusal names the leader they are to follow.
  void Refuse(const absl::Status& refusal);

  // Leadership is gone (server/ha.h): every new call, every queued write and
  // every stream is answered `refusal` (UNAVAILABLE naming the leader,
  // api::WithLeader: nothing was done); a write being committed gets the
  // commit's answer (never OK unless committed). For 0.5 s the port goes on
  // refusing (clients that follow the leader leave); then shuts down as
  // Shutdown() does, letting the calls in flight finish on their own for up
  // to `grace` (cover the store's commit retries); only calls still running
  // after it are cancelled.
  void StepDown(const absl::Status& refusal, absl::Duration grace);

 private:
  struct Impl;
  explicit SlicedServer(std::unique_ptr<Impl> impl);
  // Checks the options and loads what they name (TLS files, tokens); touches
  // no data dir. InvalidArgument / FailedPrecondition name the flag.
  static absl::StatusOr<std::unique_ptr<Impl>> Prepare(
      const ServerOptions& options);
  // Wires the core on `store` and starts serving.
  static absl::StatusOr<std::unique_ptr<SlicedServer>> Serve(
      std::unique_ptr<Impl> impl, const ServerOptions& options,
      std::unique_ptr<storage::Store> store,
      const std::function<void()>& before_listen);
  static absl::Status Wire(Impl& impl, const ServerOptions& options,
                           std::unique_ptr<storage::Store> store);
  // Shutdown: ends the streams with `end`, then waits up to `grace`.
  void Stop(const absl::Status& end, absl::Duration grace);
  std::unique_ptr<Impl> impl_;
};

}  // namespace sliced::server

#endif  // SLICED_SERVER_SERVER_H_
