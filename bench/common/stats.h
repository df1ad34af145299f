// Summary statistics for benchmark samples: percentiles (nearest rank) and
// medians.
//
// Pure functions; thread-safe.
#ifndef SLICED_BENCH_COMMON_STATS_H_
#define SLICED_BENCH_COMMON_STATS_H_

#include <algorithm>
#include <cmath>
#include <vector>

namespace sliced::bench {

// The q-quantile (0 <= q <= 1) by nearest rank; 0 for no samples.
// Sorts `samples` in place.
inline double Percentile(std::vector<double>& samples, double q) {
  if (samples.empty()) return 0;
  std::sort(samples.begin(), samples.end());
  size_t rank = static_cast<size_t>(std::ceil(q * samples.size()));
  if (rank > 0) --rank;
  return samples[std::min(rank, samples.size() - 1)];
}

inline double Median(std::vector<double> samples) {
  return Percentile(samples, 0.5);
}

inline double Mean(const std::vector<double>& samples) {
  if (samples.empty()) return 0;
  double sum = 0;
  for (double s : samples) sum += s;
  return sum / samples.size();
}

}  // namespace sliced::bench

#endif  // SLICED_BENCH_COMMON_STATS_H_
