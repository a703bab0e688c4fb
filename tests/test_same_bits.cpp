// test_same_bits.cpp — what "the same bits" means (tensor/same_bits.h, docs/numerics.md "NaN and
// infinities"): equal bytes, or NaN in both; digests hash every NaN as the canonical one.
#include <catch2/catch.hpp>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <vector>

#include "tensor/same_bits.h"

namespace {

double from_bits(uint64_t b) {
  double x;
  std::memcpy(&x, &b, sizeof x);
  return x;
}

std::string digest(const std::vector<double>& v) {
  gr::Sha256 h;
  gr::hash_doubles(h, v.data(), v.size());
  return h.hex();
}

}  // namespace

TEST_CASE("same_bits: bytes, except that every NaN is the same as every NaN", "[same_bits]") {
  const double x86_nan = from_bits(0xfff8000000000000ULL);  // 0/0 on x86-64
  const double arm_nan = from_bits(0x7ff8000000000000ULL);  // 0/0 on aarch64, NVIDIA
  const double payload = from_bits(0x7ff4000000000123ULL);  // a signalling payload
  const double inf = std::numeric_limits<double>::infinity();
  CHECK(gr::same_bits(x86_nan, arm_nan));
  CHECK(gr::same_bits(payload, x86_nan));
  CHECK_FALSE(gr::same_bits(0.0, -0.0));  // signed zeros are bits, and stay compared
  CHECK_FALSE(gr::same_bits(arm_nan, inf));
  CHECK_FALSE(gr::same_bits(inf, -inf));
  CHECK_FALSE(gr::same_bits(1.0, std::nextafter(1.0, 2.0)));
  CHECK(gr::same_bits(1.5, 1.5));
}

TEST_CASE("first_different: the first element that is not the same, NaN for NaN allowed", "[same_bits]") {
  const double nan_a = from_bits(0xfff8000000000000ULL), nan_b = from_bits(0x7ff8000000000001ULL);
  std::vector<double> a = {1.0, nan_a, 3.0, -0.0}, b = {1.0, nan_b, 3.0, -0.0};
  CHECK(gr::first_different(a, b) == -1);
  b[3] = 0.0;
  CHECK(gr::first_different(a, b) == 3);
  b[3] = -0.0;
  b[1] = 2.0;
  CHECK(gr::first_different(a, b) == 1);
  CHECK(gr::first_different(std::vector<double>{1.0}, std::vector<double>{1.0, 2.0}) == 0);  // lengths differ
}

TEST_CASE("hash_doubles: equal digests exactly when same_bits holds everywhere", "[same_bits]") {
  const double nan_a = from_bits(0xfff8000000000000ULL), nan_b = from_bits(0x7ff0000000000001ULL);
  CHECK(digest({1.0, nan_a, nan_a, 2.0}) == digest({1.0, nan_b, nan_a, 2.0}));
  CHECK(digest({1.0, nan_a}) != digest({1.0, 2.0}));
  CHECK(digest({0.0}) != digest({-0.0}));
  // Without NaN it is the plain SHA-256 of the bytes (run receipts written before keep their digests).
  const std::vector<double> plain = {1.0, -2.5, 1e-300};
  gr::Sha256 h;
  h.update(plain.data(), plain.size() * sizeof(double));
  CHECK(digest(plain) == h.hex());
}
