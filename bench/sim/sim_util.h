// Small helpers shared by the simulator's files (bench/sim/). Header-only;
// thread-safe (no state).
#ifndef SLICED_BENCH_SIM_SIM_UTIL_H_
#define SLICED_BENCH_SIM_SIM_UTIL_H_

#include <cstdint>
#include <cstdio>
#include <cstdlib>

#include "absl/strings/string_view.h"
#include "scheduler/types.h"

namespace sliced::bench::sim_util {

// The amount of `name` in `set`, 0 when absent.
inline int64_t Get(const scheduler::ResourceSet& set, absl::string_view name) {
  auto it = set.find(name);
  return it == set.end() ? 0 : it->second;
}

inline void AddTo(scheduler::ResourceSet& into, const scheduler::ResourceSet& add) {
  for (const auto& [name, amount] : add) into[name] += amount;
}

// A simulator bug or an engine error on constant input: print and abort.
[[noreturn]] inline void Die(absl::string_view what) {
  std::fprintf(stderr, "sliced_sim: %.*s\n", static_cast<int>(what.size()),
               what.data());
  std::abort();
}

}  // namespace sliced::bench::sim_util

#endif  // SLICED_BENCH_SIM_SIM_UTIL_H_
