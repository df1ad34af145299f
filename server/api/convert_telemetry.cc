#include "server/api/convert_telemetry.h"

#include "absl/strings/str_cat.h"
#include "server/api/convert_common.h"
#include "server/core/telemetry_manager.h"

namespace sliced::server::api {

std::vector<NodeTpuMetrics> MetricsFromProto(
    const v1::ReportTpuMetricsRequest& request) {
  std::vector<NodeTpuMetrics> out;
  out.reserve(request.nodes_size());
  for (const v1::NodeTpuMetrics& in : request.nodes()) {
    NodeTpuMetrics& node = out.emplace_back();
    node.node_id = in.node_id();
    for (const v1::ChipMetrics& c : in.chips()) {
      ChipMetrics& chip = node.chips.emplace_back();
      chip.chip_index = c.chip_index();
      // Unset stays unset: no series, rather than a 0 that reads as idle.
      if (c.has_tensorcore_utilization())
        chip.tensorcore_utilization = c.tensorcore_utilization();
      if (c.has_duty_cycle()) chip.duty_cycle = c.duty_cycle();
      if (c.has_hbm_used_bytes()) chip.hbm_used_bytes = c.hbm_used_bytes();
      if (c.has_hbm_total_bytes()) chip.hbm_total_bytes = c.hbm_total_bytes();
      if (c.has_memory_bandwidth_utilization()) {
        chip.memory_bandwidth_utilization = c.memory_bandwidth_utilization();
      }
    }
  }
  return out;
}

absl::StatusOr<LogSeverity> SeverityFromProto(int severity,
                                              absl::string_view field) {
  switch (severity) {
    case v1::LOG_SEVERITY_UNSPECIFIED:
      return LogSeverity::kUnspecified;
    case v1::INFO:
      return LogSeverity::kInfo;
    case v1::WARNING:
      return LogSeverity::kWarning;
    case v1::ERROR:
      return LogSeverity::kError;
    case v1::FATAL:
      return LogSeverity::kFatal;
  }
  return absl::InvalidArgumentError(
      absl::StrCat(field, ": unknown value ", severity));
}

absl::StatusOr<std::vector<LogLine>> LogLinesFromProto(
    const v1::AppendLogsRequest& request) {
  if (request.lines_size() > kMaxLinesPerAppend) {
    return absl::InvalidArgumentError(
        absl::StrCat("lines: at most ", kMaxLinesPerAppend, " per call, got ",
                     request.lines_size()));
  }
  std::vector<LogLine> out;
  out.reserve(request.lines_size());
  for (int i = 0; i < request.lines_size(); ++i) {
    const v1::LogLine& in = request.lines(i);
    if (static_cast<int>(in.text().size()) > kMaxLineBytes) {
      return absl::InvalidArgumentError(
          absl::StrCat("lines[", i, "].text: at most ", kMaxLineBytes,
                       " bytes, got ", in.text().size()));
    }
    LogLine& line = out.emplace_back();
    auto severity = SeverityFromProto(in.severity(),
                                      absl::StrCat("lines[", i, "].severity"));
    if (!severity.ok()) return severity.status();
    line.severity = *severity;
    line.text = in.text();
    if (in.has_time()) {
      auto time = FromTimestamp(in.time(), absl::StrCat("lines[", i, "].time"));
      if (!time.ok()) return time.status();
      line.time = *time;
    }
  }
  return out;
}

v1::LogSeverity SeverityToProto(LogSeverity severity) {
  switch (severity) {
    case LogSeverity::kUnspecified:
      return v1::LOG_SEVERITY_UNSPECIFIED;
    case LogSeverity::kInfo:
      return v1::INFO;
    case LogSeverity::kWarning:
      return v1::WARNING;
    case LogSeverity::kError:
      return v1::ERROR;
    case LogSeverity::kFatal:
      return v1::FATAL;
  }
  return v1::LOG_SEVERITY_UNSPECIFIED;
}

void LogLineToProto(const LogLine& line, v1::LogLine* out) {
  ToTimestamp(line.time, out->mutable_time());
  out->set_severity(SeverityToProto(line.severity));
  out->set_text(line.text);
  out->set_node_id(line.node_id);
}

void SummaryToProto(const ClusterSummary& s,
                    v1::GetClusterSummaryResponse* out) {
  for (const auto& [key, group] : s.slices) {
    const auto& [accel, topo, tier, zone] = key;
    v1::FreeCapacity* row = out->add_free();
    row->set_accelerator_type(accel);
    row->set_topology(topo);
    row->set_tier(tier);
    row->set_zone(zone);
    row->set_free_chips(group.free_chips);
    row->set_free_slices(group.free_slices);
    row->set_total_slices(group.total_slices);
  }
  out->mutable_nodes_by_state()->insert(s.nodes_by_state.begin(),
                                        s.nodes_by_state.end());
  out->set_pending_placement_groups(s.pending);
  out->mutable_pending_shapes()->Assign(s.pending_shapes.begin(),
                                        s.pending_shapes.end());
  out->set_fragmentation(s.fragmentation);
  for (const auto& [key, free] : s.free_subslices) {
    v1::FreeSubslices* row = out->add_free_subslices();
    row->set_accelerator_type(key.first);
    row->set_topology(key.second);
    row->set_free(free);
  }
  out->set_subslice_fragmentation(s.subslice_fragmentation);
}

}  // namespace sliced::server::api
