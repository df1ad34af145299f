// What is free, what is fragmented and what is waiting: one pass over the
// committed state, shared by GetClusterSummary, the web view and the
// /metrics collector.
//
// Thread-safe: holds the cluster's read lock only to read the queue.
#ifndef SLICED_SERVER_CORE_CLUSTER_SUMMARY_H_
#define SLICED_SERVER_CORE_CLUSTER_SUMMARY_H_

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <tuple>
#include <vector>

#include "absl/time/time.h"
#include "server/core/cluster.h"
#include "server/core/txn.h"

namespace sliced::server {

struct ClusterSummary {
  // TPU slices grouped by (accelerator type, topology, tier, zone).
  struct SliceGroup {
    int64_t total_slices = 0;
    int64_t free_slices = 0;  // whole: intact and no bundle on any host
    int64_t total_chips = 0;
    int64_t free_chips = 0;  // on the group's hosts, whole slice or not
  };
  std::map<std::tuple<std::string, std::string, std::string, std::string>,
           SliceGroup>
      slices;
  // TPU chips per (accelerator type, zone), over every TPU node.
  std::map<std::pair<std::string, std::string>, std::pair<int64_t, int64_t>>
      chips_total_free;
  // Fragmentation per (accelerator type, topology): the share of free chips
  // on that shape's hosts that are not in a whole free slice (0 = every free
  // chip can be handed out as a slice; 1 = none can). Shapes with no free
  // chips are 0. `fragmentation` is the same over every slice.
  std::map<std::pair<std::string, std::string>, double> fragmentation_by_shape;
  double fragmentation = 0;
  // Sub-slices (issue 16): per (accelerator type, topology), free aligned
  // boxes over every intact slice (scheduler/subslices.h); and per parent
  // (accelerator type, topology), the share of free chips outside each
  // slice's largest free aligned box (or the whole slice, when free), with
  // `subslice_fragmentation` the same over every slice.
  std::map<std::pair<std::string, std::string>, int64_t> free_subslices;
  std::map<std::pair<std::string, std::string>, double>
      subslice_fragmentation_by_shape;
  double subslice_fragmentation = 0;
  std::map<std::string, int64_t> nodes_by_state;  // "ALIVE", ...
  int64_t pending = 0;  // PENDING + RESCHEDULING groups
  double oldest_pending_seconds = 0;
  // What the queue waits for, e.g. "2 x v6e-16 slice (1 group)" or
  // "4 bundles {CPU: 2} (3 groups)" — the signal an autoscaler needs.
  std::vector<std::string> pending_shapes;
};

// The summary of `cluster` at `now`, and the snapshot it describes. Only
// the queue is read under the cluster's lock; the walk over every node and
// slice (~0.1 s at 100k nodes, plus the sub-slice boxes) runs on the
// immutable snapshot after, so that a /metrics scrape or a web view poll
// never holds up the writer (it did: at 100k nodes each scrape stalled
// placements ~0.1 s; bench/RESULTS.md).
struct SummaryAt {
  ClusterSummary summary;
  std::shared_ptr<const scheduler::InventorySnapshot> snapshot;
};
SummaryAt Summarize(const Cluster& cluster, absl::Time now);

}  // namespace sliced::server

#endif  // SLICED_SERVER_CORE_CLUSTER_SUMMARY_H_
