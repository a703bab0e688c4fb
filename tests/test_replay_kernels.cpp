// test_replay_kernels.cpp — lib/replay's kernel source and driving rules: NVRTC compiles the complete
// kernel source (f64 and f32) with FMA only in the dot-product kernels (gr_dot's explicit ones,
// never a contraction); the host backend exports every listed kernel; what cannot
// be captured or driven fails closed, naming the node; launch counts per episode.
#include <stdlib.h>

#include <catch2/catch.hpp>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <functional>
#include <set>
#include <vector>

#include "device/backend.h"
#include "grad/optimizer.h"
#include "grad/tape.h"
#include "replay/replay.h"
#include "support/rng.h"

#include "support/ptx_audit.h"
#include "support/replay_support.h"
#include "support/skip.h"

using namespace gr;
using namespace gr::replaytest;

// ---- (d) NVRTC -----------------------------------------------------------------------------------------
// The FMA contract in PTX (support/ptx_audit.h): fma only in the matmul/bmm/conv2d kernels, and none at all
// once gr_dot's explicit __fma_rn is spelled as a multiply and an add (so none is a contraction).
static void check_fma_only_in_dots(DType dt) {
  std::string ptx, plain, log;
  try {
    ptx = device::nvrtc_compile_ptx(replay::kernel_source(dt), "compute_90", &log);
    plain = ptxaudit::ptx_without_explicit_fma(replay::kernel_source(dt));
  } catch (const device::DeviceUnavailable& e) {
    GR_SKIP("nvrtc", "the device kernel source was not compiled for a GPU: " << e.what());
  }
  INFO(log);
  const std::set<std::string> with_fma = ptxaudit::fma_functions(ptx);
  std::set<std::string> dots;
  for (const std::string& k : replay::kernel_names()) {
    INFO("kernel " << k);
    CHECK(ptx.find(".entry " + k + "(") != std::string::npos);
    // the dot-product kernels: the contractions' (matmul, bmm) and conv2d's (a window row with kAttrConv)
    for (const OpInfo& info : kOps)
      if ((info.cls == OpClass::Contraction || (info.window() && (info.attrs & kAttrConv))) &&
          k.rfind("grk_" + std::string(info.stem) + "_", 0) == 0)
        dots.insert(k);
  }
  CHECK(dots.size() >= 9);
  for (const std::string& f : with_fma) {
    INFO("function " << f << " has an fma but computes no dot product");
    CHECK(dots.count(f) == 1);
  }
  for (const std::string& k : dots) {
    INFO("dot-product kernel " << k << " has no fma");
    CHECK(with_fma.count(k) == 1);
  }
  CHECK(ptx.find(dt == DType::F32 ? "fma.rn.f32" : "fma.rn.f64") != std::string::npos);
  CHECK(plain.find("fma") == std::string::npos);
}

TEST_CASE("replay: NVRTC compiles the complete kernel source with --fmad=false, fma only in dot products",
          "[replay][nvrtc]") {
  check_fma_only_in_dots(DType::F64);
}

TEST_CASE("replay: NVRTC compiles the f32 kernel source too, fma only in dot products", "[replay][nvrtc][f32]") {
  check_fma_only_in_dots(DType::F32);
}

TEST_CASE("replay: the host backend exports every listed kernel (f64 and f32 modules)", "[replay]") {
  auto be = host();
  for (const DType dt : {DType::F64, DType::F32}) {
    device::Module* mod = be->compile(replay::kernel_source(dt), dt == DType::F32 ? "f32" : "f64");
    for (const std::string& k : replay::kernel_names()) CHECK_NOTHROW(be->kernel(mod, k));
  }
}

// ---- (e) fail closed -----------------------------------------------------------------------------------
TEST_CASE("replay: what cannot be captured or driven fails closed, naming the node", "[replay][errors]") {
  auto be = host();
  Tape t;
  const Var p = t.param(Shape{2, 3}, std::vector<double>(6, 0.5));
  const Var c = t.constant(Shape{3}, std::vector<double>(3, 1.0));
  const Var y = t.mul(p, c);
  const Var loss = t.sum(y);

  CHECK_THROWS_WITH(replay::Program(*be, t, Var{9}), Catch::Contains("loss (id 9)"));

  replay::Program prog(*be, t, loss);
  CHECK_THROWS_WITH(prog.set_input(y, std::vector<double>(6)), Catch::Contains("node 2 (mul [2, 3])") &&
                                                                    Catch::Contains("not a param or const"));
  CHECK_THROWS_WITH(prog.set_input(c, std::vector<double>(2)), Catch::Contains("node 1 (const [3])") &&
                                                                   Catch::Contains("needs 3 values, got 2"));
  std::vector<double> out(5);
  CHECK_THROWS_WITH(prog.value(y, out), Catch::Contains("node 2"));
  CHECK_THROWS_WITH(prog.grad(Var{42}, out), Catch::Contains("variable id 42"));
  CHECK_THROWS_WITH(prog.run_episode(), Catch::Contains("no captured episode"));

  Tape other;
  other.constant(Shape{1}, std::vector<double>{1.0});
  other.constant(Shape{1}, std::vector<double>{1.0});
  other.constant(Shape{1}, std::vector<double>{1.0});
  other.constant(Shape{1}, std::vector<double>{1.0});
  other.constant(Shape{1}, std::vector<double>{1.0});
  const Var q = other.param(Shape{1}, std::vector<double>{1.0});
  Optimizer o = Optimizer::sgd(0.1);
  o.add(other, q);
  CHECK_THROWS_WITH(replay::DeviceOptimizer(prog, o), Catch::Contains("registered parameter 5"));

  Optimizer sgd = Optimizer::sgd(0.1);
  replay::DeviceOptimizer dopt(prog, sgd);
  prog.capture_episode();
  CHECK_THROWS_WITH(prog.run_episode(&dopt), Catch::Contains("different optimizer"));

  Tape bad;
  const Var a = bad.param(Shape{2, 3}, std::vector<double>(6, 1.0));
  bad.matmul(a, a);
  REQUIRE(!bad.ok());
  CHECK_THROWS_WITH(replay::Program(*be, bad, Var{0}), Catch::Contains("poisoned tape") && Catch::Contains("matmul"));
}

TEST_CASE("replay: launches per episode of a 2-layer MLP (docs/replay.md)", "[replay]") {
  auto be = host();
  Rng rng(3);
  Tape t;
  const Var w1 = t.param(Shape{4, 6}, rng.uniform_vec(24, -1, 1)), b1 = t.param(Shape{6}, rng.uniform_vec(6, -1, 1));
  const Var w2 = t.param(Shape{6, 2}, rng.uniform_vec(12, -1, 1)), b2 = t.param(Shape{2}, rng.uniform_vec(2, -1, 1));
  const Var x = t.constant(Shape{5, 4}, rng.uniform_vec(20, -1, 1)), y = t.constant(Shape{5, 2}, rng.uniform_vec(10, -1, 1));
  const Var h = t.relu(t.add(t.matmul(x, w1), b1));
  const Var loss = t.mse(t.add(t.matmul(h, w2), b2), y);
  Optimizer o = Optimizer::adam(0.01);
  for (const Var p : {w1, b1, w2, b2}) o.add(t, p, 0.0);
  o.set_clip(1.0);
  replay::Program prog(*be, t, loss);
  replay::DeviceOptimizer opt(prog, o);
  // forward: matmul add relu matmul add sub mul mean
  CHECK(prog.forward_launches() == 8);
  // backward: zero-fill, seed, mean, mul (a, b), sub (a), add (a, b), matmul (a, b), relu, add (a, b), matmul (b)
  CHECK(prog.backward_launches() == 14);
  // optimizer: clip norm + one update per parameter
  CHECK(opt.launches_per_step() == 5);
}

TEST_CASE("replay: a loss with no parameter upstream has no backward work", "[replay]") {
  auto be = host();
  Tape t;
  const Var c = t.constant(Shape{3}, std::vector<double>{1, 2, 3});
  const Var loss = t.sum(t.exp(c));
  REQUIRE(t.backward(loss));
  replay::Program prog(*be, t, loss);
  CHECK(prog.backward_launches() == 0);
  prog.forward();
  prog.backward();
  const double l = prog.loss();
  CHECK(std::memcmp(&l, t.value(loss).data, sizeof l) == 0);
  std::vector<double> g(3, 7.0);
  prog.grad(c, g);
  CHECK(g == std::vector<double>(3, 0.0));
}
