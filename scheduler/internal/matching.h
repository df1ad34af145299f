// Matching: the exact fallback of STRICT_SPREAD. When greedy placement leaves
// bundles without a distinct node, augmenting paths (Kuhn's algorithm) over
// (bundle, node) edges find an assignment whenever one exists, within a
// budget of edge visits. Engine-internal: include only from scheduler/ (and
// its tests).
//
// Thread-safety: a pure function of its arguments.
#ifndef SLICED_SCHEDULER_INTERNAL_MATCHING_H_
#define SLICED_SCHEDULER_INTERNAL_MATCHING_H_

#include <cstdint>
#include <optional>
#include <vector>

#include "absl/types/span.h"
#include "scheduler/internal/candidates.h"
#include "scheduler/internal/snapshot_state.h"
#include "scheduler/internal/solver_util.h"
#include "scheduler/snapshot.h"
#include "scheduler/solver.h"

namespace sliced::scheduler::internal {

// Edge visits allowed to MatchDistinct() before it gives up.
inline constexpr int64_t kMatchingBudget = 4'000'000;

// What MatchDistinct() works on.
struct MatchingProblem {
  const std::vector<Bundle>* bundles = nullptr;
  absl::Span<const int> group;  // candidate group per bundle
  const CandidateGroups* candidates = nullptr;
  // Node index per bundle from the greedy pass; -1 when unplaced. Pinned
  // bundles keep their node.
  absl::Span<const int64_t> start;
};

// Assigns every bundle of `problem` a distinct node that matches its
// selector (its group's candidates, in rank order) and has room for it
// alone, starting from the greedy assignment and keeping pinned bundles in
// place. Steps:
//   1. Seed: the greedy assignment; pinned bundles' resources are taken.
//   2. Hall's condition: nullopt at once when the movable bundles of the
//      groups greedy left a bundle of have fewer distinct nodes that fit
//      one of them than they are, or a group fewer than its bundles.
//   3. For each unassigned bundle, search an augmenting path (depth first,
//      candidates in rank order), re-homing bundles that are not pinned.
// Returns the node index per bundle, or nullopt when some bundle has no
// augmenting path or kMatchingBudget edge visits run out.
std::optional<std::vector<uint32_t>> MatchDistinct(
    const SnapshotState& snap, const Released& released,
    const MatchingProblem& problem);

}  // namespace sliced::scheduler::internal

#endif  // SLICED_SCHEDULER_INTERNAL_MATCHING_H_
