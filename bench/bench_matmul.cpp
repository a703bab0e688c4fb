// bench_matmul.cpp — single-threaded GFLOP/s of gr::matmul_exact against OpenBLAS cblas_dgemm and
// against the machine's peak for separate (unfused) vector multiply + add.
//
// OpenBLAS is loaded at run time (dlopen), so the build needs only -ldl. If it is missing, only
// our numbers are printed. OpenBLAS's DYNAMIC_ARCH build picks its kernels from the CPU id; an
// unknown CPU falls back to an old core (the name is printed) — set OPENBLAS_CORETYPE=SkylakeX to
// compare against its AVX-512 kernels. Best-of-N timings; the machine may be shared, so noise is one-sided.
//
// Usage: bench_matmul [reps]   (default 9)
#include <dlfcn.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <random>
#include <vector>

#include "tensor/matmul.h"

#if defined(__AVX512F__)
#include <immintrin.h>
#define BENCH_W 8
#elif defined(__AVX__)
#define BENCH_W 4
#else
#define BENCH_W 2
#endif

namespace {

typedef double vd __attribute__((vector_size(BENCH_W * sizeof(double))));

// Thread CPU time, not wall time: the machine is shared (2 cores, other builds running), and time
// this thread spends descheduled must not count. The work is pure computation, so CPU time is
// the right denominator; best-of-N then filters cache pollution from the neighbours.
struct Clock {
  using time_point = double;
  static double now() {
    timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
  }
};

double seconds_since(double t0) { return Clock::now() - t0; }

// Best time per call of f(): each rep runs `calls` calls; the best rep wins.
template <class F>
double best_per_call(F&& f, int reps, int64_t calls) {
  double best = 1e300;
  for (int r = 0; r < reps; ++r) {
    const double t0 = Clock::now();
    for (int64_t c = 0; c < calls; ++c) f();
    best = std::min(best, seconds_since(t0) / static_cast<double>(calls));
  }
  return best;
}

// Enough calls per rep that one rep lasts about `target_s`.
template <class F>
int64_t calls_for(F&& f, double target_s) {
  const double t0 = Clock::now();
  f();
  const double once = std::max(seconds_since(t0), 1e-9);
  return std::max<int64_t>(1, static_cast<int64_t>(target_s / once));
}

// ---- OpenBLAS, loaded at run time -------------------------------------------------------------
constexpr int kCblasRowMajor = 101, kCblasNoTrans = 111;
using DgemmFn = void (*)(int, int, int, int, int, int, double, const double*, int, const double*, int, double, double*,
                         int);
using SetThreadsFn = void (*)(int);
using CorenameFn = char* (*)();

struct Blas {
  DgemmFn dgemm = nullptr;
  const char* path = nullptr;
  const char* core = "?";
};

Blas load_blas() {
  setenv("OPENBLAS_NUM_THREADS", "1", 1);  // before the library reads it at load time
  const char* paths[] = {"libopenblas.so.0", "/usr/lib/x86_64-linux-gnu/openblas-pthread/libopenblas.so.0",
                         "/usr/lib/x86_64-linux-gnu/libopenblas.so.0", "libopenblas.so", "libblas.so.3"};
  Blas b;
  for (const char* p : paths) {
    void* h = dlopen(p, RTLD_NOW | RTLD_LOCAL);
    if (!h) continue;
    auto dgemm = reinterpret_cast<DgemmFn>(dlsym(h, "cblas_dgemm"));
    if (!dgemm) {
      dlclose(h);
      continue;
    }
    b.dgemm = dgemm;
    b.path = p;
    if (auto set = reinterpret_cast<SetThreadsFn>(dlsym(h, "openblas_set_num_threads"))) {
      set(1);
    } else {
      std::printf("note: %s has no openblas_set_num_threads (not OpenBLAS?)\n", p);
    }
    if (auto core = reinterpret_cast<CorenameFn>(dlsym(h, "openblas_get_corename"))) b.core = core();
    return b;
  }
  return b;
}

// ---- peak for separate multiply + add ---------------------------------------------------------
// 12 independent chains acc_i = acc_i + x_i * y, each a rounded vector multiply then a rounded
// vector add. The empty asm makes y look new every step so the products cannot be hoisted.
double peak_mul_add_gflops(int reps) {
  constexpr int kChains = 12;
  constexpr int64_t kIters = 20'000'000;
  double best = 0;
  for (int r = 0; r < reps; ++r) {
    vd acc[kChains], x[kChains];
    for (int c = 0; c < kChains; ++c) {
      acc[c] = vd{} + 1.0;
      x[c] = vd{} + (1.0 + c * 1e-3);
    }
    vd y = vd{} + 1e-9;
    const double t0 = Clock::now();
    for (int64_t it = 0; it < kIters; ++it) {
      asm volatile("" : "+v"(y));
#pragma GCC unroll 16
      for (int c = 0; c < kChains; ++c) {
        const vd prod = x[c] * y;
        acc[c] = acc[c] + prod;
      }
    }
    const double s = seconds_since(t0);
    double sink = 0;
    for (int c = 0; c < kChains; ++c) sink += acc[c][0];
    if (sink == 42.0) std::printf(" ");
    best = std::max(best, 2.0 * BENCH_W * kChains * static_cast<double>(kIters) / s * 1e-9);
  }
  return best;
}

#if defined(__AVX512F__)
// Context only (never used by gradrun): the fused multiply-add peak that BLAS kernels run at.
double peak_fma_gflops(int reps) {
  constexpr int kChains = 12;
  constexpr int64_t kIters = 20'000'000;
  double best = 0;
  for (int r = 0; r < reps; ++r) {
    __m512d acc[kChains], x[kChains];
    for (int c = 0; c < kChains; ++c) {
      acc[c] = _mm512_set1_pd(1.0);
      x[c] = _mm512_set1_pd(1.0 + c * 1e-3);
    }
    __m512d y = _mm512_set1_pd(1e-9);
    const double t0 = Clock::now();
    for (int64_t it = 0; it < kIters; ++it) {
      asm volatile("" : "+v"(y));
#pragma GCC unroll 16
      for (int c = 0; c < kChains; ++c) acc[c] = _mm512_fmadd_pd(x[c], y, acc[c]);
    }
    const double s = seconds_since(t0);
    double sink = 0;
    for (int c = 0; c < kChains; ++c) sink += _mm512_cvtsd_f64(acc[c]);
    if (sink == 42.0) std::printf(" ");
    best = std::max(best, 2.0 * 8 * kChains * static_cast<double>(kIters) / s * 1e-9);
  }
  return best;
}
#endif

// ---- matmul -----------------------------------------------------------------------------------
struct Problem {
  int64_t m, k, n;
  std::vector<double> a, b, c;
  Problem(int64_t m_, int64_t k_, int64_t n_) : m(m_), k(k_), n(n_) {
    std::mt19937_64 rng(static_cast<uint64_t>(m * 1000003 + k * 1009 + n));
    std::uniform_real_distribution<double> u(-1.0, 1.0);
    a.resize(static_cast<size_t>(m * k));
    b.resize(static_cast<size_t>(k * n));
    c.assign(static_cast<size_t>(m * n), 0.0);
    for (auto& v : a) v = u(rng);
    for (auto& v : b) v = u(rng);
  }
  void ours() { gr::matmul_exact({a.data(), k, 1, b.data(), n, 1, c.data(), m, k, n, gr::MatmulStore::Overwrite}); }
  void blas(DgemmFn dgemm) {
    dgemm(kCblasRowMajor, kCblasNoTrans, kCblasNoTrans, static_cast<int>(m), static_cast<int>(n), static_cast<int>(k),
          1.0, a.data(), static_cast<int>(k), b.data(), static_cast<int>(n), 0.0, c.data(), static_cast<int>(n));
  }
  double flops() const { return 2.0 * static_cast<double>(m) * static_cast<double>(n) * static_cast<double>(k); }
};

}  // namespace

int main(int argc, char** argv) {
  const int reps = argc > 1 ? std::max(1, std::atoi(argv[1])) : 9;
  const Blas blas = load_blas();
  if (blas.dgemm) {
    std::printf("OpenBLAS: %s (core %s), 1 thread\n", blas.path, blas.core);
    if (!std::getenv("OPENBLAS_CORETYPE"))
      std::printf(
          "note: that is OpenBLAS's own CPU detection; OPENBLAS_CORETYPE=SkylakeX (or\n"
          "      Haswell, ...) forces a kernel, e.g. its AVX-512 FMA one\n");
  } else
    std::printf(
        "note: no OpenBLAS/CBLAS found (tried libopenblas.so.0, libblas.so.3); "
        "benchmarking matmul_exact only\n");
  std::printf("SIMD width: %d doubles; best of %d reps\n\n", BENCH_W, reps);

  const double peak = peak_mul_add_gflops(reps);
  std::printf("peak, separate vector mul + add (12 chains): %7.2f GFLOP/s\n", peak);
#if defined(__AVX512F__)
  std::printf("peak, fused vector FMA (context only):       %7.2f GFLOP/s\n", peak_fma_gflops(reps));
#endif
  std::printf("\n%6s %12s %12s %10s %10s\n", "n", "ours GF/s", "BLAS GF/s", "ours/BLAS", "ours/peak");
  for (int64_t n : {64, 128, 256, 512, 1024}) {
    Problem p(n, n, n);
    const double target = 0.05;
    const double t_ours = best_per_call([&] { p.ours(); }, reps, calls_for([&] { p.ours(); }, target));
    const double g_ours = p.flops() / t_ours * 1e-9;
    if (blas.dgemm) {
      const double t_blas =
          best_per_call([&] { p.blas(blas.dgemm); }, reps, calls_for([&] { p.blas(blas.dgemm); }, target));
      const double g_blas = p.flops() / t_blas * 1e-9;
      std::printf("%6lld %12.2f %12.2f %10.2f %9.0f%%\n", static_cast<long long>(n), g_ours, g_blas, g_ours / g_blas,
                  100.0 * g_ours / peak);
    } else {
      std::printf("%6lld %12.2f %12s %10s %9.0f%%\n", static_cast<long long>(n), g_ours, "-", "-",
                  100.0 * g_ours / peak);
    }
  }

  std::printf("\nsmall shapes (M x K x N), time per call:\n");
  std::printf("%16s %12s %12s %12s\n", "shape", "ours ns", "BLAS ns", "ours GF/s");
  const int64_t shapes[][3] = {{4, 2, 16}, {200, 6, 64}, {200, 64, 32}, {64, 784, 256}, {1, 64, 64}, {32, 32, 32}};
  for (const auto& s : shapes) {
    Problem p(s[0], s[1], s[2]);
    const double target = 0.02;
    const double t_ours = best_per_call([&] { p.ours(); }, reps, calls_for([&] { p.ours(); }, target));
    char name[64];
    std::snprintf(name, sizeof name, "%lldx%lldx%lld", static_cast<long long>(s[0]), static_cast<long long>(s[1]),
                  static_cast<long long>(s[2]));
    double t_blas = 0;
    if (blas.dgemm)
      t_blas = best_per_call([&] { p.blas(blas.dgemm); }, reps, calls_for([&] { p.blas(blas.dgemm); }, target));
    std::printf("%16s %12.1f %12.1f %12.2f\n", name, t_ours * 1e9, t_blas * 1e9, p.flops() / t_ours * 1e-9);
  }
  return 0;
}
