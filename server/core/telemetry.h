// The domain model of what node agents send besides heartbeats: libtpu log
// lines and TPU chip telemetry. No protobuf: server/api converts.
//
// Plain value types; no synchronisation of their own.
#ifndef SLICED_SERVER_CORE_TELEMETRY_H_
#define SLICED_SERVER_CORE_TELEMETRY_H_

#include <optional>
#include <string>
#include <vector>

#include "absl/time/time.h"

namespace sliced::server {

enum class LogSeverity { kUnspecified, kInfo, kWarning, kError, kFatal };

// One libtpu log line of one node.
struct LogLine {
  // When the line was written; InfinitePast() when the agent gave none (the
  // daemon stamps it on arrival).
  absl::Time time = absl::InfinitePast();
  LogSeverity severity = LogSeverity::kUnspecified;
  std::string text;
  std::string node_id;

  friend bool operator==(const LogLine&, const LogLine&) = default;
};

// One TPU chip's counters, as the GKE device plugin / libtpu report them;
// nullopt where the agent could not read one (no series is exported for it).
struct ChipMetrics {
  int chip_index = 0;
  std::optional<double> tensorcore_utilization;  // 0..100 %
  std::optional<double> duty_cycle;              // 0..100 %
  std::optional<double> hbm_used_bytes;
  std::optional<double> hbm_total_bytes;
  std::optional<double> memory_bandwidth_utilization;  // 0..100 %

  friend bool operator==(const ChipMetrics&, const ChipMetrics&) = default;
};

struct NodeTpuMetrics {
  std::string node_id;
  std::vector<ChipMetrics> chips;
};

}  // namespace sliced::server

#endif  // SLICED_SERVER_CORE_TELEMETRY_H_
