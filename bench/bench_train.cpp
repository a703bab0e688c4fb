// bench_train — time per optimizer step of a spec on the CPU tape (no file output).
//
//   bench_train SPEC [--threads N] [--seconds S] [--dtype f64|f32] [--phases 1]
// Runs the training loop exactly as `gradrun train` does (input slots filled by index, record,
// backward, optimizer step, reset_to(mark)) and prints one line:
//   spec=<path> threads=<n> dtype=<f64|f32> steps=<k> us_per_step=<best of 5 windows>
// --dtype f32 runs the f32 CPU tape (Tape(DType::F32), docs/numerics.md "f32").
// --phases 1 adds a line with the best window's mean time in each phase of a step (record,
// backward, optimizer step, reset): where a step's time goes, and which phase fails to scale with
// --threads. The clock reads add ~0.1 µs per step.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "spec/random.h"
#include "tensor/parallel.h"
#include "train/model.h"

using namespace gr;

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: bench_train SPEC [--threads N] [--seconds S] [--dtype f64|f32] [--phases 1]\n");
    return 2;
  }
  int threads = 1;
  double seconds = 1.0;
  DType real = DType::F64;
  bool phases = false;
  for (int i = 2; i + 1 < argc; i += 2) {
    if (!std::strcmp(argv[i], "--threads"))
      threads = std::atoi(argv[i + 1]);
    else if (!std::strcmp(argv[i], "--seconds"))
      seconds = std::atof(argv[i + 1]);
    else if (!std::strcmp(argv[i], "--phases"))
      phases = std::atoi(argv[i + 1]) != 0;
    else if (!std::strcmp(argv[i], "--dtype") && !std::strcmp(argv[i + 1], "f32"))
      real = DType::F32;
    else if (!std::strcmp(argv[i], "--dtype") && std::strcmp(argv[i + 1], "f64") != 0) {
      std::fprintf(stderr, "bench_train: --dtype is f64 or f32, not %s\n", argv[i + 1]);
      return 2;
    } else if (std::strcmp(argv[i], "--dtype") != 0) {
      std::fprintf(stderr, "bench_train: unknown flag %s\n", argv[i]);
      return 2;
    }
  }
  set_num_threads(threads);
  try {
    const Spec spec = load_spec(argv[1]);
    Model model(spec, load_datasets(spec), real);
    Optimizer opt = model.make_optimizer();
    const DataTable& train = model.data().train;
    const int64_t n = spec.data ? train.rows : 0, batch = spec.data ? model.program().batch : 0;
    const int64_t steps_per_epoch = spec.data ? n / batch : 1;
    std::vector<int64_t> order, rows;
    int64_t step = 0;
    using Clock = std::chrono::steady_clock;
    enum { kRecord, kBackward, kStep, kReset, kPhases };
    static const char* const kPhaseNames[kPhases] = {"record", "backward", "step", "reset"};
    double phase_s[kPhases] = {};  // this window's sums
    Clock::time_point mark;
    const auto lap = [&](int phase) {
      if (!phases) return;
      const Clock::time_point t = Clock::now();
      phase_s[phase] += std::chrono::duration<double>(t - mark).count();
      mark = t;
    };
    auto one_step = [&] {
      const int64_t s = step % steps_per_epoch;
      if (s == 0) order = epoch_order(spec, n, step / steps_per_epoch);
      rows.clear();
      for (int64_t i = s * batch; i < (s + 1) * batch; ++i) rows.push_back(order[static_cast<size_t>(i)]);
      if (phases) mark = Clock::now();
      const std::vector<Var>& nodes = model.record(train, rows);
      lap(kRecord);
      model.tape().backward(nodes[static_cast<size_t>(model.program().loss)]);
      lap(kBackward);
      opt.step(model.tape());
      lap(kStep);
      model.reset();
      lap(kReset);
      ++step;
    };
    for (int i = 0; i < 20; ++i) one_step();  // warm-up: arena, scratch, caches
    double best = 1e30, best_phase_us[kPhases] = {};
    int64_t total = 0;
    for (int w = 0; w < 5; ++w) {
      std::fill(phase_s, phase_s + kPhases, 0.0);
      const auto t0 = Clock::now();
      int64_t k = 0;
      while (std::chrono::duration<double>(Clock::now() - t0).count() < seconds / 5) {
        for (int i = 0; i < 10; ++i) one_step();
        k += 10;
      }
      const double us = 1e6 * std::chrono::duration<double>(Clock::now() - t0).count() / static_cast<double>(k);
      if (us < best)
        for (int p = 0; p < kPhases; ++p) best_phase_us[p] = 1e6 * phase_s[p] / static_cast<double>(k);
      best = std::min(best, us);
      total += k;
    }
    std::printf("spec=%s threads=%d dtype=%s steps=%lld us_per_step=%.2f\n", argv[1], threads,
                real == DType::F32 ? "f32" : "f64", static_cast<long long>(total), best);
    if (phases) {
      std::printf("phases_us");
      for (int p = 0; p < kPhases; ++p) std::printf(" %s=%.2f", kPhaseNames[p], best_phase_us[p]);
      std::printf("\n");
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_train: %s\n", e.what());
    return 3;
  }
  return 0;
}
