// The Telemetry service, whose RPCs are not built yet: each answers
// UNIMPLEMENTED with a message naming the issue that builds it.
//
// Stateless; thread-safe.
#ifndef SLICED_SERVER_UNIMPLEMENTED_SERVICES_H_
#define SLICED_SERVER_UNIMPLEMENTED_SERVICES_H_

#include "sliced/v1/sliced.grpc.pb.h"

namespace sliced::server {

class PendingTelemetryService final : public v1::Telemetry::CallbackService {
 public:
  grpc::ServerUnaryReactor* ReportTpuMetrics(
      grpc::CallbackServerContext*, const v1::ReportTpuMetricsRequest*,
      v1::ReportTpuMetricsResponse*) override;
  grpc::ServerUnaryReactor* GetClusterSummary(
      grpc::CallbackServerContext*, const v1::GetClusterSummaryRequest*,
      v1::GetClusterSummaryResponse*) override;
  grpc::ServerUnaryReactor* AppendLogs(grpc::CallbackServerContext*,
                                       const v1::AppendLogsRequest*,
                                       v1::AppendLogsResponse*) override;
  grpc::ServerWriteReactor<v1::LogLine>* TailLogs(
      grpc::CallbackServerContext*, const v1::TailLogsRequest*) override;
};

}  // namespace sliced::server

#endif  // SLICED_SERVER_UNIMPLEMENTED_SERVICES_H_
