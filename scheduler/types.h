// Domain types shared by every layer of sliced: nodes, their labels and
// resources, in the engine's fixed-point representation.
//
// Plain value types; no synchronisation of their own.
#ifndef SLICED_SCHEDULER_TYPES_H_
#define SLICED_SCHEDULER_TYPES_H_

#include <cstdint>
#include <limits>
#include <string>

#include "absl/container/btree_map.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "base/flat_map.h"

namespace sliced::scheduler {

// Resources are fixed point in the engine: one unit is 1/10000 of the wire
// value, as in Ray. Fit checks compare these integers, never doubles.
inline constexpr int64_t kResourceScale = 10000;

// The largest wire value accepted for one resource (100 TB of `memory` in
// bytes): 1e18 units, so one amount fits int64, but a sum of ten does not
// (nor a zone's `memory`): sums of amounts go through AddAmounts.
inline constexpr double kMaxResourceValue = 1e14;

// a + b for amounts (each >= 0), at most INT64_MAX instead of wrapping. A
// saturated sum is larger than any one node's amount, so it fits nowhere.
inline int64_t AddAmounts(int64_t a, int64_t b) {
  return b > std::numeric_limits<int64_t>::max() - a
             ? std::numeric_limits<int64_t>::max()
             : a + b;
}

// Label map, ordered so that anything derived from it is deterministic. A
// sorted vector (base/flat_map.h): every node keeps one, so its size is
// what 100k nodes cost.
using Labels = FlatMap<std::string, std::string>;

// Resource name -> fixed-point amount, in name order.
using ResourceSet = FlatMap<std::string, int64_t>;

// Converts a wire value to fixed point.
// Returns InvalidArgument (message names `what` and the rule) when the value is
// NaN, infinite, negative, above kMaxResourceValue, or finer than 1/10000.
absl::StatusOr<int64_t> ToFixedPoint(double value, absl::string_view what);

// Converts a fixed-point amount back to its wire value.
double FromFixedPoint(int64_t amount);

enum class NodeState {
  kAlive,     // takes new placements
  kDraining,  // keeps its placements, takes no new ones
  kDead,      // missed its heartbeat lease or was reported dead
};

absl::string_view NodeStateName(NodeState state);

// One Ray node (one VM; one TPU VM host for TPU nodes).
struct Node {
  std::string node_id;
  std::string address;
  Labels labels;
  ResourceSet resources;  // total capacity
  NodeState state = NodeState::kAlive;
  // Why the node's agent reported the host unhealthy; "" when healthy.
  // Independent of `state` (the lease): a quarantined node takes no new
  // placements and its groups are rescheduled, as for a DEAD node.
  std::string quarantine_reason;
  // DEAD, and DRAINING when it died: it comes back DRAINING (a heartbeat or
  // a registration never lifts a drain; only UndrainNode does). Set and
  // cleared by MoveToState().
  bool drain_kept = false;

  friend bool operator==(const Node&, const Node&) = default;
};

// Moves `node` to `state`, keeping a drain across DEAD: a DRAINING node
// that dies remembers it (drain_kept), and comes back DRAINING.
inline void MoveToState(Node& node, NodeState state) {
  if (state == NodeState::kDead) {
    node.drain_kept = node.drain_kept || node.state == NodeState::kDraining;
  } else {
    if (node.drain_kept && state == NodeState::kAlive) {
      state = NodeState::kDraining;
    }
    node.drain_kept = false;
  }
  node.state = state;
}

// ALIVE and not quarantined: the node may take new placements.
inline bool TakesPlacements(const Node& node) {
  return node.state == NodeState::kAlive && node.quarantine_reason.empty();
}

// DRAINING and not quarantined: the node takes no new placements but keeps
// the ones it has (a pinned bundle, one that is already there, included).
inline bool StaysOn(const Node& node) {
  return node.state == NodeState::kDraining && node.quarantine_reason.empty();
}

// Why `node` takes no placements, e.g. "DRAINING" or "quarantined (slice
// error detected)"; "" when it does.
std::string WhyNoPlacements(const Node& node);

// Ray's default label keys.
inline constexpr absl::string_view kLabelNodeId = "ray.io/node-id";
inline constexpr absl::string_view kLabelAcceleratorType =
    "ray.io/accelerator-type";
inline constexpr absl::string_view kLabelMarketType = "ray.io/market-type";
inline constexpr absl::string_view kLabelZone = "ray.io/availability-zone";
inline constexpr absl::string_view kLabelRegion = "ray.io/availability-region";
inline constexpr absl::string_view kLabelNodeGroup = "ray.io/node-group";
inline constexpr absl::string_view kLabelTpuTopology = "ray.io/tpu-topology";
inline constexpr absl::string_view kLabelTpuSliceName = "ray.io/tpu-slice-name";
inline constexpr absl::string_view kLabelTpuWorkerId = "ray.io/tpu-worker-id";
inline constexpr absl::string_view kLabelTpuPodType = "ray.io/tpu-pod-type";
// sliced's own: spot, flex-start, reserved or on-demand.
inline constexpr absl::string_view kLabelCapacityTier =
    "sliced.io/capacity-tier";
// sliced's own: a TPU host's position in its slice's host grid, "x-y-z"
// (its lowest chip coordinate / the host's chip box), set by the node agent
// from libtpu's chip coordinates.
inline constexpr absl::string_view kLabelTpuHostCoords =
    "sliced.io/tpu-host-coords";
// sliced's own (TPU7x dynamic slicing, issue 16): the physical block a
// sub-block (a 4x4x4 cube of 16 hosts) belongs to, from GKE's
// cloud.google.com/gce-topology-block; cubes of one block can be stitched
// into a larger slice.
inline constexpr absl::string_view kLabelTpuBlock = "sliced.io/tpu-block";
// sliced's own: the health of the host's partition (GKE's
// cloud.google.com/gke-tpu-partition-<shape>-state); a slice with a host
// whose partition is not HEALTHY is not intact.
inline constexpr absl::string_view kLabelTpuPartitionState =
    "sliced.io/tpu-partition-state";

// Resource names.
inline constexpr absl::string_view kResourceCpu = "CPU";
inline constexpr absl::string_view kResourceMemory = "memory";
inline constexpr absl::string_view kResourceTpu = "TPU";

}  // namespace sliced::scheduler

#endif  // SLICED_SCHEDULER_TYPES_H_
