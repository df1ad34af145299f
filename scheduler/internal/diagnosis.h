// Diagnosis: why a step placed nothing. Counts, per reason, the nodes or
// slices a failed step ruled out (the DiagnosisStep a user sees when asking
// why a request is pending) and writes the one-line summary, and decides
// whether the failure is Infeasible (no state of the inventory would help).
// Slow path only: it runs after a placement failed. Engine-internal: include
// only from scheduler/ (and its tests).
//
// Thread-safety: pure functions of their arguments; a Tally belongs to one
// caller.
#ifndef SLICED_SCHEDULER_INTERNAL_DIAGNOSIS_H_
#define SLICED_SCHEDULER_INTERNAL_DIAGNOSIS_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/string_view.h"
#include "scheduler/internal/slice_placer.h"
#include "scheduler/internal/snapshot_state.h"
#include "scheduler/internal/solver_util.h"
#include "scheduler/labels.h"
#include "scheduler/snapshot.h"
#include "scheduler/solver.h"

namespace sliced::scheduler::internal {

// Counts rejections by reason, keeping first-seen order.
class Tally {
 public:
  // Adds n (when non-zero) to `reason`.
  void Add(const std::string& reason, int64_t n = 1);
  std::vector<Rejection> Take() { return std::move(rejected_); }

 private:
  std::vector<Rejection> rejected_;
};

// "9 held, 2 not intact" from the non-zero rejections.
std::string JoinRejections(const std::vector<Rejection>& rejected);

// What a failed generic step could not place: one bundle, or the summed gang
// (STRICT_PACK).
struct UnplacedBundle {
  int64_t index = -1;  // bundle index; -1 for the summed gang (STRICT_PACK)
  const ResourceSet* resources = nullptr;
  const LabelSelector* selector = nullptr;  // the effective selector
  // STRICT_SPREAD: nodes the gang already uses do not count as fitting.
  bool distinct = false;
};

// Explains why `what` fits on no node: counts every node by the first check
// it fails (selector, total capacity, state, free capacity with `overlay`,
// already in `gang_nodes` when distinct). Infeasible when no node matching
// the selector has the total capacity. O(n / 64) for the selector, then one
// look at every node that matches it.
Failure ExplainBundle(const SnapshotState& snap, const Overlay& overlay,
                      const absl::flat_hash_set<uint32_t>& gang_nodes,
                      absl::string_view label, const UnplacedBundle& what);

// Explains why `request` found too few slices: every slice of the shape is
// counted as held, not intact, too small, excluded by selector (by zone), or
// free. Keys whose tier or zone the selectors exclude are counted whole; the
// slices of the other keys one by one (O(slices in the allowed keys)).
// Infeasible when fewer than num_slices slices could ever match.
Failure ExplainSlices(const SnapshotState& snap, const SliceRequest& request,
                      absl::string_view label);

}  // namespace sliced::scheduler::internal

#endif  // SLICED_SCHEDULER_INTERNAL_DIAGNOSIS_H_
