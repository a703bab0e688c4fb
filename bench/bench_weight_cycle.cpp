// bench_weight_cycle — one weight's life in a training step, on 2 threads, under several ownership
// schemes: which core touches which part of W1 [784,256] (MLP-784's first weight) in the forward
// product, the weight-gradient product and the Adam update. docs/performance.md ("Threads,
// 2026-12-02 16:50") has the numbers and what they mean for issue 15's item 3.
//
//   bench_weight_cycle [ROUNDS]      (default 3; prints every round)
//
// Per step, as the tape runs it: H = X·W (X [64,784], output split by column halves, as
// output_grid splits [64,256]), dW = Xᵀ·dH (split by row halves, as now, or by the forward's column
// halves), then Adam over W, dW, m, v split one of these ways:
//   rows               each thread one contiguous half of every array (the optimizer today)
//   cols, row by row   each thread its column half, a 128-element run per row
//   cols, panels       its column half in 32-column panels walked down all rows, m and v row-major
//   cols, panels, pm   the same with m and v panel-major (each 32-column panel's rows contiguous,
//                      so a thread's moments are one contiguous range)
//   W out-major        W, dW, m and v stored [256,784] (a Linear weight kept as [out, in]), so the
//                      forward's column half t, dW's rows and the update are one contiguous range
//                      of every array per thread (2026-12-03: no better than the panels, see docs)
// and "+ norm": thread 0 also runs the gradient norm's 16 lanes over all of dW in row-major order,
// as the bit-exact norm must (docs/numerics.md), which reads the other thread's half.
// The products are the project's own (tensor/matmul.cpp, compiled into this program with the
// threading threshold out of reach, so each task's product is serial and the split is this
// program's); nothing here is bit-checked.
#define GR_MM_MIN_PAR_FLOPS 1e300
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>

#include "tensor/matmul.cpp"  // NOLINT: the serial block product (matmul_serial) and its helpers
#include "tensor/parallel.h"

namespace {

using gr::MatmulArgs;
using gr::MatmulStore;

double now() { return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(); }

constexpr int64_t kB = 64, kK = 784, kN = 256, kPanel = 32;

double* page_array(int64_t n, double x) {
  auto* p = static_cast<double*>(std::aligned_alloc(4096, static_cast<size_t>((n * 8 + 4095) / 4096 * 4096)));
  std::fill(p, p + n, x);
  return p;
}
double *X = page_array(kB * kK, 0.01), *W = page_array(kK * kN, 0.02), *H = page_array(kB * kN, 0),
       *dH = page_array(kB * kN, 0.001), *dW = page_array(kK * kN, 0), *M = page_array(kK * kN, 0),
       *V = page_array(kK * kN, 0);
volatile double g_sink;

void adam(double* w, const double* g, double* m, double* v, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    m[i] = 0.9 * m[i] + 0.1 * g[i];
    v[i] = 0.999 * v[i] + 0.001 * g[i] * g[i];
    w[i] = w[i] - 0.001 * m[i] / (std::sqrt(v[i]) + 1e-8);
  }
}

double norm_lanes() {  // 16 lanes over dW in element order
  double l[16] = {};
  for (int64_t i = 0; i < kK * kN; i += 16)
    for (int j = 0; j < 16; ++j) l[j] += dW[i + j] * dW[i + j];
  double s = 0;
  for (double x : l) s += x;
  return s;
}

void forward(int64_t t, int64_t T) {  // H[:, column block t] = X · W[:, column block t]
  const int64_t c0 = kN * t / T, c1 = kN * (t + 1) / T;
  gr::matmul_serial(MatmulArgs{X, kK, 1, W + c0, kN, 1, H + c0, kB, kK, c1 - c0, MatmulStore::Overwrite}, kN);
}

void weight_grad(int64_t t, int64_t T, bool by_cols) {  // dW = Xᵀ · dH, block t
  if (by_cols) {
    const int64_t c0 = kN * t / T, c1 = kN * (t + 1) / T;
    gr::matmul_serial(MatmulArgs{X, 1, kK, dH + c0, kN, 1, dW + c0, kK, kB, c1 - c0, MatmulStore::Overwrite}, kN);
  } else {
    const int64_t r0 = kK * t / T, r1 = kK * (t + 1) / T;
    gr::matmul_serial(MatmulArgs{X + r0, 1, kK, dH, kN, 1, dW + r0 * kN, r1 - r0, kB, kN, MatmulStore::Overwrite}, kN);
  }
}

// W stored out-major (Wt [256,784], the layout of a Linear weight kept as [out, in]): the forward's
// column half t is Wt's row half t, so the product, the weight gradient dWt = dHᵀ·X and the update
// each touch one contiguous range of every array per thread.
void forward_out_major(int64_t t, int64_t T) {  // H[:, c0:c1] = X · Wt[c0:c1, :]ᵀ
  const int64_t c0 = kN * t / T, c1 = kN * (t + 1) / T;
  gr::matmul_serial(MatmulArgs{X, kK, 1, W + c0 * kK, 1, kK, H + c0, kB, kK, c1 - c0, MatmulStore::Overwrite}, kN);
}
void weight_grad_out_major(int64_t t, int64_t T) {  // dWt[c0:c1, :] = dH[:, c0:c1]ᵀ · X
  const int64_t c0 = kN * t / T, c1 = kN * (t + 1) / T;
  gr::matmul_serial(MatmulArgs{dH + c0, 1, kN, X, kK, 1, dW + c0 * kK, c1 - c0, kB, kK, MatmulStore::Overwrite}, kK);
}

enum class Update { Rows, ColsRowByRow, ColsPanels, ColsPanelsPanelMajor };

void update(int64_t t, int64_t T, Update how) {
  if (how == Update::Rows) {
    const int64_t a = kK * kN * t / T, b = kK * kN * (t + 1) / T;
    return adam(W + a, dW + a, M + a, V + a, b - a);
  }
  const int64_t c0 = kN * t / T, c1 = kN * (t + 1) / T;
  if (how == Update::ColsRowByRow) {
    for (int64_t r = 0; r < kK; ++r) adam(W + r * kN + c0, dW + r * kN + c0, M + r * kN + c0, V + r * kN + c0, c1 - c0);
    return;
  }
  for (int64_t p = c0; p < c1; p += kPanel) {
    const int64_t w = std::min(kPanel, c1 - p);
    for (int64_t r = 0; r < kK; ++r) {
      const int64_t e = r * kN + p;
      const int64_t q = how == Update::ColsPanelsPanelMajor ? p * kK + r * w : e;  // pm: panel p's rows contiguous
      adam(W + e, dW + e, M + q, V + q, w);
    }
  }
}

struct Scheme {
  const char* name;
  bool grad_by_cols;
  Update how;
  bool norm;
  bool out_major = false;  // W, dW, m, v stored [256,784]; forward and dW by W's row halves, Adam rows
};

}  // namespace

int main(int argc, char** argv) {
  const int rounds = argc > 1 ? std::max(1, std::atoi(argv[1])) : 3;
  constexpr int kSteps = 200;
  const Scheme schemes[] = {
      {"dW rows, Adam rows (today) + norm", false, Update::Rows, true},
      {"dW rows, Adam rows", false, Update::Rows, false},
      {"dW cols, Adam cols row by row", true, Update::ColsRowByRow, false},
      {"dW cols, Adam cols panels", true, Update::ColsPanels, false},
      {"dW cols, Adam cols panels, pm", true, Update::ColsPanelsPanelMajor, false},
      {"dW cols, Adam cols panels + norm", true, Update::ColsPanels, true},
      {"dW cols, Adam cols panels, pm + norm", true, Update::ColsPanelsPanelMajor, true},
      {"W out-major: all by W's row halves", false, Update::Rows, false, true},
      {"W out-major + norm", false, Update::Rows, true, true},
  };
  for (int round = 0; round < rounds; ++round) {
    gr::set_num_threads(1);
    double f = 0, g = 0, u = 0;
    for (int s = 0; s < kSteps; ++s) {
      const double a0 = now();
      forward(0, 1);
      const double a1 = now();
      weight_grad(0, 1, false);
      const double a2 = now();
      update(0, 1, Update::Rows);
      g_sink = norm_lanes();
      const double a3 = now();
      f += a1 - a0, g += a2 - a1, u += a3 - a2;
    }
    std::printf("round %d\n  %-40s total %6.1f us: forward %6.1f  dW %6.1f  Adam %6.1f\n", round + 1, "1 thread + norm",
                (f + g + u) / kSteps * 1e6, f / kSteps * 1e6, g / kSteps * 1e6, u / kSteps * 1e6);
    gr::set_num_threads(2);
    for (const Scheme& sc : schemes) {
      f = g = u = 0;
      for (int s = 0; s < kSteps; ++s) {
        const double a0 = now();
        gr::parallel_for(2, [&](int64_t t) { sc.out_major ? forward_out_major(t, 2) : forward(t, 2); });
        const double a1 = now();
        gr::parallel_for(2, [&](int64_t t) { sc.out_major ? weight_grad_out_major(t, 2) : weight_grad(t, 2, sc.grad_by_cols); });
        const double a2 = now();
        gr::parallel_for(2, [&](int64_t t) {
          update(t, 2, sc.how);
          if (sc.norm && t == 0) g_sink = norm_lanes();
        });
        const double a3 = now();
        f += a1 - a0, g += a2 - a1, u += a3 - a2;
      }
      std::printf("  %-40s total %6.1f us: forward %6.1f  dW %6.1f  Adam %6.1f\n", sc.name, (f + g + u) / kSteps * 1e6,
                  f / kSteps * 1e6, g / kSteps * 1e6, u / kSteps * 1e6);
    }
  }
  return 0;
}
