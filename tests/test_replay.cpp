// test_replay.cpp — lib/replay on the host backend: every op's forward value and every gradient
// equal the CPU tape's bit for bit (memcmp); Adam + L2 + clip and SGD training runs equal the CPU
// tape's loss trace, parameters and moments, with per-node launches and with the captured episode;
// NVRTC compiles the complete kernel source (f64 and f32) without FMA; what cannot be captured or
// driven fails closed; f32 programs stay within a tolerance of the tape and are geometry-independent.
// On a machine with a GPU, "[cuda]" repeats the sweep and the training runs on CUDA.
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

using namespace gr;
using gr::test::Rng;

namespace {

struct TempDir {
  std::string path;
  TempDir() {
    std::string templ = (std::filesystem::temp_directory_path() / "gr_test_replay_XXXXXX").string();
    REQUIRE(mkdtemp(templ.data()) != nullptr);
    path = templ;
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path, ec);
  }
};

const std::string& cache_dir() {
  static TempDir dir;
  return dir.path;
}

std::unique_ptr<device::Backend> host(bool fibers = false, unsigned threads = 1) {
  device::HostOptions o;
  o.threads = threads;
  o.fiber_block = fibers;
  o.cache_dir = cache_dir();
  return device::make_host_backend(o);
}

bool same_bits(std::span<const double> a, std::span<const double> b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size_bytes()) == 0;
}

// ---- (a) the sweep ---------------------------------------------------------------------------------
enum class Dom { Any, Positive, OneHot, Big };

struct In {
  Shape shape;
  Dom dom = Dom::Any;
  bool constant = false;
};

struct SweepCase {
  const char* name;
  std::vector<In> inputs;
  std::function<Var(Tape&, const std::vector<Var>&)> build;
};

std::vector<double> draw(Rng& rng, const In& in) {
  const int64_t n = in.shape.numel();
  switch (in.dom) {
    case Dom::Any: return rng.uniform_vec(n, -2.0, 2.0);
    case Dom::Positive: return rng.uniform_vec(n, 0.5, 2.5);
    case Dom::Big: return rng.uniform_vec(n, -300.0, 300.0);
    case Dom::OneHot: {
      std::vector<double> v(static_cast<size_t>(n), 0.0);
      const int64_t cols = in.shape[in.shape.rank() - 1];
      for (int64_t r = 0; r < n / cols; ++r) v[static_cast<size_t>(r * cols + static_cast<int64_t>(rng.next() % cols))] = 1.0;
      return v;
    }
  }
  return {};
}

using B = const std::vector<Var>&;
const int64_t kStarts2[] = {1, -4}, kStops2[] = {3, 5};
const int64_t kStarts3[] = {0, 1, 1}, kStops3[] = {2, 3, 4};
const int64_t kReshapeTo[] = {2, -1};

const std::vector<SweepCase> kCases = {
    {"add", {{{3, 4}}, {{3, 4}}}, [](Tape& t, B v) { return t.add(v[0], v[1]); }},
    {"add row broadcast", {{{3, 4}}, {{4}}}, [](Tape& t, B v) { return t.add(v[0], v[1]); }},
    {"add outer broadcast", {{{3, 1}}, {{1, 4}}}, [](Tape& t, B v) { return t.add(v[0], v[1]); }},
    {"add scalar broadcast", {{{2, 3, 4}}, {{1}}}, [](Tape& t, B v) { return t.add(v[0], v[1]); }},
    {"add scalar on the left, rank 2", {{{1, 1}}, {{3, 4}}}, [](Tape& t, B v) { return t.add(v[0], v[1]); }},
    {"sub middle broadcast", {{{2, 3, 4}}, {{2, 1, 4}}}, [](Tape& t, B v) { return t.sub(v[0], v[1]); }},
    {"sub", {{{3, 4}}, {{3, 1}}}, [](Tape& t, B v) { return t.sub(v[0], v[1]); }},
    {"mul", {{{3, 4}}, {{3, 4}}}, [](Tape& t, B v) { return t.mul(v[0], v[1]); }},
    {"mul broadcast", {{{2, 3, 4}}, {{3, 1}}}, [](Tape& t, B v) { return t.mul(v[0], v[1]); }},
    {"mul both stretched", {{{2, 1, 4}}, {{3, 1}}}, [](Tape& t, B v) { return t.mul(v[0], v[1]); }},
    {"mul fan-out x*x", {{{5}}}, [](Tape& t, B v) { return t.mul(v[0], v[0]); }},
    {"mul const side", {{{3, 4}}, {{4}, Dom::Any, true}}, [](Tape& t, B v) { return t.mul(v[0], v[1]); }},
    {"div", {{{3, 4}}, {{3, 4}, Dom::Positive}}, [](Tape& t, B v) { return t.div(v[0], v[1]); }},
    {"div broadcast", {{{3, 4}}, {{4}, Dom::Positive}}, [](Tape& t, B v) { return t.div(v[0], v[1]); }},
    {"div broadcast numerator", {{{4}}, {{3, 4}, Dom::Positive}}, [](Tape& t, B v) { return t.div(v[0], v[1]); }},
    {"neg", {{{3, 4}}}, [](Tape& t, B v) { return t.neg(v[0]); }},
    {"adds", {{{3, 4}}}, [](Tape& t, B v) { return t.adds(v[0], 0.7); }},
    {"muls", {{{3, 4}}}, [](Tape& t, B v) { return t.muls(v[0], -1.3); }},
    {"relu", {{{3, 4}}}, [](Tape& t, B v) { return t.relu(v[0]); }},
    {"sigmoid", {{{3, 4}}}, [](Tape& t, B v) { return t.sigmoid(v[0]); }},
    {"tanh", {{{3, 4}}}, [](Tape& t, B v) { return t.tanh(v[0]); }},
    {"exp", {{{3, 4}}}, [](Tape& t, B v) { return t.exp(v[0]); }},
    {"log", {{{3, 4}, Dom::Positive}}, [](Tape& t, B v) { return t.log(v[0]); }},
    {"sqrt", {{{3, 4}, Dom::Positive}}, [](Tape& t, B v) { return t.sqrt(v[0]); }},
    {"sum", {{{3, 4}}}, [](Tape& t, B v) { return t.sum(v[0]); }},
    {"mean", {{{3, 4}}}, [](Tape& t, B v) { return t.mean(v[0]); }},
    {"sum axis 0", {{{3, 4}}}, [](Tape& t, B v) { return t.sum(v[0], 0); }},
    {"sum axis 1 keepdims", {{{2, 3, 4}}}, [](Tape& t, B v) { return t.sum(v[0], 1, true); }},
    {"mean axis -1", {{{2, 3, 4}}}, [](Tape& t, B v) { return t.mean(v[0], -1); }},
    {"mean axis 0 keepdims", {{{3, 2, 2}}}, [](Tape& t, B v) { return t.mean(v[0], 0, true); }},
    {"matmul", {{{3, 4}}, {{4, 5}}}, [](Tape& t, B v) { return t.matmul(v[0], v[1]); }},
    {"matmul A·A", {{{4, 4}}}, [](Tape& t, B v) { return t.matmul(v[0], v[0]); }},
    {"matmul const weight", {{{3, 4}, Dom::Any, true}, {{4, 2}}}, [](Tape& t, B v) { return t.matmul(v[0], v[1]); }},
    {"bmm", {{{2, 3, 4}}, {{2, 4, 5}}}, [](Tape& t, B v) { return t.bmm(v[0], v[1]); }},
    {"bmm broadcast batch a", {{{1, 3, 4}}, {{3, 4, 2}}}, [](Tape& t, B v) { return t.bmm(v[0], v[1]); }},
    {"bmm broadcast batch b", {{{3, 2, 4}}, {{1, 4, 3}}}, [](Tape& t, B v) { return t.bmm(v[0], v[1]); }},
    {"transpose", {{{2, 3, 4}}}, [](Tape& t, B v) { return t.transpose(v[0]); }},
    {"transpose 2-D", {{{3, 5}}}, [](Tape& t, B v) { return t.transpose(v[0]); }},
    {"reshape", {{{3, 4}}}, [](Tape& t, B v) { return t.reshape(v[0], kReshapeTo); }},
    {"softmax last axis", {{{3, 5}}}, [](Tape& t, B v) { return t.softmax(v[0], -1); }},
    {"softmax middle axis", {{{2, 3, 4}}}, [](Tape& t, B v) { return t.softmax(v[0], 1); }},
    {"softmax large logits", {{{2, 6}, Dom::Big}}, [](Tape& t, B v) { return t.softmax(v[0], -1); }},
    {"log_softmax axis 0", {{{3, 5}}}, [](Tape& t, B v) { return t.log_softmax(v[0], 0); }},
    {"log_softmax middle axis", {{{2, 3, 4}}}, [](Tape& t, B v) { return t.log_softmax(v[0], 1); }},
    {"softmax_cross_entropy", {{{4, 5}}, {{4, 5}, Dom::OneHot, true}},
     [](Tape& t, B v) { return t.softmax_cross_entropy(v[0], v[1]); }},
    {"softmax_cross_entropy soft targets", {{{3, 4}}, {{3, 4}, Dom::Positive}},
     [](Tape& t, B v) { return t.softmax_cross_entropy(v[0], v[1]); }},
    {"softmax_cross_entropy x with x", {{{3, 4}, Dom::Positive}},
     [](Tape& t, B v) { return t.softmax_cross_entropy(v[0], v[0]); }},
    {"slice", {{{4, 5}}}, [](Tape& t, B v) { return t.slice(v[0], kStarts2, kStops2); }},
    {"slice 3-D", {{{2, 3, 4}}}, [](Tape& t, B v) { return t.slice(v[0], kStarts3, kStops3); }},
    {"concat axis 0", {{{2, 3}}, {{1, 3}}}, [](Tape& t, B v) { return t.concat(v[0], v[1], 0); }},
    {"concat axis -1", {{{2, 2, 3}}, {{2, 2, 1}}}, [](Tape& t, B v) { return t.concat(v[0], v[1], -1); }},
    {"concat x with x", {{{2, 3}}}, [](Tape& t, B v) { return t.concat(v[0], v[0], 1); }},
    {"mse composite", {{{3, 4}}, {{3, 4}, Dom::Any, true}}, [](Tape& t, B v) { return t.mse(v[0], v[1]); }},
    {"fan-out composite", {{{6}}},
     [](Tape& t, B v) {
       const Var x = v[0];
       const Var a = t.mul(t.tanh(x), x);
       const Var b = t.div(t.exp(t.muls(x, 0.5)), t.adds(t.mul(x, x), 1.0));
       return t.add(t.sub(a, b), t.sigmoid(a));
     }},
    // Slots that already hold a contribution when a broadcast walk / a matmul sum lands in them
    // (the orders of accumulation into a non-zero slot are what these pin).
    {"broadcast slot with two consumers", {{{3, 4}}, {{4}}, {{2, 3, 4}}},
     [](Tape& t, B v) { return t.add(t.mul(v[0], v[1]), t.mul(v[1], t.sum(v[2], 0))); }},
    {"matmul shared weight", {{{3, 4}}, {{4, 4}}},
     [](Tape& t, B v) {
       const Var h = t.matmul(v[0], v[1]);
       return t.add(t.add(t.matmul(t.tanh(h), v[1]), h), t.sum(t.muls(v[0], 0.3)));  // v[0]'s slot is non-zero first
     }},
    {"bmm shared batch with a second consumer", {{{1, 3, 4}}, {{2, 4, 2}}},
     [](Tape& t, B v) { return t.add(t.sum(t.bmm(v[0], v[1])), t.sum(t.exp(v[0]))); }},
    {"const-only branch and an unused param", {{{3, 4}}, {{3, 4}, Dom::Any, true}, {{2}}},
     [](Tape& t, B v) {
       const Var c = t.exp(t.neg(v[1]));  // const-only: no gradient memory anywhere
       t.relu(v[2]);                      // depends on a param, but not on the loss
       return t.mul(t.sigmoid(v[0]), c);
     }},
};

// Builds the case (loss = Σ op(inputs) ⊙ R), runs the CPU tape, captures, replays forward and
// backward on `be`, and compares every node's value and gradient bit for bit.
void sweep_case(device::Backend& be, const SweepCase& c, uint64_t seed, std::set<Op>& seen,
                replay::ReplayOptions ro = {}) {
  INFO("case: " << c.name);
  Rng rng(0x5EED00 + seed);
  Tape t;
  std::vector<Var> in;
  for (const In& i : c.inputs) {
    const std::vector<double> v = draw(rng, i);
    in.push_back(i.constant ? t.constant(i.shape, v) : t.param(i.shape, v));
  }
  const Var y = c.build(t, in);
  REQUIRE(t.ok());
  const Var r = t.constant(t.node(y).shape, rng.uniform_vec(t.node(y).numel(), -1.0, 1.0));
  const Var loss = t.sum(t.mul(y, r));
  REQUIRE(t.backward(loss));
  for (int32_t id = 0; id < t.size(); ++id) seen.insert(t.node(id).op);

  replay::Program prog(be, t, loss, ro);
  prog.forward();
  prog.backward();
  for (int32_t id = 0; id < t.size(); ++id) {
    const Var v{id};
    INFO("node " << id << " (" << op_name(t.node(v).op) << " " << t.node(v).shape.str() << ")");
    std::vector<double> dv(static_cast<size_t>(t.node(v).numel()));
    prog.value(v, dv);
    CHECK(same_bits(dv, t.value(v).values()));
    prog.grad(v, dv);
    CHECK(same_bits(dv, t.grad(v).values()));
    CHECK(prog.backward_active(v) == (t.node(v).grad != nullptr && t.node(v).touched));
  }
  const double l = prog.loss();
  CHECK(std::memcmp(&l, t.value(loss).data, sizeof l) == 0);
}

}  // namespace

TEST_CASE("replay: every op's value and every gradient equal the CPU tape (host, blockDim 1)", "[replay][sweep]") {
  auto be = host();
  std::set<Op> seen;
  for (size_t i = 0; i < kCases.size(); ++i) sweep_case(*be, kCases[i], i, seen);
  for (const OpInfo& info : kOps) {
    INFO("op without a replay sweep case: " << info.name);
    CHECK(seen.count(info.op) == 1);
  }
}

TEST_CASE("replay: the sweep with fibers, blockDim 3 and a 2-block grid (grid/block-stride loops)",
          "[replay][sweep][fibers]") {
  auto be = host(true);
  replay::ReplayOptions ro;
  ro.block = 3;
  ro.max_grid = 2;
  std::set<Op> seen;
  for (size_t i = 0; i < kCases.size(); ++i) sweep_case(*be, kCases[i], i, seen, ro);
}

TEST_CASE("replay: the sweep with the host backend's blocks on 3 OS threads", "[replay][sweep]") {
  auto be = host(false, 3);
  std::set<Op> seen;
  for (size_t i = 0; i < kCases.size(); ++i) sweep_case(*be, kCases[i], i, seen);
}

TEST_CASE("replay: lazy and dropped constants get buffers and no upload", "[replay]") {
  auto be = host();
  Rng rng(7);
  const std::vector<double> xv = rng.uniform_vec(6 * 3, -1, 1), wv = rng.uniform_vec(3 * 2, -1, 1);
  Tape ref;
  const Var rx = ref.constant(Shape{6, 3}, xv), rw = ref.param(Shape{3, 2}, wv);
  const Var rloss = ref.mean(ref.tanh(ref.matmul(rx, rw)));
  REQUIRE(ref.backward(rloss));

  Tape lazy;
  const Var lx = lazy.constant_lazy(Shape{6, 3}), lw = lazy.param(Shape{3, 2}, wv);
  const Var lloss = lazy.mean(lazy.tanh(lazy.matmul(lx, lw)));
  REQUIRE(lazy.ok());
  replay::Program prog(*be, lazy, lloss);
  prog.set_input(lx, xv);
  prog.forward();
  prog.backward();
  std::vector<double> g(6);
  prog.grad(lw, g);
  CHECK(same_bits(g, ref.grad(rw).values()));
  const double l = prog.loss();
  CHECK(std::memcmp(&l, ref.value(rloss).data, sizeof l) == 0);

  Tape dropped;
  const Var dx = dropped.constant(Shape{6, 3}, std::vector<double>(18, 0.0)), dw = dropped.param(Shape{3, 2}, wv);
  const Var dloss = dropped.mean(dropped.tanh(dropped.matmul(dx, dw)));
  dropped.drop_consts();
  replay::Program prog2(*be, dropped, dloss);
  prog2.set_input(dx, xv);
  prog2.forward();
  prog2.backward();
  prog2.grad(dw, g);
  CHECK(same_bits(g, ref.grad(rw).values()));
}

// ---- (b), (c) training runs -------------------------------------------------------------------------
namespace {

struct Mlp {
  Var x, t, w1, b1, w2, b2, unused;
};

// A 2-layer MLP with an mse + softmax-cross-entropy loss; params recorded first, then the inputs.
Mlp make_leaves(Tape& tape, Rng& rng) {
  Mlp m;
  m.w1 = tape.param(Shape{5, 8}, rng.uniform_vec(40, -0.6, 0.6));
  m.b1 = tape.param(Shape{8}, rng.uniform_vec(8, -0.1, 0.1));
  m.w2 = tape.param(Shape{8, 3}, rng.uniform_vec(24, -0.6, 0.6));
  m.b2 = tape.param(Shape{3}, rng.uniform_vec(3, -0.1, 0.1));
  m.unused = tape.param(Shape{4}, rng.uniform_vec(4, -1, 1));
  m.x = tape.constant(Shape{6, 5}, std::vector<double>(30, 0.0));
  m.t = tape.constant(Shape{6, 3}, std::vector<double>(18, 0.0));
  return m;
}

Var record(Tape& tape, const Mlp& m) {
  const Var h = tape.tanh(tape.add(tape.matmul(m.x, m.w1), m.b1));
  const Var out = tape.add(tape.matmul(h, m.w2), m.b2);
  return tape.add(tape.mse(tape.sigmoid(out), m.t), tape.muls(tape.softmax_cross_entropy(out, m.t), 0.5));
}

struct Batch {
  std::vector<double> x, t;
};

std::vector<Batch> batches(int n) {
  Rng rng(99);
  std::vector<Batch> out;
  for (int i = 0; i < n; ++i) {
    Batch b{rng.uniform_vec(30, -2, 2), std::vector<double>(18, 0.0)};
    for (int r = 0; r < 6; ++r) b.t[static_cast<size_t>(r * 3 + static_cast<int>(rng.next() % 3))] = 1.0;
    out.push_back(b);
  }
  return out;
}

Optimizer make_opt(Tape& tape, const Mlp& m, bool adam) {
  Optimizer o = adam ? Optimizer::adam(0.05) : Optimizer::sgd(0.3);
  o.add(tape, m.w1, 1e-3);
  o.add(tape, m.b1, 0.0);
  o.add(tape, m.unused, 1e-2);  // the loss does not depend on it: skipped on both paths
  o.add(tape, m.w2, 1e-3);
  o.add(tape, m.b2, 0.0);
  o.set_clip(0.4);
  return o;
}

struct RunResult {
  std::vector<double> losses, params, moments;
  int64_t t = 0;
};

RunResult cpu_run(bool adam, int episodes) {
  Rng rng(1234);
  Tape tape;
  const Mlp m = make_leaves(tape, rng);
  Optimizer opt = make_opt(tape, m, adam);
  const int32_t mark = tape.mark();
  RunResult r;
  for (const Batch& b : batches(episodes)) {
    tape.reset_to(mark);
    tape.set_value(m.x, b.x);
    tape.set_value(m.t, b.t);
    const Var loss = record(tape, m);
    REQUIRE(tape.backward(loss));
    r.losses.push_back(tape.scalar(loss));
    opt.step(tape);
  }
  for (const Var p : {m.w1, m.b1, m.w2, m.b2, m.unused})
    for (double v : tape.param_value(p)) r.params.push_back(v);
  for (size_t i = 0; i < opt.count(); ++i) {
    for (double v : opt.m(i)) r.moments.push_back(v);
    for (double v : opt.v(i)) r.moments.push_back(v);
  }
  r.t = opt.t();
  return r;
}

RunResult device_run(device::Backend& be, bool adam, int episodes, bool captured, size_t* launches = nullptr) {
  Rng rng(1234);
  Tape tape;
  const Mlp m = make_leaves(tape, rng);
  Optimizer cpu_opt = make_opt(tape, m, adam);
  const Var loss = record(tape, m);
  REQUIRE(tape.ok());
  replay::Program prog(be, tape, loss);
  replay::DeviceOptimizer opt(prog, cpu_opt);
  if (launches) *launches = prog.forward_launches() + prog.backward_launches() + opt.launches_per_step();
  if (captured) prog.capture_episode(&opt);
  RunResult r;
  for (const Batch& b : batches(episodes)) {
    prog.set_input(m.x, b.x);
    prog.set_input(m.t, b.t);
    if (captured) {
      prog.run_episode(&opt);
    } else {
      prog.forward();
      prog.backward();
      opt.step();
    }
    r.losses.push_back(prog.loss());
  }
  prog.sync_params_to(tape);
  for (const Var p : {m.w1, m.b1, m.w2, m.b2, m.unused})
    for (double v : tape.param_value(p)) r.params.push_back(v);
  opt.store_state_to(cpu_opt);
  for (size_t i = 0; i < cpu_opt.count(); ++i) {
    for (double v : cpu_opt.m(i)) r.moments.push_back(v);
    for (double v : cpu_opt.v(i)) r.moments.push_back(v);
  }
  r.t = opt.t();
  return r;
}

void check_same_run(const RunResult& cpu, const RunResult& dev) {
  REQUIRE(cpu.losses.size() == dev.losses.size());
  for (size_t i = 0; i < cpu.losses.size(); ++i) {
    INFO("episode " << i << ": cpu " << cpu.losses[i] << " device " << dev.losses[i]);
    CHECK(std::memcmp(&cpu.losses[i], &dev.losses[i], sizeof(double)) == 0);
  }
  CHECK(same_bits(cpu.params, dev.params));
  CHECK(same_bits(cpu.moments, dev.moments));
  CHECK(cpu.t == dev.t);
}

}  // namespace

TEST_CASE("replay: 40 episodes of Adam + L2 + clip equal the CPU tape bit for bit", "[replay][train]") {
  auto be = host();
  const RunResult cpu = cpu_run(true, 40);
  // The clip must have been active for part of the run, or the test would not cover it.
  REQUIRE(cpu.losses.front() != cpu.losses.back());
  size_t launches = 0;
  SECTION("per-node launches") { check_same_run(cpu, device_run(*be, true, 40, false, &launches)); }
  SECTION("captured episode, replay()") { check_same_run(cpu, device_run(*be, true, 40, true, &launches)); }
  INFO("launches per episode: " << launches);
  CHECK(launches > 0);
}

TEST_CASE("replay: 40 episodes of SGD + L2 + clip equal the CPU tape bit for bit", "[replay][train]") {
  auto be = host();
  const RunResult cpu = cpu_run(false, 40);
  SECTION("per-node launches") { check_same_run(cpu, device_run(*be, false, 40, false)); }
  SECTION("captured episode, replay()") { check_same_run(cpu, device_run(*be, false, 40, true)); }
}

TEST_CASE("replay: the clip scale really clips, and moments round-trip", "[replay][train]") {
  auto be = host();
  Rng rng(1234);
  Tape tape;
  const Mlp m = make_leaves(tape, rng);
  Optimizer cpu_opt = make_opt(tape, m, true);
  const Batch b = batches(1)[0];
  tape.set_value(m.x, b.x);
  tape.set_value(m.t, b.t);
  const Var loss = record(tape, m);
  replay::Program prog(*be, tape, loss);
  replay::DeviceOptimizer opt(prog, cpu_opt);
  prog.forward();
  prog.backward();
  opt.step();
  REQUIRE(tape.backward(loss));
  cpu_opt.step(tape);
  const double dcs = opt.last_clip_scale(), ccs = cpu_opt.last_clip_scale();
  CHECK(std::memcmp(&dcs, &ccs, sizeof dcs) == 0);
  CHECK(ccs < 1.0);
  CHECK(opt.last_lr_t() == cpu_opt.last_lr_t());
  std::vector<double> mm(40), vv(40), m2(40), v2(40);
  opt.download_moments(0, mm, vv);
  for (auto& x : mm) x *= 0.5;
  opt.upload_moments(0, mm, vv);
  opt.download_moments(0, m2, v2);
  CHECK(same_bits(mm, m2));
  CHECK(same_bits(vv, v2));
  opt.set_t(17);
  CHECK(opt.t() == 17);
  CHECK(!prog.backward_active(m.unused));
  CHECK(prog.backward_active(m.w1));
}

// ---- (d) NVRTC -----------------------------------------------------------------------------------------
TEST_CASE("replay: NVRTC compiles the complete kernel source with --fmad=false, no fma in the PTX",
          "[replay][nvrtc]") {
  std::string ptx, log;
  try {
    ptx = device::nvrtc_compile_ptx(replay::kernel_source(), "compute_90", &log);
  } catch (const device::DeviceUnavailable& e) {
    WARN("NVRTC not available, the device kernel source was not compiled for a GPU: " << e.what());
    return;
  }
  INFO(log);
  CHECK(ptx.find("fma") == std::string::npos);
  for (const std::string& k : replay::kernel_names()) {
    INFO("kernel " << k);
    CHECK(ptx.find(".entry " + k + "(") != std::string::npos);
  }
}

TEST_CASE("replay: NVRTC compiles the f32 kernel source too, no fma", "[replay][nvrtc][f32]") {
  std::string ptx, log;
  try {
    ptx = device::nvrtc_compile_ptx(replay::kernel_source(replay::DType::F32), "compute_90", &log);
  } catch (const device::DeviceUnavailable& e) {
    WARN("NVRTC not available, the f32 kernel source was not compiled for a GPU: " << e.what());
    return;
  }
  INFO(log);
  CHECK(ptx.find("fma") == std::string::npos);
  for (const std::string& k : replay::kernel_names()) CHECK(ptx.find(".entry " + k + "(") != std::string::npos);
}

TEST_CASE("replay: the host backend exports every listed kernel (f64 and f32 modules)", "[replay]") {
  auto be = host();
  for (const replay::DType dt : {replay::DType::F64, replay::DType::F32}) {
    device::Module* mod = be->compile(replay::kernel_source(dt), dt == replay::DType::F32 ? "f32" : "f64");
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

  replay::DeviceOptimizer dopt(prog, Optimizer::sgd(0.1));
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

// ---- f32 programs -------------------------------------------------------------------------------------
namespace {

// The f32 sweep: every node's value and gradient within a tolerance of the f64 tape; returns the
// bytes of every value and gradient (as downloaded doubles) for the determinism check.
std::vector<double> sweep_case_f32(device::Backend& be, const SweepCase& c, uint64_t seed, replay::ReplayOptions ro,
                                   double* worst) {
  INFO("case: " << c.name);
  Rng rng(0x5EED00 + seed);
  Tape t;
  std::vector<Var> in;
  for (const In& i : c.inputs) {
    const std::vector<double> v = draw(rng, i);
    in.push_back(i.constant ? t.constant(i.shape, v) : t.param(i.shape, v));
  }
  const Var y = c.build(t, in);
  REQUIRE(t.ok());
  const Var r = t.constant(t.node(y).shape, rng.uniform_vec(t.node(y).numel(), -1.0, 1.0));
  const Var loss = t.sum(t.mul(y, r));
  REQUIRE(t.backward(loss));
  ro.dtype = replay::DType::F32;
  replay::Program prog(be, t, loss, ro);
  prog.forward();
  prog.backward();
  std::vector<double> all;
  for (int32_t id = 0; id < t.size(); ++id) {
    const Var v{id};
    INFO("node " << id << " (" << op_name(t.node(v).op) << " " << t.node(v).shape.str() << ")");
    std::vector<double> dv(static_cast<size_t>(t.node(v).numel()));
    for (int pass = 0; pass < 2; ++pass) {
      if (pass == 0) prog.value(v, dv);
      else prog.grad(v, dv);
      const auto ref = pass == 0 ? t.value(v).values() : t.grad(v).values();
      double scale = 1.0;
      for (double x : ref) scale = std::max(scale, std::fabs(x));
      for (size_t e = 0; e < dv.size(); ++e) {
        const double err = std::fabs(dv[e] - ref[e]) / scale;
        *worst = std::max(*worst, err);
        CHECK(err <= 1e-5);
      }
      all.insert(all.end(), dv.begin(), dv.end());
    }
  }
  return all;
}

}  // namespace

TEST_CASE("replay f32: every op within 1e-5 (relative to the node's scale) of the f64 tape, and the same bytes "
          "at any launch geometry", "[replay][f32]") {
  auto be1 = host();
  auto bef = host(true);
  replay::ReplayOptions wide;
  wide.block = 3;
  wide.max_grid = 2;
  double worst = 0.0;
  for (size_t i = 0; i < kCases.size(); ++i) {
    const std::vector<double> a = sweep_case_f32(*be1, kCases[i], i, {}, &worst);
    const std::vector<double> b = sweep_case_f32(*bef, kCases[i], i, wide, &worst);
    INFO("case: " << kCases[i].name);
    CHECK(same_bits(a, b));
  }
  std::printf("replay f32 sweep: worst error relative to the node's scale %.3g\n", worst);
}

TEST_CASE("replay f32: 40 episodes of Adam + L2 + clip track the f64 tape", "[replay][f32][train]") {
  auto be = host();
  const RunResult cpu = cpu_run(true, 40);
  Rng rng(1234);
  Tape tape;
  const Mlp m = make_leaves(tape, rng);
  Optimizer cpu_opt = make_opt(tape, m, true);
  const Var loss = record(tape, m);
  replay::ReplayOptions ro;
  ro.dtype = replay::DType::F32;
  replay::Program prog(*be, tape, loss, ro);
  replay::DeviceOptimizer opt(prog, cpu_opt);
  prog.capture_episode(&opt);
  double worst = 0.0;
  size_t i = 0;
  for (const Batch& b : batches(40)) {
    prog.set_input(m.x, b.x);
    prog.set_input(m.t, b.t);
    prog.run_episode(&opt);
    const double rel = std::fabs(prog.loss() - cpu.losses[i]) / std::fabs(cpu.losses[i]);
    worst = std::max(worst, rel);
    INFO("episode " << i << ": f64 " << cpu.losses[i] << " f32 " << prog.loss());
    CHECK(rel <= 1e-4);
    ++i;
  }
  std::printf("replay f32 Adam run: worst relative loss difference to the f64 tape %.3g\n", worst);
}

// Where a GPU and driver are present: the same sweep and training runs on CUDA must give the CPU
// tape's bytes. Here (no driver) it WARNs and passes; run `test_replay "[cuda]"` on a GPU machine.
TEST_CASE("replay: CUDA gives the CPU tape bytes for the sweep, Adam and SGD (skipped without a GPU)", "[replay][cuda]") {
  std::unique_ptr<device::Backend> cuda;
  try {
    device::CudaOptions o;
    o.cache_dir = cache_dir();
    cuda = device::make_cuda_backend(o);
  } catch (const device::DeviceUnavailable& e) {
    WARN("CUDA replay not exercised: " << e.what());
    return;
  }
  std::set<Op> seen;
  for (size_t i = 0; i < kCases.size(); ++i) sweep_case(*cuda, kCases[i], i, seen);
  check_same_run(cpu_run(true, 40), device_run(*cuda, true, 40, false));
  check_same_run(cpu_run(true, 40), device_run(*cuda, true, 40, true));
  check_same_run(cpu_run(false, 40), device_run(*cuda, false, 40, true));
  // f32: the same bytes on CUDA as on the host backend.
  auto hostbe = host();
  double worst = 0.0;
  for (size_t i = 0; i < kCases.size(); ++i) {
    INFO("f32 case: " << kCases[i].name);
    CHECK(same_bits(sweep_case_f32(*hostbe, kCases[i], i, {}, &worst), sweep_case_f32(*cuda, kCases[i], i, {}, &worst)));
  }
}
