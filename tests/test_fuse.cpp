// test_fuse.cpp — lib/fuse on the host backend: every node's value and gradient from the fused
// program equal the per-node replay's bit for bit (memcmp), on every example spec and on seeded random
// graphs, with blockDim 1 and with a block's threads as fibers resumed in reverse order after every
// barrier (a missing __syncthreads shows up there); f32 plans too; the order-safety fallback; a
// 40-episode Adam + L2 + clip run as one captured fused episode equals the CPU tape bit for bit.
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
#include "support/rng.h"
#include "spec/spec.h"
#include "train/model.h"

using namespace gr;
using gr::test::Rng;

namespace {

struct TempDir {
  std::string path;
  TempDir() {
    std::string templ = (std::filesystem::temp_directory_path() / "gr_test_fuse_XXXXXX").string();
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

std::unique_ptr<device::Backend> host(bool fibers) {
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
const Geometry kGeometries[] = {{"blockDim 1", false, 1, 65535}, {"fibers, blockDim 3, grid <= 2", true, 3, 2}};

replay::ReplayOptions options(const Geometry& g, replay::DType dt = replay::DType::F64) {
  replay::ReplayOptions ro;
  ro.block = g.block;
  ro.max_grid = g.max_grid;
  ro.dtype = dt;
  return ro;
}

// Every node's value and gradient, fused vs per-node, memcmp (after f32 → f64 conversion both ways).
void compare_programs(replay::Program& ref, replay::Program& fused, const char* when) {
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

void build_random(Graph& gr, uint64_t seed) {
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
};

void random_case(uint64_t seed, const Geometry& geo, replay::DType dt, Coverage* cov,
                 const std::function<std::unique_ptr<device::Backend>()>& make = nullptr) {
  Graph gr;
  build_random(gr, seed);
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
    ref.forward();
    ref.backward();
    fp.forward();
    fp.backward();
    compare_programs(ref, prog, episode ? "episode 2" : "episode 1");
  }
}

// ---- example specs --------------------------------------------------------------------------------------
const char* const kSpecs[] = {"xor", "linreg", "iris", "diabetes", "digits", "digits-autoencoder", "attention"};

struct SpecRun {
  size_t per_node = 0, fused = 0, optimizer = 0;
  std::string plan;
};

SpecRun spec_case(const std::string& name, const Geometry& geo) {
  const std::string path = std::string(GR_SOURCE_DIR) + "/specs/" + name + ".json";
  Spec spec = load_spec(path);
  Model model(spec, load_datasets(spec));
  std::vector<int64_t> rows;
  if (spec.data)
    for (int64_t i = 0; i < model.program().batch; ++i) rows.push_back(i);
  const std::vector<Var>& nodes = model.record(model.data().train, rows);
  REQUIRE(!nodes.empty());
  const Var loss = nodes[static_cast<size_t>(model.program().loss)];
  auto be_ref = host(geo.fibers), be_fused = host(geo.fibers);
  replay::Program ref(*be_ref, model.tape(), loss, options(geo));
  replay::Program prog(*be_fused, model.tape(), loss, options(geo));
  fuse::Plan pl = fuse::plan(prog);
  SpecRun out;
  out.plan = pl.describe();
  INFO(name << ", " << geo.name << "\n" << out.plan);
  out.per_node = pl.per_node_launches();
  out.fused = pl.fused_launches();
  CHECK(pl.fuses());
  fuse::FusedProgram fp(prog, std::move(pl));
  for (int episode = 0; episode < 2; ++episode) {
    if (episode > 0 && spec.data) {  // the next rows of the table through the input slots
      model.reset();
      std::vector<int64_t> rows2;
      const int64_t n = model.data().train.rows;
      for (int64_t i = 0; i < model.program().batch; ++i) rows2.push_back((i + model.program().batch) % n);
      model.record(model.data().train, rows2);
      for (Var slot : model.slots()) {
        ref.set_input(slot, model.tape().leaf_values(slot));
        prog.set_input(slot, model.tape().leaf_values(slot));
      }
    }
    ref.forward();
    ref.backward();
    fp.forward();
    fp.backward();
    compare_programs(ref, prog, episode ? "episode 2" : "episode 1");
  }
  Optimizer o = model.make_optimizer();
  replay::DeviceOptimizer dopt(prog, o);
  out.optimizer = dopt.launches_per_step();
  return out;
}

// ---- training: 40 fused episodes vs the CPU tape ---------------------------------------------------------
struct Mlp {
  Var x, t, w1, b1, w2, b2, unused;
};

Mlp make_leaves(Tape& tape, Rng& rng) {
  Mlp m;
  m.x = tape.constant(Shape({6, 5}), rng.uniform_vec(30, -2, 2));
  m.t = tape.constant(Shape({6, 3}), std::vector<double>(18, 0.0));
  m.w1 = tape.param(Shape({5, 8}), rng.uniform_vec(40, -0.6, 0.6));
  m.b1 = tape.param(Shape({8}), rng.uniform_vec(8, -0.1, 0.1));
  m.unused = tape.param(Shape({2}), rng.uniform_vec(2, -1, 1));
  m.w2 = tape.param(Shape({8, 3}), rng.uniform_vec(24, -0.6, 0.6));
  m.b2 = tape.param(Shape({3}), rng.uniform_vec(3, -0.1, 0.1));
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

Optimizer make_opt(Tape& tape, const Mlp& m) {
  Optimizer o = Optimizer::adam(0.05);
  o.add(tape, m.w1, 1e-3);
  o.add(tape, m.b1, 0.0);
  o.add(tape, m.unused, 1e-2);
  o.add(tape, m.w2, 1e-3);
  o.add(tape, m.b2, 0.0);
  o.set_clip(0.4);
  return o;
}

struct RunResult {
  std::vector<double> losses, params, moments;
};

RunResult cpu_run(int episodes) {
  Rng rng(1234);
  Tape tape;
  const Mlp m = make_leaves(tape, rng);
  Optimizer opt = make_opt(tape, m);
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
  return r;
}

RunResult fused_run(device::Backend& be, int episodes, bool captured, const Geometry& geo, std::string* plan_text,
                    size_t* launches) {
  Rng rng(1234);
  Tape tape;
  const Mlp m = make_leaves(tape, rng);
  Optimizer cpu_opt = make_opt(tape, m);
  const Var loss = record(tape, m);
  REQUIRE(tape.ok());
  replay::Program prog(be, tape, loss, options(geo));
  replay::DeviceOptimizer opt(prog, cpu_opt);
  fuse::FusedProgram fp(prog, fuse::plan(prog));
  *plan_text = fp.plan().describe();
  launches[0] = prog.forward_launches() + prog.backward_launches() + opt.launches_per_step();
  launches[1] = fp.launches_per_episode(&opt);
  if (captured) fp.capture_episode(&opt);
  RunResult r;
  for (const Batch& b : batches(episodes)) {
    prog.set_input(m.x, b.x);
    prog.set_input(m.t, b.t);
    if (captured) {
      fp.run_episode(&opt);
    } else {
      fp.forward();
      fp.backward();
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
  return r;
}

bool same_bits(const std::vector<double>& a, const std::vector<double>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(double)) == 0;
}

}  // namespace

TEST_CASE("fuse: random graphs, fused == per-node bit for bit (f64, both geometries)", "[fuse][random]") {
  Coverage cov;
  for (const Geometry& geo : kGeometries)
    for (uint64_t seed = 1; seed <= 24; ++seed) random_case(seed, geo, replay::DType::F64, &cov);
  // The generator really produces every kind of fused work.
  INFO("row " << cov.row << ", serial " << cov.serial << ", heads " << cov.heads << ", param kernels " << cov.param
              << ", per-node fallbacks " << cov.fallback);
  CHECK(cov.row > 24);
  CHECK(cov.serial > 0);
  CHECK(cov.heads > 0);
  CHECK(cov.param > 0);
  WARN("row " << cov.row << ", serial " << cov.serial << ", heads " << cov.heads << ", param kernels " << cov.param
              << ", per-node fallbacks " << cov.fallback);
}

TEST_CASE("fuse: random graphs, f32 plans == per-node f32 bit for bit", "[fuse][random][f32]") {
  Coverage cov;
  for (uint64_t seed = 101; seed <= 108; ++seed) random_case(seed, kGeometries[1], replay::DType::F32, &cov);
  CHECK(cov.row > 0);
}

TEST_CASE("fuse: every example spec, fused == per-node bit for bit", "[fuse][specs]") {
  for (const char* name : kSpecs) {
    if (!std::filesystem::exists(std::string(GR_SOURCE_DIR) + "/specs/" + name + ".json")) continue;
    for (const Geometry& geo : kGeometries) {
      const SpecRun r = spec_case(name, geo);
      if (!geo.fibers)
        std::printf("fuse: %-20s launches per episode: per-node %zu + %zu optimizer, fused %zu + %zu optimizer\n%s", name,
                    r.per_node, r.optimizer, r.fused, r.optimizer, r.plan.c_str());
      CHECK(r.fused < r.per_node);
    }
  }
}

TEST_CASE("fuse: order safety keeps the per-node backward where a slot gets both kinds", "[fuse]") {
  // W [3, 3] is the matmul's weight (parameter space) and the a-side of a row-local add over B = 3
  // (row space) inside one segment.
  Rng rng(7);
  Tape t;
  const Var x = t.constant(Shape({3, 3}), rng.uniform_vec(9, -1, 1));
  const Var w = t.param(Shape({3, 3}), rng.uniform_vec(9, -1, 1));
  const Var h = t.tanh(t.matmul(x, w));
  const Var loss = t.sum(t.mul(t.add(w, h), h));
  REQUIRE(t.backward(loss));
  for (const Geometry& geo : kGeometries) {
    auto be1 = host(geo.fibers), be2 = host(geo.fibers);
    replay::Program ref(*be1, t, loss, options(geo)), prog(*be2, t, loss, options(geo));
    fuse::Plan pl = fuse::plan(prog);
    INFO(pl.describe());
    REQUIRE(!pl.segments.empty());
    CHECK_FALSE(pl.segments[0].bwd_fused);
    CHECK(pl.segments[0].bwd_why.find("order safety") != std::string::npos);
    fuse::FusedProgram fp(prog, std::move(pl));
    ref.forward();
    ref.backward();
    fp.forward();
    fp.backward();
    compare_programs(ref, prog, "order safety");
  }
}

TEST_CASE("fuse: a graph with nothing to fuse runs exactly as before", "[fuse]") {
  Tape t;
  const Var x = t.param(Shape({2, 3, 4}), std::vector<double>(24, 0.5));
  const Var loss = t.sum(t.transpose(x));
  REQUIRE(t.backward(loss));
  auto be = host(false);
  replay::Program prog(*be, t, loss);
  const fuse::Plan pl = fuse::plan(prog);
  CHECK_FALSE(pl.fuses());
  CHECK(pl.fwd_fused == prog.forward_launches());
  CHECK(pl.bwd_fused + 1 == prog.backward_launches());  // zero-fill + seed became one launch
  CHECK_FALSE(fuse::worthwhile(pl, *be));
}

TEST_CASE("fuse: 40 episodes of Adam + L2 + clip, fused, equal the CPU tape bit for bit", "[fuse][train]") {
  const RunResult cpu = cpu_run(40);
  REQUIRE(cpu.losses.front() != cpu.losses.back());
  for (const Geometry& geo : kGeometries) {
    for (bool captured : {false, true}) {
      INFO(geo.name << (captured ? ", one captured episode" : ", direct launches"));
      auto be = host(geo.fibers);
      std::string plan_text;
      size_t launches[2] = {};
      const RunResult dev = fused_run(*be, 40, captured, geo, &plan_text, launches);
      INFO(plan_text);
      REQUIRE(dev.losses.size() == cpu.losses.size());
      for (size_t i = 0; i < cpu.losses.size(); ++i) {
        INFO("episode " << i);
        CHECK(std::memcmp(&cpu.losses[i], &dev.losses[i], sizeof(double)) == 0);
      }
      CHECK(same_bits(cpu.params, dev.params));
      CHECK(same_bits(cpu.moments, dev.moments));
      CHECK(launches[1] < launches[0]);
    }
  }
}

TEST_CASE("fuse: NVRTC compiles a generated module (f64 and f32), no fma", "[fuse][nvrtc]") {
  Graph gr;
  build_random(gr, 3);
  REQUIRE(gr.tape.backward(gr.loss));
  for (replay::DType dt : {replay::DType::F64, replay::DType::F32}) {
    auto be = host(false);
    replay::ReplayOptions ro;
    ro.dtype = dt;
    replay::Program prog(*be, gr.tape, gr.loss, ro);
    const fuse::Plan pl = fuse::plan(prog);
    std::string ptx;
    try {
      ptx = device::nvrtc_compile_ptx(pl.source, "compute_90");
    } catch (const device::DeviceUnavailable& e) {
      WARN("NVRTC unavailable: " << e.what());
      return;
    }
    CHECK(ptx.find("fma.rn") == std::string::npos);
    for (const fuse::Segment& s : pl.segments) CHECK(ptx.find(s.fwd) != std::string::npos);
  }
}

TEST_CASE("fuse: inspect-style planning of a tape, and fuse: auto", "[fuse]") {
  Graph gr;
  build_random(gr, 5);
  REQUIRE(gr.tape.backward(gr.loss));
  auto be = host(false);
  const fuse::Plan pl = fuse::plan_tape(*be, gr.tape, gr.loss);
  CHECK(pl.describe().find("launches: forward") != std::string::npos);
  CHECK_FALSE(fuse::worthwhile(pl, *be));  // the host backend has no launch latency to save
}

TEST_CASE("fuse: CUDA, fused == per-node bit for bit (skipped without a GPU)", "[fuse][cuda]") {
  try {
    device::make_cuda_backend();
  } catch (const device::DeviceUnavailable& e) {
    WARN("skipped: " << e.what());
    return;
  }
  auto cuda = [] {
    device::CudaOptions o;
    o.cache_dir = cache_dir();
    return device::make_cuda_backend(o);
  };
  Coverage cov;
  const Geometry geo{"cuda, blockDim 128", false, 128, 65535};
  for (uint64_t seed = 1; seed <= 24; ++seed) random_case(seed, geo, replay::DType::F64, &cov, cuda);
  for (uint64_t seed = 101; seed <= 104; ++seed) random_case(seed, geo, replay::DType::F32, &cov, cuda);
  const Geometry narrow{"cuda, blockDim 32, grid <= 2", false, 32, 2};
  for (uint64_t seed = 1; seed <= 8; ++seed) random_case(seed, narrow, replay::DType::F64, &cov, cuda);
  // And the host backend's bytes: a fused CUDA episode equals the CPU tape (training run).
  const RunResult cpu = cpu_run(40);
  for (bool captured : {false, true}) {
    auto be = cuda();
    std::string plan_text;
    size_t launches[2] = {};
    const RunResult dev = fused_run(*be, 40, captured, geo, &plan_text, launches);
    CHECK(same_bits(cpu.losses, dev.losses));
    CHECK(same_bits(cpu.params, dev.params));
    CHECK(same_bits(cpu.moments, dev.moments));
  }
}

TEST_CASE("fuse: a program's generated module is compiled once (the backend's disk cache)", "[fuse]") {
  Graph gr;
  build_random(gr, 9);
  REQUIRE(gr.tape.backward(gr.loss));
  {
    auto be = host(false);
    replay::Program prog(*be, gr.tape, gr.loss);
    fuse::FusedProgram fp(prog, fuse::plan(prog));
  }
  const unsigned long before = device::host_compiler_runs();
  auto be = host(false);  // a fresh backend: no in-memory module, the same disk cache
  replay::Program prog(*be, gr.tape, gr.loss);
  fuse::Plan pl = fuse::plan(prog);
  const std::string name = pl.module_name;
  fuse::FusedProgram fp(prog, std::move(pl));
  CHECK(device::host_compiler_runs() == before);
  CHECK(name.rfind("gr_fuse_", 0) == 0);
}

// The reference autoencoder (tests/test_autoencoder.cpp): 6-64-32-64-6 tanh MLP, batch 200, mse,
// Adam — 10 episodes as one captured fused episode each, against the CPU tape, bit for bit.
TEST_CASE("fuse: the reference autoencoder, fused episodes == CPU tape", "[fuse][train][autoencoder]") {
  constexpr int64_t kDim = 6, kBatch = 200;
  const int64_t widths[] = {kDim, 64, 32, 64, kDim};
  auto build = [&](Tape& tape, Optimizer& opt, std::vector<Var>& params) {
    Rng rng(0xA11CE5ULL);
    for (int l = 0; l < 4; ++l) {
      const int64_t fi = widths[l], fo = widths[l + 1];
      const double lim = std::sqrt(6.0 / static_cast<double>(fi + fo));
      params.push_back(tape.param(Shape({fi, fo}), rng.uniform_vec(fi * fo, -lim, lim)));
      params.push_back(tape.param(Shape({fo}), std::vector<double>(static_cast<size_t>(fo), 0.0)));
      opt.add(tape, params[params.size() - 2]);
      opt.add(tape, params.back());
    }
  };
  auto forward = [&](Tape& tape, const std::vector<Var>& params, Var x) {
    Var h = x;
    for (int l = 0; l < 4; ++l) {
      h = tape.add(tape.matmul(h, params[static_cast<size_t>(2 * l)]), params[static_cast<size_t>(2 * l + 1)]);
      if (l + 1 < 4) h = tape.tanh(h);
    }
    return tape.mse(h, x);
  };
  std::vector<std::vector<double>> data;
  Rng drng(0x5EEDF00DULL);
  for (int e = 0; e < 10; ++e) data.push_back(drng.uniform_vec(kBatch * kDim, -1, 1));

  // CPU tape.
  std::vector<double> cpu_losses, cpu_params;
  {
    Tape tape;
    Optimizer opt = Optimizer::adam(2e-3);
    std::vector<Var> params;
    build(tape, opt, params);
    const int32_t mark = tape.mark();
    for (const auto& xb : data) {
      const Var x = tape.constant(Shape({kBatch, kDim}), xb);
      const Var loss = forward(tape, params, x);
      REQUIRE(tape.backward(loss));
      cpu_losses.push_back(tape.scalar(loss));
      opt.step(tape);
      tape.reset_to(mark);
    }
    for (Var p : params)
      for (double v : tape.param_value(p)) cpu_params.push_back(v);
  }
  // Fused device episodes (host backend, blockDim 1).
  Tape tape;
  Optimizer opt = Optimizer::adam(2e-3);
  std::vector<Var> params;
  build(tape, opt, params);
  const Var x = tape.constant(Shape({kBatch, kDim}), data[0]);
  const Var loss = forward(tape, params, x);
  auto be = host(false);
  replay::Program prog(*be, tape, loss);
  replay::DeviceOptimizer dopt(prog, opt);
  fuse::FusedProgram fp(prog, fuse::plan(prog));
  std::printf("fuse: reference autoencoder launches per episode: per-node %zu + %zu optimizer, fused %zu + %zu optimizer\n%s",
              fp.plan().per_node_launches(), dopt.launches_per_step(), fp.plan().fused_launches(), dopt.launches_per_step(),
              fp.plan().describe().c_str());
  CHECK(fp.plan().fused_launches() < fp.plan().per_node_launches());
  fp.capture_episode(&dopt);
  std::vector<double> dev_losses, dev_params;
  for (const auto& xb : data) {
    prog.set_input(x, xb);
    fp.run_episode(&dopt);
    dev_losses.push_back(prog.loss());
  }
  prog.sync_params_to(tape);
  for (Var p : params)
    for (double v : tape.param_value(p)) dev_params.push_back(v);
  CHECK(same_bits(cpu_losses, dev_losses));
  CHECK(same_bits(cpu_params, dev_params));
}
