// test_matmul_f32.cpp — the float matmul (MatmulArgsF32, issue 15 item 2's building block): the
// same contract in single precision, acc = fmaf(a, b, acc) for k ascending, then C = acc or
// C = C + acc in float. matmul_reference(f32) is checked against a loop over std::fmaf written
// here, and matmul_exact(f32) — the SIMD path with twice the double lanes — against the reference
// byte for byte over a shape sweep, every layout and store, the cache-block shapes and threads;
// and with A, B and C stored as doubles (matmul_exact_f32, the f32 tape's) against the same bytes.
#include <catch2/catch.hpp>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "support/matmul_check.h"
#include "tensor/matmul.h"
#include "tensor/parallel.h"

namespace {

using gr::MatmulArgsF32;
using gr::MatmulStore;

// Random mantissa and sign, exponents over ±20 binades (products and sums stay finite in float):
// any change in the order or association of the k loop changes the rounding and shows up.
std::vector<float> fill(std::mt19937_64& rng, int64_t n) {
  std::uniform_real_distribution<float> mant(1.0f, 2.0f);
  std::uniform_int_distribution<int> ex(-20, 20);
  std::vector<float> v(static_cast<size_t>(n));
  for (float& x : v) {
    x = std::ldexp(mant(rng), ex(rng));
    if (rng() & 1) x = -x;
  }
  return v;
}

bool bytes_equal(const std::vector<float>& x, const std::vector<float>& y) {
  return x.size() == y.size() && (x.empty() || std::memcmp(x.data(), y.data(), x.size() * sizeof(float)) == 0);
}

// Also the f32 CPU tape's form (matmul_exact_f32): the same floats stored as doubles (A and B
// narrowed while packing, C converted in the kernel's loads and stores) must give the reference's
// floats, widened.
void check_shape(std::mt19937_64& rng, int64_t m, int64_t k, int64_t n, bool at, bool bt) {
  const auto a = fill(rng, m * k), b = fill(rng, k * n), c0 = fill(rng, m * n);
  const std::vector<double> a64(a.begin(), a.end()), b64(b.begin(), b.end());
  const MatmulArgsF32 x = gr::test::layout_args(a.data(), b.data(), m, k, n, at, bt);
  for (MatmulStore store : {MatmulStore::Overwrite, MatmulStore::Accumulate, MatmulStore::OntoZero}) {
    const auto [want, got] = gr::test::reference_and_exact(x, c0, store);
    INFO("f32 M=" << m << " K=" << k << " N=" << n << " aT=" << at << " bT=" << bt
                  << " accumulate=" << (store == MatmulStore::Accumulate));
    REQUIRE(bytes_equal(want, got));
    std::vector<double> from64(c0.begin(), c0.end());
    gr::matmul_exact_f32(gr::MatmulArgs{a64.data(), x.a_rs, x.a_cs, b64.data(), x.b_rs, x.b_cs, from64.data(), m, k, n, store});
    INFO("A, B and C stored as doubles");
    const std::vector<double> want64(want.begin(), want.end());  // each float widened, exactly
    REQUIRE(want64.size() == from64.size());
    REQUIRE(std::memcmp(want64.data(), from64.data(), want64.size() * sizeof(double)) == 0);
  }
}

const int64_t kDims[] = {0, 1, 2, 3, 5, 8, 15, 16, 17, 31, 33, 64, 65, 100};

}  // namespace

TEST_CASE("f32 matmul_reference is the serial-k fmaf loop", "[matmul][f32]") {
  std::mt19937_64 rng(1);
  const int64_t m = 7, k = 13, n = 5;
  const auto a = fill(rng, m * k), b = fill(rng, k * n), c0 = fill(rng, m * n);
  for (MatmulStore store : {MatmulStore::Overwrite, MatmulStore::Accumulate, MatmulStore::OntoZero}) {
    std::vector<float> want = c0, got = c0;
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j < n; ++j) {
        float acc = 0.0f;
        for (int64_t kk = 0; kk < k; ++kk)
          acc = std::fmaf(a[static_cast<size_t>(i * k + kk)], b[static_cast<size_t>(kk * n + j)], acc);
        float& c = want[static_cast<size_t>(i * n + j)];
        c = store == MatmulStore::Accumulate ? c + acc : store == MatmulStore::OntoZero ? 0.0f + acc : acc;
      }
    gr::matmul_reference(MatmulArgsF32{a.data(), k, 1, b.data(), n, 1, got.data(), m, k, n, store});
    REQUIRE(bytes_equal(want, got));
  }
}

TEST_CASE("f32 matmul_exact matches the reference bitwise over a sampled shape sweep", "[matmul][f32]") {
  std::mt19937_64 rng(42), pick(7);
  int64_t count = 0;
  for (int64_t m : kDims)
    for (int64_t k : kDims)
      for (int64_t n : kDims) {
        const bool small = m <= 3 || k <= 3 || n <= 3;
        if (!small && pick() % 5 != 0) continue;
        check_shape(rng, m, k, n, (count & 1) != 0, (count & 2) != 0);
        ++count;
      }
  CHECK(count > 800);
}

TEST_CASE("f32 matmul_exact: cache blocks, long k, narrow and wide C, the models' shapes", "[matmul][f32]") {
  std::mt19937_64 rng(5);
  for (bool at : {false, true})
    for (bool bt : {false, true}) {
      check_shape(rng, 257, 131, 263, at, bt);
      check_shape(rng, 45, 1100, 29, at, bt);
      check_shape(rng, 9, 40, 2200, at, bt);  // more than one NC block of float columns
    }
  check_shape(rng, 200, 64, 6, false, false);
  check_shape(rng, 6, 200, 64, true, false);
  check_shape(rng, 100, 900, 10, true, false);
  check_shape(rng, 64, 784, 256, false, false);
  check_shape(rng, 784, 64, 256, true, false);
  check_shape(rng, 64, 256, 784, false, true);
  check_shape(rng, 3, 3, 700, false, false);  // the row-streaming path
  // Few k steps and C's rows 4 KiB apart (1024 floats; 512 or 1024 doubles holding floats): the
  // tiles walk C along its rows.
  check_shape(rng, 203, 10, 1024, false, true);
  check_shape(rng, 203, 10, 512, true, false);
}

// The products a conv layer's im2col makes (issue 42; see test_matmul.cpp's case of the same
// name), and transposed-B panels of every ragged width around the float and double lane counts
// (the f32 tape's doubles are transposed 8 at a time, floats 16), k not a multiple of either.
TEST_CASE("f32 matmul_exact: conv im2col shapes and ragged transposed panels", "[matmul][f32][conv]") {
  std::mt19937_64 rng(4343);
  struct Mkn {
    int64_t m, k, n;
  };
  for (const Mkn s : {Mkn{16, 150, 6400}, Mkn{6400, 150, 16}, Mkn{16, 6400, 150}, Mkn{150, 16, 6400}, Mkn{6, 25, 3136},
                      Mkn{6, 3136, 25}, Mkn{16, 72, 4096}, Mkn{16, 4096, 72}, Mkn{72, 16, 4096}, Mkn{8, 9, 2048},
                      Mkn{8, 2048, 9}, Mkn{150, 6400, 16}, Mkn{3136, 25, 6}, Mkn{25, 3136, 6},
                      Mkn{4096, 9, 8}, Mkn{9, 4096, 8}})
    for (bool at : {false, true})
      for (bool bt : {false, true}) check_shape(rng, s.m, s.k, s.n, at, bt);
  for (int64_t n : {7, 8, 9, 15, 16, 17, 23, 24, 25, 31, 33, 41, 63, 65, 100}) {
    check_shape(rng, 13, 389, n, false, true);
    check_shape(rng, 7, 21, n, true, true);
  }
  check_shape(rng, 197, 300, 70, true, false);
  check_shape(rng, 1024, 37, 10, true, false);  // narrow C, transposed A 1024 apart: swapped on the f32 tape
  check_shape(rng, 256, 1030, 10, false, false);  // mlp1024's fwd 2, k past a slice
}

// MatmulStore::Continue in float, on floats and on the f32 tape's doubles holding floats (see
// test_matmul.cpp's case): k ranges in pieces give one call's bytes.
TEST_CASE("f32 matmul_exact Continue: k ranges in pieces give one call's bytes", "[matmul][f32][continue]") {
  std::mt19937_64 rng(778);
  struct Case {
    int64_t m, k, n;
    std::vector<int64_t> cuts;
  };
  const std::vector<Case> cases = {{16, 6400, 150, {100, 1700, 4000}}, {17, 1700, 33, {0, 769, 1540}},
                                   {5, 40, 600, {1, 2}}, {100, 300, 12, {45}}, {203, 20, 1024, {10}}};
  for (const Case& c : cases)
    for (bool at : {false, true})
      for (bool bt : {false, true}) {
        const auto a = fill(rng, c.m * c.k), b = fill(rng, c.k * c.n), c0 = fill(rng, c.m * c.n);
        MatmulArgsF32 x = gr::test::layout_args(a.data(), b.data(), c.m, c.k, c.n, at, bt);
        std::vector<float> want = c0, got = c0;
        x.c = want.data();
        gr::matmul_reference(x);
        x.c = got.data();
        gr::test::run_in_k_pieces(x, c.cuts, [](const MatmulArgsF32& p) { gr::matmul_exact(p); });
        INFO("f32 M=" << c.m << " K=" << c.k << " N=" << c.n << " aT=" << at << " bT=" << bt);
        REQUIRE(bytes_equal(want, got));
        const std::vector<double> a64(a.begin(), a.end()), b64(b.begin(), b.end());
        std::vector<double> tape(c0.begin(), c0.end());
        gr::MatmulArgs x64{a64.data(), x.a_rs, x.a_cs, b64.data(), x.b_rs, x.b_cs, tape.data(), c.m, c.k, c.n,
                           MatmulStore::Overwrite};
        gr::test::run_in_k_pieces(x64, c.cuts, [](const gr::MatmulArgs& p) { gr::matmul_exact_f32(p); });
        INFO("A, B and C stored as doubles");
        const std::vector<double> want64(want.begin(), want.end());
        REQUIRE(std::memcmp(want64.data(), tape.data(), want64.size() * sizeof(double)) == 0);
      }
}

TEST_CASE("f32 matmul_exact: 1 to 3 threads give the reference's bytes", "[matmul][f32]") {
  std::mt19937_64 rng(9);
  const int before = gr::num_threads();
  for (int t : {1, 2, 3}) {
    gr::set_num_threads(t);
    check_shape(rng, 192, 300, 256, false, false);
    check_shape(rng, 300, 192, 40, true, false);
  }
  gr::set_num_threads(before);
}
