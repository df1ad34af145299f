// Label-domain gangs (Ray's topology_strategy): places a generic gang so
// that its bundles share label values level by level, outer level first
// (solver.h, TopologyLevel). Engine-internal: include only from scheduler/
// (and its tests).
//
// Thread-safety: pure functions of their arguments (they only read the
// snapshot; each call keeps its own overlay).
#ifndef SLICED_SCHEDULER_INTERNAL_TOPOLOGY_H_
#define SLICED_SCHEDULER_INTERNAL_TOPOLOGY_H_

#include <vector>

#include "scheduler/internal/gang_placer.h"
#include "scheduler/internal/solver_util.h"
#include "scheduler/labels.h"
#include "scheduler/solver.h"

namespace sliced::scheduler::internal {

// Domains tried per group of bundles before the group gives up (the
// diagnosis says when this bound cut the search).
inline constexpr int kMaxDomainTries = 64;

// Places `bundles` by `levels` (valid: ValidateRequest). Steps, per level:
//   1. Groups: the bundles of the domain above in consecutive groups of
//      bundles_per_domain (all of them when 0; one each for (STRICT_)SPREAD).
//   2. Domains per group: the values of the level's label on nodes that
//      take placements, inside the domain above and the priority; a group
//      with a pinned bundle has only its pinned node's value. Ruled out, and
//      counted per reason: a value another group of this gang took; a slice
//      that is not intact (ray.io/tpu-slice-name); too little total, then
//      too little free, of a resource the group asks for (summed over the
//      domain's nodes). The rest in best-fit order: least free of the
//      group's main resource (TPU, GPU, CPU, memory, else its first), then
//      value.
//   3. Each domain in order (at most kMaxDomainTries): the next level
//      inside it, or at the last level PlaceGeneric() (domains.h) with the
//      chosen values ANDed into every selector; the first that holds the
//      group wins. Later groups see what earlier ones took.
//   4. A group that fits no domain undoes the level's groups: the level
//      fails, except PACK / SPREAD, which then drop the level.
// Placed: a node per bundle, the summary naming the chosen domains.
// Otherwise one diagnosis step per level (domains considered, fitting,
// rejected per reason) and the summary of the first group that fit nowhere.
// Infeasible when the first level has fewer domains big enough for a group
// (by total resources) than it has groups.
Attempt PlaceTopology(const GangContext& ctx,
                      const std::vector<Bundle>& bundles,
                      const LabelSelector* priority,
                      const std::vector<TopologyLevel>& levels);

}  // namespace sliced::scheduler::internal

#endif  // SLICED_SCHEDULER_INTERNAL_TOPOLOGY_H_
