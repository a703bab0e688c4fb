// bench_replay — the reference autoencoder (6-64-32-64-6 tanh, batch 200, MSE, Adam) for N
// episodes four ways: the CPU tape, per-node device launches, the captured episode (one replay per
// step; on CUDA one graph, cuGraphLaunch), and fused kernels in a captured episode. The reference
// measured 1388 / 303 / 236 ms for 360 episodes on an RTX 4090 (the first three).
//
//   bench_replay [--backend host|cuda] [--episodes N] [--block B]
//   bench_replay --nvrtc        NVRTC compile times of the modules a CUDA run builds (no GPU needed)
// Prints ms per run and µs per episode, launches per episode, the setup time of each device path
// (capture, compile or disk-cache fetch, upload), and checks that the four paths end on the same
// parameter bytes (f64), naming the first path and parameter element that differs.
// Exit status (scripts/gpu-check tells them apart): 0 bit-equal; 1 a path differs; 2 the backend
// cannot be had (no driver, no device, no NVRTC: one line "bench_replay: no usable CUDA device:
// REASON"); 3 any other error, e.g. a CUDA error in a launch.
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "device/backend.h"
#include "device/detail.h"
#include "device/nvrtc.h"
#include "fuse/fuse.h"
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

// Times NVRTC on each module a CUDA training run of the autoencoder compiles, to sm_90 cubin (what the
// CUDA backend loads on an H100/H200) and compute_90 PTX, with no cache: the cost of a cold start.
int nvrtc_times() {
  Ae d;
  const Var loss = d.record();
  auto host = device::make_host_backend();
  replay::Program prog(*host, d.tape, loss);
  const fuse::Plan plan = fuse::plan(prog);
  std::printf("NVRTC %s, no cache, --fmad=false\n", device::detail::nvrtc_version().c_str());
  std::printf("  %-40s %10s %10s %10s\n", "module", "KiB text", "sm_90 ms", "PTX ms");
  const std::pair<const char*, const std::string*> mods[] = {
      {"per-node kernels, f64 (gr_replay_f64)", &replay::kernel_source(DType::F64)},
      {"per-node kernels, f32 (gr_replay_f32)", &replay::kernel_source(DType::F32)},
      {"fused autoencoder, f64 (per-node + fused)", &plan.source}};
  for (const auto& [what, src] : mods) {
    const std::string text = device::detail::module_text(*src, "bench.cu");
    auto t0 = Clock::now();
    device::detail::nvrtc_compile(text, "bench.cu", "sm_90", nullptr);
    const double cubin = ms_since(t0);
    t0 = Clock::now();
    device::detail::nvrtc_compile(text, "bench.cu", "compute_90", nullptr);
    std::printf("  %-40s %10.1f %10.1f %10.1f\n", what, text.size() / 1024.0, cubin, ms_since(t0));
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  std::string backend_kind = "host";
  int episodes = 360;
  unsigned block = 0;
  bool nvrtc = false;
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--nvrtc")) nvrtc = true;
    if (i + 1 >= argc) continue;
    if (!std::strcmp(argv[i], "--backend")) backend_kind = argv[i + 1];
    if (!std::strcmp(argv[i], "--episodes")) episodes = std::atoi(argv[i + 1]);
    if (!std::strcmp(argv[i], "--block")) block = static_cast<unsigned>(std::atoi(argv[i + 1]));
  }
  try {
    if (nvrtc) return nvrtc_times();
    device::Selection sel;
    try {
      DeviceKind kind = DeviceKind::Cpu;
      if (!parse_device_kind(backend_kind, kind) || kind == DeviceKind::Cpu) throw Error("--backend: expected host, cuda or auto");
      sel = device::select_backend(kind);
    } catch (const device::DeviceUnavailable& e) {
      std::string why = e.what();
      if (why.rfind("unavailable: ", 0) == 0) why = why.substr(13);
      std::fprintf(stderr, "bench_replay: no usable CUDA device: %s\n", why.c_str());
      return 2;
    }
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
    // 2. Per-node launches, 3. the captured episode, 4. fused + captured; each from fresh parameters.
    const char* names[3] = {"per-node replay", "captured episode", "fused + captured"};
    double ms_dev[3], ms_setup[3];
    size_t launches[3];
    std::vector<double> final_params[3];
    for (int mode = 0; mode < 3; ++mode) {
      Ae d;
      Optimizer o = Optimizer::adam(1e-3);
      for (Var p : d.params) o.add(d.tape, p);
      const Var loss = d.record();
      replay::ReplayOptions ro;
      ro.block = block;
      const bool captured = mode > 0;
      t0 = Clock::now();
      std::unique_ptr<replay::Episode> ep;  // will own the program: outlives the optimizer over it
      auto prog = std::make_unique<replay::Program>(be, d.tape, loss, ro);
      replay::DeviceOptimizer dopt(*prog, o);
      d.tape.reset_to(d.mark);
      if (mode == 2) {
        fuse::Plan plan = fuse::plan(*prog);
        ep = std::make_unique<fuse::FusedProgram>(std::move(prog), std::move(plan));
      } else {
        ep = std::move(prog);
      }
      if (captured) ep->capture_episode(&dopt);
      be.synchronize();
      ms_setup[mode] = ms_since(t0);
      launches[mode] = ep->launches_per_episode(dopt.launches_per_step());
      t0 = Clock::now();
      for (int e = 0; e < episodes; ++e) {
        ep->set_input(d.x, d.batch(e));
        if (captured) {
          ep->run_episode(&dopt);
        } else {
          ep->forward();
          ep->backward();
          dopt.step();
        }
      }
      be.synchronize();
      ms_dev[mode] = ms_since(t0);
      ep->sync_params_to(d.tape);
      final_params[mode] = params_of(d.tape, d.params);
    }
    const std::vector<double> ref = params_of(cpu.tape, cpu.params);
    bool same = true;
    std::string first_difference;
    for (int m = 0; m < 3 && same; ++m) {
      const std::vector<double>& f = final_params[m];
      for (size_t i = 0; i < ref.size() && same; ++i)
        if (i >= f.size() || std::memcmp(&ref[i], &f[i], sizeof(double)) != 0) {
          same = false;
          char buf[200];
          std::snprintf(buf, sizeof buf, "%s: parameter element %zu: CPU tape %.17g, device %.17g", names[m], i, ref[i],
                        i < f.size() ? f[i] : 0.0);
          first_difference = buf;
        }
    }
    std::printf("autoencoder 6-64-32-64-6, batch 200, Adam, %d episodes on %s\n", episodes, be.describe().c_str());
    std::printf("  %-20s %10.1f ms  %8.1f us/episode\n", "CPU tape", ms_cpu, 1e3 * ms_cpu / episodes);
    for (int m = 0; m < 3; ++m)
      std::printf("  %-20s %10.1f ms  %8.1f us/episode  %4zu launches/episode  setup %.1f ms\n", names[m], ms_dev[m],
                  1e3 * ms_dev[m] / episodes, launches[m], ms_setup[m]);
    std::printf("  final parameters bit-equal on all four paths: %s\n", same ? "yes" : "NO");
    if (!same) std::printf("  first difference: %s\n", first_difference.c_str());
    return same ? 0 : 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_replay: %s\n", e.what());
    return 3;
  }
}
