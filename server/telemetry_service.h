// sliced.v1.Telemetry on gRPC's callback API: TPU telemetry reports, the
// cluster summary, and libtpu logs (append, tail, follow).
//
// Thread-safe.
#ifndef SLICED_SERVER_TELEMETRY_SERVICE_H_
#define SLICED_SERVER_TELEMETRY_SERVICE_H_

#include "server/auth.h"
#include "server/coordinator.h"
#include "server/log_store.h"
#include "server/stream_reactor.h"
#include "server/telemetry_store.h"
#include "sliced/v1/sliced.grpc.pb.h"

namespace sliced::server {

class TelemetryService final : public v1::Telemetry::CallbackService {
 public:
  TelemetryService(Coordinator* coordinator, TelemetryStore* telemetry,
                   LogStore* logs, StreamLimiter* streams,
                   const Authenticator* auth = nullptr)
      : coordinator_(coordinator),
        telemetry_(telemetry),
        logs_(logs),
        streams_(streams),
        auth_(auth) {}

  grpc::ServerUnaryReactor* ReportTpuMetrics(
      grpc::CallbackServerContext* context,
      const v1::ReportTpuMetricsRequest* request,
      v1::ReportTpuMetricsResponse* response) override;
  grpc::ServerUnaryReactor* GetClusterSummary(
      grpc::CallbackServerContext* context,
      const v1::GetClusterSummaryRequest* request,
      v1::GetClusterSummaryResponse* response) override;
  grpc::ServerUnaryReactor* AppendLogs(
      grpc::CallbackServerContext* context,
      const v1::AppendLogsRequest* request,
      v1::AppendLogsResponse* response) override;
  grpc::ServerWriteReactor<v1::LogLine>* TailLogs(
      grpc::CallbackServerContext* context,
      const v1::TailLogsRequest* request) override;

  // Limits on AppendLogs.
  static constexpr int kMaxLinesPerAppend = 1000;
  static constexpr int kMaxLineBytes = 4096;

 private:
  Coordinator* const coordinator_;
  TelemetryStore* const telemetry_;
  LogStore* const logs_;
  StreamLimiter* const streams_;
  const Authenticator* const auth_;  // null: auth off
};

}  // namespace sliced::server

#endif  // SLICED_SERVER_TELEMETRY_SERVICE_H_
