// Seeded job-trace generator for the placement-quality simulator.
//
// A trace is a list of jobs with Poisson arrivals, sizes and durations drawn
// from a mix that is mostly small (CPU gangs, single-host TPU jobs, one small
// slice) with a few huge multi-slice jobs; scheduling priorities; and a share
// of jobs in the `cost-optimized` compute class (spot -> flex-start ->
// reserved, DESIGN §1). Jobs ask only for shapes the fleet has.
//
// The arrival rate is set so that the offered TPU load (chip-seconds per
// second) is `load` times the fleet's chips.
//
// Pure functions; thread-safe. The same fleet and options always give the
// same trace.
#ifndef SLICED_BENCH_GEN_TRACE_H_
#define SLICED_BENCH_GEN_TRACE_H_

#include <cstdint>
#include <string>
#include <vector>

#include "bench/gen/fleet.h"
#include "scheduler/solver.h"

namespace sliced::bench {

// What kind of job, for reporting wait per job size.
enum class JobKind {
  kCpu,         // CPU-only gang
  kTpuBundles,  // generic {TPU: k} bundles, not slice-aware (Ray users' habit)
  kSlice,       // one whole slice
  kMultiSlice,  // several whole slices of one shape
  kSingleHost,  // one whole single-host slice (mixed trace only)
};
const char* JobKindName(JobKind kind);

struct Job {
  int64_t id = 0;
  double arrival_s = 0;
  double duration_s = 0;
  int priority = 0;           // higher first
  std::string compute_class;  // "" or "cost-optimized"
  JobKind kind = JobKind::kCpu;
  int64_t chips = 0;          // TPU chips asked for (0 for CPU jobs)
  std::string shape;          // e.g. "v6e-16 x2", "4 x {TPU: 1}", "2 x {CPU: 4}"
  // The engine request, compute-class priorities already filled in.
  scheduler::PlacementRequest request;
};

struct TraceOptions {
  int64_t jobs = 2000;
  uint64_t seed = 1;
  double load = 0.9;  // offered TPU chip-seconds per second / fleet chips
  // Mixed trace only: offered CPU of the CPU gangs (core-seconds per second)
  // / the CPU of the fleet's CPU-only nodes. Above 1 the gangs must spill
  // onto TPU hosts.
  double cpu_load = 1.0;
};

// Generates a trace over `fleet`. Jobs are in arrival order; ids are 0..n-1.
std::vector<Job> GenerateTrace(const Fleet& fleet, const TraceOptions& options);

// The mixed trace of issue 13, item 4, for a FleetMix::kMixed fleet: 45 %
// CPU gangs (1-8 x {CPU: 4-32}, PACK or SPREAD, ~20 min), 25 % one
// single-host slice (~1 h), 5 % generic {TPU: 4, CPU: 8} bundles (1-2, PACK,
// ~40 min), 22 % one multi-host slice (~2 h), 3 % two multi-host slices
// (~3 h). Shapes are drawn by the chips the fleet has of them; no selectors
// or compute classes; priorities 0/1/2 (70/25/5 %). Poisson arrivals at the
// rate that offers `load` x the chips of the multi-host slices; the
// durations of the other jobs are scaled (before the clamp to 30 s..48 h)
// so that single-host jobs offer `load` x the single-host chips and CPU
// gangs `cpu_load` x the CPU of the CPU-only nodes.
std::vector<Job> GenerateMixedTrace(const Fleet& fleet, const TraceOptions& options);

// A batch of whole-slice jobs (single and multi-slice, some with a zone
// selector or the cost-optimized class), all arriving at t = 0, asking for
// about `oversubscription` times the fleet's slices of each shape. For the
// max-flow comparison.
std::vector<Job> GenerateSliceBatch(const Fleet& fleet, uint64_t seed,
                                    double oversubscription);

// The compute-class priorities of `name` as selectors ("" -> none).
std::vector<scheduler::LabelSelector> ComputeClassPriorities(
    absl::string_view name);

// A fingerprint of a trace (ids, times, shapes, classes), for determinism
// checks.
uint64_t Fingerprint(const std::vector<Job>& jobs);

}  // namespace sliced::bench

#endif  // SLICED_BENCH_GEN_TRACE_H_
