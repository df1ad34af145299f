// sliced_sim --workload=preemption: victim choice for priority preemption
// (issue 18, item 5). Per seed, a fleet of v6e-16 slices (4 hosts of 4
// chips), single-host v6e-8 nodes and a few CPU nodes is filled with
// low-priority groups (best-effort 0 and batch 100: whole slices, gangs of
// 1-3 hosts of 4 chips, gangs of single chips, CPU gangs), placed by the
// engine in arrival order until nothing more fits. Then a sequence of
// production (1000) requests arrives (a v6e-16 slice 45 %, two v6e-16
// slices 15 %, 4 x {TPU: 4} spread 25 %, a v6e-8 node 15 %). Each one that
// does not fit preempts, under one of two policies, from the same start:
//
//   sliced         PlanPreemption (scheduler/preemption.h) over every
//                  running group of lower priority: one round.
//   topology-blind Kueue's way: candidates lowest priority first, then the
//                  most recently started; take them until the free TPU
//                  chips (CPU for a CPU request) would cover the request,
//                  release, and if the request still does not fit take one
//                  more per round until it does or none is left.
//
// Every round costs the preemptor one grace period (30 s) of waiting. The
// preemptor is placed when it fits and keeps its capacity; victims are
// requeued and placed again, highest priority and oldest first, where they
// fit. Reported per policy and seed: preemptors placed, victims per
// preemption, TPU chips taken from victims, the preemptor's wait (mean and
// max), and victims still waiting at the end.
//
// Writes DIR/preemption.json and DIR/sim_preemption.md. Not thread-safe;
// call from main.
#ifndef SLICED_BENCH_SIM_PREEMPTION_H_
#define SLICED_BENCH_SIM_PREEMPTION_H_

#include <cstdint>
#include <string>

namespace sliced::bench {

struct PreemptionSimOptions {
  int64_t slices = 48;      // v6e-16 slices per seed
  int64_t preemptors = 24;  // production requests per seed
  uint64_t seed = 1;        // first seed; run k uses seed + k
  int seeds = 5;            // runs
  double grace_s = 30;      // a round's cost to the preemptor
  std::string out_dir = ".";
  bool check = false;  // exit 1 unless sliced needs no more victims
};

// Runs the comparison; returns the process exit code.
int RunPreemptionSim(const PreemptionSimOptions& options);

}  // namespace sliced::bench

#endif  // SLICED_BENCH_SIM_PREEMPTION_H_
