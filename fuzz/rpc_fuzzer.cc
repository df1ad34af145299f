// libFuzzer target: every unary RPC handler of the daemon, fed arbitrary
// request bytes over a real gRPC channel to an in-process server (memory
// store). Input: first byte picks the method, the rest is the raw request
// message. Invariants: no crash, no sanitizer report, every call ends with a
// status; the server stays healthy.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "absl/synchronization/notification.h"
#include "grpcpp/create_channel.h"
#include "grpcpp/generic/generic_stub.h"
#include "grpcpp/security/credentials.h"
#include "server/server.h"
#include "storage/store.h"

namespace {

const char* const kMethods[] = {
    "/sliced.v1.Inventory/RegisterNodes",
    "/sliced.v1.Inventory/Heartbeat",
    "/sliced.v1.Inventory/DrainNode",
    "/sliced.v1.Inventory/RemoveNode",
    "/sliced.v1.Inventory/GetNode",
    "/sliced.v1.Inventory/ListNodes",
    "/sliced.v1.Inventory/ListSlices",
    "/sliced.v1.Inventory/PutComputeClass",
    "/sliced.v1.Inventory/ListComputeClasses",
    "/sliced.v1.Inventory/DeleteComputeClass",
    "/sliced.v1.Placement/CreatePlacementGroup",
    "/sliced.v1.Placement/SubmitScalingConfig",
    "/sliced.v1.Placement/GetPlacementGroup",
    "/sliced.v1.Placement/ListPlacementGroups",
    "/sliced.v1.Placement/RemovePlacementGroup",
    "/sliced.v1.Placement/ExplainPlacementGroup",
    "/sliced.v1.Telemetry/ReportTpuMetrics",
    "/sliced.v1.Telemetry/GetClusterSummary",
    "/sliced.v1.Telemetry/AppendLogs",
};

struct Fixture {
  std::unique_ptr<sliced::server::SlicedServer> server;
  std::unique_ptr<grpc::GenericStub> stub;
  Fixture() {
    sliced::server::ServerOptions options;
    options.listen = "127.0.0.1:0";
    options.metrics_listen = "";
    options.heartbeat_timeout = absl::ZeroDuration();
    auto started = sliced::server::SlicedServer::StartWithStore(
        options, std::make_unique<sliced::storage::MemoryStore>());
    if (!started.ok()) std::abort();
    server = *std::move(started);
    stub = std::make_unique<grpc::GenericStub>(
        grpc::CreateChannel("127.0.0.1:" + std::to_string(server->port()),
                            grpc::InsecureChannelCredentials()));
  }
};

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static Fixture* fixture = new Fixture();  // lives for the whole run
  if (size == 0) return 0;
  const char* method =
      kMethods[data[0] % (sizeof(kMethods) / sizeof(kMethods[0]))];
  grpc::Slice slice(data + 1, size - 1);
  grpc::ByteBuffer request(&slice, 1);
  grpc::ByteBuffer response;
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() +
                       std::chrono::seconds(10));
  absl::Notification done;
  grpc::Status status;
  fixture->stub->UnaryCall(&context, method, grpc::StubOptions(), &request,
                           &response, [&](grpc::Status s) {
                             status = std::move(s);
                             done.Notify();
                           });
  done.WaitForNotification();
  if (status.error_code() == grpc::StatusCode::DEADLINE_EXCEEDED ||
      status.error_code() == grpc::StatusCode::UNAVAILABLE) {
    std::abort();  // the server hung or died on this input
  }
  return 0;
}
