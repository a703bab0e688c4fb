// test_matmul.cpp — matmul_exact must give the same bits as matmul_reference (the serial-k loop).
#include <catch2/catch.hpp>
#include <array>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "support/matmul_check.h"
#include "tensor/matmul.h"
#include "tensor/parallel.h"

namespace {

using gr::MatmulArgs;
using gr::MatmulStore;

// Random mantissa, random sign, exponent spread over ±30 binades: any change in the order or
// association of the k loop (or a fused multiply-add) changes the rounding and shows up.
struct Gen {
  std::mt19937_64 rng;
  explicit Gen(uint64_t seed) : rng(seed) {}
  double next() {
    std::uniform_real_distribution<double> mant(1.0, 2.0);
    std::uniform_int_distribution<int> ex(-30, 30);
    const double v = std::ldexp(mant(rng), ex(rng));
    return (rng() & 1) ? -v : v;
  }
  std::vector<double> fill(int64_t n) {
    std::vector<double> v(static_cast<size_t>(n));
    for (auto& x : v) x = next();
    return v;
  }
};

// memcmp of two equal-sized buffers (memcmp must not be handed the null data() of an empty vector).
bool bytes_equal(const std::vector<double>& x, const std::vector<double>& y) {
  return x.size() == y.size() && (x.empty() || std::memcmp(x.data(), y.data(), x.size() * sizeof(double)) == 0);
}

uint64_t bits(double x) {
  uint64_t u;
  std::memcpy(&u, &x, sizeof u);
  return u;
}

// Bitwise comparison. Two NaNs count as equal whatever their payload/sign: which NaN operand an
// add propagates depends on the operand order the compiler picks, which C++ does not pin down.
bool same_bits(const std::vector<double>& x, const std::vector<double>& y, std::string* where) {
  if (x.size() != y.size()) return false;
  for (size_t t = 0; t < x.size(); ++t) {
    if (std::isnan(x[t]) && std::isnan(y[t])) continue;
    if (bits(x[t]) != bits(y[t])) {
      if (where) *where = "index " + std::to_string(t);
      return false;
    }
  }
  return true;
}

struct Layout {
  bool a_trans, b_trans;
};

// Runs both routines on C = A·B (M×K times K×N) with A and/or B stored transposed, both stores.
void check_shape(Gen& g, int64_t m, int64_t k, int64_t n, Layout lay) {
  const auto a = g.fill(m * k), b = g.fill(k * n), c0 = g.fill(m * n);
  const MatmulArgs args = gr::test::layout_args(a.data(), b.data(), m, k, n, lay.a_trans, lay.b_trans);
  for (MatmulStore store : {MatmulStore::Overwrite, MatmulStore::Accumulate, MatmulStore::OntoZero}) {
    const auto [want, got] = gr::test::reference_and_exact(args, c0, store);
    const bool ok = bytes_equal(want, got);
    std::string where = "none";
    if (!ok) same_bits(want, got, &where);
    INFO("M=" << m << " K=" << k << " N=" << n << " aT=" << lay.a_trans << " bT=" << lay.b_trans
              << " accumulate=" << (store == MatmulStore::Accumulate) << " mismatch: " << where);
    REQUIRE(ok);
  }
}

const int64_t kDims[] = {0, 1, 2, 3, 5, 7, 8, 9, 15, 16, 17, 31, 33, 64, 65, 100};

}  // namespace

TEST_CASE("matmul_reference is the serial-k fma loop", "[matmul]") {
  Gen g(1);
  const int64_t m = 7, k = 13, n = 5;
  const auto a = g.fill(m * k), b = g.fill(k * n), c0 = g.fill(m * n);
  for (MatmulStore store : {MatmulStore::Overwrite, MatmulStore::Accumulate, MatmulStore::OntoZero}) {
    std::vector<double> want = c0, got = c0;
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j < n; ++j) {
        double acc = 0.0;
        for (int64_t kk = 0; kk < k; ++kk) acc = std::fma(a[static_cast<size_t>(i * k + kk)], b[static_cast<size_t>(kk * n + j)], acc);
        double& c = want[static_cast<size_t>(i * n + j)];
        c = store == MatmulStore::Accumulate ? c + acc : store == MatmulStore::OntoZero ? 0.0 + acc : acc;
      }
    MatmulArgs args{a.data(), k, 1, b.data(), n, 1, got.data(), m, k, n, store};
    gr::matmul_reference(args);
    REQUIRE(bytes_equal(want, got));
  }
}

TEST_CASE("matmul_exact matches reference bitwise over a sampled shape sweep", "[matmul]") {
  Gen g(42);
  std::mt19937_64 pick(7);
  int64_t count = 0;
  for (int64_t m : kDims)
    for (int64_t k : kDims)
      for (int64_t n : kDims) {
        // Every shape with a small (≤ 3) dimension, and a fixed-seed 1-in-6 sample of the rest.
        const bool small = m <= 3 || k <= 3 || n <= 3;
        if (!small && pick() % 6 != 0) continue;
        const Layout lay{(count & 1) != 0, (count & 2) != 0};
        check_shape(g, m, k, n, lay);
        ++count;
      }
  CHECK(count > 1000);
}

TEST_CASE("matmul_exact matches reference on all layouts", "[matmul]") {
  Gen g(3);
  for (bool at : {false, true})
    for (bool bt : {false, true}) {
      const Layout lay{at, bt};
      check_shape(g, 17, 33, 31, lay);
      check_shape(g, 100, 9, 65, lay);
      check_shape(g, 1, 100, 1, lay);
    }
}

TEST_CASE("matmul_exact matches reference on larger shapes (cache blocks, long k)", "[matmul]") {
  Gen g(5);
  check_shape(g, 257, 131, 263, {false, false});
  check_shape(g, 257, 131, 263, {true, false});
  check_shape(g, 257, 131, 263, {false, true});
  // K past one k slice (the running acc is parked and reloaded), M past one row block, N with a
  // ragged last vector; and K long enough for several slices with a transposed A.
  check_shape(g, 203, 600, 37, {false, false});
  check_shape(g, 45, 1100, 29, {true, true});
  check_shape(g, 9, 40, 2100, {false, false});
  // Few rows (row-streaming path): column chunks, k not a multiple of 4, long k.
  check_shape(g, 5, 37, 600, {false, false});
  check_shape(g, 8, 301, 513, {true, false});
  check_shape(g, 3, 3, 700, {false, false});
  // Some rows, B read in place by the tiled path, several k slices.
  check_shape(g, 40, 700, 70, {false, false});
  check_shape(g, 13, 530, 47, {true, false});
  // Narrow C, A read in place: 2*MR-row tiles of a transposed A (one and two vectors, several k
  // slices parked in scratch), a row-major A, and few rows of a narrow C on the tiled path.
  check_shape(g, 100, 900, 10, {true, false});  // folded tails (matmul_fold.cpp)
  check_shape(g, 100, 900, 12, {true, false});  // two vectors, computed as Cᵀ = Bᵀ·Aᵀ
  check_shape(g, 61, 450, 6, {true, true});
  check_shape(g, 200, 64, 6, {false, false});
  check_shape(g, 37, 800, 120, {false, false});
  check_shape(g, 6, 200, 64, {true, false});
  check_shape(g, 8, 128, 10, {false, false});
  // Few k steps and C's rows 4 KiB apart: the tiles walk C along its rows (matmul.cpp's
  // rows_outer), with a ragged last row tile, past one 192-row block, every layout.
  for (bool at : {false, true})
    for (bool bt : {false, true}) {
      check_shape(g, 203, 10, 512, {at, bt});
      check_shape(g, 13, 1, 1024, {at, bt});
    }
  check_shape(g, 256, 10, 1024, {false, true});  // mlp1024's dX2 = g·W2ᵀ
  check_shape(g, 7, 6, 512, {false, false});      // one full row tile and one row
}

// The products a conv layer's im2col makes (issue 42; LeNet-5's conv2 at batch 64, conv1 at batch 4,
// the digits CNN's 8→16 3×3 at batch 64 and its 1→8 at batch 32 and 64): y = W·cols or cols·Wᵀ,
// dW = G·colsᵀ or dWᵀ = colsᵀ·G (a long k), dcols = Wᵀ·G or Wᵀ·Gᵀ (a short k), in every layout
// (lib/grad/tape_window.cpp runs the tall ones: rows = N·OH·OW). Then transposed-B panels of every
// ragged width around the vector widths (register-transposed column groups plus a column tail,
// matmul_pack.h) with k not a multiple of the lanes, and transposed A packed k outer past a row block.
TEST_CASE("matmul_exact: conv im2col shapes and ragged transposed panels match reference", "[matmul][conv]") {
  Gen g(4242);
  struct Mkn {
    int64_t m, k, n;
  };
  for (const Mkn s : {Mkn{16, 150, 6400}, Mkn{6400, 150, 16}, Mkn{16, 6400, 150}, Mkn{150, 16, 6400}, Mkn{6, 25, 3136},
                      Mkn{6, 3136, 25}, Mkn{16, 72, 4096}, Mkn{16, 4096, 72}, Mkn{72, 16, 4096}, Mkn{8, 9, 2048},
                      Mkn{8, 2048, 9}, Mkn{150, 6400, 16}, Mkn{3136, 25, 6}, Mkn{25, 3136, 6},
                      Mkn{4096, 9, 8}, Mkn{9, 4096, 8}})
    for (bool at : {false, true})
      for (bool bt : {false, true}) check_shape(g, s.m, s.k, s.n, {at, bt});
  for (int64_t n : {7, 8, 9, 15, 16, 17, 23, 24, 25, 31, 33, 41, 63, 65, 100}) {
    check_shape(g, 13, 389, n, {false, true});
    check_shape(g, 7, 21, n, {true, true});
  }
  check_shape(g, 197, 300, 70, {true, false});
  check_shape(g, 1024, 37, 10, {true, false});  // narrow C of a transposed A, a far row stride: Cᵀ = Bᵀ·Aᵀ
}

// MatmulStore::Continue: a product split into consecutive k ranges (Overwrite, then Continue) gives
// one call's bytes, on every path: tiles and k slices (K past 384), the folded 10-wide C and the
// row-streaming path (both skipped for Continue), the narrow-C swap (C read transposed), empty
// ranges, threads; and matmul_reference split the same way gives its own one-call bytes.
TEST_CASE("matmul_exact Continue: k ranges in pieces give one call's bytes", "[matmul][continue]") {
  Gen g(777);
  struct Case {
    int64_t m, k, n;
    std::vector<int64_t> cuts;
  };
  const std::vector<Case> cases = {
      {16, 6400, 150, {100, 1700, 1701, 4000}},  // a conv's dW = G·Colᵀ in pieces of images
      {17, 900, 33, {0, 385, 770}},               // an empty first range, cuts past a k slice
      {64, 300, 10, {150}},                        // 10 wide: the fold path when not continuing
      {5, 40, 600, {1, 2, 3}},                     // few rows: the row-streaming path
      {100, 90, 12, {45}},                         // narrow C (swapped for a transposed A)
      {203, 20, 512, {10, 10}},                    // short k, C's rows 4 KiB apart
      {3, 7, 3, {7}},                              // an empty last range
  };
  for (const Case& c : cases)
    for (bool at : {false, true})
      for (bool bt : {false, true}) {
        const auto a = g.fill(c.m * c.k), b = g.fill(c.k * c.n), c0 = g.fill(c.m * c.n);
        MatmulArgs x = gr::test::layout_args(a.data(), b.data(), c.m, c.k, c.n, at, bt);
        std::vector<double> want = c0, got = c0, ref_pieces = c0;
        x.c = want.data();
        gr::matmul_reference(x);
        x.c = got.data();
        gr::test::run_in_k_pieces(x, c.cuts, [](const MatmulArgs& p) { gr::matmul_exact(p); });
        x.c = ref_pieces.data();
        gr::test::run_in_k_pieces(x, c.cuts, [](const MatmulArgs& p) { gr::matmul_reference(p); });
        INFO("M=" << c.m << " K=" << c.k << " N=" << c.n << " aT=" << at << " bT=" << bt);
        REQUIRE(bytes_equal(want, ref_pieces));
        REQUIRE(bytes_equal(want, got));
      }
  // Threads: each block continues its own elements.
  const int before = gr::num_threads();
  gr::set_num_threads(2);
  const auto a = g.fill(192 * 500), b = g.fill(500 * 256), c0 = g.fill(192 * 256);
  MatmulArgs x = gr::test::layout_args(a.data(), b.data(), 192, 500, 256, false, false);
  std::vector<double> want = c0, got = c0;
  x.c = want.data();
  gr::matmul_reference(x);
  x.c = got.data();
  gr::test::run_in_k_pieces(x, {123, 400}, [](const MatmulArgs& p) { gr::matmul_exact(p); });
  gr::set_num_threads(before);
  REQUIRE(bytes_equal(want, got));
}

// A 10-wide C with a row-major B: the 2-column tails of 4 rows share one vector
// (matmul_fold.cpp), in groups of 8 and 4 rows; leftover rows go to the other paths. Every row
// count mod 8, k from 1 to past a k slice, every layout (a transposed B takes the other paths).
TEST_CASE("matmul_exact: a 10-wide C (folded tails) matches reference", "[matmul]") {
  Gen g(29);
  for (int64_t m : {1, 3, 4, 5, 7, 8, 9, 11, 12, 13, 15, 16, 17, 20, 64, 203})
    for (int64_t k : {1, 2, 3, 128, 401})
      for (bool at : {false, true})
        for (bool bt : {false, true}) check_shape(g, m, k, 10, {at, bt});
}

TEST_CASE("matmul_exact matches reference on padded and strided views", "[matmul]") {
  // A and B as views into larger buffers: row strides past the width, and non-unit column strides.
  Gen g(17);
  struct View {
    int64_t m, k, n, a_rs, a_cs, b_rs, b_cs;
  };
  const View views[] = {
      {6, 10, 40, 13, 1, 45, 1},     // padded rows, few rows of a narrow C (tiled, A and B in place)
      {6, 10, 300, 13, 1, 310, 1},   // padded rows, row-streaming path (wide C)
      {30, 20, 37, 23, 1, 41, 1},    // padded rows, tiled path reading B in place
      {70, 300, 50, 1, 75, 2, 150},  // padded transposed A, B with column stride 2
      {5, 9, 19, 2, 11, 3, 40},      // every stride non-unit
      {13, 40, 10, 45, 1, 12, 1},    // a 10-wide C, padded rows: folded tails (8 + 4) and 1 row
      {9, 30, 10, 1, 11, 10, 1},     // the same with a padded transposed A
      {12, 7, 10, 3, 40, 16, 1},     // the same with both of A's strides non-unit
  };
  for (const View& v : views) {
    const int64_t a_len = (v.m - 1) * v.a_rs + (v.k - 1) * v.a_cs + 1;
    const int64_t b_len = (v.k - 1) * v.b_rs + (v.n - 1) * v.b_cs + 1;
    const auto a = g.fill(a_len), b = g.fill(b_len), c0 = g.fill(v.m * v.n);
    for (MatmulStore store : {MatmulStore::Overwrite, MatmulStore::Accumulate, MatmulStore::OntoZero}) {
      std::vector<double> want = c0, got = c0;
      MatmulArgs args{a.data(), v.a_rs, v.a_cs, b.data(), v.b_rs, v.b_cs, want.data(), v.m, v.k, v.n, store};
      gr::matmul_reference(args);
      args.c = got.data();
      gr::matmul_exact(args);
      INFO("M=" << v.m << " K=" << v.k << " N=" << v.n);
      REQUIRE(bytes_equal(want, got));
    }
  }
}

TEST_CASE("matmul_exact tiny shapes used by the models", "[matmul]") {
  Gen g(11);
  check_shape(g, 4, 2, 16, {false, false});
  check_shape(g, 200, 6, 64, {false, false});
  check_shape(g, 200, 64, 32, {false, false});
  check_shape(g, 64, 784, 256, {false, false});
  check_shape(g, 784, 64, 256, {true, false});  // Aᵀ·g shape of a weight gradient
  check_shape(g, 64, 256, 784, {false, true});  // g·Bᵀ shape of an input gradient
}

TEST_CASE("matmul_exact: signed zeros, infinities and NaN", "[matmul]") {
  const double inf = std::numeric_limits<double>::infinity();
  const double nan = std::numeric_limits<double>::quiet_NaN();
  const double specials[] = {0.0, -0.0, 1.0, -1.0, inf, -inf, nan, 1e308, -1e308, 5e-324, 3.0};
  std::mt19937_64 rng(99);
  for (int64_t m : {1, 5, 13, 29, 40})
    for (int64_t k : {0, 1, 2, 3, 7, 300})
      for (int64_t n : {1, 8, 9, 17, 40}) {
        auto fill = [&](int64_t cnt) {
          std::vector<double> v(static_cast<size_t>(cnt));
          for (auto& x : v) x = specials[rng() % (sizeof specials / sizeof specials[0])];
          return v;
        };
        const auto a = fill(m * k), b = fill(k * n), c0 = fill(m * n);
        for (MatmulStore store : {MatmulStore::Overwrite, MatmulStore::Accumulate, MatmulStore::OntoZero}) {
          std::vector<double> want = c0, got = c0;
          MatmulArgs args{a.data(), k, 1, b.data(), n, 1, want.data(), m, k, n, store};
          gr::matmul_reference(args);
          args.c = got.data();
          gr::matmul_exact(args);
          std::string where;
          INFO("M=" << m << " K=" << k << " N=" << n);
          REQUIRE(same_bits(want, got, &where));
        }
      }
  // -0.0 products: acc starts at +0.0, so 0 + (-0) = +0; and C = (-0) + 0 = +0 when K = 0.
  {
    const double a[] = {-0.0, 1.0}, b[] = {1.0, -0.0};
    double c[1] = {-0.0};
    gr::matmul_exact({a, 2, 1, b, 1, 1, c, 1, 2, 1, MatmulStore::Overwrite});
    CHECK(bits(c[0]) == bits(0.0));
    c[0] = -0.0;
    gr::matmul_exact({a, 0, 1, b, 1, 1, c, 1, 0, 1, MatmulStore::Accumulate});
    CHECK(bits(c[0]) == bits(0.0));
    c[0] = -0.0;
    gr::matmul_exact({a, 0, 1, b, 1, 1, c, 1, 0, 1, MatmulStore::Overwrite});
    CHECK(bits(c[0]) == bits(0.0));
  }
}

TEST_CASE("matmul: 1 and N threads give identical bytes", "[matmul][threads]") {
  std::uint64_t s = 99;
  auto next = [&] {
    s += 0x9E3779B97F4A7C15ULL;
    std::uint64_t z = s;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    return static_cast<double>((z ^ (z >> 31)) >> 11) * 0x1.0p-53 - 0.5;
  };
  for (const auto& [M, K, N] : {std::array<int64_t, 3>{197, 300, 71}, {64, 784, 256}, {1000, 64, 33}, {40, 513, 129}}) {
    std::vector<double> a(static_cast<size_t>(M * K)), b(static_cast<size_t>(K * N)), c1(static_cast<size_t>(M * N), 1.5);
    for (double& v : a) v = next();
    for (double& v : b) v = next();
    std::vector<double> c4 = c1;
    for (gr::MatmulStore store : {gr::MatmulStore::Overwrite, gr::MatmulStore::Accumulate, gr::MatmulStore::OntoZero}) {
      gr::set_num_threads(1);
      gr::matmul_exact({a.data(), K, 1, b.data(), N, 1, c1.data(), M, K, N, store});
      gr::set_num_threads(4);
      gr::matmul_exact({a.data(), K, 1, b.data(), N, 1, c4.data(), M, K, N, store});
      gr::set_num_threads(1);
      INFO("M=" << M << " K=" << K << " N=" << N);
      REQUIRE(std::memcmp(c1.data(), c4.data(), c1.size() * sizeof(double)) == 0);
    }
  }
}

TEST_CASE("matmul_exact: thread grids over rows and columns match the reference", "[matmul][threads]") {
  // Few rows split over column blocks (row-streaming and tiled paths), many rows over row blocks,
  // mixed grids with 3 and 4 threads, ragged last column blocks, k past one slice (the running
  // acc parked in C or in scratch per block), and transposed operands.
  Gen g(23);
  struct Case {
    int64_t m, k, n;
    Layout lay;
  };
  const Case cases[] = {
      {6, 600, 300, {false, false}},    // rows path, column blocks
      {3, 1000, 200, {false, true}},    // tiled path with few rows and a transposed B
      {64, 784, 256, {false, false}},   // the MLP forward shape
      {64, 256, 784, {false, true}},    // its input gradient g·Wᵀ
      {784, 64, 256, {true, false}},    // its weight gradient Xᵀ·g
      {37, 900, 133, {false, false}},   // several k slices, ragged last column block
      {50, 520, 97, {true, true}},      // several k slices, both transposed
      {130, 70, 70, {false, false}},    // rows only (too narrow for column blocks)
      {300, 200, 6, {true, false}},     // row blocks of a narrow C, each computed as Cᵀ = Bᵀ·Aᵀ
      {300, 200, 10, {true, false}},    // row blocks of a 10-wide C, folded tails
      {256, 10, 1024, {false, true}},   // blocks of a C walked along its rows (rows 4 KiB apart)
      {203, 6, 512, {true, false}},     // the same, ragged row blocks
      {203, 401, 10, {false, false}},   // row blocks of a 10-wide C: folded tails, then leftover rows
  };
  for (int threads : {2, 3, 4}) {
    gr::set_num_threads(threads);
    for (const Case& c : cases) {
      INFO("threads=" << threads);
      check_shape(g, c.m, c.k, c.n, c.lay);
    }
  }
  gr::set_num_threads(1);
}

// OntoZero (a fresh gradient slot): C = +0 + acc, C never read. With products that all underflow,
// every acc is ±0 (the sign of the last product), so Overwrite leaves −0s and OntoZero must turn
// each into +0 on every path: row streaming, tiles, the swapped transposed store, k slices, threads.
TEST_CASE("matmul_exact OntoZero: +0 + acc on every path, C not read", "[matmul]") {
  std::mt19937_64 rng(99);
  struct Case {
    int64_t m, k, n;
    bool a_trans;
    int threads;
  };
  const Case cases[] = {{5, 20, 300, false, 1}, {64, 30, 64, false, 1}, {200, 64, 6, true, 1},
                        {20, 1000, 40, false, 1}, {64, 50, 256, false, 2}, {130, 40, 70, true, 2},
                        {15, 30, 10, false, 1}};  // the folded tails (8 + 4 rows, then 3)
  for (const Case& cs : cases) {
    gr::set_num_threads(cs.threads);
    std::vector<double> a(static_cast<size_t>(cs.m * cs.k)), b(static_cast<size_t>(cs.k * cs.n));
    for (double& x : a) x = std::ldexp(static_cast<double>(1 + rng() % 7), -600) * (rng() % 2 ? -1.0 : 1.0);
    for (double& x : b) x = std::ldexp(static_cast<double>(1 + rng() % 7), -600) * (rng() % 2 ? -1.0 : 1.0);
    const std::vector<double> c0(static_cast<size_t>(cs.m * cs.n), std::numeric_limits<double>::quiet_NaN());
    const MatmulArgs args = gr::test::layout_args(a.data(), b.data(), cs.m, cs.k, cs.n, cs.a_trans, false);
    const auto [want, got] = gr::test::reference_and_exact(args, c0, MatmulStore::OntoZero);
    INFO("M=" << cs.m << " K=" << cs.k << " N=" << cs.n << " aT=" << cs.a_trans << " threads=" << cs.threads);
    REQUIRE(bytes_equal(want, got));
    const auto [over_want, over_got] = gr::test::reference_and_exact(args, c0, MatmulStore::Overwrite);
    REQUIRE(bytes_equal(over_want, over_got));
    int64_t negative_zeros = 0;
    for (size_t i = 0; i < got.size(); ++i) {
      REQUIRE(got[i] == 0.0);
      REQUIRE(!std::signbit(got[i]));
      if (std::signbit(over_got[i])) ++negative_zeros;
    }
    CHECK(negative_zeros > 0);  // the case can tell OntoZero from Overwrite
  }
  gr::set_num_threads(1);
}
