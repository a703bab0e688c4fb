// fuse_support.h — helpers shared by the fusion tests (test_fuse*.cpp): the host backend with a
// per-process kernel cache folder, the launch geometries, the fused-vs-per-node bitwise comparison,
// the seeded random graph generator and its fused-vs-per-node run.
#pragma once
#include <stdlib.h>

#include <catch2/catch.hpp>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <functional>
#include <vector>

#include "device/backend.h"
#include "fuse/fuse.h"
#include "grad/optimizer.h"
#include "grad/tape.h"
#include "replay/replay.h"
#include "rng.h"
#include "temp_dir.h"
#include "spec/spec.h"
#include "train/model.h"

namespace gr::fusetest {

using gr::test::Rng;

using TempDir = gr::test::TempDir;

inline const std::string& cache_dir() {
  static gr::test::CacheDir dir("gr_test_fuse");  // $GR_TEST_CACHE when set (temp_dir.h)
  return dir.path;
}

inline std::unique_ptr<device::Backend> host(bool fibers) {
  device::HostOptions o;
  o.threads = 1;
  o.fiber_block = fibers;
  o.cache_dir = cache_dir();
  return device::make_host_backend(o);
}

// Geometries: blockDim 1; fibers (reverse-order resume) with blockDim 3 and at most 2 blocks.
struct Geometry {
  const char* name;
  bool fibers;
  unsigned block, max_grid;
};
inline const Geometry kGeometries[] = {{"blockDim 1", false, 1, 65535}, {"fibers, blockDim 3, grid <= 2", true, 3, 2}};

inline replay::ReplayOptions options(const Geometry& g, DType dt = DType::F64) {
  replay::ReplayOptions ro;
  ro.block = g.block;
  ro.max_grid = g.max_grid;
  ro.dtype = dt;
  return ro;
}

// One launch-by-launch forward + backward on each episode (the per-node reference, the fused one).
inline void forward_backward(std::initializer_list<replay::Episode*> episodes) {
  for (replay::Episode* ep : episodes) {
    ep->forward();
    ep->backward();
  }
}

// Every node's value and gradient, fused vs per-node, memcmp (after f32 → f64 conversion both ways).
inline void compare_programs(replay::Program& ref, replay::Program& fused, const char* when) {
  REQUIRE(ref.size() == fused.size());
  std::vector<double> a, b;
  for (int32_t id = 0; id < ref.size(); ++id) {
    const replay::Program::NodeView n = ref.node_view(id);
    INFO(when << ": node " << id << " (" << op_name(n.op) << " " << n.shape.str() << ")");
    a.resize(static_cast<size_t>(n.numel));
    b.resize(static_cast<size_t>(n.numel));
    ref.value(Var{id}, a);
    fused.value(Var{id}, b);
    CHECK(std::memcmp(a.data(), b.data(), a.size() * sizeof(double)) == 0);
    ref.grad(Var{id}, a);
    fused.grad(Var{id}, b);
    CHECK(std::memcmp(a.data(), b.data(), a.size() * sizeof(double)) == 0);
  }
}

// ---- random graphs -------------------------------------------------------------------------------------
struct Graph {
  Tape tape;
  Var loss;
  std::vector<Var> inputs;  // consts refreshed between episodes
};

inline void build_random(Graph& gr, uint64_t seed) {
  Rng rng(seed);
  Tape& t = gr.tape;
  auto pick = [&](uint64_t n) { return static_cast<int64_t>(rng.next() % n); };
  const int64_t B = 1 + pick(5);
  int64_t c = 1 + pick(5);
  Var x = t.constant(Shape({B, c}), rng.uniform_vec(B * c, -1.5, 1.5));
  gr.inputs.push_back(x);
  std::vector<Var> pool{x};     // [B, *] activations
  std::vector<Var> weights;     // [k, n] params
  Var cur = pool[0];
  auto width = [&](Var v) { return t.node(v).shape[1]; };
  const int steps = 4 + static_cast<int>(pick(12));
  for (int s = 0; s < steps; ++s) {
    c = width(cur);
    switch (pick(11)) {
      case 0:
      case 1: {  // matmul: a new weight, a const weight, or a shared one of the right shape
        Var w{-1};
        for (Var cand : weights)
          if (t.node(cand).shape[0] == c && pick(2) == 0) w = cand;
        if (w.id < 0) {
          const int64_t n = 1 + pick(5);
          const std::vector<double> v = rng.uniform_vec(c * n, -0.8, 0.8);
          w = pick(5) == 0 ? t.constant(Shape({c, n}), v) : t.param(Shape({c, n}), v);
          if (t.node(w).op == Op::Param) weights.push_back(w);
        }
        cur = t.matmul(cur, w);
        break;
      }
      case 2:
      case 3: {  // binary with a [c], [1], [1, c] or [B, c] b-side
        const int kind = static_cast<int>(pick(6));
        Var b{-1};
        if (kind == 0) b = t.param(Shape({c}), rng.uniform_vec(c, 0.5, 1.5));
        else if (kind == 1) b = t.param(Shape({1}), rng.uniform_vec(1, 0.5, 1.5));
        else if (kind == 2) b = t.constant(Shape({1, c}), rng.uniform_vec(c, 0.5, 1.5));
        else if (kind == 3) b = cur;  // x ∘ x
        else {
          for (Var p : pool)
            if (t.node(p).shape == t.node(cur).shape && p != cur) b = p;
          if (b.id < 0) b = t.param(Shape({B, c}), rng.uniform_vec(B * c, 0.5, 1.5));
        }
        const int op = static_cast<int>(pick(4));
        if (op == 3 && (t.node(b).op == Op::Param || t.node(b).op == Op::Const)) cur = t.div(cur, b);
        else if (op == 2) cur = t.mul(cur, b);
        else if (op == 1) cur = t.sub(cur, b);
        else cur = t.add(cur, b);
        break;
      }
      case 4: cur = t.tanh(cur); break;
      case 5: cur = pick(2) ? t.relu(cur) : t.sigmoid(cur); break;
      case 6: {
        const int u = static_cast<int>(pick(6));
        if (u == 0) cur = t.log(t.adds(t.sigmoid(cur), 0.25));
        else if (u == 1) cur = t.sqrt(t.sigmoid(cur));
        else if (u == 2) cur = t.exp(t.muls(t.tanh(cur), 0.5));
        else if (u == 3) cur = t.neg(cur);
        else cur = t.muls(t.adds(cur, -0.3), 1.7);
        break;
      }
      case 7: cur = pick(2) ? t.softmax(cur, -1) : t.log_softmax(cur, -1); break;
      case 8: {  // a segment break: transpose twice, or a column sum broadcast back
        if (pick(2)) cur = t.transpose(t.transpose(cur));
        else cur = t.add(cur, t.sum(cur, 0, true));
        break;
      }
      case 9: {  // a [B, c] param on the a-side (a row-space leaf target)
        cur = t.add(t.param(Shape({B, c}), rng.uniform_vec(B * c, -1, 1)), cur);
        break;
      }
      default: {  // a const-only branch (no gradient) joined in
        const Var k = t.constant(Shape({B, c}), rng.uniform_vec(B * c, -1, 1));
        gr.inputs.push_back(k);
        cur = t.mul(cur, t.tanh(k));
        break;
      }
    }
    pool.push_back(cur);
  }
  c = width(cur);
  switch (pick(4)) {
    case 0: gr.loss = t.mean(cur); break;
    case 1: {
      std::vector<double> oh(static_cast<size_t>(B * c), 0.0);
      for (int64_t r = 0; r < B; ++r) oh[static_cast<size_t>(r * c + pick(static_cast<uint64_t>(c)))] = 1.0;
      const Var y = t.constant(Shape({B, c}), oh);
      gr.loss = t.softmax_cross_entropy(cur, y);
      break;
    }
    case 2: gr.loss = t.adds(t.muls(t.sum(cur), 0.5), 1.25); break;  // a serial tail
    default: {
      const Var r = t.constant(Shape({1}), std::vector<double>{0.75});
      gr.loss = t.mul(t.sqrt(t.adds(t.mean(t.mul(cur, cur)), 1.0)), r);
      break;
    }
  }
}

struct Coverage {
  int row = 0, serial = 0, heads = 0, param = 0, fallback = 0;
  int flat = 0, causal = 0;  // row segments over flattened rank > 2 rows; causal softmax row stages
};

inline void random_case(uint64_t seed, const Geometry& geo, DType dt, Coverage* cov,
                 const std::function<std::unique_ptr<device::Backend>()>& make = nullptr,
                 void (*build)(Graph&, uint64_t) = build_random) {
  Graph gr;
  build(gr, seed);
  REQUIRE(gr.tape.ok());
  REQUIRE(gr.tape.backward(gr.loss));
  auto be_ref = make ? make() : host(geo.fibers), be_fused = make ? make() : host(geo.fibers);
  replay::Program ref(*be_ref, gr.tape, gr.loss, options(geo, dt));
  replay::Program prog(*be_fused, gr.tape, gr.loss, options(geo, dt));
  fuse::Plan pl = fuse::plan(prog);
  INFO("seed " << seed << ", " << geo.name << "\n" << pl.describe());
  for (const fuse::Segment& sg : pl.segments) {
    (sg.kind == fuse::SegKind::Row ? cov->row : cov->serial) += 1;
    cov->heads += sg.head >= 0 && sg.bwd_fused;
    cov->param += !sg.bwd_param.empty();
    cov->fallback += !sg.bwd_fused;
    bool flat = false;
    for (int32_t k : sg.nodes) {
      const replay::Program::NodeView v = prog.node_view(k);
      flat = flat || v.shape.rank() > 2;
      cov->causal += v.causal;
    }
    cov->flat += sg.kind == fuse::SegKind::Row && flat;
  }
  fuse::FusedProgram fp(prog, std::move(pl));
  Rng rng(seed ^ 0xABCDEF);
  for (int episode = 0; episode < 2; ++episode) {
    if (episode > 0)
      for (Var in : gr.inputs) {
        const std::vector<double> v = rng.uniform_vec(gr.tape.node(in).numel(), -1.5, 1.5);
        ref.set_input(in, v);
        prog.set_input(in, v);
      }
    forward_backward({&ref, &fp});
    compare_programs(ref, prog, episode ? "episode 2" : "episode 1");
  }
}

inline bool same_bits(const std::vector<double>& a, const std::vector<double>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(double)) == 0;
}

}  // namespace gr::fusetest
