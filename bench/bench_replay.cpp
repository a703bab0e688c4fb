// bench_replay — the reference autoencoder (6-64-32-64-6 tanh, batch 200, MSE, Adam) for N
// episodes three ways: the CPU tape, per-node device launches, and the captured episode (one
// replay per step). The reference measured 1388 / 303 / 236 ms for 360 episodes on an RTX 4090.
//
//   bench_replay [--backend host|cuda] [--episodes N] [--block B]
// Prints ms per run and per episode, launches per episode, and checks the three paths end on the
// same parameter bytes (f64).
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "device/backend.h"
#include "grad/optimizer.h"
#include "replay/replay.h"

using namespace gr;
using Clock = std::chrono::steady_clock;

namespace {

struct Ae {
  Tape tape;
  std::vector<Var> params;
  Var x;
  int32_t mark = 0;
  std::vector<double> data;  // the noisy 2-D manifold in 6-D, 200 rows per batch, 10 batches
  Ae() {
    uint64_t s = 1;
    auto unit = [&] {
      s += 0x9E3779B97F4A7C15ULL;
      uint64_t z = s;
      z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
      z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
      return static_cast<double>((z ^ (z >> 31)) >> 11) * 0x1.0p-53;
    };
    for (int r = 0; r < 2000; ++r) {
      const double u = unit() * 2 - 1, v = unit() * 2 - 1;
      const double f[6] = {u, v, std::sin(3 * u), std::cos(2 * v), u * v, std::sin(u + v)};
      for (double c : f) data.push_back(c + 0.01 * (unit() - 0.5));
    }
    const int sizes[] = {6, 64, 32, 64, 6};
    for (int l = 0; l < 4; ++l) {
      std::vector<double> w(static_cast<size_t>(sizes[l] * sizes[l + 1]));
      const double a = std::sqrt(6.0 / (sizes[l] + sizes[l + 1]));
      for (double& e : w) e = (unit() * 2 - 1) * a;
      params.push_back(tape.param(Shape{sizes[l], sizes[l + 1]}, w));
      params.push_back(tape.param(Shape{sizes[l + 1]}, std::vector<double>(static_cast<size_t>(sizes[l + 1]), 0.0)));
    }
    x = tape.constant(Shape{200, 6}, std::span<const double>(data.data(), 1200));
    mark = tape.mark();
  }
  Var record() {
    Var h = x;
    for (int l = 0; l < 4; ++l) {
      h = tape.add(tape.matmul(h, params[2 * l]), params[2 * l + 1]);
      if (l < 3) h = tape.tanh(h);
    }
    return tape.mse(h, x);
  }
  std::span<const double> batch(int e) { return {data.data() + (e % 10) * 1200, 1200}; }
};

double ms_since(Clock::time_point t0) { return std::chrono::duration<double, std::milli>(Clock::now() - t0).count(); }

std::vector<double> params_of(Tape& t, const std::vector<Var>& ps) {
  std::vector<double> out;
  for (Var p : ps) {
    auto v = t.param_value(p);
    out.insert(out.end(), v.begin(), v.end());
  }
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  std::string backend_kind = "host";
  int episodes = 360;
  unsigned block = 0;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!std::strcmp(argv[i], "--backend")) backend_kind = argv[i + 1];
    if (!std::strcmp(argv[i], "--episodes")) episodes = std::atoi(argv[i + 1]);
    if (!std::strcmp(argv[i], "--block")) block = static_cast<unsigned>(std::atoi(argv[i + 1]));
  }
  try {
    auto sel = device::select_backend(backend_kind);
    device::Backend& be = *sel.backend;
    // 1. CPU tape.
    Ae cpu;
    Optimizer opt = Optimizer::adam(1e-3);
    for (Var p : cpu.params) opt.add(cpu.tape, p);
    auto t0 = Clock::now();
    for (int e = 0; e < episodes; ++e) {
      cpu.tape.set_value(cpu.x, cpu.batch(e));
      cpu.tape.backward(cpu.record());
      opt.step(cpu.tape);
      cpu.tape.reset_to(cpu.mark);
    }
    const double ms_cpu = ms_since(t0);
    // 2. Per-node launches and 3. the captured episode, each from fresh parameters.
    double ms_dev[2];
    size_t launches = 0;
    std::vector<double> final_params[2];
    for (int mode = 0; mode < 2; ++mode) {
      Ae d;
      Optimizer o = Optimizer::adam(1e-3);
      for (Var p : d.params) o.add(d.tape, p);
      const Var loss = d.record();
      replay::ReplayOptions ro;
      ro.block = block;
      replay::Program prog(be, d.tape, loss, ro);
      replay::DeviceOptimizer dopt(prog, o);
      d.tape.reset_to(d.mark);
      if (mode == 1) prog.capture_episode(&dopt);
      launches = prog.forward_launches() + prog.backward_launches() + dopt.launches_per_step();
      t0 = Clock::now();
      for (int e = 0; e < episodes; ++e) {
        prog.set_input(d.x, d.batch(e));
        if (mode == 1) {
          prog.run_episode(&dopt);
        } else {
          prog.forward();
          prog.backward();
          dopt.step();
        }
      }
      be.synchronize();
      ms_dev[mode] = ms_since(t0);
      prog.sync_params_to(d.tape);
      final_params[mode] = params_of(d.tape, d.params);
    }
    const std::vector<double> ref = params_of(cpu.tape, cpu.params);
    const bool same = ref == final_params[0] && ref == final_params[1] &&
                      std::memcmp(ref.data(), final_params[1].data(), ref.size() * sizeof(double)) == 0;
    std::printf("autoencoder 6-64-32-64-6, batch 200, Adam, %d episodes on %s\n", episodes, be.describe().c_str());
    std::printf("  %-28s %10.1f ms  %8.1f us/episode\n", "CPU tape", ms_cpu, 1e3 * ms_cpu / episodes);
    std::printf("  %-28s %10.1f ms  %8.1f us/episode  (%zu launches/episode)\n", "per-node replay", ms_dev[0],
                1e3 * ms_dev[0] / episodes, launches);
    std::printf("  %-28s %10.1f ms  %8.1f us/episode  (1 replay/episode)\n", "captured episode", ms_dev[1],
                1e3 * ms_dev[1] / episodes);
    std::printf("  final parameters bit-equal on all three paths: %s\n", same ? "yes" : "NO");
    return same ? 0 : 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_replay: %s\n", e.what());
    return 3;
  }
}
