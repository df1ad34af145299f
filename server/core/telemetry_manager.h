// The telemetry manager: what node agents report besides heartbeats (TPU
// chip metrics, libtpu log lines) and the cluster summary.
//
//  - TPU metrics are kept in memory only (TelemetryStore): the latest report
//    per known node, pruned by age.
//  - Log lines go through the coordinator into the store's log table (a
//    bounded ring per node, LogStore) and then to followers.
//
// Thread-safety: public methods from any thread; `done` callbacks run on the
// coordinator's writer thread after the commit and must not block.
#ifndef SLICED_SERVER_CORE_TELEMETRY_MANAGER_H_
#define SLICED_SERVER_CORE_TELEMETRY_MANAGER_H_

#include <functional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "server/core/cluster.h"
#include "server/core/cluster_summary.h"
#include "server/core/coordinator.h"
#include "server/core/log_store.h"
#include "server/core/telemetry.h"
#include "server/core/telemetry_store.h"

namespace sliced::server {

// Bounds of one AppendLogs call.
inline constexpr int kMaxLinesPerAppend = 1000;
inline constexpr int kMaxLineBytes = 4096;

// Which nodes a TailLogs call covers: one of node, slice or group, or all.
struct LogScope {
  std::string node_id;
  std::string slice_name;
  std::string placement_group_id;
};

class TelemetryManager {
 public:
  // REQUIRES: every pointer outlives the manager.
  TelemetryManager(Coordinator* coordinator, Cluster* cluster,
                   TelemetryStore* telemetry, LogStore* logs);

  // Stores the reports, all or nothing. NotFound names the first unknown
  // node; InvalidArgument a bad value (TelemetryStore::Put).
  absl::Status ReportMetrics(const std::vector<NodeTpuMetrics>& nodes);

  ClusterSummary Summary() const;

  // Appends `lines` to the node's ring. NotFound for an unknown node.
  // REQUIRES: at most kMaxLinesPerAppend lines of at most kMaxLineBytes.
  void AppendLogs(const std::string& node_id, std::vector<LogLine> lines,
                  std::function<void(const absl::Status&)> done);

  // The node ids `scope` covers. NotFound names the unknown node, slice or
  // group.
  absl::StatusOr<std::vector<std::string>> ResolveScope(
      const LogScope& scope) const;

  LogStore* logs() const { return logs_; }
  TelemetryStore* telemetry() const { return telemetry_; }

 private:
  Coordinator* const coordinator_;
  Cluster* const cluster_;
  TelemetryStore* const telemetry_;
  LogStore* const logs_;
};

}  // namespace sliced::server

#endif  // SLICED_SERVER_CORE_TELEMETRY_MANAGER_H_
