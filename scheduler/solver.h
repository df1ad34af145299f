// The placement solver: decides where a gang (placement group) goes on an
// InventorySnapshot. Pure: no I/O, never mutates the snapshot (it keeps its
// own overlay of what this decision uses), and deterministic: ties are broken
// by node index (= node id order) or slice index (= slice name order), never
// by hash order or randomness. The same snapshot and request always give the
// same decision.
//
// Thread-safety: Solve() is a pure function; call it from any thread on any
// shared snapshot.
#ifndef SLICED_SCHEDULER_SOLVER_H_
#define SLICED_SCHEDULER_SOLVER_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "scheduler/labels.h"
#include "scheduler/snapshot.h"
#include "scheduler/tpu.h"
#include "scheduler/types.h"

namespace sliced::scheduler {

// Ray placement-group strategies.
enum class Strategy {
  kPack,          // as few nodes as possible (soft)
  kSpread,        // distinct nodes where possible (soft)
  kStrictPack,    // all bundles on one node, else fail
  kStrictSpread,  // every bundle on a distinct node, else fail
};

absl::string_view StrategyName(Strategy strategy);

struct Bundle {
  ResourceSet resources;
  LabelSelector selector;
  // Non-empty: this bundle stays on that node (re-placing only the lost
  // bundles of a PG). The solver checks the node is ALIVE or DRAINING (a
  // draining node keeps what it holds), not quarantined and still has room
  // (not the bundle's selector: it is already there); otherwise the gang is
  // not placed. A pinned
  // bundle on a DEAD or quarantined node is the caller's mistake to avoid:
  // it makes the request Unschedulable. Not allowed with a slice
  // requirement (slices are re-placed whole).
  std::string pinned_node_id;

  friend bool operator==(const Bundle&, const Bundle&) = default;
};

// Whether a slice request may be carved out of a larger slice (issue 16).
enum class Subslicing {
  kNever,           // whole free slices of the exact shape only
  kIfNoExactShape,  // carve only when no slice of the exact shape exists
  kAllowed,         // whole free slices of the shape first, then carve
};

absl::string_view SubslicingName(Subslicing subslicing);

// Ray's SlicePlacementGroup: num_slices whole free intact slices of one shape,
// or (subslicing) aligned sub-boxes of larger intact slices of the same
// generation: see CarveSlices() in scheduler/internal/carver.h.
struct SliceRequirement {
  TpuGeneration generation = TpuGeneration::kV6e;
  std::string topology;
  int num_slices = 1;
  // Per host bundle; empty means {"TPU": chips_per_host *
  // tpu_resource_per_chip}.
  ResourceSet resources_per_host;
  // Every host of a chosen slice must match.
  LabelSelector selector;
  // TPU resources one chip counts for (Ray's tpu_resource_per_chip): 1, or
  // 2 on v7x hosts that advertise each TensorCore as a device.
  int tpu_resource_per_chip = 1;
  Subslicing subslicing = Subslicing::kNever;

  friend bool operator==(const SliceRequirement&,
                         const SliceRequirement&) = default;
};

// One level of a label-domain gang (Ray's topology_strategy), outer level
// first. Within each domain of the level above (the whole cluster for the
// first), the bundles share values of `label`, any values, as `strategy`
// says:
//   STRICT_PACK: all of them one value; with bundles_per_domain = k, each
//     consecutive group of k bundles one value, and no two groups the same
//     (a domain is a unit, like a slice: 4 groups of 4 = 4 domains).
//   STRICT_SPREAD: every bundle a distinct value.
//   PACK / SPREAD: the STRICT_ rule when it can be met, else the level is
//     dropped (the gang may span values).
// Nodes without the label are in no domain. A domain is chosen best-fit
// (the least free of the group's main resource that still holds it; ties by
// value). For ray.io/tpu-slice-name only intact slices are domains. The
// node level (Ray's "ray.io/node-id") is PlacementRequest::strategy.
struct TopologyLevel {
  std::string label;
  Strategy strategy = Strategy::kStrictPack;
  int bundles_per_domain = 0;  // 0: all bundles of the domain above

  friend bool operator==(const TopologyLevel&, const TopologyLevel&) = default;
};

// At most this many topology levels per request.
inline constexpr size_t kMaxTopologyLevels = 4;

struct PlacementRequest {
  // With a slice requirement: one bundle per host, slice-major (bundle
  // s * hosts + i lands on worker i of the s-th chosen slice); when empty the
  // solver expands them from resources_per_host.
  std::vector<Bundle> bundles;
  Strategy strategy = Strategy::kPack;  // ignored with a slice requirement
  // Label domains, outer first (TopologyLevel); empty: none. Not with a
  // slice requirement. Apply to every bundle list (fallbacks too).
  std::vector<TopologyLevel> topology;
  std::optional<SliceRequirement> slice;
  // Alternative bundle lists, tried in order only when the primary cannot be
  // placed (Ray's fallback_strategy). With a slice requirement each list is
  // another set of per-host bundles for the same slices.
  std::vector<std::vector<Bundle>> fallbacks;
  // Compute-class priorities, ANDed with every bundle's selector; the whole
  // gang goes on the first priority that holds it. Empty: no class. The
  // primary bundle list is tried on every priority before any fallback.
  std::vector<LabelSelector> priorities;
  // When non-empty, the allocations this PG holds in the snapshot count as
  // free while solving (re-placing a PG whose old allocations the caller
  // releases in the same commit). Slices it holds are not re-offered.
  std::string replacing_pg_id;

  friend bool operator==(const PlacementRequest&,
                         const PlacementRequest&) = default;
};

// One thing a step ruled out, and how many.
struct Rejection {
  std::string reason;  // e.g. "held", "insufficient free CPU"
  int64_t count = 0;

  friend bool operator==(const Rejection&, const Rejection&) = default;
};

// One step of the pipeline for one attempt (bundle list x priority).
struct DiagnosisStep {
  std::string step;        // e.g. "priority 0: v6e-16 slices", "bundle 3 nodes"
  int64_t considered = 0;  // nodes or slices looked at
  int64_t accepted = 0;    // passed every check
  std::vector<Rejection> rejected;  // by reason, in a fixed order

  friend bool operator==(const DiagnosisStep&, const DiagnosisStep&) = default;
};

// A not-placed summary beyond this is cut (a group's pending reason).
inline constexpr size_t kMaxSummaryBytes = 4096;

struct Diagnosis {
  // One line, e.g. "0/12 v6e-16 slices free: 9 held, 2 not intact (s10: node
  // s10-w3 is DEAD; ...), 1 in zone us-east5-a excluded by selector" (the
  // first slice that is not intact says why). At most kMaxSummaryBytes and
  // a note of the full size when not placed.
  std::string summary;
  std::vector<DiagnosisStep> steps;

  friend bool operator==(const Diagnosis&, const Diagnosis&) = default;
};

struct Decision {
  enum Outcome {
    kPlaced,         // bundle_nodes (and slice_names) say where
    kUnschedulable,  // does not fit now; might when capacity frees up
    kInfeasible,     // can never fit this inventory, even if all were free
  };
  Outcome outcome = kUnschedulable;
  std::vector<std::string> bundle_nodes;  // node id per bundle, bundle order
  std::vector<std::string> slice_names;   // per slice index (slice requests)
  int priority_index = -1;  // which priority held the gang; -1 without any
  int fallback_index = -1;  // -1: primary bundle list; i: fallbacks[i]
  Diagnosis diagnosis;
  // Placed: what it had to do that the rules avoid, e.g. "2 CPU-only
  // bundle(s) on whole free TPU capacity: no other node fits them" (also at
  // the end of the summary); "" when nothing.
  std::string placement_note;

  friend bool operator==(const Decision&, const Decision&) = default;
};

absl::string_view OutcomeName(Decision::Outcome outcome);

// Checks a request's shape: at least one bundle (or a slice requirement),
// non-negative resources, no empty bundle, a valid slice topology,
// num_slices >= 1, slice bundle counts of num_slices * hosts, no pinned
// bundles with a slice requirement; topology levels: at most
// kMaxTopologyLevels, valid distinct labels other than ray.io/node-id, no
// slice requirement, bundles_per_domain >= 0, only with (STRICT_)PACK, and
// dividing the bundles of each domain above in every bundle list. Returns
// InvalidArgument naming the field.
absl::Status ValidateRequest(const PlacementRequest& request);

// Decides where `request` goes. An invalid request (see ValidateRequest) is
// kInfeasible with the validation message as summary.
//
// Pipeline (per bundle list, per priority, first success wins):
//  Slice requests (O(log n) via the free-slice index):
//   1. Pre-filter: the free intact slices of the shape from the index, by
//      (tier, zone) key; keys whose tier/zone contradict the selectors are
//      dropped whole.
//   2. Domains: zones. Prefer one zone that holds them all: for one slice
//      the zone with the most free slices of the shape (keeps every zone's
//      pool large for zone-pinned requests), for several the zone with the
//      fewest that still holds them (best fit; keeps big pools for bigger
//      multi-slice requests); ties by zone name. Only when no zone holds
//      them all, zones with the most free slices first.
//   3. Fit: within a zone, slices in name order whose every host matches
//      the selectors and has room for its bundle; bundle i -> worker i.
//  Generic requests:
//   1. Candidates: per distinct selector, a node bitset from the label
//      index, intersected with the snapshot's rank bitsets (ALIVE only).
//   2. Ranks (lower first). CPU-only bundles: CPU nodes already in use, idle
//      CPU nodes, TPU nodes whose slice is already broken (used, then idle),
//      free single-host TPU slices, hosts of intact multi-host slices that
//      only TPU work holds (whole again when it ends, unless a CPU bundle
//      stays), hosts of free intact multi-host slices (smallest slices
//      first: <= 4 hosts, <= 16, larger).
//      TPU bundles: single-host TPU nodes first (used, idle but not a whole
//      free slice, free single-host slices), then multi-host TPU nodes in
//      the same order, so hosts of free intact multi-host slices come last
//      (smallest first). Nodes with no CPU (TPU) left come after all of
//      these, so scans skip full nodes. A gang with CPU-only bundles is
//      placed in tiers, whatever its strategy: those bundles first see no
//      node of a whole free TPU slice, then free single-host TPU nodes too,
//      then hosts of slices only TPU work holds, then every node. So a CPU bundle lands on a TPU node only when no CPU
//      node fits or its selector asks for TPU nodes, and a free multi-host
//      slice is broken only when nothing else fits (the summary says so).
//   3. Fit the whole gang, bundles largest first (TPU, CPU, memory):
//      PACK: the whole gang on one node (best fit, as Ray's PACK does,
//        scanning at most 1,024 candidates) unless that scores worse (see
//        4) than the greedy placement: nodes this gang already uses first,
//        then best fit among the
//        first 8 fitting candidates of the best rank (least leftover of the
//        bundle's dominant resource); SPREAD: a node this gang does not use
//        yet (same best-fit choice), else the gang's nodes round-robin;
//        STRICT_PACK: best fit of the summed bundle on one node matching
//        every selector; STRICT_SPREAD: distinct nodes, most constrained
//        bundle first, then augmenting paths (bipartite matching) when
//        greedy fails, so it finds a placement whenever one exists.
//   4. Domains: a gang of up to 64 bundles placed across several zones is
//      also placed in each zone alone; the lowest score wins, compared in
//      order: whole free slices broken, CPU-only bundles on TPU nodes, the
//      strategy's own cost (PACK: nodes used; SPREAD: bundles sharing a
//      node), zones spanned, idle nodes opened, sum of ranks; ties keep the
//      cluster-wide placement, then the first zone by name.
//   Pinned bundles are placed first, on their node.
//  Label-domain gangs (request.topology): level by level, outer first,
//  each group of bundles tries the domains of its level best-fit (least
//  free of its main resource first, at most 64 per group), and inside a
//  domain the next level; the innermost places the group by steps 1-4 with
//  the chosen values ANDed into every selector. All groups or none; a
//  group with a pinned bundle keeps its pinned node's domain.
//  On failure, a diagnosis step counts what was ruled out and why.
Decision Solve(const InventorySnapshot& snapshot,
               const PlacementRequest& request);

}  // namespace sliced::scheduler

#endif  // SLICED_SCHEDULER_SOLVER_H_
