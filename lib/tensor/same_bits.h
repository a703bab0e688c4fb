// same_bits.h — what "the same bits" means, in one place (docs/numerics.md "NaN").
// Two numbers are the same when their bytes are equal, or when both are NaN: a NaN's sign and
// payload are not part of the bit rule (x86 makes 0/0 a negative NaN, ARM and NVIDIA GPUs a
// positive canonical one, and which operand's payload an a + b of two NaNs keeps depends on the
// order the compiler put them in). Every bitwise comparison in gradrun goes through here, and every
// digest of numbers hashes a NaN as the canonical quiet NaN, so a NaN in the same place is equal
// on every path and every CPU; text files already write every NaN as `nan`.
#pragma once
#include <cstdint>
#include <cstring>
#include <span>

#include "tensor/sha256.h"

namespace gr {

constexpr uint64_t kCanonicalNaNBits = 0x7ff8000000000000ULL;  // +qNaN, no payload

inline bool is_nan_bits(double v) { return v != v; }

// Equal bytes, or NaN in both.
inline bool same_bits(double a, double b) {
  return std::memcmp(&a, &b, sizeof a) == 0 || (is_nan_bits(a) && is_nan_bits(b));
}

// The index of the first element that is not the same, or -1. Equal bytes are checked first with
// one memcmp (the common case); NaN-for-NaN is looked at only where the bytes differ.
inline int64_t first_different(std::span<const double> a, std::span<const double> b) {
  if (a.size() != b.size()) return 0;
  if (a.empty() || std::memcmp(a.data(), b.data(), a.size() * sizeof(double)) == 0) return -1;
  for (size_t i = 0; i < a.size(); ++i)
    if (!same_bits(a[i], b[i])) return static_cast<int64_t>(i);
  return -1;
}

// Hash doubles with every NaN as the canonical one: equal digests ⇔ same_bits everywhere.
inline void hash_doubles(Sha256& h, const double* p, size_t n) {
  size_t i = 0;
  while (i < n) {
    size_t j = i;
    while (j < n && !is_nan_bits(p[j])) ++j;
    if (j > i) h.update(p + i, (j - i) * sizeof(double));
    if (j < n) {
      const uint64_t c = kCanonicalNaNBits;
      h.update(&c, sizeof c);
      ++j;
    }
    i = j;
  }
}

}  // namespace gr
