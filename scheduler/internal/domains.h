// Domain choice for generic gangs: places the gang across the whole cluster,
// then for a small gang spread over several zones also inside each zone
// alone, and keeps the placement that costs the cluster least. Engine-
// internal: include only from scheduler/ (and its tests).
//
// Thread-safety: pure functions of their arguments (they only read the
// snapshot).
#ifndef SLICED_SCHEDULER_INTERNAL_DOMAINS_H_
#define SLICED_SCHEDULER_INTERNAL_DOMAINS_H_

#include <compare>
#include <cstdint>
#include <vector>

#include "scheduler/internal/gang_placer.h"
#include "scheduler/internal/solver_util.h"
#include "scheduler/labels.h"
#include "scheduler/solver.h"

namespace sliced::scheduler::internal {

// Gangs up to this many bundles that land in several zones are also tried
// one zone at a time (the cost is one placement per zone).
inline constexpr size_t kZoneDomainMaxBundles = 64;

// How much a placement costs, compared lexicographically (lower is better):
// whole free slices it breaks, CPU-only bundles it puts on TPU nodes, how far
// it strays from the strategy (PACK: nodes used; SPREAD: bundles sharing a
// node), zones it spans, idle nodes it opens, then the sum of the nodes'
// ranks.
struct DomainScore {
  int64_t slices_broken = 0;
  int64_t cpu_on_tpu = 0;
  int64_t strategy_cost = 0;
  int64_t zones = 0;
  int64_t fresh_nodes = 0;
  int64_t rank_sum = 0;
  friend auto operator<=>(const DomainScore&, const DomainScore&) = default;
};

// The score of `placed`, a placement of `bundles` with `strategy`.
// REQUIRES: placed.placed.
DomainScore ScorePlacement(const SnapshotState& snap, Strategy strategy,
                           const std::vector<Bundle>& bundles,
                           const Attempt& placed);

// Places a generic gang (one attempt). Steps:
//   1. PlaceGang() across the whole cluster.
//   2. PACK with several bundles: also the whole gang on one node
//      (PlaceGangOnOneNode()); kept unless it scores worse than step 1.
//   3. Unless STRICT_PACK, or more than kZoneDomainMaxBundles bundles, or
//      the placement spans at most one zone: PlaceGang() in each zone alone
//      (zones in name order); a strictly lower score wins, so ties keep the
//      cluster-wide placement, then the first zone by name.
// Returns the chosen placement, or step 1's failure.
Attempt PlaceGeneric(const GangContext& ctx, const std::vector<Bundle>& bundles,
                     const LabelSelector* priority);

}  // namespace sliced::scheduler::internal

#endif  // SLICED_SCHEDULER_INTERNAL_DOMAINS_H_
