// The latest TPU telemetry per node, as node agents report it. Bounded: one
// report per node, dropped when the node leaves the inventory or when it is
// older than the configured age.
//
// Thread-safe.
#ifndef SLICED_SERVER_CORE_TELEMETRY_STORE_H_
#define SLICED_SERVER_CORE_TELEMETRY_STORE_H_

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

  // Forgets a node (removed from the inventory).
  void Forget(const std::string& node_id);

  absl::Duration max_age() const { return max_age_; }

 private:
  const absl::Duration max_age_;
  mutable absl::Mutex mu_;
  absl::btree_map<std::string, Report> reports_ ABSL_GUARDED_BY(mu_);
};

}  // namespace sliced::server

#endif  // SLICED_SERVER_CORE_TELEMETRY_STORE_H_
