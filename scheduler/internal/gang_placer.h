// The gang placer: fits a whole generic gang (placement group without a
// slice requirement) into one domain of the cluster (the whole cluster, or
// the nodes a domain selector admits, e.g. one zone), with the request's
// strategy. Engine-internal: include only from scheduler/ (and its tests).
//
// Thread-safety: pure functions of their arguments; each call keeps its own
// overlay and candidate groups and only reads the snapshot.
#ifndef SLICED_SCHEDULER_INTERNAL_GANG_PLACER_H_
#define SLICED_SCHEDULER_INTERNAL_GANG_PLACER_H_

#include <vector>

#include "absl/strings/string_view.h"
#include "scheduler/internal/snapshot_state.h"
#include "scheduler/internal/solver_util.h"
#include "scheduler/labels.h"
#include "scheduler/snapshot.h"
#include "scheduler/solver.h"

namespace sliced::scheduler::internal {

// What every placement of one attempt shares.
struct GangContext {
  const SnapshotState* snap = nullptr;
  const Released* released = nullptr;  // a re-placed PG's allocations
  Strategy strategy = Strategy::kPack;
  absl::string_view label;  // prefix of diagnosis step names, e.g. "primary: "
  // CPU-only bundles are offered only nodes of a lower rank (kNumRanks: all;
  // kCpuRankNoFreeTpu: none of a whole free TPU slice).
  int cpu_rank_limit = kNumRanks;
};

// One placement of the gang, every bundle's selector ANDed with `priority`
// and `domain` (either may be null). Steps:
//   1. Candidates: bundles with the same selector, kind and resources share
//      one candidate group (candidates.h).
//   2. Pinned bundles first, on their node (ALIVE or DRAINING, not
//      quarantined, within the priority, with room; not checked against the
//      bundle's own selector: it is already there).
//   3. The strategy, bundles largest first (TPU, CPU, memory, bundle order):
//      PACK: a node the gang already uses, else best fit among the first 8
//        fitting candidates of the best rank;
//      SPREAD: best fit on a node the gang does not use yet, else the gang's
//        nodes round-robin;
//      STRICT_PACK: best fit of the summed remaining bundles on one node
//        matching every selector (the pinned node when there is one);
//      STRICT_SPREAD: most constrained bundle first (fewest candidates),
//        best fit on distinct nodes; when that leaves bundles over, the
//        augmenting-path matching (matching.h).
//   On failure, ExplainBundle() (diagnosis.h) explains the first bundle that
//   fits nowhere. Returns the node per bundle, or the failure.
Attempt PlaceGang(const GangContext& ctx, const std::vector<Bundle>& bundles,
                  const LabelSelector* priority, const LabelSelector* domain);

// PACK's one-node placement, as Ray's PACK does: the summed gang on one
// node matching every selector, best fit among at most kPackOneNodeScan
// candidates. Not placed (with no diagnosis) when a bundle is pinned or no
// node fits.
Attempt PlaceGangOnOneNode(const GangContext& ctx,
                           const std::vector<Bundle>& bundles,
                           const LabelSelector* priority);

}  // namespace sliced::scheduler::internal

#endif  // SLICED_SCHEDULER_INTERNAL_GANG_PLACER_H_
