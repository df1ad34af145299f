// The latest TPU telemetry per node, as node agents report it, and a short
// recent series per chip for the web view. Bounded: one report and at most
// kSeriesSamples compact samples (whole percents, 5 bytes per chip) per node,
// dropped when the node leaves the inventory or when its last report is
// older than the configured age.
//
// Thread-safe.
#ifndef SLICED_SERVER_CORE_TELEMETRY_STORE_H_
#define SLICED_SERVER_CORE_TELEMETRY_STORE_H_

#include <array>
#include <cstdint>
#include <deque>
#include <optional>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/btree_map.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "server/core/telemetry.h"

namespace sliced::server {

class TelemetryStore {
 public:
  struct Report {
    absl::Time time;
    std::vector<ChipMetrics> chips;  // sorted by chip_index
  };

  // Reports older than `max_age` are not served and are pruned.
  explicit TelemetryStore(absl::Duration max_age) : max_age_(max_age) {}

  // Validates every report (chip index 0..63 unique per node, percentages in
  // 0..100, HBM bytes finite, >= 0 and used <= total) and stores them, all or
  // nothing. InvalidArgument names the field. Known-node checks are the
  // caller's.
  absl::Status Put(const std::vector<NodeTpuMetrics>& nodes, absl::Time now);

  // Fresh reports by node id.
  absl::btree_map<std::string, Report> Fresh(absl::Time now) const;

  // Samples kept per node for Series().
  static constexpr int kSeriesSamples = 30;

  // One chip at one report, in whole percents (rounded); nullopt where the
  // agent reported nothing. HBM is used / total.
  struct ChipSample {
    std::optional<int> tensorcore_utilization;
    std::optional<int> duty_cycle;
    std::optional<int> hbm_used_percent;
    std::optional<int> memory_bandwidth_utilization;
  };
  struct Sample {
    absl::Time time;
    absl::btree_map<int, ChipSample> chips;  // by chip index
  };
  // The node's recent samples, oldest first (empty when it has no fresh
  // report), and its latest report.
  struct Series {
    std::vector<Sample> samples;
    std::optional<Report> latest;
  };
  Series SeriesOf(const std::string& node_id, absl::Time now) const;

  // Forgets a node (removed from the inventory).
  void Forget(const std::string& node_id);

  absl::Duration max_age() const { return max_age_; }

 private:
  const absl::Duration max_age_;
  mutable absl::Mutex mu_;
  // One sample packed: seconds since the Unix epoch, then per chip its index
  // and four percents (255 = not reported).
  struct Packed {
    int64_t unix_seconds = 0;
    std::vector<std::array<uint8_t, 5>> chips;
  };
  absl::btree_map<std::string, Report> reports_ ABSL_GUARDED_BY(mu_);
  absl::btree_map<std::string, std::deque<Packed>> series_ ABSL_GUARDED_BY(mu_);
};

}  // namespace sliced::server

#endif  // SLICED_SERVER_CORE_TELEMETRY_STORE_H_
