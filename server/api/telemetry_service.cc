#include "server/api/telemetry_service.h"

#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "base/status_macros.h"
#include "server/api/convert_common.h"
#include "server/api/convert_telemetry.h"

namespace sliced::server::api {
namespace {

using Finish = std::function<void(const absl::Status&)>;

// One TailLogs stream: the stored lines, then (when following) every new
// line of its nodes that passes the filter.
class TailReactor : public StreamReactor<v1::LogLine>,
                    public LogStore::Follower {
 public:
  TailReactor(LogStore* logs, absl::flat_hash_set<std::string> nodes,
              LogStore::Filter filter, bool follow)
      : logs_(logs), nodes_(std::move(nodes)), filter_(std::move(filter)) {
    if (follow) set_on_done([this] { logs_->Unfollow(this); });
  }
  bool Wants(const LogLine& line) const override {
    return nodes_.contains(line.node_id) && filter_(line);
  }
  void Deliver(const LogLine& line) override { Send(line); }
  void End(const absl::Status& why) override { EndWith(why); }
  void Send(const LogLine& line) {
    v1::LogLine out;
    LogLineToProto(line, &out);
    StreamReactor::Deliver(std::move(out));
  }

 private:
  LogStore* const logs_;
  const absl::flat_hash_set<std::string> nodes_;
  const LogStore::Filter filter_;
};

}  // namespace

grpc::ServerUnaryReactor* TelemetryService::ReportTpuMetrics(
    grpc::CallbackServerContext* context,
    const v1::ReportTpuMetricsRequest* request,
    v1::ReportTpuMetricsResponse* /*response*/) {
  std::vector<std::string> reporting;
  for (const auto& node : request->nodes()) reporting.push_back(node.node_id());
  return gate_->Unary(
      context, Rpc::kReportTpuMetrics,
      [&] { return telemetry_->ReportMetrics(MetricsFromProto(*request)); },
      reporting);
}

grpc::ServerUnaryReactor* TelemetryService::GetClusterSummary(
    grpc::CallbackServerContext* context, const v1::GetClusterSummaryRequest*,
    v1::GetClusterSummaryResponse* response) {
  return gate_->Unary(context, Rpc::kGetClusterSummary, [&] {
    SummaryToProto(telemetry_->Summary(), response);
    return absl::OkStatus();
  });
}

grpc::ServerUnaryReactor* TelemetryService::AppendLogs(
    grpc::CallbackServerContext* context, const v1::AppendLogsRequest* request,
    v1::AppendLogsResponse* /*response*/) {
  return gate_->Async(context, Rpc::kAppendLogs,
                      [&](Finish finish) {
                        auto lines = LogLinesFromProto(*request);
                        if (!lines.ok()) return finish(lines.status());
                        telemetry_->AppendLogs(request->node_id(),
                                               *std::move(lines), finish);
                      },
                      {request->node_id()});
}

grpc::ServerWriteReactor<v1::LogLine>* TelemetryService::TailLogs(
    grpc::CallbackServerContext* context, const v1::TailLogsRequest* request) {
  return gate_->Stream<v1::LogLine>(
      context, Rpc::kTailLogs,
      [&]() -> absl::StatusOr<grpc::ServerWriteReactor<v1::LogLine>*> {
        ASSIGN_OR_RETURN(
            LogSeverity min_severity,
            SeverityFromProto(request->min_severity(), "min_severity"));
        ASSIGN_OR_RETURN(std::vector<std::string> nodes,
                         telemetry_->ResolveScope(
                             LogScope{request->node_id(), request->slice_name(),
                                      request->placement_group_id()}));
        absl::Time since = absl::InfinitePast();
        if (request->has_since()) {
          ASSIGN_OR_RETURN(since, FromTimestamp(request->since(), "since"));
        }
        LogStore::Filter filter = [min_severity, since](const LogLine& line) {
          return line.severity >= min_severity && line.time >= since;
        };
        RETURN_IF_ERROR(streams_->TryAcquire());
        LogStore* logs = telemetry_->logs();
        auto* reactor = new TailReactor(
            logs, absl::flat_hash_set<std::string>(nodes.begin(), nodes.end()),
            filter, request->follow());
        reactor->set_slot(streams_, context);
        logs->Read(
            nodes, filter,
            [reactor](const LogLine& line) { reactor->Send(line); },
            request->follow() ? reactor : nullptr);
        // The stored lines are queued whatever their size; then the bound,
        // as for a watch: a follower that stops reading ends ABORTED.
        reactor->set_max_pending_bytes(limits_.max_watch_buffer_bytes);
        if (!request->follow()) reactor->FinishWhenDrained();
        return reactor;
      });
}

}  // namespace sliced::server::api
