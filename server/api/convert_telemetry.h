// sliced.v1 Telemetry messages <-> domain: TPU chip metrics, libtpu log
// lines and the cluster summary. Pure functions; thread-safe. Every error is
// InvalidArgument and names the field.
#ifndef SLICED_SERVER_API_CONVERT_TELEMETRY_H_
#define SLICED_SERVER_API_CONVERT_TELEMETRY_H_

#include <vector>

#include "absl/status/statusor.h"
#include "server/core/cluster_summary.h"
#include "server/core/telemetry.h"
#include "sliced/v1/sliced.pb.h"

namespace sliced::server::api {

std::vector<NodeTpuMetrics> MetricsFromProto(
    const v1::ReportTpuMetricsRequest& request);

// AppendLogs: at most kMaxLinesPerAppend lines of at most kMaxLineBytes,
// known severities.
absl::StatusOr<std::vector<LogLine>> LogLinesFromProto(
    const v1::AppendLogsRequest& request);
absl::StatusOr<LogSeverity> SeverityFromProto(int severity,
                                              absl::string_view field);
void LogLineToProto(const LogLine& line, v1::LogLine* out);

void SummaryToProto(const ClusterSummary& summary,
                    v1::GetClusterSummaryResponse* out);

}  // namespace sliced::server::api

#endif  // SLICED_SERVER_API_CONVERT_TELEMETRY_H_
