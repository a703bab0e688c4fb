// rng.h — a tiny deterministic generator for tests (SplitMix64): the same values on every
// platform, unlike std::*_distribution.
#pragma once
#include <cstdint>
#include <vector>

namespace gr::test {

struct Rng {
  uint64_t state;
  explicit Rng(uint64_t seed) : state(seed) {}
  uint64_t next() {
    uint64_t z = (state += 0x9E3779B97F4A7C15ULL);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    return z ^ (z >> 31);
  }
  // Uniform in [0, 1) with 53 random bits.
  double unit() { return static_cast<double>(next() >> 11) * 0x1.0p-53; }
  double uniform(double lo, double hi) { return lo + (hi - lo) * unit(); }
  std::vector<double> uniform_vec(int64_t n, double lo, double hi) {
    std::vector<double> v(static_cast<size_t>(n));
    for (double& x : v) x = uniform(lo, hi);
    return v;
  }
};

}  // namespace gr::test
