// test_row_lanes.cpp — layer_norm's blocked CPU path (lib/grad/row_lanes.h: 8 rows side by side)
// against the one-row rule of kernels/gr_ops_lane.h, byte for byte: the functions themselves (and
// the backward from the forward's kept 1/sigma, layer_norm_rows_bwd_r) on
// random rows (f64 and f32, several lengths), and the tape's layer_norm forward and backward on 13
// rows (one block of 8 and a remainder of 5 through the one-row rule), f64 and f32; cross_entropy's
// rows (exps first) against gr_ce_row_fwd/_bwd. The values
// span many magnitudes so a sum in another order rounds differently (a reordered chain fails this).
#include <catch2/catch.hpp>
#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "gr_ops_lane.h"
#include "grad/row_lanes.h"
#include "grad/tape.h"

using namespace gr;

namespace {
template <class T>
std::vector<T> wild(size_t n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> u(-1.0, 1.0), e(-6.0, 6.0);
  std::vector<T> v(n);
  for (auto& x : v) x = static_cast<T>(u(rng) * std::pow(10.0, e(rng)));
  return v;
}

template <class T>
void rows_against_one_row(int64_t len) {
  constexpr int W = kRowBlock;
  const size_t n = static_cast<size_t>(W * len);
  const std::vector<T> x = wild<T>(n, 1 + static_cast<uint64_t>(len)), g = wild<T>(n, 99 + static_cast<uint64_t>(len));
  const std::vector<T> slot0 = wild<T>(n, 7 + static_cast<uint64_t>(len));
  const T eps = static_cast<T>(1e-5);
  std::vector<T> y(n), y1(n), s = slot0, s1 = slot0, s_kept = slot0;
  T r[W];  // each row's 1/sigma, as the tape keeps it for backward
  layer_norm_rows_fwd<W>(x.data(), y.data(), len, eps, r);
  layer_norm_rows_bwd<W>(g.data(), x.data(), y.data(), s.data(), len, eps);
  layer_norm_rows_bwd_r<W>(g.data(), y.data(), r, s_kept.data(), len);
  for (int w = 0; w < W; ++w) {
    const size_t o = static_cast<size_t>(w * len);
    gr_layer_norm_lane_fwd(x.data() + o, y1.data() + o, static_cast<long long>(len), 1LL, eps);
    gr_layer_norm_lane_bwd(g.data() + o, x.data() + o, y1.data() + o, s1.data() + o, static_cast<long long>(len), 1LL, eps);
  }
  CHECK(std::memcmp(y.data(), y1.data(), n * sizeof(T)) == 0);
  CHECK(std::memcmp(s.data(), s1.data(), n * sizeof(T)) == 0);
  CHECK(std::memcmp(s_kept.data(), s1.data(), n * sizeof(T)) == 0);
}
}  // namespace

TEST_CASE("row_lanes: 8 layer_norm rows side by side equal the one-row rule byte for byte", "[tape][layer_norm]") {
  for (const int64_t len : {1, 5, 64, 200}) {
    rows_against_one_row<double>(len);
    rows_against_one_row<float>(len);
  }
}

TEST_CASE("row_lanes: the tape's layer_norm on 13 rows (a block and a remainder) equals the one-row rule", "[tape][layer_norm]") {
  constexpr int64_t R = 13, L = 64;
  const size_t n = static_cast<size_t>(R * L);
  const std::vector<double> x = wild<double>(n, 5), w = wild<double>(n, 6);
  for (const DType dt : {DType::F64, DType::F32}) {
    Tape t(dt);
    // The f32 tape holds floats in doubles: its inputs are the values narrowed.
    std::vector<double> xs = x, ws = w;
    if (dt == DType::F32)
      for (size_t i = 0; i < n; ++i) xs[i] = static_cast<float>(x[i]), ws[i] = static_cast<float>(w[i]);
    const Var X = t.param(Shape{R, L}, xs), Wc = t.constant(Shape{R, L}, ws);
    const Var y = t.layer_norm(X);
    REQUIRE(t.backward(t.sum(t.mul(y, Wc))));  // y's gradient is w exactly
    std::vector<double> want_y(n), want_g(n, 0.0);
    for (int64_t r = 0; r < R; ++r) {
      const size_t o = static_cast<size_t>(r * L);
      if (dt == DType::F64) {
        gr_layer_norm_lane_fwd(xs.data() + o, want_y.data() + o, L, 1LL, 1e-5);
        gr_layer_norm_lane_bwd(ws.data() + o, xs.data() + o, want_y.data() + o, want_g.data() + o, L, 1LL, 1e-5);
      } else {
        std::vector<float> xf(xs.begin() + static_cast<long>(o), xs.begin() + static_cast<long>(o + L)), gf(L), yf(L), sf(L, 0.0f);
        for (int64_t k = 0; k < L; ++k) gf[static_cast<size_t>(k)] = static_cast<float>(ws[o + static_cast<size_t>(k)]);
        gr_layer_norm_lane_fwd(xf.data(), yf.data(), L, 1LL, 1e-5f);
        gr_layer_norm_lane_bwd(gf.data(), xf.data(), yf.data(), sf.data(), L, 1LL, 1e-5f);
        for (int64_t k = 0; k < L; ++k) want_y[o + static_cast<size_t>(k)] = yf[static_cast<size_t>(k)], want_g[o + static_cast<size_t>(k)] = sf[static_cast<size_t>(k)];
      }
    }
    CHECK(std::memcmp(t.value(y).data, want_y.data(), n * sizeof(double)) == 0);
    CHECK(std::memcmp(t.grad(X).data, want_g.data(), n * sizeof(double)) == 0);
  }
}

namespace {
// ce_row_fwd / ce_row_bwd (the exps first, then the sum) and ce_row_bwd_ml (from the forward's
// max and log-sum-exp) against gr_ce_row_fwd / gr_ce_row_bwd
// (the sum carried through the exps), byte for byte: logits spanning ±30 so that a sum in another
// order rounds differently, every class id, one outside the row and a NaN id (the NaN results).
template <class T>
void ce_against_one_row(int64_t len) {
  std::vector<T> x = wild<T>(static_cast<size_t>(len), 300 + static_cast<uint64_t>(len));
  for (auto& v : x) v = static_cast<T>(std::fmod(static_cast<double>(v), 30.0));
  const std::vector<T> slot0 = wild<T>(static_cast<size_t>(len), 400 + static_cast<uint64_t>(len));
  std::vector<T> e(static_cast<size_t>(len));
  std::vector<T> ids;
  for (int64_t c = 0; c < len; ++c) ids.push_back(static_cast<T>(c));
  ids.push_back(static_cast<T>(len));
  ids.push_back(static_cast<T>(NAN));
  const T q = static_cast<T>(0.0625);
  for (const T c : ids) {
    T ml[2];  // the row's max and log-sum-exp, as the tape keeps them for backward
    const T got = ce_row_fwd(x.data(), c, len, e.data(), ml), want = gr_ce_row_fwd(x.data(), c, static_cast<long long>(len));
    CHECK(std::memcmp(&got, &want, sizeof(T)) == 0);
    std::vector<T> s = slot0, s1 = slot0, s_kept = slot0;
    ce_row_bwd(x.data(), c, q, s.data(), len, e.data());
    ce_row_bwd_ml(x.data(), c, q, s_kept.data(), len, ml[0], ml[1]);
    gr_ce_row_bwd(x.data(), c, q, s1.data(), static_cast<long long>(len));
    CHECK(std::memcmp(s.data(), s1.data(), s.size() * sizeof(T)) == 0);
    CHECK(std::memcmp(s_kept.data(), s1.data(), s.size() * sizeof(T)) == 0);
  }
}
}  // namespace

TEST_CASE("row_lanes: cross_entropy's rows with the exps first equal the one-row rule byte for byte", "[tape][cross_entropy]") {
  for (const int64_t len : {1, 2, 10, 27, 100}) {
    ce_against_one_row<double>(len);
    ce_against_one_row<float>(len);
  }
}
