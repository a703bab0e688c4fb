// test_lane_rows.cpp — the CPU tape's fast paths that must not change a bit:
//   • softmax over a last axis runs eight lanes at a time (gr_softmax_rows_fwd/bwd, their serial
//     chains interleaved); each lane must equal gr_softmax_lane_fwd/bwd, the one definition the
//     device kernels use, bitwise, for any values (NaN, ±inf, ties, −0, huge spreads; a NaN
//     matches any NaN);
//   • the tape's softmax forward and backward on [rows, L] equal those lane kernels called one lane
//     at a time, for row counts that leave every remainder of 8;
//   • a fresh gradient slot (Tape::grad_slot) holds anything; poisoned with NaN, every op's gradient
//     still equals an unpoisoned run's.
#include <catch2/catch.hpp>
#include <array>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "gr_ops_lane.h"
#include "gr_ops_scalar.h"
#include "grad/tape.h"

namespace {

bool same_bytes(const std::vector<double>& a, const std::vector<double>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(double)) == 0;
}
// Bitwise, except that any NaN matches any NaN: IEEE 754 leaves the sign and payload of a NaN
// made by arithmetic open, and the compiler may commute operands (docs/emit.md "NaN results").
bool same_bits_nan_any(const std::vector<double>& a, const std::vector<double>& b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    if (std::isnan(a[i]) && std::isnan(b[i])) continue;
    if (std::memcmp(&a[i], &b[i], sizeof(double)) != 0) return false;
  }
  return true;
}

// Values that stress max, exp and the sums: mostly ordinary, some special.
std::vector<double> lanes_of(std::mt19937_64& rng, size_t n) {
  std::uniform_real_distribution<double> u(-30.0, 30.0);
  std::uniform_int_distribution<int> pick(0, 39);
  std::vector<double> v(n);
  const double inf = std::numeric_limits<double>::infinity();
  for (double& x : v) {
    switch (pick(rng)) {
      case 0: x = std::numeric_limits<double>::quiet_NaN(); break;
      case 1: x = inf; break;
      case 2: x = -inf; break;
      case 3: x = -0.0; break;
      case 4: x = 700.0; break;
      case 5: x = 3.0; break;  // ties for the max
      case 6: x = 3.0; break;
      default: x = u(rng);
    }
  }
  return v;
}

}  // namespace

TEST_CASE("eight softmax lanes at once equal eight single lanes, bitwise", "[lanes]") {
  std::mt19937_64 rng(20261202);
  for (long long len : {1LL, 2LL, 3LL, 7LL, 16LL, 17LL, 64LL}) {
    for (int trial = 0; trial < 50; ++trial) {
      const std::vector<double> x = lanes_of(rng, static_cast<size_t>(8 * len));
      const std::vector<double> g = lanes_of(rng, static_cast<size_t>(8 * len));
      std::vector<double> y_rows(x.size()), y_lanes(x.size());
      gr_softmax_rows_fwd<8>(x.data(), y_rows.data(), len);
      for (int r = 0; r < 8; ++r) gr_softmax_lane_fwd(x.data() + r * len, y_lanes.data() + r * len, len, 1LL);
      REQUIRE(same_bits_nan_any(y_rows, y_lanes));

      std::vector<double> s_rows = lanes_of(rng, x.size()), s_lanes = s_rows;  // slots already holding sums
      gr_softmax_rows_bwd<8>(g.data(), y_lanes.data(), s_rows.data(), len);
      for (int r = 0; r < 8; ++r)
        gr_softmax_lane_bwd(g.data() + r * len, y_lanes.data() + r * len, s_lanes.data() + r * len, len, 1LL);
      REQUIRE(same_bits_nan_any(s_rows, s_lanes));
    }
  }
}

TEST_CASE("the tape's last-axis softmax equals the lane kernels for every row count", "[lanes]") {
  std::mt19937_64 rng(7);
  std::uniform_real_distribution<double> u(-4.0, 4.0);
  for (int64_t rows : {1, 7, 8, 9, 15, 16, 17, 31}) {
    for (int64_t len : {1, 5, 16}) {
      std::vector<double> xv(static_cast<size_t>(rows * len)), wv(xv.size());
      for (double& v : xv) v = u(rng);
      for (double& v : wv) v = u(rng);
      gr::Tape t;
      const gr::Var x = t.param(gr::Shape{rows, len}, xv);
      const gr::Var w = t.constant(gr::Shape{rows, len}, wv);
      const gr::Var y = t.softmax(x, -1);
      const gr::Var loss = t.sum(t.mul(y, w));
      REQUIRE(t.backward(loss));

      std::vector<double> y_want(xv.size()), dx_want(xv.size(), 0.0);
      for (int64_t r = 0; r < rows; ++r) gr_softmax_lane_fwd(xv.data() + r * len, y_want.data() + r * len, len, 1LL);
      // d loss / d y = w (the mul's a-side onto a fresh slot: +0 + w·1, i.e. w), then the lane rule.
      for (int64_t r = 0; r < rows; ++r)
        gr_softmax_lane_bwd(wv.data() + r * len, y_want.data() + r * len, dx_want.data() + r * len, len, 1LL);
      const auto yv = t.value(y).values();
      const auto gx = t.grad(x).values();
      REQUIRE(same_bytes(std::vector<double>(yv.begin(), yv.end()), y_want));
      REQUIRE(same_bytes(std::vector<double>(gx.begin(), gx.end()), dx_want));
    }
  }
}

namespace {

// Parameter gradients of a graph that reaches every kind of backward rule: the fresh-slot writers
// (elementwise same shape, x·x on one node, reshape of an op and of a leaf, transpose, matmul with
// A = B, bmm with a shared batch-1 side, sum/mean over all) and the zeroing ones (broadcast, bias,
// axis sums, max, slice, concat, lanes, layer_norm). Two episodes, so the second's fresh slots
// hold the first's gradients unless poisoned.
std::vector<double> all_rule_grads(bool poison) {
  gr::Tape::poison_fresh_gradients(poison);
  std::mt19937_64 rng(11);
  std::uniform_real_distribution<double> u(-1.0, 1.0);
  auto vals = [&](int64_t n) {
    std::vector<double> v(static_cast<size_t>(n));
    for (double& x : v) x = u(rng);
    return v;
  };
  gr::Tape t;
  const gr::Var a = t.param(gr::Shape{4, 4}, vals(16));
  const gr::Var b = t.param(gr::Shape{1, 4, 4}, vals(16));
  const gr::Var bias = t.param(gr::Shape{4}, vals(4));
  const gr::Var c = t.param(gr::Shape{2, 4, 4}, vals(32));
  const gr::Var unused = t.param(gr::Shape{3}, vals(3));
  const int32_t mark = t.mark();
  std::vector<double> out;
  for (int episode = 0; episode < 2; ++episode) {
    const gr::Var aa = t.matmul(a, a);                           // A = B
    const gr::Var sq = t.mul(aa, aa);                            // one node on both sides
    const gr::Var r = t.reshape(t.add(sq, bias), std::vector<int64_t>{1, 4, 4});  // bias, view of an op
    const gr::Var bm = t.bmm(c, t.transpose(t.add(r, b)));       // batch-1 B shared by 2 batches
    const gr::Var sm = t.softmax(bm, -1);
    const gr::Var ls = t.log_softmax(t.reshape(c, std::vector<int64_t>{8, 4}), 0);  // a leaf's reshape, axis 0
    const gr::Var cat = t.concat(t.reshape(sm, std::vector<int64_t>{8, 4}), ls, 1);
    const gr::Var sl = t.slice(cat, std::vector<int64_t>{1, 2}, std::vector<int64_t>{7, 7});
    const gr::Var ln = t.layer_norm(sl);
    const gr::Var m = t.max(ln, 1, false);
    const gr::Var s = t.sum(ln, 0, false);
    const gr::Var loss = t.add(t.add(t.mean(t.muls(m, 0.5)), t.sum(s)), t.mse(aa, t.exp(a)));
    REQUIRE(t.backward(loss));
    if (episode == 1)
      for (gr::Var p : {a, b, bias, c, unused})
        for (double g : t.grad(p).values()) out.push_back(g);
    t.reset_to(mark);
  }
  gr::Tape::poison_fresh_gradients(false);
  return out;
}

}  // namespace

TEST_CASE("fresh gradient slots poisoned with NaN give the same gradients, bitwise", "[lanes][fresh]") {
  const std::vector<double> plain = all_rule_grads(false), poisoned = all_rule_grads(true);
  REQUIRE(plain.size() == 16 + 16 + 4 + 32 + 3);
  for (double g : plain) REQUIRE(std::isfinite(g));
  REQUIRE(same_bytes(plain, poisoned));
}

namespace {

// A channel bias b [C, 1] over x [P, C, Q] (backward.cpp channel_bias; 8 channels a vector where C and Q
// are multiples of 8, channel_lanes.h): x's and b's gradients against the definition — x's slot +0 +
// ca(e) (after the later consumer's contribution where `shared`), b's slot c the sum over (p, q)
// ascending of cb(e), each a round-to-nearest add in T.
template <class T>
void check_channel_bias(int op, int64_t P, int64_t C, int64_t Q, bool shared, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> u(-2.0, 2.0);
  const auto draw = [&](int64_t n) {
    std::vector<double> v(static_cast<size_t>(n));
    for (double& e : v) e = static_cast<double>(static_cast<T>(u(rng)));
    return v;
  };
  gr::Tape t(std::is_same_v<T, float> ? gr::DType::F32 : gr::DType::F64);
  const gr::Var x = t.param(gr::Shape{P, C, Q}, draw(P * C * Q)), b = t.param(gr::Shape{C, 1}, draw(C));
  const gr::Var y = op == 0 ? t.add(x, b) : op == 1 ? t.sub(x, b) : t.mul(x, b);
  const gr::Var r1 = t.constant(gr::Shape{P, C, Q}, draw(P * C * Q)), r2 = t.constant(gr::Shape{P, C, Q}, draw(P * C * Q));
  gr::Var loss = t.sum(t.mul(y, r1));
  if (shared) loss = t.add(loss, t.sum(t.mul(x, r2)));
  REQUIRE(t.backward(loss));
  const double *g = t.grad(y).data, *xv = t.value(x).data, *bv = t.value(b).data, *r2v = t.value(r2).data;
  std::vector<double> want_x(static_cast<size_t>(P * C * Q)), want_b(static_cast<size_t>(C));
  for (int64_t p = 0, e = 0; p < P; ++p)
    for (int64_t c = 0; c < C; ++c)
      for (int64_t q = 0; q < Q; ++q, ++e) {
        const T ge = static_cast<T>(g[e]);
        const T ca = op == 2 ? gr_mul_bwd_a<T>(ge, static_cast<T>(bv[c])) : ge;
        const T cb = op == 0 ? ge : op == 1 ? gr_sub_bwd_b<T>(ge) : gr_mul_bwd_b<T>(ge, static_cast<T>(xv[e]));
        const T before = shared ? gr_accumulate<T>(T(0), gr_mul_bwd_b<T>(T(1), static_cast<T>(r2v[e]))) : T(0);
        want_x[static_cast<size_t>(e)] = static_cast<double>(gr_accumulate<T>(before, ca));
        want_b[static_cast<size_t>(c)] = static_cast<double>(gr_accumulate<T>(static_cast<T>(want_b[static_cast<size_t>(c)]), cb));
      }
  CHECK(std::memcmp(want_x.data(), t.grad(x).data, want_x.size() * sizeof(double)) == 0);
  CHECK(std::memcmp(want_b.data(), t.grad(b).data, want_b.size() * sizeof(double)) == 0);
}

}  // namespace

TEST_CASE("a channel bias's backward equals the definition, 8 channels a vector with partial blocks and tiles (f64, f32)", "[lanes]") {
  uint64_t seed = 11;
  for (int op = 0; op < 3; ++op)
    for (const auto& [P, C, Q] : std::vector<std::array<int64_t, 3>>{{3, 16, 64}, {1, 8, 8}, {2, 24, 16}, {2, 12, 16}, {2, 16, 9}, {2, 6, 100}, {1, 13, 20}})
      for (const bool shared : {false, true}) {
        INFO("op " << op << " P " << P << " C " << C << " Q " << Q << (shared ? " shared" : ""));
        check_channel_bias<double>(op, P, C, Q, shared, ++seed);
        check_channel_bias<float>(op, P, C, Q, shared, ++seed);
      }
}
