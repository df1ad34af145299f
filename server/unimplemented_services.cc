#include "server/unimplemented_services.h"

#include <string>

namespace sliced::server {
namespace {

constexpr char kTelemetry[] =
    "not implemented yet: telemetry, logs and the cluster summary arrive with "
    "the observability issue (issue 6)";

grpc::ServerUnaryReactor* Unimplemented(grpc::CallbackServerContext* context,
                                        const char* what) {
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  reactor->Finish(grpc::Status(grpc::StatusCode::UNIMPLEMENTED, what));
  return reactor;
}

// A server stream that ends at once with UNIMPLEMENTED.
template <typename T>
class UnimplementedStream : public grpc::ServerWriteReactor<T> {
 public:
  explicit UnimplementedStream(const char* what) {
    this->Finish(grpc::Status(grpc::StatusCode::UNIMPLEMENTED, what));
  }
  void OnDone() override { delete this; }
};

}  // namespace

#define SLICED_UNIMPLEMENTED_UNARY(Service, Method, Request, Response, what) \
  grpc::ServerUnaryReactor* Service::Method(grpc::CallbackServerContext* c,  \
                                            const v1::Request*,             \
                                            v1::Response*) {                 \
    return Unimplemented(c, what);                                           \
  }

SLICED_UNIMPLEMENTED_UNARY(PendingTelemetryService, ReportTpuMetrics,
                           ReportTpuMetricsRequest, ReportTpuMetricsResponse,
                           kTelemetry)
SLICED_UNIMPLEMENTED_UNARY(PendingTelemetryService, GetClusterSummary,
                           GetClusterSummaryRequest, GetClusterSummaryResponse,
                           kTelemetry)
SLICED_UNIMPLEMENTED_UNARY(PendingTelemetryService, AppendLogs,
                           AppendLogsRequest, AppendLogsResponse, kTelemetry)
#undef SLICED_UNIMPLEMENTED_UNARY

grpc::ServerWriteReactor<v1::LogLine>* PendingTelemetryService::TailLogs(
    grpc::CallbackServerContext*, const v1::TailLogsRequest*) {
  return new UnimplementedStream<v1::LogLine>(kTelemetry);
}

}  // namespace sliced::server
