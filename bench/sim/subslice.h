// sliced_sim --workload=subslice: sub-slices of large pods (issue 16, item
// 5). Per seed, a fleet of v5p and v7x 4x4x4 pods (16 hosts each) and a
// trace of slice jobs of mixed sizes (2x2x1 ... 4x4x4), each allowed to be
// carved out of a pod, replayed under sliced and a first-fit carving
// baseline (pods in name order, aligned boxes in origin order, the first
// free one). Reported per run: TPU utilization and chip-hours, acceptance,
// p99 wait, and the mean largest free aligned box per pod over the samples
// (chips); against the fluid bound min(1, offered load) on utilization.
//
// Writes DIR/subslice.json and DIR/sim_subslice.md. Not thread-safe; call
// from main.
#ifndef SLICED_BENCH_SIM_SUBSLICE_H_
#define SLICED_BENCH_SIM_SUBSLICE_H_

#include <cstdint>
#include <string>

namespace sliced::bench {

struct SubsliceOptions {
  int64_t pods = 64;     // 4x4x4 pods per seed (16 hosts each)
  int64_t jobs = 4000;   // jobs per trace
  uint64_t seed = 1;     // first seed; run k uses seed + k
  int seeds = 3;         // runs
  double load = 0.9;     // offered chip-seconds per second / fleet chips
  std::string out_dir = ".";
  bool check = false;    // exit 1 unless both policies placed jobs
};

// Runs the comparison; returns the process exit code.
int RunSubslice(const SubsliceOptions& options);

}  // namespace sliced::bench

#endif  // SLICED_BENCH_SIM_SUBSLICE_H_
