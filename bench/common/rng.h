// A small seeded random number generator (splitmix64) with the few
// distributions the generators and the simulator need, and a fingerprint
// hash. Written out here, not
// taken from <random>, so that a seed gives the same fleet and trace with any
// standard library.
//
// Not thread-safe; one Rng per thread.
#ifndef SLICED_BENCH_COMMON_RNG_H_
#define SLICED_BENCH_COMMON_RNG_H_

#include <cmath>
#include <cstdint>
#include <vector>

#include "absl/strings/string_view.h"

namespace sliced::bench {

class Rng {
 public:
  explicit Rng(uint64_t seed) : state_(seed) {}

  uint64_t Next() {
    uint64_t z = (state_ += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
  }
  // Uniform in [0, 1).
  double Uniform() { return (Next() >> 11) * 0x1.0p-53; }
  // Uniform integer in [lo, hi]. REQUIRES: lo <= hi.
  int64_t Int(int64_t lo, int64_t hi) {
    return lo + static_cast<int64_t>(Next() % static_cast<uint64_t>(hi - lo + 1));
  }
  bool Bernoulli(double p) { return Uniform() < p; }
  // Exponential with the given mean.
  double Exponential(double mean) { return -mean * std::log1p(-Uniform()); }
  // Log-normal with the given median and sigma of the underlying normal.
  double LogNormal(double median, double sigma) {
    const double u1 = 1.0 - Uniform(), u2 = Uniform();
    const double normal = std::sqrt(-2.0 * std::log(u1)) * std::cos(2 * M_PI * u2);
    return median * std::exp(sigma * normal);
  }
  // An index drawn with probability proportional to weights[i].
  // REQUIRES: weights non-empty with a positive sum.
  size_t Weighted(const std::vector<double>& weights) {
    double total = 0;
    for (double w : weights) total += w;
    double x = Uniform() * total;
    for (size_t i = 0; i < weights.size(); ++i) {
      if (x < weights[i]) return i;
      x -= weights[i];
    }
    return weights.size() - 1;
  }

 private:
  uint64_t state_;
};

// FNV-1a over a sequence of strings, each terminated, for fingerprints of
// generated data.
class Fnv {
 public:
  void Mix(absl::string_view s) {
    for (unsigned char c : s) hash_ = (hash_ ^ c) * 0x100000001b3ULL;
    hash_ = (hash_ ^ 0xff) * 0x100000001b3ULL;
  }
  uint64_t hash() const { return hash_; }

 private:
  uint64_t hash_ = 0xcbf29ce484222325ULL;
};

}  // namespace sliced::bench

#endif  // SLICED_BENCH_COMMON_RNG_H_
