// sliced_sim --workload=mixed: the mixed trace of issue 13, item 4. On a
// fleet of multi-host slices, single-host TPU nodes and a few CPU nodes
// (FleetMix::kMixed), a trace of multi-host slice jobs, single-host TPU jobs
// and CPU gangs (GenerateMixedTrace) is replayed per seed under sliced, the
// tuned tiered-first-fit, first-fit and Ray's worst fit.
//
// Tuning of the baseline, on traces the comparison does not use: every
// combination of TieredOptions is replayed on `tune_seeds` fleets and traces
// (seeds 1000 + seed, ...), and the one with the most TPU chip-time (mean
// over those seeds) is the tiered-first-fit of the comparison.
//
// Writes DIR/mixed.json and DIR/sim_mixed.md (bench/run.sh splices the
// latter into bench/RESULTS.md). Not thread-safe; call from main.
#ifndef SLICED_BENCH_SIM_MIXED_H_
#define SLICED_BENCH_SIM_MIXED_H_

#include <cstdint>
#include <string>

namespace sliced::bench {

struct MixedOptions {
  int64_t nodes = 2000;     // fleet size per seed
  int64_t jobs = 6000;      // jobs per trace
  uint64_t seed = 1;        // first seed; fleet and trace of run k use seed + k
  int seeds = 5;            // runs compared
  int tune_seeds = 3;       // runs used to tune the baseline (other seeds)
  double load = 0.9;        // offered TPU load / fleet chips
  double cpu_load = 1.5;    // offered CPU-gang load / CPU of the CPU nodes
  double cpu_fraction = 0.05;  // share of CPU-only nodes in the fleet
  std::string out_dir = ".";
  bool check = false;       // exit 1 unless every policy placed jobs
};

// Runs the comparison; returns the process exit code.
int RunMixed(const MixedOptions& options);

}  // namespace sliced::bench

#endif  // SLICED_BENCH_SIM_MIXED_H_
