// test_fuse_train.cpp — lib/fuse training runs: a 40-episode Adam + L2 + clip run, with direct launches
// and as one captured fused episode, equals the CPU tape bit for bit; the reference autoencoder; and,
// where a GPU is present, fused CUDA programs equal the per-node replay and the CPU tape.
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

#include "support/fuse_support.h"
#include "support/replay_support.h"
#include "support/skip.h"

using namespace gr;
using namespace gr::fusetest;

namespace {

// ---- training: 40 fused episodes vs the CPU tape ---------------------------------------------------------
// The MLP fixture (leaves, loss, batches, optimizer, CPU reference run) is the replay tests' own,
// so fused, per-node and CPU-tape runs train exactly the same thing.
using replaytest::Batch;
using replaytest::batches;
using replaytest::make_leaves;
using replaytest::Mlp;
using replaytest::record;
using replaytest::RunResult;

RunResult cpu_run(int episodes) { return replaytest::cpu_run(true, episodes); }

// The replay tests' driver (support/replay_support.h) over a FusedProgram owning the program.
RunResult fused_run(device::Backend& be, int episodes, bool captured, const Geometry& geo, std::string* plan_text,
                    size_t* launches) {
  size_t per_node = 0, fused = 0, total = 0;
  const replaytest::EpisodeMaker make = [&](std::unique_ptr<replay::Program> prog) -> std::unique_ptr<replay::Episode> {
    per_node = prog->launches_per_episode();
    fuse::Plan plan = fuse::plan(*prog);
    auto fp = std::make_unique<fuse::FusedProgram>(std::move(prog), std::move(plan));
    *plan_text = fp->plan().describe();
    fused = fp->launches_per_episode();
    return fp;
  };
  RunResult r = replaytest::episode_run(be, true, episodes, captured, options(geo), make, &total);
  launches[0] = per_node + (total - fused);  // the per-node schedule + the optimizer's launches
  launches[1] = total;
  return r;
}

}  // namespace

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

TEST_CASE("fuse: CUDA, fused == per-node bit for bit (skipped without a GPU)", "[fuse][cuda]") {
  try {
    device::make_cuda_backend();
  } catch (const device::DeviceUnavailable& e) {
    GR_SKIP("gpu", "fused CUDA runs not exercised: " << e.what());
  }
  auto cuda = [] {
    device::CudaOptions o;
    o.cache_dir = cache_dir();
    return device::make_cuda_backend(o);
  };
  Coverage cov;
  const Geometry geo{"cuda, blockDim 128", false, 128, 65535};
  for (uint64_t seed = 1; seed <= 24; ++seed) random_case(seed, geo, DType::F64, &cov, cuda);
  for (uint64_t seed = 101; seed <= 104; ++seed) random_case(seed, geo, DType::F32, &cov, cuda);
  const Geometry narrow{"cuda, blockDim 32, grid <= 2", false, 32, 2};
  for (uint64_t seed = 1; seed <= 8; ++seed) random_case(seed, narrow, DType::F64, &cov, cuda);
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
