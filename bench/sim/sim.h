// The placement-quality simulator: replays one seeded trace in simulated time
// under several placement policies, on the engine's own InventorySnapshot,
// and measures utilization, acceptance, wait and fragmentation; and places a
// batch of whole-slice jobs under each policy against a max-flow bound.
//
// Policies (all see the same snapshot; only *where* a gang goes differs):
//   sliced     the real engine: scheduler::Solve.
//   first-fit  nodes (and slices) in id order, first that fits.
//   random     a seeded random order.
//   ray        Ray's bundle scheduling with its LeastResourceScorer: per
//              bundle the node with the largest remaining share of the
//              requested resources (worst fit); PACK first tries the whole
//              gang on one node. Ties, which Ray breaks by hash-map order,
//              are broken at random (seeded). A slice request takes free
//              intact slices scored by their head node: all equal, so random.
//   tiered-first-fit  first fit with the node tiers GKE taints give an
//              operator (issue 13, item 4): a CPU-only gang is fitted on CPU
//              nodes alone, then CPU + single-host TPU nodes, then anywhere
//              (the first tier that holds the whole gang wins); the tuning
//              knobs of TieredOptions order nodes within a tier. Slices and
//              gangs with TPU bundles as first-fit (see TieredOptions). A
//              gang mixing CPU-only and TPU bundles is not tiered.
// The baselines honour selectors, compute-class priorities (first priority
// that holds the whole gang), PACK / SPREAD, and slice atomicity (free
// intact slices only, bundle i on worker i).
//
// Queue discipline, the same for every policy: waiting jobs in (priority
// desc, arrival) order; after a completion every waiting job is tried and
// placed if it fits (backfill without reservation), after arrivals only the
// newcomers (the others already failed on that state); within one pass a
// request signature (shape, class, selector, strategy) that failed is not
// tried again, since placements only take capacity away. A job that waited
// longer than `patience_s` leaves (not accepted). Jobs that cannot be
// placed even on the empty fleet are "infeasible" and excluded from
// acceptance for all policies alike.
//
// Not thread-safe; one Simulator per thread.
#ifndef SLICED_BENCH_SIM_SIM_H_
#define SLICED_BENCH_SIM_SIM_H_

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/string_view.h"
#include "bench/gen/fleet.h"
#include "bench/gen/trace.h"
#include "scheduler/snapshot.h"

namespace sliced::bench {

enum class PolicyKind { kSliced, kFirstFit, kRandom, kRay, kTieredFirstFit };
const char* PolicyName(PolicyKind kind);
// The policies of the default replay and the whole-slice batches.
inline constexpr PolicyKind kAllPolicies[] = {
    PolicyKind::kSliced, PolicyKind::kFirstFit, PolicyKind::kRandom,
    PolicyKind::kRay};
// The policies of the mixed trace (--workload=mixed).
inline constexpr PolicyKind kMixedPolicies[] = {
    PolicyKind::kSliced, PolicyKind::kTieredFirstFit, PolicyKind::kFirstFit,
    PolicyKind::kRay};

// Where each bundle of a job goes (node indexes of the snapshot, bundle
// order), or empty when the policy does not place it now.
struct Placement {
  std::vector<uint32_t> nodes;
  std::vector<scheduler::ResourceSet> resources;  // per bundle
};

// The size bucket of a job for wait statistics: "0 (CPU)", "1-8 chips",
// "9-64 chips", "65-256 chips", ">256 chips".
extern const char* const kSizeClasses[5];
const char* SizeClass(const Job& job);

// Places `job` on `snapshot` under `kind`. `seed` feeds random tie breaks.
class Policy {
 public:
  virtual ~Policy() = default;
  virtual Placement Place(const scheduler::InventorySnapshot& snapshot,
                          const Job& job) = 0;
};
std::unique_ptr<Policy> MakePolicy(PolicyKind kind, uint64_t seed);

// The tuning knobs of tiered-first-fit; the defaults are the setting the
// tuning of `sliced_sim --workload=mixed` chose at its default CPU load
// (docs/bench.md), which MakePolicy(kTieredFirstFit) uses; the mixed
// comparison itself uses whatever its tuning picks. Each is something an operator can configure in kube-scheduler.
struct TieredOptions {
  // Within a tier, nodes that already hold allocations (for a TPU host: any
  // host of its slice) before idle ones: kube-scheduler's MostAllocated
  // scoring with the TPU resource in it. Default false.
  bool busy_first = false;
  // In the multi-host tier, hosts of smaller slices first (preferred node
  // affinity weighted by node pool). Default false.
  bool small_slices_first = false;
  // Gangs with TPU bundles try single-host TPU nodes before hosts of
  // multi-host slices (node-pool affinity). Default true.
  bool tpu_single_host_first = true;
};
std::unique_ptr<Policy> MakeTieredPolicy(const TieredOptions& options);

// A what-if for the engine's ranks of CPU-only bundles (the engine itself is
// not changed): sliced, but a CPU-only gang is first asked with a selector
// keeping it off hosts of the given multi-host pod types (e.g. "v6e-16"),
// then, if that fails, as it is.
std::unique_ptr<Policy> MakeSlicedCpuHintPolicy(
    std::vector<std::string> multi_host_pod_types);

// The per-host bundles of a slice job (num_slices x hosts of {TPU: chips per
// host}); the bundles themselves for other jobs.
std::vector<scheduler::Bundle> ExpandBundles(const Job& job);

struct SimOptions {
  double patience_s = 4 * 3600;   // a job leaves after waiting this long
  int scan_limit = 0;             // queue entries tried per pass; 0: all
  int samples = 120;              // points of the time series
  uint64_t seed = 1;              // random tie breaks
  // Measured on the snapshot at every sample and averaged into
  // SimResult::probe_mean (e.g. the largest free aligned box); none when
  // empty.
  std::function<double(const scheduler::InventorySnapshot&)> probe;
};

struct WaitStats {
  int64_t placed = 0;
  int64_t feasible = 0;
  double mean_s = 0;
  double p99_s = 0;
};

struct ShapeFragmentation {
  std::string shape;            // pod type, e.g. "v6e-64"
  int64_t slices = 0;
  double mean_whole_free = 0;   // whole free intact slices, time average
  double stranded = 0;          // Slurm-style cost: time average of free
                                // chips outside whole free slices / free chips
};

// Where a CPU-only bundle went, by the state of the node (and its slice)
// before the placement: 0 CPU node; 1-3 single-host TPU node whose slice
// holds TPU work / only CPU work / nothing; 4-6 the same for a host of a
// multi-host slice.
inline constexpr int kNumCpuBundleClasses = 7;
extern const char* const kCpuBundleClasses[kNumCpuBundleClasses];
int CpuBundleClass(const scheduler::InventorySnapshot& snap, uint32_t node);

struct SimSample {
  double t_s = 0;
  double utilization = 0;       // held TPU chips / fleet chips
  double cpu_utilization = 0;   // held CPU / fleet CPU
  int64_t queued = 0;
  double mean_wait_s = 0;       // of jobs started since the previous sample
};

struct SimResult {
  std::string policy;
  double utilization = 0;       // time-weighted TPU, over the arrival window
  double chip_hours = 0;        // TPU chip-time held over the arrival window
  double cpu_utilization = 0;
  double acceptance = 0;        // accepted / feasible
  int64_t accepted = 0;
  int64_t feasible = 0;
  WaitStats wait_all;                             // every job
  int64_t cpu_bundles[kNumCpuBundleClasses] = {};  // by CpuBundleClass
  double blocked_chips = 0;     // time average: TPU chips of slices that no
                                // TPU work holds but CPU-only work keeps
                                // from being whole
  std::map<std::string, WaitStats> wait_by_kind;  // JobKindName
  std::map<std::string, WaitStats> wait_by_size;  // SizeClass
  std::vector<ShapeFragmentation> fragmentation;
  std::vector<SimSample> series;
  double wall_s = 0;            // real time the replay took
  double probe_mean = 0;        // SimOptions::probe over the samples
};

// Replays `trace` on `fleet` under `kind`. `feasible[i]` says whether job i
// fits the empty fleet (FeasibleJobs).
SimResult Replay(const Fleet& fleet, const std::vector<Job>& trace,
                 const std::vector<bool>& feasible, PolicyKind kind,
                 const SimOptions& options);
// The same with a given policy; `name` is the result's policy name.
SimResult ReplayWith(const Fleet& fleet, const std::vector<Job>& trace,
                     const std::vector<bool>& feasible, Policy& policy,
                     absl::string_view name, const SimOptions& options);

// Whether each job fits the empty fleet (sliced's solver on it).
std::vector<bool> FeasibleJobs(const Fleet& fleet, const std::vector<Job>& jobs);

struct BatchResult {
  std::string policy;
  int64_t slices_placed = 0;
  int64_t chips_placed = 0;
  int64_t jobs_placed = 0;
};
struct BatchComparison {
  int64_t jobs = 0;
  int64_t slices_asked = 0;
  int64_t bound_slices = 0;     // max-flow bound (relaxes gang atomicity)
  int64_t bound_chips = 0;
  std::vector<BatchResult> results;
};

// Places a whole-slice batch (all at t = 0, in (priority desc, id) order,
// each job tried once) under every policy, and computes the max-flow bound:
// per shape, jobs -> (tier, zone) pools they may use -> free slices.
BatchComparison CompareSliceBatch(const Fleet& fleet, const std::vector<Job>& batch,
                                  uint64_t seed);

// Chip-seconds a pool of `chips` can have served by `end` if it never idles
// while work waits and may serve a job at any rate (a relaxation: a job
// really runs on its own chips for its duration). `work` is (arrival,
// chip-seconds) in arrival order. Every schedule of the pool's jobs serves
// at most this much by `end`; one that drops jobs, less.
double FluidServed(const std::vector<std::pair<double, double>>& work,
                   double chips, double end);

// An upper bound on the TPU chip-hours any policy (placement or queue order)
// can hold replaying `trace` on `fleet`, over the arrival window as
// SimResult::chip_hours counts them. Each job counts at most its chips from
// its arrival to the window's end. Whole-slice jobs (multi-host and
// single-host) run only on slices of their shape: per shape, at most
// FluidServed() by the window's end. REQUIRES: every shape a slice job asks
// is in the fleet (else it could be carved from a larger one). Generic TPU
// bundles, and a slice job whose shape does not resolve, may run anywhere. All
// TPU jobs together: at most FluidServed() on all chips.
double ChipHoursBound(const Fleet& fleet, const std::vector<Job>& trace,
                      const std::vector<bool>& feasible);

}  // namespace sliced::bench

#endif  // SLICED_BENCH_SIM_SIM_H_
