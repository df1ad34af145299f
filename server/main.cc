// The sliced daemon. Flags are parsed here and nowhere else.
#include <signal.h>

#include <cstdio>
#include <string>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/flags/usage_config.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "server/server.h"
#ifdef SLICED_WITH_ETCD
#include "server/ha.h"
#endif

ABSL_FLAG(std::string, listen, "127.0.0.1:50051",
          "gRPC listen address (host:port; port 0 picks a free port)");
ABSL_FLAG(std::string, data_dir, "./data", "RocksDB data directory");
ABSL_FLAG(std::string, metrics_listen, "127.0.0.1:9464",
          "HTTP address of Prometheus /metrics and the web view (/ui, "
          "/api/v1); HTTPS with --tls_cert (empty disables)");
ABSL_FLAG(absl::Duration, heartbeat_timeout, absl::Seconds(10),
          "a node without a heartbeat for this long turns DEAD (0 disables)");
ABSL_FLAG(absl::Duration, telemetry_max_age, absl::Seconds(60),
          "TPU telemetry older than this is dropped from /metrics");
ABSL_FLAG(int, log_lines_per_node, 1000,
          "libtpu log lines kept per node (a ring, persisted)");
ABSL_FLAG(std::string, tls_cert, "", "PEM certificate chain: turns TLS on");
ABSL_FLAG(std::string, tls_key, "", "PEM private key for --tls_cert");
ABSL_FLAG(
    std::string, tls_client_ca, "",
    "PEM CA bundle: requires and verifies client certificates (mutual TLS)");
ABSL_FLAG(
    std::string, auth_tokens, "",
    "file of '<token> <role> [<node_id>]' lines (admin, scheduler, agent, "
    "viewer); reloaded on SIGHUP");
ABSL_FLAG(std::string, agent_token_secret_file, "",
          "file holding a secret (>= 32 bytes): '<node_id>.<hex "
          "HMAC-SHA256(secret, node_id)>' is then an agent token for that "
          "node; reloaded on SIGHUP");
ABSL_FLAG(bool, insecure_listen_any, false,
          "allow a non-loopback --listen without TLS and tokens");
ABSL_FLAG(int, max_message_bytes, 16 << 20, "largest request message accepted");
ABSL_FLAG(int, max_nodes_per_batch, 1000,
          "nodes per RegisterNodes / heartbeats per Heartbeat");
ABSL_FLAG(int, max_labels_per_node, 64, "labels per node, after translation");
ABSL_FLAG(int, max_bundles_per_pg, 10000,
          "bundles per placement group (slice hosts count as bundles)");
ABSL_FLAG(
    int, max_pending, 100000,
    "placement groups the pending queue holds; more are RESOURCE_EXHAUSTED");
ABSL_FLAG(int, max_streams, 1000,
          "open WatchPlacementGroups + TailLogs streams; more are "
          "RESOURCE_EXHAUSTED");
ABSL_FLAG(int, max_watch_buffer_bytes, 4 << 20,
          "bytes of events a WatchPlacementGroups stream (or log lines a "
          "TailLogs stream) may hold for a client that reads too slowly, "
          "past the size of what it sends first (the current state), and "
          "of the changes it holds while that is built, past what is "
          "built of it; beyond, the stream ends ABORTED (\"fell behind\") "
          "and the client watches again");
ABSL_FLAG(std::string, log_level, "info",
          "what the daemon logs on stderr: error (failures only), info (also "
          "node DEAD/ALIVE/DRAINING and placement-group "
          "placed/queued/rescheduling/removed, one line each), debug (also "
          "every new reason of a waiting group)");
ABSL_FLAG(bool, subslicing, true,
          "let slice requests that allow it be placed on aligned sub-boxes "
          "of larger intact slices (sub-slices); false: whole slices of the "
          "exact shape only, whatever the request says");
ABSL_FLAG(std::string, priority_classes,
          sliced::server::PriorityClasses::kDefaultSpec,
          "named priorities a request may give as priority_class: "
          "name=value[:non-preemptible],... (a non-preemptible class's groups "
          "are never preemption victims)");
ABSL_FLAG(std::string, default_priority_class,
          sliced::server::PriorityClasses::kDefaultClass,
          "the class of a request that names no class and no priority; empty: "
          "none (priority 0, no class)");
ABSL_FLAG(bool, preemption, true,
          "let a placement group that does not fit preempt running groups of "
          "strictly lower priority (docs/preemption.md); false: it waits");
ABSL_FLAG(absl::Duration, preemption_grace, absl::Seconds(30),
          "how long a preempted group keeps its capacity after it is told "
          "(state PREEMPTING) before it is requeued or removed");
ABSL_FLAG(absl::Duration, preemption_cooldown, absl::ZeroDuration(),
          "a group placed less than this long ago is not preempted (as "
          "Slurm's PreemptExemptTime; 0, the default: no such protection)");
ABSL_FLAG(std::string, store, "rocksdb",
          "where the facts live: rocksdb (embedded, --data_dir) or etcd "
          "(high availability: a leader elected in etcd, standbys that "
          "redirect; --etcd_endpoints, docs/ha.md)");
ABSL_FLAG(std::string, etcd_endpoints, "127.0.0.1:2379",
          "--store=etcd: etcd members, host:port, comma-separated");
ABSL_FLAG(std::string, etcd_cluster, "default",
          "--store=etcd: keys live under /sliced/<cluster>/");
ABSL_FLAG(std::string, advertise, "",
          "--store=etcd: the address clients reach this daemon at, told to "
          "them by standbys (default: --listen with its bound port)");
ABSL_FLAG(absl::Duration, etcd_lease_ttl, absl::Seconds(5),
          "--store=etcd: leadership lease; a dead leader is replaced about "
          "this long after it stops renewing");
ABSL_FLAG(bool, etcd_hot_standby, true,
          "--store=etcd: while standing by, keep a copy of the cluster's "
          "records (loaded, then tailed with an etcd watch) so that a new "
          "leader serves without reading etcd again; false: read on winning");
ABSL_FLAG(int, etcd_max_txn_ops, 128,
          "--store=etcd: etcd's --max-txn-ops; a larger commit is split "
          "between operations");
ABSL_FLAG(int64_t, etcd_max_request_bytes, 1572864,
          "--store=etcd: etcd's --max-request-bytes");
ABSL_FLAG(absl::Duration, starvation_bound, absl::Minutes(5),
          "a placement group pending this long blocks later ones of the same "
          "or lower priority until it is placed (0 disables)");

namespace {

// The daemon's options from the flags; InvalidArgument names a bad flag.
absl::StatusOr<sliced::server::ServerOptions> OptionsFromFlags() {
  sliced::server::ServerOptions options;
  options.listen = absl::GetFlag(FLAGS_listen);
  options.data_dir = absl::GetFlag(FLAGS_data_dir);
  options.metrics_listen = absl::GetFlag(FLAGS_metrics_listen);
  options.heartbeat_timeout = absl::GetFlag(FLAGS_heartbeat_timeout);
  options.starvation_bound = absl::GetFlag(FLAGS_starvation_bound);
  options.subslicing = absl::GetFlag(FLAGS_subslicing);
  options.preemption = absl::GetFlag(FLAGS_preemption);
  options.preemption_grace = absl::GetFlag(FLAGS_preemption_grace);
  options.preemption_cooldown = absl::GetFlag(FLAGS_preemption_cooldown);
  {
    auto classes = sliced::server::PriorityClasses::Parse(
        absl::GetFlag(FLAGS_priority_classes),
        absl::GetFlag(FLAGS_default_priority_class));
    if (!classes.ok()) return classes.status();
    options.priority_classes = *std::move(classes);
  }
  options.telemetry_max_age = absl::GetFlag(FLAGS_telemetry_max_age);
  options.log_lines_per_node = absl::GetFlag(FLAGS_log_lines_per_node);
  options.tls_cert = absl::GetFlag(FLAGS_tls_cert);
  options.tls_key = absl::GetFlag(FLAGS_tls_key);
  options.tls_client_ca = absl::GetFlag(FLAGS_tls_client_ca);
  options.auth_tokens = absl::GetFlag(FLAGS_auth_tokens);
  options.agent_token_secret_file =
      absl::GetFlag(FLAGS_agent_token_secret_file);
  options.insecure_listen_any = absl::GetFlag(FLAGS_insecure_listen_any);
  options.limits.max_message_bytes = absl::GetFlag(FLAGS_max_message_bytes);
  options.limits.max_nodes_per_batch = absl::GetFlag(FLAGS_max_nodes_per_batch);
  options.limits.max_labels_per_node = absl::GetFlag(FLAGS_max_labels_per_node);
  options.limits.max_bundles_per_pg = absl::GetFlag(FLAGS_max_bundles_per_pg);
  options.limits.max_pending_pgs = absl::GetFlag(FLAGS_max_pending);
  options.limits.max_streams = absl::GetFlag(FLAGS_max_streams);
  options.limits.max_watch_buffer_bytes =
      absl::GetFlag(FLAGS_max_watch_buffer_bytes);
  for (const auto& [name, value] :
       {std::pair{"max_message_bytes", options.limits.max_message_bytes},
        std::pair{"max_nodes_per_batch", options.limits.max_nodes_per_batch},
        std::pair{"max_labels_per_node", options.limits.max_labels_per_node},
        std::pair{"max_bundles_per_pg", options.limits.max_bundles_per_pg},
        std::pair{"max_pending", options.limits.max_pending_pgs},
        std::pair{"max_streams", options.limits.max_streams},
        std::pair{"max_watch_buffer_bytes",
                  options.limits.max_watch_buffer_bytes}}) {
    if (value < 1) {
      return absl::InvalidArgumentError(
          absl::StrCat("--", name, " must be >= 1"));
    }
  }
  auto log_level =
      sliced::server::Logger::ParseLevel(absl::GetFlag(FLAGS_log_level));
  if (!log_level.ok()) return log_level.status();
  options.log_level = *log_level;
  for (const auto& [name, value] :
       {std::pair{"heartbeat_timeout", options.heartbeat_timeout},
        std::pair{"starvation_bound", options.starvation_bound},
        std::pair{"preemption_grace", options.preemption_grace},
        std::pair{"preemption_cooldown", options.preemption_cooldown}}) {
    if (value < absl::ZeroDuration()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "--", name, " must be >= 0, got ", absl::FormatDuration(value)));
    }
  }
  return options;
}

void PrintServing(const sliced::server::ServerOptions& options,
                  const sliced::server::SlicedServer& server) {
  std::string host = options.listen.substr(0, options.listen.rfind(':'));
  std::printf(
      "sliced: serving on %s:%d, data dir %s, %zu nodes loaded, metrics on "
      "port %d\n",
      host.c_str(), server.port(), options.data_dir.c_str(),
      server.node_count(), server.metrics_port());
  const sliced::server::Coordinator::LoadStats& loaded = server.loaded();
  std::printf(
      "sliced: loaded %zu nodes and %zu placement groups in %.2f s (store "
      "read %.2f s, state built %.2f s)\n",
      loaded.nodes, loaded.placement_groups,
      absl::ToDoubleSeconds(loaded.read + loaded.restore),
      absl::ToDoubleSeconds(loaded.read),
      absl::ToDoubleSeconds(loaded.restore));
  if (!server.tls() || !server.auth()) {
    std::printf("sliced: %s%s%s\n", server.tls() ? "" : "TLS off",
                !server.tls() && !server.auth() ? ", " : "",
                server.auth() ? "" : "no authentication (any caller is admin)");
  }
  std::fflush(stdout);
}

// Serves until SIGINT or SIGTERM; SIGHUP reloads the auth tokens.
// `Server`: SlicedServer, or HaDaemon with --store=etcd.
template <typename Server>
void ServeUntilStopped(Server& server, const sigset_t& stop_signals) {
  int signal_number = 0;
  while (true) {
    sigwait(&stop_signals, &signal_number);
    if (signal_number != SIGHUP) break;
    absl::Status reloaded = server.ReloadAuth();
    std::printf("sliced: SIGHUP: %s\n", reloaded.ok()
                                            ? "auth tokens reloaded"
                                            : reloaded.ToString().c_str());
    std::fflush(stdout);
  }
  std::printf("sliced: signal %d, shutting down\n", signal_number);
  std::fflush(stdout);
  server.Shutdown();
}

// --store=etcd: stands by or leads until SIGINT/SIGTERM (server/ha.h).
int ServeOnEtcd(const sliced::server::ServerOptions& options,
                const sigset_t& stop_signals) {
#ifdef SLICED_WITH_ETCD
  sliced::server::HaOptions ha;
  ha.etcd_endpoints = absl::GetFlag(FLAGS_etcd_endpoints);
  ha.cluster = absl::GetFlag(FLAGS_etcd_cluster);
  ha.advertise = absl::GetFlag(FLAGS_advertise);
  ha.lease_ttl = absl::GetFlag(FLAGS_etcd_lease_ttl);
  ha.max_txn_ops = absl::GetFlag(FLAGS_etcd_max_txn_ops);
  ha.max_request_bytes = absl::GetFlag(FLAGS_etcd_max_request_bytes);
  ha.hot_standby = absl::GetFlag(FLAGS_etcd_hot_standby);
  auto daemon = sliced::server::HaDaemon::Start(options, ha);
  if (!daemon.ok()) {
    std::fprintf(stderr, "sliced: %s\n", daemon.status().ToString().c_str());
    return daemon.status().code() == absl::StatusCode::kInvalidArgument ? 2
                                                                         : 1;
  }
  ServeUntilStopped(**daemon, stop_signals);
  return 0;
#else
  (void)options;
  (void)stop_signals;
  std::fprintf(stderr,
               "sliced: --store=etcd: this sliced was built without etcd "
               "(cmake -DSLICED_WITH_ETCD=ON)\n");
  return 2;
#endif
}

// --help and --helpshort list the flags of this file (Abseil's default looks
// for a file named after the program, sliced.cc, and finds none).
void ConfigureHelp() {
  absl::FlagsUsageConfig config;
  auto ours = [](absl::string_view file) {
    return absl::EndsWith(file, "server/main.cc");
  };
  config.contains_help_flags = ours;
  config.contains_helpshort_flags = ours;
  absl::SetFlagsUsageConfig(config);
  // Abseil prints "<program>: " before this text.
  absl::SetProgramUsageMessage(
      "TPU placement scheduler daemon for Ray clusters.\n"
      "Usage: sliced [--listen=127.0.0.1:50051] [--data_dir=./data] ...\n"
      "Stops on SIGINT/SIGTERM; SIGHUP reloads --auth_tokens and "
      "--agent_token_secret_file.");
}

}  // namespace

int main(int argc, char** argv) {
  ConfigureHelp();
  absl::ParseCommandLine(argc, argv);
  // Debian's Abseil is built with mutex deadlock detection on, which costs a
  // graph update on every lock of every absl::Mutex (gRPC's included). Our
  // lock order is checked by clang's thread-safety analysis instead.
  absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kIgnore);

  // Block the stop signals in every thread; main waits for them below.
  sigset_t stop_signals;
  sigemptyset(&stop_signals);
  sigaddset(&stop_signals, SIGINT);
  sigaddset(&stop_signals, SIGTERM);
  sigaddset(&stop_signals, SIGHUP);
  pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr);

  auto options = OptionsFromFlags();
  if (!options.ok()) {
    std::fprintf(stderr, "sliced: %s\n",
                 std::string(options.status().message()).c_str());
    return 2;
  }
  if (absl::GetFlag(FLAGS_store) == "etcd") {
    return ServeOnEtcd(*options, stop_signals);
  }
  if (absl::GetFlag(FLAGS_store) != "rocksdb") {
    std::fprintf(stderr, "sliced: --store must be rocksdb or etcd\n");
    return 2;
  }
  auto server = sliced::server::SlicedServer::Start(*options);
  if (!server.ok()) {
    std::fprintf(stderr, "sliced: %s\n", server.status().ToString().c_str());
    return 1;
  }
  PrintServing(*options, **server);
  ServeUntilStopped(**server, stop_signals);
  return 0;
}
