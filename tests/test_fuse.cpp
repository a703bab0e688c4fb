// test_fuse.cpp — lib/fuse on the host backend: every node's value and gradient from the fused
// program equal the per-node replay's bit for bit (memcmp), on every example spec and on seeded random
// graphs, with blockDim 1 and with a block's threads as fibers resumed in reverse order after every
// barrier (a missing __syncthreads shows up there); f32 plans too; the order-safety fallback; NVRTC
// compiles a generated module; planning a tape; the disk cache. The training runs (and the CUDA
// check) are in test_fuse_train.cpp, the shared helpers in support/fuse_support.h.
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
#include "fuse/fuse.h"
#include "grad/optimizer.h"
#include "grad/tape.h"
#include "replay/replay.h"
#include "support/rng.h"
#include "spec/spec.h"
#include "train/model.h"

#include "support/fuse_seq_support.h"
#include "support/fuse_support.h"
#include "support/ptx_audit.h"
#include "support/skip.h"

using namespace gr;
using namespace gr::fusetest;

namespace {

// ---- example specs --------------------------------------------------------------------------------------
const char* const kSpecs[] = {"xor",       "linreg",           "iris",           "diabetes",         "digits",
                              "digits-autoencoder", "attention", "attention-causal", "words-transformer"};

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
    forward_backward({&ref, &fp});
    compare_programs(ref, prog, episode ? "episode 2" : "episode 1");
  }
  Optimizer o = model.make_optimizer();
  replay::DeviceOptimizer dopt(prog, o);
  out.optimizer = dopt.launches_per_step();
  return out;
}

}  // namespace

TEST_CASE("fuse: random graphs, fused == per-node bit for bit (f64, both geometries)", "[fuse][random]") {
  Coverage cov;
  for (const Geometry& geo : kGeometries)
    for (uint64_t seed = 1; seed <= 24; ++seed) random_case(seed, geo, DType::F64, &cov);
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

// Rank-3 activations [N, T, c] fuse as flattened rows [N·T, c] (docs/fusion.md): matmuls, row-compatible
// b-sides, layer_norm, gelu, last-axis and causal softmax lanes; [T, c] / [N, 1, c] b-sides and softmax
// over T must stay per-node. A wrong row mapping (a causal lane's query row, a column b-side that is
// not one) changes bytes here.
TEST_CASE("fuse: random rank-3 graphs (flattened rows), fused == per-node bit for bit", "[fuse][random][seq]") {
  Coverage cov;
  for (const Geometry& geo : kGeometries)
    for (uint64_t seed = 201; seed <= 240; ++seed) random_case(seed, geo, DType::F64, &cov, nullptr, build_random_seq);
  for (uint64_t seed = 301; seed <= 310; ++seed)
    random_case(seed, kGeometries[1], DType::F32, &cov, nullptr, build_random_seq);
  INFO("row " << cov.row << " (flattened " << cov.flat << "), causal stages " << cov.causal << ", serial " << cov.serial
              << ", heads " << cov.heads << ", param kernels " << cov.param << ", per-node fallbacks " << cov.fallback);
  CHECK(cov.flat > 30);
  CHECK(cov.causal > 10);
  CHECK(cov.heads > 0);
  CHECK(cov.param > 10);
  WARN("rank-3: row " << cov.row << " (flattened " << cov.flat << "), causal stages " << cov.causal << ", serial "
                      << cov.serial << ", heads " << cov.heads << ", param kernels " << cov.param << ", per-node fallbacks "
                      << cov.fallback);
}

TEST_CASE("fuse: random graphs, f32 plans == per-node f32 bit for bit", "[fuse][random][f32]") {
  Coverage cov;
  for (uint64_t seed = 101; seed <= 108; ++seed) random_case(seed, kGeometries[1], DType::F32, &cov);
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
    forward_backward({&ref, &fp});
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

// The text of one generated kernel (from its signature to its GR_EXPORT_KERNEL line), "" if absent.
static std::string generated_kernel_text(const std::string& generated, const std::string& kernel) {
  const size_t at = generated.find(" void " + kernel + "(");
  if (at == std::string::npos) return "";
  const size_t end = generated.find("GR_EXPORT_KERNEL(" + kernel + ")", at);
  return generated.substr(at, end == std::string::npos ? std::string::npos : end - at);
}

TEST_CASE("fuse: NVRTC compiles a generated module (f64 and f32), fma only from gr_dot", "[fuse][nvrtc]") {
  // A random graph, and a two-layer MLP whose row segment fuses both matmuls (forward, dA, dW).
  Graph random, mlp;
  build_random(random, 3);
  {
    Tape& t = mlp.tape;
    const Var x = t.constant(Shape({4, 3}), std::vector<double>{0.1, -0.2, 0.3, 0.4, -0.5, 0.6, 0.7, 0.8, -0.9, 1.0, 1.1, -1.2});
    const Var w1 = t.param(Shape({3, 5}), std::vector<double>(15, 0.25));
    const Var b1 = t.param(Shape({5}), std::vector<double>(5, 0.1));
    const Var w2 = t.param(Shape({5, 2}), std::vector<double>(10, -0.3));
    mlp.loss = t.mean(t.matmul(t.tanh(t.add(t.matmul(x, w1), b1)), w2));
  }
  size_t dots = 0;
  for (Graph* gr : {&random, &mlp}) {
    REQUIRE(gr->tape.backward(gr->loss));
    for (DType dt : {DType::F64, DType::F32}) {
      auto be = host(false);
      replay::ReplayOptions ro;
      ro.dtype = dt;
      replay::Program prog(*be, gr->tape, gr->loss, ro);
      const fuse::Plan pl = fuse::plan(prog);
      std::string ptx, plain;
      try {
        ptx = device::nvrtc_compile_ptx(pl.source, "compute_90");
        plain = ptxaudit::ptx_without_explicit_fma(pl.source);
      } catch (const device::DeviceUnavailable& e) {
        GR_SKIP("nvrtc", "the fused kernel source was not compiled for a GPU: " << e.what());
      }
      // The module is the prelude and the generated kernels only (no per-node kernel), so the PTX's
      // functions are the generated kernels. A generated kernel has an fma exactly when its own text
      // calls gr_dot (its explicit __fma_rn), and once that is spelled as a multiply and an add there
      // is no fma at all (nothing was contracted).
      CHECK(plain.find("fma") == std::string::npos);
      CHECK(pl.source.find("grk_matmul_fwd") == std::string::npos);
      std::set<std::string> kernels;
      for (const fuse::Segment& s : pl.segments)
        for (const std::string* k : {&s.fwd, &s.bwd_row, &s.bwd_param})
          if (!k->empty()) kernels.insert(*k);
      if (!pl.fill.empty()) kernels.insert(pl.fill);
      const std::set<std::string> with_fma = ptxaudit::fma_functions(ptx);
      for (const std::string& k : kernels) {
        INFO("generated kernel " << k);
        const std::string text = generated_kernel_text(pl.generated, k);
        REQUIRE_FALSE(text.empty());
        CHECK(ptx.find(".entry " + k + "(") != std::string::npos);
        const bool calls_dot = text.find("gr_dot(") != std::string::npos;
        dots += calls_dot;
        CHECK(with_fma.count(k) == (calls_dot ? 1u : 0u));
      }
      for (const std::string& f : with_fma) {
        INFO("function " << f << " has an fma but is not a generated kernel that calls gr_dot");
        CHECK(kernels.count(f) == 1);
      }
    }
  }
  CHECK(dots >= 2 * 3);  // the MLP's fused matmul kernels (f64 and f32): the check above saw fma kernels
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
