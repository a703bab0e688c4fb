// test_optimizer.cpp — optimizer trajectories, bit-exact against values computed by hand from the
// §5 formulas (written out here independently of optimizer.cpp), compared with memcmp.
#include <catch2/catch.hpp>
#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "grad/optimizer.h"
#include "tensor/parallel.h"

using namespace gr;

namespace {
bool same_bits(std::span<const double> a, const std::vector<double>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size_bytes()) == 0;
}
// L = Σ w ⊙ c, so dL/dw = c exactly (the slot receives 0 + 1·c).
Var linear_loss(Tape& t, Var w, const std::vector<double>& c) {
  return t.sum(t.mul(w, t.constant(t.node(w).shape, c)));
}
}  // namespace

TEST_CASE("two Adam steps match the hand-computed trajectory", "[optimizer]") {
  Tape t;
  std::vector<double> w = {0.5, -1.25, 3.0};
  const std::vector<double> g = {0.1, -0.02, 4.0};
  const Var p = t.param(Shape{3}, w);
  Optimizer opt = Optimizer::adam(0.01);
  opt.add(t, p);
  const int32_t mark = t.mark();
  std::vector<double> m(3, 0.0), v(3, 0.0);
  for (int step = 1; step <= 2; ++step) {
    REQUIRE(t.backward(linear_loss(t, p, g)));
    opt.step(t);
    t.reset_to(mark);
    const double lr_t = 0.01 * std::sqrt(1.0 - std::pow(0.999, step)) / (1.0 - std::pow(0.9, step));
    for (int i = 0; i < 3; ++i) {
      m[i] = 0.9 * m[i] + (1.0 - 0.9) * g[i];
      v[i] = 0.999 * v[i] + (1.0 - 0.999) * (g[i] * g[i]);
      w[i] = w[i] - (lr_t * m[i]) / (std::sqrt(v[i]) + 1e-8);
    }
    INFO("step " << step);
    REQUIRE(same_bits(t.param_value(p), w));
    REQUIRE(same_bits(opt.m(0), m));
    REQUIRE(same_bits(opt.v(0), v));
  }
  REQUIRE(opt.t() == 2);
  // First step of Adam moves each weight by ≈ lr against the gradient's sign.
  REQUIRE(std::fabs(w[0] - (0.5 - 2 * 0.01)) < 1e-6);
}

TEST_CASE("SGD with per-parameter L2", "[optimizer]") {
  Tape t;
  std::vector<double> w = {1.5, -0.75}, b = {0.25};
  const std::vector<double> gw = {0.3, 0.6}, gb = {-1.0};
  const Var pw = t.param(Shape{2}, w), pb = t.param(Shape{1}, b);
  Optimizer opt = Optimizer::sgd(0.1);
  opt.add(t, pw, 0.01);
  opt.add(t, pb, 0.0);
  REQUIRE(t.backward(t.add(linear_loss(t, pw, gw), linear_loss(t, pb, gb))));
  opt.step(t);
  for (int i = 0; i < 2; ++i) w[i] = w[i] - 0.1 * (gw[i] * 1.0 + 0.01 * w[i]);
  b[0] = b[0] - 0.1 * (gb[0] * 1.0 + 0.0 * b[0]);
  REQUIRE(same_bits(t.param_value(pw), w));
  REQUIRE(same_bits(t.param_value(pb), b));
}

TEST_CASE("global-norm clipping scales every gradient by maxn/norm", "[optimizer]") {
  Tape t;
  std::vector<double> w1 = {1.0, 2.0}, w2 = {-3.0};
  const std::vector<double> g1 = {3.0, 4.0}, g2 = {12.0};  // norm = 13
  const Var p1 = t.param(Shape{2}, w1), p2 = t.param(Shape{1}, w2);
  Optimizer opt = Optimizer::sgd(0.5);
  opt.add(t, p1, 0.1);
  opt.add(t, p2);
  opt.set_clip(6.5);
  REQUIRE(t.backward(t.add(linear_loss(t, p1, g1), linear_loss(t, p2, g2))));
  opt.step(t);
  const double sq = (3.0 * 3.0 + 12.0 * 12.0) + 4.0 * 4.0;  // lane 0: g1[0], g2[0]; lane 1: g1[1]
  const double cs = 6.5 / std::sqrt(sq);
  REQUIRE(cs == 0.5);
  REQUIRE(opt.last_clip_scale() == cs);
  for (int i = 0; i < 2; ++i) w1[i] = w1[i] - 0.5 * (g1[i] * cs + 0.1 * w1[i]);
  w2[0] = w2[0] - 0.5 * (g2[0] * cs + 0.0 * w2[0]);
  REQUIRE(same_bits(t.param_value(p1), w1));
  REQUIRE(same_bits(t.param_value(p2), w2));
}

TEST_CASE("clipping leaves gradients under the threshold alone", "[optimizer]") {
  Tape t;
  const Var p = t.param(Shape{2}, std::vector<double>{1.0, 1.0});
  Optimizer opt = Optimizer::sgd(1.0);
  opt.add(t, p);
  opt.set_clip(100.0);
  REQUIRE(t.backward(linear_loss(t, p, {3.0, 4.0})));
  opt.step(t);
  REQUIRE(opt.last_clip_scale() == 1.0);
  REQUIRE(same_bits(t.param_value(p), {1.0 - 3.0, 1.0 - 4.0}));
}

TEST_CASE("a parameter backward never touched is skipped, not decayed", "[optimizer]") {
  Tape t;
  const std::vector<double> used0 = {1.0}, unused0 = {2.0, -2.0};
  const Var used = t.param(Shape{1}, used0);
  const Var unused = t.param(Shape{2}, unused0);
  Optimizer opt = Optimizer::adam(0.1);
  opt.add(t, used, 0.5);
  opt.add(t, unused, 0.5);  // L2 would move it if it were not skipped
  opt.set_clip(1e-3);       // and the clip norm must ignore it too
  REQUIRE(t.backward(linear_loss(t, used, {2.0})));
  opt.step(t);
  REQUIRE(same_bits(t.param_value(unused), unused0));
  REQUIRE(same_bits(opt.m(1), {0.0, 0.0}));
  REQUIRE(opt.last_clip_scale() == 1e-3 / 2.0);
  REQUIRE(t.param_value(used)[0] != used0[0]);
  REQUIRE(opt.t() == 1);
}

TEST_CASE("Adam moments and step counter can be written back (checkpoint resume)", "[optimizer]") {
  // Run 3 steps straight; separately run 1 step, copy state into a fresh optimizer, run 2 more.
  auto run = [](int steps, Optimizer* resume_from, std::vector<double> w0) {
    Tape t;
    const Var p = t.param(Shape{2}, w0);
    Optimizer opt = Optimizer::adam(0.05, {0.8, 0.99, 1e-7});
    opt.add(t, p, 0.01);
    if (resume_from) {
      opt.set_t(resume_from->t());
      opt.set_m(0, resume_from->m(0));
      opt.set_v(0, resume_from->v(0));
    }
    const int32_t mark = t.mark();
    for (int s = 0; s < steps; ++s) {
      REQUIRE(t.backward(t.sum(t.mul(p, p))));
      opt.step(t);
      t.reset_to(mark);
    }
    std::vector<double> w(t.param_value(p).begin(), t.param_value(p).end());
    return std::make_pair(w, opt);
  };
  auto [straight, o3] = run(3, nullptr, {0.7, -0.4});
  auto [first, o1] = run(1, nullptr, {0.7, -0.4});
  auto [resumed, o2] = run(2, &o1, first);
  REQUIRE(o2.t() == 3);
  REQUIRE(same_bits(std::span<const double>(resumed), straight));
}

// SGD momentum and Nesterov (PyTorch's SGD, dampening 0): b = μ·b + ge; d = nesterov ? ge + μ·b : b;
// w = w − lr·d, with b starting at 0 — written out here from the formula, not from gr_optim.h.
TEST_CASE("SGD momentum and Nesterov match the hand-computed trajectory", "[optimizer]") {
  for (const bool nesterov : {false, true}) {
    Tape t;
    std::vector<double> w = {0.5, -1.25, 3.0};
    const std::vector<double> g = {0.1, -0.02, 4.0};
    const Var p = t.param(Shape{3}, w);
    Optimizer opt = Optimizer::sgd(0.05, {0.9, nesterov});
    opt.add(t, p, 0.01);
    const int32_t mark = t.mark();
    std::vector<double> b(3, 0.0);
    for (int step = 1; step <= 4; ++step) {
      REQUIRE(t.backward(linear_loss(t, p, g)));
      opt.step(t);
      t.reset_to(mark);
      for (int i = 0; i < 3; ++i) {
        const double ge = g[i] * 1.0 + 0.01 * w[i];
        b[i] = 0.9 * b[i] + ge;
        const double d = nesterov ? ge + 0.9 * b[i] : b[i];
        w[i] = w[i] - 0.05 * d;
      }
      INFO("nesterov " << nesterov << " step " << step);
      REQUIRE(same_bits(t.param_value(p), w));
      REQUIRE(same_bits(opt.m(0), b));
    }
  }
}

// AdamW: w = w·(1 − lr·wd) first (PyTorch's decoupled decay), then Adam's step.
TEST_CASE("AdamW matches the hand-computed trajectory; weight_decay 0 is Adam", "[optimizer]") {
  auto run = [](double wd, std::vector<double> w, int steps) {
    Tape t;
    const std::vector<double> g = {0.1, -0.02, 4.0};
    const Var p = t.param(Shape{3}, w);
    Optimizer opt = Optimizer::adam(0.01, {0.9, 0.999, 1e-8, wd});
    opt.add(t, p);
    const int32_t mark = t.mark();
    for (int s = 0; s < steps; ++s) {
      REQUIRE(t.backward(linear_loss(t, p, g)));
      opt.step(t);
      t.reset_to(mark);
    }
    return std::vector<double>(t.param_value(p).begin(), t.param_value(p).end());
  };
  std::vector<double> w = {0.5, -1.25, 3.0}, m(3, 0.0), v(3, 0.0);
  const std::vector<double> g = {0.1, -0.02, 4.0};
  for (int step = 1; step <= 3; ++step) {
    const double lr_t = 0.01 * std::sqrt(1.0 - std::pow(0.999, step)) / (1.0 - std::pow(0.9, step));
    for (int i = 0; i < 3; ++i) {
      w[i] = w[i] * (1.0 - 0.01 * 0.1);
      m[i] = 0.9 * m[i] + (1.0 - 0.9) * g[i];
      v[i] = 0.999 * v[i] + (1.0 - 0.999) * (g[i] * g[i]);
      w[i] = w[i] - (lr_t * m[i]) / (std::sqrt(v[i]) + 1e-8);
    }
  }
  const std::vector<double> got = run(0.1, {0.5, -1.25, 3.0}, 3);
  REQUIRE(same_bits(std::span<const double>(got), w));
  // wd = 0 is plain Adam, and a positive wd pulls the weights toward 0.
  const std::vector<double> adam = run(0.0, {0.5, -1.25, 3.0}, 3);
  REQUIRE(std::fabs(got[2]) < std::fabs(adam[2]));
}

// ---- the gradient norm's 16 lanes (docs/numerics.md "Gradient norm") ---------------------------

TEST_CASE("the gradient norm sums 16 lanes, then folds them pairwise (not one serial chain)", "[optimizer]") {
  // g = [1, 2^-27 × 15]: each small square is 2^-54, under half an ulp of 1. One serial chain
  // gives 1 + 2^-54 + … = 1 exactly. The lanes give lane 0 = 1, lanes 1..15 = 2^-54, and the fold
  // (w = 8, 4, 2, 1) by hand: lanes 1..7 become 2^-53 and lane 0 stays 1 (1 + 2^-54 rounds down);
  // lanes 1..3 become 2^-52, lane 0 stays 1 (1 + 2^-53 is a tie, to even); lane 1 becomes 2^-51,
  // lane 0 becomes 1 + 2^-52; then lane 0 = 1 + 2^-52 + 2^-51 = 1 + 3·2^-52, all exact.
  std::vector<double> g(16, std::ldexp(1.0, -27));
  g[0] = 1.0;
  const double sq = 1.0 + 3.0 * std::ldexp(1.0, -52);
  for (const bool clip : {false, true}) {
    Tape t;
    const Var p = t.param(Shape{16}, std::vector<double>(16, 0.0));
    Optimizer opt = Optimizer::sgd(0.0);
    opt.add(t, p);
    if (clip) opt.set_clip(1e9);
    REQUIRE(t.backward(linear_loss(t, p, g)));
    REQUIRE(opt.grad_norm(t) == std::sqrt(sq));
    REQUIRE(opt.grad_norm(t) != 1.0);  // the serial chain's answer
    opt.step(t);
    REQUIRE(opt.last_grad_norm() == std::sqrt(sq));
  }
}

namespace {
// The lanes written out independently of kernels/gr_optim.h: element e of each parameter into
// lane e % 16, then the pairwise fold. R is the arithmetic type (float on an f32 tape).
template <class R>
double lanes_norm(const std::vector<std::vector<double>>& grads) {
  R lane[16] = {};
  for (const std::vector<double>& g : grads)
    for (size_t e = 0; e < g.size(); ++e) lane[e % 16] = lane[e % 16] + R(g[e]) * R(g[e]);
  for (int w = 8; w >= 1; w /= 2)
    for (int j = 0; j < w; ++j) lane[j] = lane[j] + lane[j + w];
  return static_cast<double>(std::sqrt(lane[0]));
}
}  // namespace

TEST_CASE("the gradient norm's lanes: whole, in the update's pass, on threads and in ranges, f64 and f32",
          "[optimizer]") {
  std::mt19937_64 rng(1607);
  std::uniform_real_distribution<double> u(-3.0, 3.0);
  const std::vector<int64_t> sizes = {1, 15, 16, 17, 31, 33, 100, 257, 1000, 40000};
  for (const DType real : {DType::F64, DType::F32}) {
    for (int trial = 0; trial < 6; ++trial) {
      Tape t(real);
      Optimizer opt = Optimizer::adam(1e-3);
      std::vector<Var> ps;
      std::vector<std::vector<double>> grads;
      Var loss{};
      const int count = 1 + static_cast<int>(rng() % 5);
      for (int k = 0; k < count; ++k) {
        const int64_t n = sizes[rng() % sizes.size()];
        std::vector<double> c(static_cast<size_t>(n));
        for (double& x : c) x = real == DType::F32 ? static_cast<float>(u(rng)) : u(rng);
        const Var p = t.param(Shape{n}, std::vector<double>(static_cast<size_t>(n), 0.0));
        opt.add(t, p);
        ps.push_back(p);
        const Var l = linear_loss(t, p, c);
        loss = k == 0 ? l : t.add(loss, l);
        grads.push_back(c);
      }
      REQUIRE(t.backward(loss));
      const double want = real == DType::F32 ? lanes_norm<float>(grads) : lanes_norm<double>(grads);
      REQUIRE(opt.grad_norm(t) == want);
      // In pieces, as ranks hold consecutive ranges of the flat vector: the lanes carried across.
      std::vector<double> flat;
      for (Var p : ps) flat.insert(flat.end(), t.param_grad(p).begin(), t.param_grad(p).end());
      const std::vector<char> active(ps.size(), 1);
      const int64_t cut1 = static_cast<int64_t>(rng() % (flat.size() + 1));
      const int64_t cut2 = cut1 + static_cast<int64_t>(rng() % (flat.size() - cut1 + 1));
      Optimizer::NormLanes lanes{};
      const int64_t cuts[] = {0, cut1, cut2, static_cast<int64_t>(flat.size())};
      for (int r = 0; r < 3; ++r) opt.add_norm_lanes(cuts[r], cuts[r + 1], flat.data() + cuts[r], lanes, active);
      REQUIRE(opt.norm_from_lanes(lanes) == want);
      // The step's own norm, on one thread (summed in the update's pass) and on two.
      for (const int threads : {1, 2}) {
        set_num_threads(threads);
        opt.step(t);
        REQUIRE(opt.last_grad_norm() == want);
      }
      set_num_threads(1);
    }
  }
}

// Without clipping, several threads run the norm alongside the update (Optimizer::step_norm_alongside):
// task 0 updates each parameter's head and continues the lanes over the tail while the others
// update the tail. Every element must still be updated exactly once: the same weights and moments
// as one thread, bitwise, and the same norm.
TEST_CASE("Adam without clipping on 1, 2, 3 and 8 threads: the same weights, moments and norm", "[optimizer]") {
  std::mt19937_64 rng(4242);
  std::uniform_real_distribution<double> u(-2.0, 2.0);
  const std::vector<int64_t> sizes = {1, 17, 5000, 8191, 8192, 8193, 20000, 40001};
  for (const DType real : {DType::F64, DType::F32}) {
    for (int trial = 0; trial < 4; ++trial) {
      std::vector<int64_t> shape_of;
      for (int k = 0; k < 4; ++k) shape_of.push_back(sizes[rng() % sizes.size()]);
      shape_of.push_back(40001);  // enough elements for the threaded step
      std::vector<std::vector<double>> coef;
      for (int64_t n : shape_of) {
        std::vector<double> c(static_cast<size_t>(n));
        for (double& x : c) x = real == DType::F32 ? static_cast<float>(u(rng)) : u(rng);
        coef.push_back(c);
      }
      std::vector<std::vector<double>> weights, moments;
      std::vector<double> norms;
      for (const int threads : {1, 2, 3, 8}) {
        set_num_threads(threads);
        Tape t(real);
        Optimizer opt = Optimizer::adam(1e-2);
        std::vector<Var> ps;
        for (int64_t n : shape_of) {
          ps.push_back(t.param(Shape{n}, std::vector<double>(static_cast<size_t>(n), 0.5)));
          opt.add(t, ps.back());
        }
        const int32_t mark = t.mark();
        for (int s = 0; s < 3; ++s) {
          Var loss{};
          for (size_t k = 0; k < ps.size(); ++k) {
            const Var l = linear_loss(t, t.mul(ps[k], ps[k]), coef[k]);  // gradient 2·c·w: changes per step
            loss = k == 0 ? l : t.add(loss, l);
          }
          REQUIRE(t.backward(loss));
          opt.step(t);
          norms.push_back(opt.last_grad_norm());
          t.reset_to(mark);
        }
        std::vector<double> w, mv;
        for (Var p : ps) w.insert(w.end(), t.param_value(p).begin(), t.param_value(p).end());
        mv = opt.m_flat();
        const std::vector<double> v = opt.v_flat();
        mv.insert(mv.end(), v.begin(), v.end());
        weights.push_back(w);
        moments.push_back(mv);
      }
      set_num_threads(1);
      for (size_t k = 1; k < weights.size(); ++k) {
        REQUIRE(std::memcmp(weights[k].data(), weights[0].data(), weights[0].size() * sizeof(double)) == 0);
        REQUIRE(std::memcmp(moments[k].data(), moments[0].data(), moments[0].size() * sizeof(double)) == 0);
        for (int s = 0; s < 3; ++s) REQUIRE(norms[static_cast<size_t>(3 * k + s)] == norms[static_cast<size_t>(s)]);
      }
    }
  }
}
