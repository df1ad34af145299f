// Pieces every step of the solver's pipeline shares: the overlay of what one
// decision uses, the result of one attempt, and small resource and selector
// helpers. Engine-internal: include only from scheduler/ (and its tests).
//
// Thread-safety: the free functions are pure. An Overlay belongs to one
// Solve() call and is used on that call's thread only; it reads the snapshot,
// which is immutable.
#ifndef SLICED_SCHEDULER_INTERNAL_SOLVER_UTIL_H_
#define SLICED_SCHEDULER_INTERNAL_SOLVER_UTIL_H_

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "scheduler/internal/resources.h"
#include "scheduler/internal/snapshot_state.h"
#include "scheduler/labels.h"
#include "scheduler/snapshot.h"
#include "scheduler/solver.h"
#include "scheduler/types.h"

namespace sliced::scheduler::internal {

// "TPU" as a std::string, for lookups in a ResourceSet.
const std::string& TpuName();

// kTpu when the bundle asks for any TPU, else kCpuOnly.
BundleKind KindOf(const ResourceSet& resources);

// "{CPU: 8, TPU: 4}".
std::string ResourcesToString(const ResourceSet& resources);

// The terms of `a` and of `b` (when not null), stably sorted by key.
LabelSelector And(const LabelSelector& a, const LabelSelector* b);

// What a PG being re-placed gives back: node index -> its resources there.
using Released = absl::flat_hash_map<uint32_t, ResourceSet>;

// The resources `pg_id` holds in `snap`, by node (empty for an empty id).
Released ReleasedBy(const InventorySnapshot& snap, const std::string& pg_id);

// What this decision uses on top of the snapshot, plus what a PG being
// re-placed gives back. The snapshot itself is never written.
class Overlay {
 public:
  // REQUIRES: `snap` and `released` (may be null) outlive the overlay.
  Overlay(const SnapshotState& snap, const Released* released)
      : snap_(snap), released_(released) {}

  // Free amount of `name` on node i: the snapshot's, plus what is released,
  // minus what this decision took.
  int64_t Free(uint32_t i, const std::string& name) const {
    int64_t free = Amount(snap_.node(i).free, name);
    if (released_ != nullptr) {
      auto it = released_->find(i);
      if (it != released_->end()) free += Amount(it->second, name);
    }
    auto it = used_.find(i);
    if (it != used_.end()) free -= Amount(it->second, name);
    return free;
  }
  // True when every positive amount of `request` is free on node i.
  bool Fits(uint32_t i, const ResourceSet& request) const {
    for (const auto& [name, amount] : request) {
      if (amount > 0 && Free(i, name) < amount) return false;
    }
    return true;
  }
  // Forgets everything taken (back to the snapshot plus what is released).
  void Clear() { used_.clear(); }
  // Records that this decision uses `request` on node i.
  void Take(uint32_t i, const ResourceSet& request) {
    ResourceSet& used = used_[i];
    for (const auto& [name, amount] : request) used[name] += amount;
  }
  // Leftover of the request's dominant resource after placing it on node i,
  // in parts per million of the node's total (lower = tighter fit).
  int64_t Leftover(uint32_t i, const ResourceSet& request) const {
    int64_t worst = 0;
    for (const auto& [name, amount] : request) {
      const int64_t total = Amount(snap_.node(i).node.resources, name);
      if (total <= 0) continue;
      const __int128 left =
          static_cast<__int128>(Free(i, name) - amount) * 1'000'000;
      worst = std::max<int64_t>(worst, static_cast<int64_t>(left / total));
    }
    return worst;
  }

 private:
  const SnapshotState& snap_;
  const Released* released_;
  absl::flat_hash_map<uint32_t, ResourceSet> used_;
};

// Why a step could not place the gang.
struct Failure {
  std::string summary;
  bool infeasible = false;  // no state of the inventory would help
  std::vector<DiagnosisStep> steps;
};

// The result of one attempt (one bundle list on one priority), or of one
// placement of the gang inside it.
struct Attempt {
  bool placed = false;
  bool infeasible = false;
  std::vector<uint32_t> nodes;       // node index per bundle, when placed
  std::vector<std::string> slices;   // slice names (slice requests)
  std::vector<DiagnosisStep> steps;  // what was ruled out, when not placed
  std::string summary;
  // Placed: CPU-only bundles it had to put on whole free TPU capacity (free
  // single-host TPU nodes, hosts of free intact multi-host slices) because
  // no CPU tier held the gang (PlaceGeneric()).
  int64_t cpu_on_whole_tpu = 0;

  // A failed attempt carrying `failure`'s explanation.
  static Attempt Failed(Failure failure);
};

}  // namespace sliced::scheduler::internal

#endif  // SLICED_SCHEDULER_INTERNAL_SOLVER_UTIL_H_
