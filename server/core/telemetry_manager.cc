#include "server/core/telemetry_manager.h"

#include <memory>
#include <utility>

#include "absl/container/btree_set.h"
#include "absl/strings/str_cat.h"
#include "base/quote.h"

namespace sliced::server {

TelemetryManager::TelemetryManager(Coordinator* coordinator, Cluster* cluster,
                                   TelemetryStore* telemetry, LogStore* logs)
    : coordinator_(coordinator),
      cluster_(cluster),
      telemetry_(telemetry),
      logs_(logs) {}

absl::Status TelemetryManager::ReportMetrics(
    const std::vector<NodeTpuMetrics>& nodes) {
  // Stored under the cluster's reader lock: a RemoveNode installs (and then
  // forgets the node's telemetry) either before this finds the node or
  // after this report is stored, never in between.
  return cluster_->Read([&](const ClusterState& s) {
    for (size_t i = 0; i < nodes.size(); ++i) {
      if (s.snapshot->FindNode(nodes[i].node_id) == nullptr) {
        return absl::NotFoundError(absl::StrCat(
            "nodes[", i, "].node_id: no node ", Quote(nodes[i].node_id)));
      }
    }
    return telemetry_->Put(nodes, coordinator_->Now());
  });
}

ClusterSummary TelemetryManager::Summary() const {
  const absl::Time now = coordinator_->Now();
  return Summarize(*cluster_, now).summary;
}

void TelemetryManager::AppendLogs(
    const std::string& node_id, std::vector<LogLine> lines,
    std::function<void(const absl::Status&)> done) {
  auto staged = std::make_shared<std::vector<LogLine>>(std::move(lines));
  coordinator_->Submit(WriteOp{
      [this, node_id, staged](Txn& txn) {
        if (txn.FindNode(node_id) == nullptr) {
          return absl::NotFoundError(
              absl::StrCat("node_id: no node ", Quote(node_id)));
        }
        *staged = logs_->Stage(txn, node_id, std::move(*staged));
        return absl::OkStatus();
      },
      [this, node_id, staged, done = std::move(done)](const absl::Status& s) {
        if (s.ok()) logs_->Install(node_id, std::move(*staged));
        done(s);
      }});
}

absl::StatusOr<std::vector<std::string>> TelemetryManager::ResolveScope(
    const LogScope& scope) const {
  return cluster_->Read([&](const ClusterState& state)
                            -> absl::StatusOr<std::vector<std::string>> {
    std::vector<std::string> nodes;
    if (!scope.node_id.empty()) {
      if (state.snapshot->FindNode(scope.node_id) == nullptr) {
        return absl::NotFoundError(
            absl::StrCat("node_id: no node ", Quote(scope.node_id)));
      }
      nodes.push_back(scope.node_id);
    } else if (!scope.slice_name.empty()) {
      auto slice = state.snapshot->GetSlice(scope.slice_name);
      if (!slice.ok()) {
        return absl::NotFoundError(
            absl::StrCat("slice_name: no slice ", Quote(scope.slice_name)));
      }
      for (const std::string& id : slice->info.node_ids) {
        if (!id.empty()) nodes.push_back(id);
      }
    } else if (!scope.placement_group_id.empty()) {
      const PlacementGroup* pg = state.pgs.Find(scope.placement_group_id);
      if (pg == nullptr) {
        return absl::NotFoundError(
            absl::StrCat("placement_group_id: no placement group ",
                         Quote(scope.placement_group_id)));
      }
      absl::btree_set<std::string> unique;
      for (const PlacedBundle& b : pg->bundles) {
        if (!b.node_id.empty()) unique.insert(b.node_id);
      }
      nodes.assign(unique.begin(), unique.end());
    } else {
      nodes.reserve(state.snapshot->num_nodes());
      for (uint32_t i = 0; i < state.snapshot->index_end(); ++i) {
        if (!state.snapshot->has_node(i)) continue;
        nodes.push_back(state.snapshot->node(i).node.node_id);
      }
    }
    return nodes;
  });
}

}  // namespace sliced::server
