// Summary statistics for benchmark samples: percentiles (nearest rank),
// medians and means.
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

// The middle sample; for an even count the mean of the two middle ones
// (nearest rank would report the lower, e.g. of two repetitions the better
// one). 0 for no samples.
inline double Median(std::vector<double> samples) {
  if (samples.empty()) return 0;
  const size_t mid = samples.size() / 2;
  std::nth_element(samples.begin(), samples.begin() + mid, samples.end());
  const double upper = samples[mid];
  if (samples.size() % 2 != 0) return upper;
  const double lower =
      *std::max_element(samples.begin(), samples.begin() + mid);
  return (lower + upper) / 2;
}

inline double Mean(const std::vector<double>& samples) {
  if (samples.empty()) return 0;
  double sum = 0;
  for (double s : samples) sum += s;
  return sum / samples.size();
}

}  // namespace sliced::bench

#endif  // SLICED_BENCH_COMMON_STATS_H_
