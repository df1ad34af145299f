#include "server/server.h"

#include <vector>

#include "absl/strings/str_cat.h"
#include "grpc/health/v1/health.pb.h"
#include "grpcpp/ext/proto_server_reflection_plugin.h"
#include "grpcpp/health_check_service_interface.h"
#include "grpcpp/server.h"
#include "grpcpp/server_builder.h"
#include "prometheus/exposer.h"
#include "prometheus/gauge.h"
#include "prometheus/registry.h"
#include "scheduler/status_macros.h"
#include "server/coordinator.h"
#include "server/inventory_service.h"
#include "server/placement.h"
#include "server/placement_service.h"
#include "server/unimplemented_services.h"

namespace sliced::server {

struct SlicedServer::Impl {
  std::unique_ptr<Coordinator> coordinator;
  std::unique_ptr<InventoryService> inventory;
  WatchHub hub;
  std::unique_ptr<PlacementService> placement;
  std::unique_ptr<PendingTelemetryService> telemetry;
  std::unique_ptr<grpc::Server> server;
  std::shared_ptr<prometheus::Registry> registry;
  std::unique_ptr<prometheus::Exposer> exposer;
  int port = 0;
  int metrics_port = 0;
  bool shut_down = false;
};

SlicedServer::SlicedServer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

SlicedServer::~SlicedServer() { Shutdown(); }

absl::StatusOr<std::unique_ptr<SlicedServer>> SlicedServer::Start(
    const ServerOptions& options) {
  ASSIGN_OR_RETURN(std::unique_ptr<storage::Store> store,
                   storage::OpenRocksDbStore({.path = options.data_dir}));
  return StartWithStore(options, std::move(store));
}

absl::StatusOr<std::unique_ptr<SlicedServer>> SlicedServer::StartWithStore(
    const ServerOptions& options, std::unique_ptr<storage::Store> store) {
  auto impl = std::make_unique<Impl>();
  Coordinator::Options coordinator_options;
  coordinator_options.heartbeat_timeout = options.heartbeat_timeout;
  coordinator_options.parse_pg = RequestFromRecord;
  const PlacementPolicy policy{.starvation_bound = options.starvation_bound};
  coordinator_options.retry_pending = [policy](Txn& txn) {
    RetryPending(txn, policy);
  };
  coordinator_options.on_nodes_lost = HandleNodesLost;
  coordinator_options.on_pg_changes =
      [hub = &impl->hub](const std::vector<PgEntry>& changed,
                         const scheduler::InventorySnapshot& snapshot) {
        std::vector<v1::PlacementGroup> out(changed.size());
        for (size_t i = 0; i < changed.size(); ++i) {
          PgToProto(changed[i], snapshot, &out[i]);
        }
        hub->Publish(out);
      };
  ASSIGN_OR_RETURN(impl->coordinator,
                   Coordinator::Start(std::move(store), coordinator_options));

  impl->inventory =
      std::make_unique<InventoryService>(impl->coordinator.get(), options.limits);
  impl->placement = std::make_unique<PlacementService>(
      impl->coordinator.get(), &impl->hub, options.limits, policy);
  impl->telemetry = std::make_unique<PendingTelemetryService>();

  // The health proto is compiled into this binary so that reflection can
  // describe grpc.health.v1.Health; touching its descriptor keeps the linker
  // from dropping it.
  (void)grpc::health::v1::HealthCheckRequest::descriptor();
  grpc::EnableDefaultHealthCheckService(true);
  grpc::reflection::InitProtoReflectionServerBuilderPlugin();

  grpc::ServerBuilder builder;
  builder.AddListeningPort(options.listen, grpc::InsecureServerCredentials(),
                           &impl->port);
  builder.SetMaxReceiveMessageSize(options.limits.max_message_bytes);
  builder.RegisterService(impl->inventory.get());
  builder.RegisterService(impl->placement.get());
  builder.RegisterService(impl->telemetry.get());
  impl->server = builder.BuildAndStart();
  if (impl->server == nullptr || impl->port == 0) {
    return absl::UnavailableError(
        absl::StrCat("cannot listen on ", options.listen,
                     " (address in use or not a valid host:port)"));
  }
  impl->server->GetHealthCheckService()->SetServingStatus(true);

  if (!options.metrics_listen.empty()) {
    try {
      impl->exposer = std::make_unique<prometheus::Exposer>(options.metrics_listen);
    } catch (const std::exception& e) {
      impl->server->Shutdown();
      return absl::UnavailableError(absl::StrCat(
          "cannot serve metrics on ", options.metrics_listen, ": ", e.what()));
    }
    impl->registry = std::make_shared<prometheus::Registry>();
    prometheus::BuildGauge()
        .Name("sliced_up")
        .Help("1 while the sliced daemon is serving")
        .Register(*impl->registry)
        .Add({})
        .Set(1);
    impl->exposer->RegisterCollectable(impl->registry);
    std::vector<int> ports = impl->exposer->GetListeningPorts();
    impl->metrics_port = ports.empty() ? 0 : ports.front();
  }
  return std::unique_ptr<SlicedServer>(new SlicedServer(std::move(impl)));
}

int SlicedServer::port() const { return impl_->port; }
int SlicedServer::metrics_port() const { return impl_->metrics_port; }

size_t SlicedServer::node_count() const {
  return impl_->coordinator->Read(
      [](const ClusterState& s) { return s.nodes.size(); });
}

void SlicedServer::Shutdown() {
  if (impl_ == nullptr || impl_->shut_down) return;
  impl_->shut_down = true;
  impl_->server->GetHealthCheckService()->SetServingStatus(false);
  impl_->server->Shutdown(std::chrono::system_clock::now() +
                          std::chrono::seconds(5));
  impl_->server->Wait();
  impl_->exposer.reset();
  impl_->coordinator.reset();  // drains the writer queue
}

}  // namespace sliced::server
