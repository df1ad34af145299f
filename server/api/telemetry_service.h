// sliced.v1.Telemetry on gRPC's callback API: TPU telemetry reports, the
// cluster summary, and libtpu logs (append, tail, follow). Each handler:
// pass the gate, convert, call the telemetry manager, convert back.
//
// Thread-safe: handlers run on gRPC's threads; state lives in the managers.
#ifndef SLICED_SERVER_API_TELEMETRY_SERVICE_H_
#define SLICED_SERVER_API_TELEMETRY_SERVICE_H_

#include "server/api/gate.h"
#include "server/api/stream_reactor.h"
#include "server/core/limits.h"
#include "server/core/telemetry_manager.h"
#include "sliced/v1/sliced.grpc.pb.h"

namespace sliced::server::api {

class TelemetryService final : public v1::Telemetry::CallbackService {
 public:
  // REQUIRES: every pointer outlives the service.
  TelemetryService(TelemetryManager* telemetry, const Limits& limits,
                   StreamLimiter* streams, const Gate* gate)
      : telemetry_(telemetry),
        limits_(limits),
        streams_(streams),
        gate_(gate) {}

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

 private:
  TelemetryManager* const telemetry_;
  // max_watch_buffer_bytes bounds a tail's queue past its first lines.
  const Limits limits_;
  StreamLimiter* const streams_;
  const Gate* const gate_;
};

}  // namespace sliced::server::api

#endif  // SLICED_SERVER_API_TELEMETRY_SERVICE_H_
