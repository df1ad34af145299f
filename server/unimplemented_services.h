// Placement and Telemetry services whose RPCs are not built yet: each answers
// UNIMPLEMENTED with a message naming the issue that builds it.
//
// Stateless; thread-safe.
#ifndef SLICED_SERVER_UNIMPLEMENTED_SERVICES_H_
#define SLICED_SERVER_UNIMPLEMENTED_SERVICES_H_

#include "sliced/v1/sliced.grpc.pb.h"

namespace sliced::server {

class PendingPlacementService final : public v1::Placement::CallbackService {
 public:
  grpc::ServerUnaryReactor* CreatePlacementGroup(
      grpc::CallbackServerContext*, const v1::CreatePlacementGroupRequest*,
      v1::PlacementGroup*) override;
  grpc::ServerUnaryReactor* SubmitScalingConfig(
      grpc::CallbackServerContext*, const v1::SubmitScalingConfigRequest*,
      v1::PlacementGroup*) override;
  grpc::ServerUnaryReactor* GetPlacementGroup(
      grpc::CallbackServerContext*, const v1::GetPlacementGroupRequest*,
      v1::PlacementGroup*) override;
  grpc::ServerUnaryReactor* ListPlacementGroups(
      grpc::CallbackServerContext*, const v1::ListPlacementGroupsRequest*,
      v1::ListPlacementGroupsResponse*) override;
  grpc::ServerUnaryReactor* RemovePlacementGroup(
      grpc::CallbackServerContext*, const v1::RemovePlacementGroupRequest*,
      v1::RemovePlacementGroupResponse*) override;
  grpc::ServerWriteReactor<v1::PlacementGroupEvent>* WatchPlacementGroups(
      grpc::CallbackServerContext*,
      const v1::WatchPlacementGroupsRequest*) override;
  grpc::ServerUnaryReactor* ExplainPlacementGroup(
      grpc::CallbackServerContext*, const v1::ExplainPlacementGroupRequest*,
      v1::ExplainPlacementGroupResponse*) override;
};

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
