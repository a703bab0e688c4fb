// random.h — the documented counter-based generator behind parameter init, the validation split
// and shuffling. Every draw is a pure function of (seed, stream, counter), so a few lines of numpy
// reproduce it bit for bit (docs/spec.md shows them) and a resumed run can regenerate any epoch's
// order without replaying the ones before.
//
//   mix(z)  = SplitMix64's finalizer of z + 0x9E3779B97F4A7C15        (uint64 arithmetic, wrapping)
//   bits(seed, stream, counter) = mix(mix(mix(seed) ^ stream) ^ counter)
//   unit(seed, stream, counter) = (bits >> 11) · 2^-53                  ∈ [0, 1), exact in f64
// Streams: parameter p (registration order) uses stream p; the validation split uses kSplitStream;
// the shuffle of epoch e (0-based) uses kShuffleStream + e.
#pragma once
#include <cstdint>
#include <vector>

namespace gr {

inline constexpr uint64_t kSplitStream = uint64_t(1) << 32;
inline constexpr uint64_t kShuffleStream = (uint64_t(1) << 32) + 1;

constexpr uint64_t mix64(uint64_t z) {
  z += 0x9E3779B97F4A7C15ULL;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
  return z ^ (z >> 31);
}
constexpr uint64_t random_bits(uint64_t seed, uint64_t stream, uint64_t counter) {
  return mix64(mix64(mix64(seed) ^ stream) ^ counter);
}
constexpr double random_unit(uint64_t seed, uint64_t stream, uint64_t counter) {
  return static_cast<double>(random_bits(seed, stream, counter) >> 11) * 0x1.0p-53;
}

// Fisher–Yates over 0..n-1: for i = n-1 down to 1, j = bits(seed, stream, i) mod (i + 1), swap.
std::vector<int64_t> random_permutation(int64_t n, uint64_t seed, uint64_t stream);

}  // namespace gr
