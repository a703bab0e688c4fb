// replay_support.h — helpers shared by the replay tests (test_replay*.cpp): the host backend with a
// per-process kernel cache folder, bitwise comparison, and the 2-layer MLP training runs (CPU tape vs
// device, launch by launch or one captured episode, over any replay::Episode: the fusion tests run
// the same driver with lib/fuse's FusedProgram).
#pragma once
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
#include "replay/episode.h"
#include "replay/replay.h"
#include "rng.h"
#include "temp_dir.h"

namespace gr::replaytest {

using gr::test::Rng;

using TempDir = gr::test::TempDir;

inline const std::string& cache_dir() {
  static gr::test::CacheDir dir("gr_test_replay");  // $GR_TEST_CACHE when set (temp_dir.h)
  return dir.path;
}

inline std::unique_ptr<device::Backend> host(bool fibers = false, unsigned threads = 1) {
  device::HostOptions o;
  o.threads = threads;
  o.fiber_block = fibers;
  o.cache_dir = cache_dir();
  return device::make_host_backend(o);
}

inline bool same_bits(std::span<const double> a, std::span<const double> b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size_bytes()) == 0;
}

// ---- (b), (c) training runs -------------------------------------------------------------------------
struct Mlp {
  Var x, t, w1, b1, w2, b2, unused;
};

// A 2-layer MLP with an mse + softmax-cross-entropy loss; params recorded first, then the inputs.
inline Mlp make_leaves(Tape& tape, Rng& rng) {
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

inline Var record(Tape& tape, const Mlp& m) {
  const Var h = tape.tanh(tape.add(tape.matmul(m.x, m.w1), m.b1));
  const Var out = tape.add(tape.matmul(h, m.w2), m.b2);
  return tape.add(tape.mse(tape.sigmoid(out), m.t), tape.muls(tape.softmax_cross_entropy(out, m.t), 0.5));
}

struct Batch {
  std::vector<double> x, t;
};

inline std::vector<Batch> batches(int n) {
  Rng rng(99);
  std::vector<Batch> out;
  for (int i = 0; i < n; ++i) {
    Batch b{rng.uniform_vec(30, -2, 2), std::vector<double>(18, 0.0)};
    for (int r = 0; r < 6; ++r) b.t[static_cast<size_t>(r * 3 + static_cast<int>(rng.next() % 3))] = 1.0;
    out.push_back(b);
  }
  return out;
}

inline Optimizer make_opt(Tape& tape, const Mlp& m, bool adam) {
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

inline RunResult cpu_run(bool adam, int episodes, DType real = DType::F64) {
  Rng rng(1234);
  Tape tape(real);
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

// The episode a device run drives, made from its program: the program itself (per-node launches)
// when null, or e.g. lib/fuse's FusedProgram owning it.
using EpisodeMaker = std::function<std::unique_ptr<replay::Episode>(std::unique_ptr<replay::Program>)>;

// The MLP trained on the device for `episodes` batches: launch by launch (forward, backward, the
// optimizer's step) or, when `captured`, one captured episode replayed per batch.
inline RunResult episode_run(device::Backend& be, bool adam, int episodes, bool captured, const replay::ReplayOptions& ro,
                             const EpisodeMaker& make, size_t* launches = nullptr) {
  Rng rng(1234);
  Tape tape(ro.dtype);  // an f32 program from an f32 tape, as gradrun does
  const Mlp m = make_leaves(tape, rng);
  Optimizer cpu_opt = make_opt(tape, m, adam);
  const Var loss = record(tape, m);
  REQUIRE(tape.ok());
  auto prog = std::make_unique<replay::Program>(be, tape, loss, ro);
  const std::unique_ptr<replay::Episode> ep = make ? make(std::move(prog)) : std::move(prog);
  replay::DeviceOptimizer opt(ep->program(), cpu_opt);  // destroyed before the program
  if (launches) *launches = ep->launches_per_episode(opt.launches_per_step());
  if (captured) ep->capture_episode(&opt);
  RunResult r;
  for (const Batch& b : batches(episodes)) {
    ep->set_input(m.x, b.x);
    ep->set_input(m.t, b.t);
    if (captured) {
      ep->run_episode(&opt);
    } else {
      ep->forward();
      ep->backward();
      opt.step();
    }
    r.losses.push_back(ep->loss());
  }
  ep->sync_params_to(tape);
  for (const Var p : {m.w1, m.b1, m.w2, m.b2, m.unused})
    for (double v : tape.param_value(p)) r.params.push_back(v);
  opt.store_moments();  // into cpu_opt, its owner (which holds t already)
  for (size_t i = 0; i < cpu_opt.count(); ++i) {
    for (double v : cpu_opt.m(i)) r.moments.push_back(v);
    for (double v : cpu_opt.v(i)) r.moments.push_back(v);
  }
  r.t = cpu_opt.t();
  return r;
}

inline RunResult device_run(device::Backend& be, bool adam, int episodes, bool captured, size_t* launches = nullptr) {
  return episode_run(be, adam, episodes, captured, {}, nullptr, launches);
}

inline void check_same_run(const RunResult& cpu, const RunResult& dev) {
  REQUIRE(cpu.losses.size() == dev.losses.size());
  for (size_t i = 0; i < cpu.losses.size(); ++i) {
    INFO("episode " << i << ": cpu " << cpu.losses[i] << " device " << dev.losses[i]);
    CHECK(std::memcmp(&cpu.losses[i], &dev.losses[i], sizeof(double)) == 0);
  }
  CHECK(same_bits(cpu.params, dev.params));
  CHECK(same_bits(cpu.moments, dev.moments));
  CHECK(cpu.t == dev.t);
}

}  // namespace gr::replaytest
