// Victim choice for priority preemption (issue 18): when a request does not
// fit, which running groups, if their allocations were released, would make
// it fit, with the fewest and cheapest victims.
//
// Pure and deterministic like Solve(): the snapshot is never modified (each
// trial releases the victims on a copy-on-write copy) and every tie is broken
// by a stable key, so the same snapshot, request and candidates always give
// the same plan.
//
// Thread-safety: PlanPreemption() is a pure function.
#ifndef SLICED_SCHEDULER_PREEMPTION_H_
#define SLICED_SCHEDULER_PREEMPTION_H_

#include <cstdint>
#include <string>
#include <vector>

#include "scheduler/snapshot.h"
#include "scheduler/solver.h"

namespace sliced::scheduler {

// A running group the caller allows as a victim: strictly lower priority
// than the preemptor, preemptible, not cooling down. The caller filters;
// the planner only chooses.
struct VictimCandidate {
  std::string pg_id;
  int32_t priority = 0;
  // Arrival order: a larger sequence is a younger group, which loses less
  // work when preempted.
  uint64_t sequence = 0;
  // Shown first in the summary's parentheses (e.g. the priority class);
  // "" for none.
  std::string label;

  friend bool operator==(const VictimCandidate&,
                         const VictimCandidate&) = default;
};

struct PreemptionOptions {
  // Candidates considered, lowest priority first; the rest are ignored.
  size_t max_candidates = 4096;
  // Solves per plan (each one a full Solve() on the snapshot with a trial
  // set released); past it the set found so far is kept, not minimised.
  int max_solves = 256;
};

// One chosen victim.
struct Victim {
  std::string pg_id;
  int32_t priority = 0;
  uint64_t sequence = 0;
  // TPU resources it holds (chips, or devices on v7x hosts that count two
  // per chip) and the slices whose hosts it holds, by name.
  int64_t tpu = 0;
  std::vector<std::string> slices;
  std::string label;  // the candidate's

  friend bool operator==(const Victim&, const Victim&) = default;
};

struct PreemptionPlan {
  bool found = false;
  // The victims, highest priority first, then most TPU, then oldest.
  std::vector<Victim> victims;
  // Where the request goes once the victims' allocations are released
  // (kPlaced when found; otherwise the decision with every candidate
  // released, whose diagnosis says why even that does not fit).
  Decision decision;
  // Solves spent, and whether a bound (candidates or solves) cut the search
  // short; the summary then says so.
  int solves = 0;
  bool bound_hit = false;
  // One line, e.g. "preempting 1 group(s) of priority <= 0 frees room:
  // pg-1 (4 TPU on slice s1)", or why no set of victims helps.
  std::string summary;

  friend bool operator==(const PreemptionPlan&,
                         const PreemptionPlan&) = default;
};

// Chooses victims among `candidates` so that `request` fits on `snapshot`
// with their allocations released. Call it only when Solve() alone does not
// place the request (a plan with victims never replaces one without).
//
// The choice minimises, lexicographically: the highest victim priority, the
// number of victims, the TPU taken from victims, then prefers younger
// victims. A victim is a whole group; a slice request is given whole
// slices, so freeing two half-used slices never stands in for one whole one.
// Steps: (1) the lowest priority level whose candidates, all released, make
// the request fit; (2) of those, only the groups on the nodes that placement
// uses; for slice requests also the cheapest whole slices of the shape;
// then every single candidate of those levels, cheapest first (one victim
// beats any two); (3) drop victims one by one (the most costly first) while
// the request still fits. The result is irreducible (no victim can be
// spared) and the best single victim when one suffices, not always the
// global minimum; both bounds in `options` cap the work.
PreemptionPlan PlanPreemption(const InventorySnapshot& snapshot,
                              const PlacementRequest& request,
                              std::vector<VictimCandidate> candidates,
                              const PreemptionOptions& options = {});

// The nodes (indexes, ascending) where `request` could place a bundle: for
// a slice request, the hosts of slices of its generation (the planner's own
// test of a relevant victim); otherwise the nodes that match some bundle's
// selector (primary or fallback) and have every resource it asks.
// A superset: compute-class priorities and free capacity are not read. Only
// a group holding capacity on one of them can be a victim that helps, so a
// caller gathers candidates from these nodes' allocations instead of every
// group. O(nodes x distinct bundles).
std::vector<uint32_t> NodesARequestMayUse(const InventorySnapshot& snapshot,
                                          const PlacementRequest& request);

}  // namespace sliced::scheduler

#endif  // SLICED_SCHEDULER_PREEMPTION_H_
