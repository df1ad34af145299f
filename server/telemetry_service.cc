#include "server/telemetry_service.h"

#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "base/quote.h"
#include "server/cluster_summary.h"
#include "server/grpc_status.h"
#include "server/stream_reactor.h"

namespace sliced::server {
namespace {

int64_t Millis(const google::protobuf::Timestamp& t) {
  return t.seconds() * 1000 + t.nanos() / 1000000;
}

// Resolves the nodes a TailLogs request covers.
absl::StatusOr<std::vector<std::string>> TailNodes(
    const ClusterState& state, const v1::TailLogsRequest& r) {
  std::vector<std::string> nodes;
  if (!r.node_id().empty()) {
    if (!state.nodes.contains(r.node_id())) {
      return absl::NotFoundError(
          absl::StrCat("node_id: no node ", Quote(r.node_id())));
    }
    nodes.push_back(r.node_id());
  } else if (!r.slice_name().empty()) {
    auto slice = state.snapshot->GetSlice(r.slice_name());
    if (!slice.ok()) {
      return absl::NotFoundError(
          absl::StrCat("slice_name: no slice ", Quote(r.slice_name())));
    }
    for (const std::string& id : slice->info.node_ids) {
      if (!id.empty()) nodes.push_back(id);
    }
  } else if (!r.placement_group_id().empty()) {
    auto it = state.pgs.find(r.placement_group_id());
    if (it == state.pgs.end()) {
      return absl::NotFoundError(
          absl::StrCat("placement_group_id: no placement group \"",
                       r.placement_group_id(), "\""));
    }
    absl::btree_set<std::string> unique;
    for (const auto& b : it->second.record.bundles()) {
      if (!b.node_id().empty()) unique.insert(b.node_id());
    }
    nodes.assign(unique.begin(), unique.end());
  } else {
    for (const auto& [id, entry] : state.nodes) nodes.push_back(id);
  }
  return nodes;
}

class TailReactor : public StreamReactor<v1::LogLine>,
                    public LogStore::Follower {
 public:
  TailReactor(LogStore* logs, absl::flat_hash_set<std::string> nodes,
              LogStore::Filter filter, bool follow)
      : logs_(logs), nodes_(std::move(nodes)), filter_(std::move(filter)) {
    if (follow) set_on_done([this] { logs_->Unfollow(this); });
  }
  void Deliver(const v1::LogLine& line) override {
    if (nodes_.contains(line.node_id()) && filter_(line)) {
      StreamReactor::Deliver(line);
    }
  }
  void Send(const v1::LogLine& line) { StreamReactor::Deliver(line); }

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
  if (absl::Status denied =
          Authorize(auth_, *context, Access::kNodeAgent, reporting);
      !denied.ok()) {
    return FinishUnary(context, denied);
  }
  absl::Status known = coordinator_->Read([&](const ClusterState& state) {
    for (int i = 0; i < request->nodes_size(); ++i) {
      if (!state.nodes.contains(request->nodes(i).node_id())) {
        return absl::NotFoundError(
            absl::StrCat("nodes[", i, "].node_id: no node ",
                         Quote(request->nodes(i).node_id())));
      }
    }
    return absl::OkStatus();
  });
  if (!known.ok()) return FinishUnary(context, known);
  return FinishUnary(context, telemetry_->Put(*request, coordinator_->Now()));
}

grpc::ServerUnaryReactor* TelemetryService::GetClusterSummary(
    grpc::CallbackServerContext* context, const v1::GetClusterSummaryRequest*,
    v1::GetClusterSummaryResponse* response) {
  if (absl::Status denied = Authorize(auth_, *context, Access::kRead);
      !denied.ok()) {
    return FinishUnary(context, denied);
  }
  ClusterSummary s = coordinator_->Read([&](const ClusterState& state) {
    return Summarize(state, coordinator_->Now());
  });
  for (const auto& [key, group] : s.slices) {
    const auto& [accel, topo, tier, zone] = key;
    v1::FreeCapacity* row = response->add_free();
    row->set_accelerator_type(accel);
    row->set_topology(topo);
    row->set_tier(tier);
    row->set_zone(zone);
    row->set_free_chips(group.free_chips);
    row->set_free_slices(group.free_slices);
    row->set_total_slices(group.total_slices);
  }
  response->mutable_nodes_by_state()->insert(s.nodes_by_state.begin(),
                                             s.nodes_by_state.end());
  response->set_pending_placement_groups(s.pending);
  response->mutable_pending_shapes()->Assign(s.pending_shapes.begin(),
                                             s.pending_shapes.end());
  response->set_fragmentation(s.fragmentation);
  return FinishUnary(context, absl::OkStatus());
}

grpc::ServerUnaryReactor* TelemetryService::AppendLogs(
    grpc::CallbackServerContext* context, const v1::AppendLogsRequest* request,
    v1::AppendLogsResponse* /*response*/) {
  if (absl::Status denied =
          Authorize(auth_, *context, Access::kNodeAgent, {request->node_id()});
      !denied.ok()) {
    return FinishUnary(context, denied);
  }
  if (request->lines_size() > kMaxLinesPerAppend) {
    return FinishUnary(context, absl::InvalidArgumentError(absl::StrCat(
                                    "lines: at most ", kMaxLinesPerAppend,
                                    " per call, got ", request->lines_size())));
  }
  for (int i = 0; i < request->lines_size(); ++i) {
    const v1::LogLine& line = request->lines(i);
    if (static_cast<int>(line.text().size()) > kMaxLineBytes) {
      return FinishUnary(context,
                         absl::InvalidArgumentError(absl::StrCat(
                             "lines[", i, "].text: at most ", kMaxLineBytes,
                             " bytes, got ", line.text().size())));
    }
    if (!v1::LogSeverity_IsValid(line.severity())) {
      return FinishUnary(context, absl::InvalidArgumentError(absl::StrCat(
                                      "lines[", i, "].severity: unknown value ",
                                      line.severity())));
    }
  }
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  auto staged = std::make_shared<std::vector<v1::LogLine>>();
  coordinator_->Submit(WriteOp{
      [this, request, staged](Txn& txn) {
        if (txn.FindNode(request->node_id()) == nullptr) {
          return absl::NotFoundError(
              absl::StrCat("node_id: no node ", Quote(request->node_id())));
        }
        *staged = logs_->Stage(txn, request->node_id(), request->lines());
        return absl::OkStatus();
      },
      [this, reactor, request, staged](const absl::Status& s) {
        if (s.ok()) logs_->Install(request->node_id(), std::move(*staged));
        reactor->Finish(ToGrpcStatus(s));
      }});
  return reactor;
}

grpc::ServerWriteReactor<v1::LogLine>* TelemetryService::TailLogs(
    grpc::CallbackServerContext* context, const v1::TailLogsRequest* request) {
  if (absl::Status denied = Authorize(auth_, *context, Access::kRead);
      !denied.ok()) {
    return new FailedStream<v1::LogLine>(denied);
  }
  if (!v1::LogSeverity_IsValid(request->min_severity())) {
    return new FailedStream<v1::LogLine>(
        absl::InvalidArgumentError("min_severity: unknown value"));
  }
  auto nodes = coordinator_->Read(
      [&](const ClusterState& state) { return TailNodes(state, *request); });
  if (!nodes.ok()) return new FailedStream<v1::LogLine>(nodes.status());
  const int min_severity = request->min_severity();
  const int64_t since = request->has_since() ? Millis(request->since()) : 0;
  LogStore::Filter filter = [min_severity, since](const v1::LogLine& line) {
    return line.severity() >= min_severity && Millis(line.time()) >= since;
  };
  if (!streams_->TryAcquire()) {
    return new FailedStream<v1::LogLine>(
        absl::ResourceExhaustedError(absl::StrCat(
            "too many open streams (", streams_->max(), "); retry later")));
  }
  auto* reactor = new TailReactor(
      logs_, absl::flat_hash_set<std::string>(nodes->begin(), nodes->end()),
      filter, request->follow());
  reactor->set_slot(streams_);
  logs_->Read(
      *nodes, filter,
      [reactor](const v1::LogLine& line) { reactor->Send(line); },
      request->follow() ? reactor : nullptr);
  if (!request->follow()) reactor->FinishWhenDrained();
  return reactor;
}

}  // namespace sliced::server
