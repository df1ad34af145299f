// What the web view reads (docs/ui.md): the slice map aggregated per shape
// and zone, one page of slices with each host's state and holders, and one
// page of the queue in order. Pure functions: SliceGroups and SliceMap read
// an immutable snapshot (callers take it under Cluster::Read and let the
// lock go before the pass, so a page never holds up a commit); Queue reads
// the committed state under Cluster::Read.
//
// Scale: SliceGroups is one pass over the slices (no per-host copies);
// SliceMap and Queue copy only the page they return, so the web view never
// builds 100k host cells at once.
//
// Thread-safe (pure).
#ifndef SLICED_SERVER_CORE_FLEET_VIEW_H_
#define SLICED_SERVER_CORE_FLEET_VIEW_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "scheduler/slices.h"
#include "scheduler/snapshot.h"
#include "scheduler/types.h"
#include "server/core/placement_group.h"
#include "server/core/txn.h"

namespace sliced::server {

// A slice's state on the map: kFree (intact, no host held), kHeld (intact,
// every host held), kPartial (intact, some hosts held: a carved sub-slice or
// CPU work), kBroken (not intact: a worker missing, DEAD, DRAINING or
// quarantined, a bad label).
enum class SliceStatus { kFree, kHeld, kPartial, kBroken };
absl::string_view SliceStatusName(SliceStatus status);

// Slices of one (accelerator type, topology, tier, zone).
struct SliceGroupRow {
  std::string accelerator_type;
  std::string topology;
  std::string pod_type;
  std::string tier;
  std::string zone;
  int64_t hosts_per_slice = 0;
  int64_t total = 0, free = 0, held = 0, partial = 0, broken = 0;
  int64_t total_chips = 0, free_chips = 0;
  // The shape's fragmentation, as Summarize defines it (per accelerator
  // type and topology, over every tier and zone): the share of the shape's
  // free chips that are not in a whole free slice.
  double fragmentation = 0;
};

// Every slice group, sorted by (accelerator type, topology, tier, zone).
std::vector<SliceGroupRow> SliceGroups(
    const scheduler::InventorySnapshot& snapshot);

struct SliceFilter {
  // "" matches any; set fields must all match.
  std::string accelerator_type;
  std::string topology;
  std::string tier;
  std::string zone;
  std::string status;  // a SliceStatusName, or "" for any
};

struct HostCell {
  std::string node_id;  // "" for a missing worker
  std::string position;
  scheduler::NodeState state = scheduler::NodeState::kAlive;
  std::string quarantine_reason;
  std::vector<std::string> pg_ids;  // groups holding it, sorted
};

struct SliceRow {
  scheduler::SliceInfo info;
  std::string tier;
  std::string zone;
  SliceStatus status = SliceStatus::kFree;
  std::vector<std::string> pg_ids;  // groups holding any host, sorted
  std::vector<HostCell> hosts;      // aligned with info.node_ids
  std::string host_grid;            // e.g. "2x2x1"; "" for an unknown shape
};

struct SliceMapPage {
  std::vector<SliceRow> slices;
  int64_t total = 0;  // slices matching the filter
  std::string next;   // last name of the page when more follow, else ""
};

// The slices matching `filter` with names after `after`, at most `limit`
// (REQUIRES: > 0), in name order.
SliceMapPage SliceMap(const scheduler::InventorySnapshot& snapshot,
                      const SliceFilter& filter, absl::string_view after,
                      int limit);

struct QueuePage {
  std::vector<PlacementGroup> groups;  // in queue order
  int64_t total = 0;                   // queued groups
  int64_t first_position = 0;          // queue position of groups[0]
};

// Queued groups (PENDING, RESCHEDULING, INFEASIBLE) in queue order (priority
// descending, then arrival), skipping `offset`, at most `limit`.
QueuePage Queue(const ClusterState& state, int64_t offset, int limit);

}  // namespace sliced::server

#endif  // SLICED_SERVER_CORE_FLEET_VIEW_H_
