#include "server/server.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "base/quote.h"
#include "base/status_macros.h"
#include "grpc/health/v1/health.pb.h"
#include "grpcpp/ext/proto_server_reflection_plugin.h"
#include "grpcpp/health_check_service_interface.h"
#include "grpcpp/security/server_credentials.h"
#include "grpcpp/server.h"
#include "grpcpp/server_builder.h"
#include "server/api/auth.h"
#include "server/api/gate.h"
#include "server/api/http_server.h"
#include "server/api/inventory_service.h"
#include "server/api/metrics.h"
#include "server/api/placement_service.h"
#include "server/api/stream_reactor.h"
#include "server/api/telemetry_service.h"
#include "server/api/web_api.h"
#include "server/core/cluster.h"
#include "server/core/coordinator.h"
#include "server/core/log_store.h"
#include "server/core/node_manager.h"
#include "server/core/placement_manager.h"
#include "server/core/telemetry_manager.h"
#include "server/core/telemetry_store.h"

namespace sliced::server {

namespace {

absl::StatusOr<std::string> ReadFile(const std::string& path,
                                     absl::string_view flag) {
  std::ifstream in(path);
  if (!in) {
    return absl::InvalidArgumentError(
        absl::StrCat("--", flag, ": can't read ", Quote(path)));
  }
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

}  // namespace

absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> ServerCredentials(
    const ServerOptions& options) {
  if (options.tls_cert.empty() != options.tls_key.empty()) {
    return absl::InvalidArgumentError(
        "--tls_cert and --tls_key: give both or neither");
  }
  if (options.tls_cert.empty()) {
    if (!options.tls_client_ca.empty()) {
      return absl::InvalidArgumentError(
          "--tls_client_ca: mutual TLS needs --tls_cert and --tls_key too");
    }
    return grpc::InsecureServerCredentials();
  }
  grpc::SslServerCredentialsOptions ssl;
  grpc::SslServerCredentialsOptions::PemKeyCertPair pair;
  ASSIGN_OR_RETURN(pair.private_key, ReadFile(options.tls_key, "tls_key"));
  ASSIGN_OR_RETURN(pair.cert_chain, ReadFile(options.tls_cert, "tls_cert"));
  ssl.pem_key_cert_pairs.push_back(std::move(pair));
  if (!options.tls_client_ca.empty()) {
    ASSIGN_OR_RETURN(ssl.pem_root_certs,
                     ReadFile(options.tls_client_ca, "tls_client_ca"));
    ssl.client_certificate_request =
        GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY;
  }
  return grpc::SslServerCredentials(ssl);
}

namespace {

// True for 127.0.0.0/8, ::1 and localhost listen addresses.
bool IsLoopback(const std::string& listen) {
  std::string host = listen.substr(0, listen.rfind(':'));
  if (absl::StartsWith(host, "[") && absl::EndsWith(host, "]")) {
    host = host.substr(1, host.size() - 2);
  }
  return host == "localhost" || host == "::1" || absl::StartsWith(host, "127.");
}

// How long a stepping-down leader refuses calls before its gRPC server
// stops (SlicedServer::StepDown).
constexpr absl::Duration kStepDownDrain = absl::Milliseconds(500);

}  // namespace

// Construction order is wiring order. Teardown: Shutdown() stops the gRPC
// server and the HTTP port, then StopCore() stops the lease thread and the
// writer; the managers and the state they write go only after that.
struct SlicedServer::Impl {
  explicit Impl(const ServerOptions& options)
      : log(options.log_level),
        telemetry(options.telemetry_max_age),
        logs(options.log_lines_per_node, options.limits.max_watch_buffer_bytes),
        streams(options.limits.max_streams) {}
  // Also on a start that fails after Wire (e.g. the port is taken).
  ~Impl() { StopCore(); }

  // Stops what submits ops (the lease thread), then the writer, which
  // drains its queue: queued ops and their callbacks still call into the
  // managers and the cluster, so those are destroyed only after this.
  void StopCore() {
    if (nodes != nullptr) nodes->StopLeases();
    if (placement != nullptr) placement->StopPreemptionChecks();
    coordinator.reset();
  }

  Logger log;
  api::Metrics metrics;
  TelemetryStore telemetry;
  LogStore logs;
  api::StreamLimiter streams;
  std::unique_ptr<Cluster> cluster;
  std::unique_ptr<Coordinator> coordinator;
  std::unique_ptr<PlacementManager> placement;
  std::unique_ptr<api::WatchHub> watch_hub;  // on `placement`
  std::unique_ptr<NodeManager> nodes;
  std::unique_ptr<TelemetryManager> telemetry_manager;
  std::unique_ptr<api::Authenticator> auth;
  std::unique_ptr<api::Gate> gate;
  std::unique_ptr<api::InventoryService> inventory_service;
  std::unique_ptr<api::PlacementService> placement_service;
  std::unique_ptr<api::TelemetryService> telemetry_service;
  bool tls = false;
  std::shared_ptr<grpc::ServerCredentials> credentials;
  std::unique_ptr<api::WebApi> web_api;
  std::unique_ptr<grpc::Server> server;
  std::unique_ptr<api::HttpServer> http;
  int port = 0;
  bool shut_down = false;
};

SlicedServer::SlicedServer(std::unique_ptr<Impl> impl)
    : impl_(std::move(impl)) {}

SlicedServer::~SlicedServer() { Shutdown(); }

namespace {

// The outermost directory of `dir` (itself or an ancestor) that does not
// exist yet; empty when `dir` exists.
std::filesystem::path FirstMissingDirectory(const std::string& dir) {
  std::filesystem::path missing;
  std::error_code error;
  for (std::filesystem::path p = std::filesystem::absolute(dir, error);
       !p.empty() && !std::filesystem::exists(p, error); p = p.parent_path()) {
    missing = p;
    if (p == p.parent_path()) break;
  }
  return missing;
}

absl::Status CheckListen(const ServerOptions& options, bool tls, bool auth) {
  if (IsLoopback(options.listen) || options.insecure_listen_any ||
      (tls && auth)) {
    return absl::OkStatus();
  }
  return absl::FailedPreconditionError(absl::StrCat(
      "refusing to listen on ", Quote(options.listen),
      " without TLS (--tls_cert/--tls_key) and tokens (--auth_tokens): "
      "anyone on the network could drain nodes and take placements. Listen "
      "on 127.0.0.1, turn both on, or pass --insecure_listen_any"));
}

}  // namespace

// Wires the core (cluster, coordinator, managers) and the gRPC edge.
absl::Status SlicedServer::Wire(Impl& impl, const ServerOptions& options,
                                std::unique_ptr<storage::Store> store) {
  impl.cluster = std::make_unique<Cluster>(&impl.logs);
  ASSIGN_OR_RETURN(
      impl.coordinator,
      Coordinator::Open(std::move(store), impl.cluster.get(),
                        {.clock = nullptr, .observer = &impl.metrics}));
  impl.placement = std::make_unique<PlacementManager>(
      impl.coordinator.get(), impl.cluster.get(),
      PlacementManager::Options{
          .starvation_bound = options.starvation_bound,
          .max_pending = options.limits.max_pending_pgs,
          .log = &impl.log,
          .subslicing = options.subslicing,
          .priority_classes = options.priority_classes,
          .preemption = options.preemption,
          .preemption_grace = options.preemption_grace,
          .preemption_cooldown = options.preemption_cooldown,
          .preemption_check_interval =
              std::clamp(options.preemption_grace / 4, absl::Milliseconds(100),
                         absl::Seconds(1))},
      &impl.metrics);
  impl.cluster->set_observer(impl.placement.get());
  impl.nodes = std::make_unique<NodeManager>(
      impl.coordinator.get(), impl.cluster.get(), impl.placement.get(),
      &impl.logs, &impl.telemetry,
      NodeManager::Options{.heartbeat_timeout = options.heartbeat_timeout,
                           .lease_check_interval = absl::Seconds(1),
                           .log = &impl.log});
  impl.telemetry_manager = std::make_unique<TelemetryManager>(
      impl.coordinator.get(), impl.cluster.get(), &impl.telemetry, &impl.logs);
  impl.gate = std::make_unique<api::Gate>(impl.auth.get());
  impl.inventory_service = std::make_unique<api::InventoryService>(
      impl.nodes.get(), impl.placement.get(), options.limits, impl.gate.get());
  impl.watch_hub = std::make_unique<api::WatchHub>(
      impl.placement.get(), options.limits.max_watch_buffer_bytes);
  impl.placement_service = std::make_unique<api::PlacementService>(
      impl.placement.get(), impl.watch_hub.get(), options.limits, &impl.streams,
      impl.gate.get());
  impl.telemetry_service = std::make_unique<api::TelemetryService>(
      impl.telemetry_manager.get(), options.limits, &impl.streams,
      impl.gate.get());
  impl.web_api = std::make_unique<api::WebApi>(
      impl.cluster.get(), impl.coordinator.get(), impl.nodes.get(),
      impl.placement.get(), impl.telemetry_manager.get());
  impl.metrics.AttachState(impl.cluster.get(), &impl.telemetry,
                           impl.coordinator.get());
  impl.coordinator->Run();
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<SlicedServer>> SlicedServer::Start(
    const ServerOptions& options) {
  // A start the flags refuse must leave no database behind: check first.
  ASSIGN_OR_RETURN(std::unique_ptr<Impl> impl, Prepare(options));
  // A start that fails later (a port in use) removes the directories it
  // created, and never one that was there before.
  const std::filesystem::path created = FirstMissingDirectory(options.data_dir);
  absl::StatusOr<std::unique_ptr<SlicedServer>> server =
      [&]() -> absl::StatusOr<std::unique_ptr<SlicedServer>> {
    ASSIGN_OR_RETURN(std::unique_ptr<storage::Store> store,
                     storage::OpenRocksDbStore({.path = options.data_dir}));
    return Serve(std::move(impl), options, std::move(store), nullptr);
  }();
  if (!server.ok() && !created.empty()) {
    std::error_code ignored;  // best effort: the start failed anyway
    std::filesystem::remove_all(created, ignored);
  }
  return server;
}

absl::StatusOr<std::unique_ptr<SlicedServer>> SlicedServer::StartWithStore(
    const ServerOptions& options, std::unique_ptr<storage::Store> store,
    const std::function<void()>& before_listen) {
  ASSIGN_OR_RETURN(std::unique_ptr<Impl> impl, Prepare(options));
  return Serve(std::move(impl), options, std::move(store), before_listen);
}

absl::StatusOr<std::unique_ptr<SlicedServer::Impl>> SlicedServer::Prepare(
    const ServerOptions& options) {
  if (options.log_lines_per_node < 1) {
    return absl::InvalidArgumentError("--log_lines_per_node must be >= 1");
  }
  auto impl = std::make_unique<Impl>(options);
  ASSIGN_OR_RETURN(impl->credentials, ServerCredentials(options));
  impl->tls = !options.tls_cert.empty();
  if (!options.auth_tokens.empty() ||
      !options.agent_token_secret_file.empty()) {
    ASSIGN_OR_RETURN(impl->auth,
                     api::Authenticator::Load(options.auth_tokens,
                                              options.agent_token_secret_file));
  }
  RETURN_IF_ERROR(CheckListen(options, impl->tls, impl->auth != nullptr));
  return impl;
}

absl::StatusOr<std::unique_ptr<SlicedServer>> SlicedServer::Serve(
    std::unique_ptr<Impl> impl, const ServerOptions& options,
    std::unique_ptr<storage::Store> store,
    const std::function<void()>& before_listen) {
  RETURN_IF_ERROR(Wire(*impl, options, std::move(store)));
  if (before_listen) before_listen();

  // The health proto is compiled into this binary so that reflection can
  // describe grpc.health.v1.Health; touching its descriptor keeps the linker
  // from dropping it.
  (void)grpc::health::v1::HealthCheckRequest::descriptor();
  grpc::EnableDefaultHealthCheckService(true);
  grpc::reflection::InitProtoReflectionServerBuilderPlugin();

  grpc::ServerBuilder builder;
  // gRPC sets SO_REUSEPORT by default, which lets a second daemon bind the
  // same port and split the clients; a port in use must fail the start.
  builder.AddChannelArgument(GRPC_ARG_ALLOW_REUSEPORT, 0);
  builder.AddListeningPort(options.listen, impl->credentials, &impl->port);
  builder.SetMaxReceiveMessageSize(options.limits.max_message_bytes);
  builder.RegisterService(impl->inventory_service.get());
  builder.RegisterService(impl->placement_service.get());
  builder.RegisterService(impl->telemetry_service.get());
  std::vector<
      std::unique_ptr<grpc::experimental::ServerInterceptorFactoryInterface>>
      interceptors;
  interceptors.push_back(impl->metrics.InterceptorFactory());
  builder.experimental().SetInterceptorCreators(std::move(interceptors));
  impl->server = builder.BuildAndStart();
  if (impl->server == nullptr || impl->port == 0) {
    return absl::UnavailableError(
        absl::StrCat("cannot listen on ", options.listen,
                     " (address in use or not a valid host:port)"));
  }
  impl->server->GetHealthCheckService()->SetServingStatus(true);

  if (!options.metrics_listen.empty()) {
    std::vector<std::shared_ptr<prometheus::Collectable>> collectables = {
        impl->metrics.registry(), impl->metrics.state_collector()};
    collectables.insert(collectables.end(), options.extra_metrics.begin(),
                        options.extra_metrics.end());
    absl::StatusOr<std::unique_ptr<api::HttpServer>> http =
        api::HttpServer::Start(
            {.listen = options.metrics_listen,
             .tls_cert = options.tls_cert,
             .tls_key = options.tls_key,
             .tls_client_ca = options.tls_client_ca,
             .auth = impl->auth.get()},
            std::move(collectables), impl->web_api.get());
    if (!http.ok()) {
      const absl::Status failed = absl::UnavailableError(
          absl::StrCat("cannot serve metrics on ", options.metrics_listen, ": ",
                       http.status().message()));
      // The gRPC port is serving already: a watch or tail opened meanwhile
      // never ends on its own, and a Shutdown() without a deadline would
      // wait for it. Stopped as a shutdown is.
      SlicedServer(std::move(impl)).Stop(failed, absl::Milliseconds(200));
      return failed;
    }
    impl->http = *std::move(http);
  }
  return std::unique_ptr<SlicedServer>(new SlicedServer(std::move(impl)));
}

int SlicedServer::port() const { return impl_->port; }
bool SlicedServer::tls() const { return impl_->tls; }
bool SlicedServer::auth() const { return impl_->auth != nullptr; }

absl::Status SlicedServer::ReloadAuth() {
  if (impl_->auth == nullptr) {
    return absl::FailedPreconditionError(
        "no --auth_tokens or --agent_token_secret_file to reload");
  }
  return impl_->auth->Reload();
}
int SlicedServer::metrics_port() const {
  return impl_->http == nullptr ? 0 : impl_->http->port();
}

size_t SlicedServer::node_count() const {
  return impl_->cluster->Read(
      [](const ClusterState& s) { return s.snapshot->num_nodes(); });
}

const Coordinator::LoadStats& SlicedServer::loaded() const {
  return impl_->coordinator->opened();
}

void SlicedServer::Shutdown() {
  // Unary calls finish in milliseconds; watch and tail streams never end on
  // their own, so they are ended first.
  Stop(absl::UnavailableError("sliced is shutting down"),
       absl::Milliseconds(200));
}

void SlicedServer::Refuse(const absl::Status& refusal) {
  if (impl_ == nullptr || impl_->shut_down) return;
  impl_->gate->Refuse(refusal);
  impl_->coordinator->Refuse(refusal);
  if (impl_->http != nullptr) impl_->http->Refuse(refusal);
}

void SlicedServer::StepDown(const absl::Status& refusal, absl::Duration grace) {
  if (impl_ == nullptr || impl_->shut_down) return;
  Refuse(refusal);
  impl_->streams.EndAll(refusal);
  // gRPC drops a call whose headers reach a server after its Shutdown began
  // (before any handler runs: the client sees CANCELLED, not a refusal).
  // So the port answers the refusal for a while first: a client that
  // follows the leader (client/, slicectl, the agents) is sent there by its
  // next call, and has nothing in flight here when the server stops.
  absl::SleepFor(kStepDownDrain);
  Stop(refusal, grace);
}

void SlicedServer::Stop(const absl::Status& end, absl::Duration grace) {
  if (impl_ == nullptr || impl_->shut_down) return;
  impl_->shut_down = true;
  impl_->server->GetHealthCheckService()->SetServingStatus(false);
  impl_->streams.EndAll(end);
  // Calls still running after the grace period are cancelled.
  impl_->server->Shutdown(absl::ToChronoTime(absl::Now() + grace));
  impl_->server->Wait();
  impl_->http.reset();
  impl_->StopCore();
}

}  // namespace sliced::server
