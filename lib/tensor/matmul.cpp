// matmul.cpp — the bit-exact CPU contraction loop (docs/numerics.md). See matmul.h for the contract.
//
// How the fast path keeps the bits of the serial-k loop:
//   * Each output element owns one accumulator (one SIMD lane of one register). It starts at +0.0
//     and sees `acc = fma(a, b, acc)` for k = 0, 1, ..., K-1 in that order: one explicit fused
//     multiply-add, one rounding (gr_dot's step, kernels/gr_reduce.h). SIMD lanes run across j
//     (and the register tile across i), never across k.
//   * The FMA is an explicit intrinsic (fma_v) or __builtin_fma, never a contraction the compiler
//     chose: -ffp-contract=off stays on for the whole project, so nothing else is fused.
//   * Packing A and B into contiguous panels only copies values.
//   * The k loop is cut into KC-long slices for the caches, but the running accumulator flows
//     through: at the end of a slice it is stored as a double (exactly) and the next slice reloads
//     it and carries on. The sequence of roundings is the same as one unbroken loop. Overwrite
//     parks the running value in C itself; Accumulate parks it in scratch and does the final
//     C = C + acc when the last slice ends.
//
// Structure (GotoBLAS-style): for each NC-wide column block, for each KC slice, B is packed into
// NR-wide k-major panels; for each MC-tall row block A is packed into MR-tall k-major panels; an
// MR x NR register tile (MR broadcasts of A times NV vectors of B per k) runs over every panel
// pair. Edge tiles use smaller instantiations of the same kernel (fewer rows / vectors). With few
// rows, B is read in place rather than packed; with very few rows (<= 8) and a row-major B, a
// row-streaming loop (acc rows in C or on the stack, four k steps per pass) replaces tiling.
// Tuning numbers and measurements: docs/performance.md.
#include "tensor/matmul.h"

#include "gr_reduce.h"
#include "tensor/parallel.h"

#include <immintrin.h>

#include <algorithm>
#include <cstddef>
#include <cstdlib>
#include <cstring>
#include <new>
#include <utility>

// SIMD width in doubles. GCC vector extensions lower to whatever the target has (AVX-512, AVX2,
// SSE2, or scalar code), so the same source is correct with any -march.
#if defined(__AVX512F__)
#define GR_MM_W 8
#elif defined(__AVX__)
#define GR_MM_W 4
#else
#define GR_MM_W 2
#endif

// Register tile: MR rows x NV vectors (NR = NV*W columns). Accumulators: MR*NV vector registers.
#ifndef GR_MM_MR
#if GR_MM_W == 8
#define GR_MM_MR 12  // 12 x 16: 24 accumulators + 2 B vectors + broadcast + product of 32 zmm
#elif GR_MM_W == 4
#define GR_MM_MR 6  // 6 x 8: 12 accumulators of 16 ymm
#else
#define GR_MM_MR 4  // 4 x 4: 8 accumulators of 16 xmm
#endif
#endif
#ifndef GR_MM_NV
#define GR_MM_NV 2
#endif
// Cache blocks (in elements): B micro-panel KC x NR in L1, A block MC x KC in L2, B block KC x NC.
#ifndef GR_MM_KC
#define GR_MM_KC 256
#endif
#ifndef GR_MM_MC
#define GR_MM_MC 192
#endif
#ifndef GR_MM_NC
#define GR_MM_NC 2048
#endif
// Up to this many rows, with a row-major B, the row-streaming path replaces tiling.
#ifndef GR_MM_ROWS_PATH_M
#define GR_MM_ROWS_PATH_M 8
#endif
// The tiled path reads a row-major B in place instead of packing it when M <= GR_MM_DIRECT_B_ROWS
// (each B value is used by only a few row panels, so packing costs about what it saves) and B's
// rows are at most GR_MM_DIRECT_B_LD doubles apart (farther apart, each k step of a panel is on a
// new page, which defeats the prefetchers, and power-of-two strides put all k rows in a few
// cache sets; measured: 12x1024x1024 runs at 6.5 GFLOP/s in place, 18.6 packed).
#ifndef GR_MM_DIRECT_B_ROWS
#define GR_MM_DIRECT_B_ROWS 48
#endif
#ifndef GR_MM_DIRECT_B_LD
#define GR_MM_DIRECT_B_LD 512
#endif

namespace gr {
namespace {

constexpr int W = GR_MM_W;
constexpr int MR = GR_MM_MR;
constexpr int NV = GR_MM_NV;
constexpr int NR = NV * W;
constexpr int64_t KC = GR_MM_KC;
constexpr int64_t MC = (GR_MM_MC + MR - 1) / MR * MR;
constexpr int64_t NC = (GR_MM_NC + NR - 1) / NR * NR;
constexpr int64_t kDirectBRows = GR_MM_DIRECT_B_ROWS;
constexpr int64_t kDirectBLd = GR_MM_DIRECT_B_LD;
constexpr int64_t kRowsMax = 4;      // rows per pass of the row-streaming path
constexpr int64_t kRowsChunk = 256;  // columns per pass; Accumulate keeps acc on the stack (8 KiB)
constexpr int64_t kRowsPathM = GR_MM_ROWS_PATH_M;

typedef double vd __attribute__((vector_size(GR_MM_W * sizeof(double))));

inline vd load_v(const double* p) {
  vd v;
  std::memcpy(&v, p, sizeof v);
  return v;
}
inline void store_v(double* p, vd v) { std::memcpy(p, &v, sizeof v); }

// fma_v(b, a, acc): per lane, fma(a, b[l], acc[l]) with one rounding — gr_rfma of every lane
// (kernels/gr_device.h), the step of gr_dot. An explicit instruction where the target has one;
// otherwise __builtin_fma per lane (glibc's correctly rounded fma), the same bits, slowly.
inline vd fma_v(vd b, double a, vd acc) {
#if GR_MM_W == 8
  return _mm512_fmadd_pd(_mm512_set1_pd(a), b, acc);
#elif GR_MM_W == 4 && defined(__FMA__)
  return _mm256_fmadd_pd(_mm256_set1_pd(a), b, acc);
#elif GR_MM_W == 2 && defined(__FMA__)
  return _mm_fmadd_pd(_mm_set1_pd(a), b, acc);
#else
  vd out;
  for (int l = 0; l < GR_MM_W; ++l) out[l] = __builtin_fma(a, b[l], acc[l]);
  return out;
#endif
}

// A 64-byte-aligned scratch buffer that only grows: steady-state calls allocate nothing.
struct Scratch {
  double* p = nullptr;
  size_t cap = 0;
  Scratch() = default;
  Scratch(const Scratch&) = delete;
  Scratch& operator=(const Scratch&) = delete;
  ~Scratch() { std::free(p); }
  double* get(size_t n) {
    if (n > cap) {
      std::free(p);
      p = nullptr;
      cap = 0;
      const size_t bytes = (n * sizeof(double) + 63) / 64 * 64;  // a multiple of the alignment
      p = static_cast<double*>(std::aligned_alloc(64, bytes));
      if (!p) throw std::bad_alloc();
      cap = n;
    }
    return p;
  }
};

// The micro-kernel: rows 0..mr-1 of an MR-stride packed A panel times vectors 0..nv-1 of a B
// panel whose k rows are ldb apart (NR when packed, b_rs when B is read in place), over kc steps.
//   init == nullptr: acc starts at +0.0 (the start of the k loop);
//   otherwise acc starts at init[r*ld_init + j] (the running value parked by the previous slice).
//   At the end: dst[r*ld_dst + j] = acc, or with `accumulate`, dst = dst + acc.
// Only the first n_valid columns are read from init and written to dst.
template <int mr, int nv>
void kernel(const double* __restrict ap, const double* __restrict bp, int64_t ldb, int64_t kc, const double* init,
            int64_t ld_init, double* dst, int64_t ld_dst, bool accumulate, int n_valid) {
  vd acc[mr][nv];
  const bool full = n_valid == nv * W;
  if (init == nullptr) {
#pragma GCC unroll 16
    for (int r = 0; r < mr; ++r)
#pragma GCC unroll 4
      for (int v = 0; v < nv; ++v) acc[r][v] = vd{};
  } else {
#pragma GCC unroll 16
    for (int r = 0; r < mr; ++r) {
      double tmp[nv * W] = {};
      const double* src = init + r * ld_init;
      if (!full) {
        for (int j = 0; j < n_valid; ++j) tmp[j] = src[j];
        src = tmp;
      }
#pragma GCC unroll 4
      for (int v = 0; v < nv; ++v) acc[r][v] = load_v(src + v * W);
    }
  }

  for (int64_t k = 0; k < kc; ++k) {
    vd b[nv];
#pragma GCC unroll 4
    for (int v = 0; v < nv; ++v) b[v] = load_v(bp + v * W);
#pragma GCC unroll 16
    for (int r = 0; r < mr; ++r) {
      const double a = ap[r];
#pragma GCC unroll 4
      for (int v = 0; v < nv; ++v) acc[r][v] = fma_v(b[v], a, acc[r][v]);  // one rounding per lane
    }
    ap += MR;
    bp += ldb;
  }

#pragma GCC unroll 16
  for (int r = 0; r < mr; ++r) {
    double* out = dst + r * ld_dst;
    if (full) {
#pragma GCC unroll 4
      for (int v = 0; v < nv; ++v) {
        if (accumulate)
          store_v(out + v * W, load_v(out + v * W) + acc[r][v]);
        else
          store_v(out + v * W, acc[r][v]);
      }
    } else {
      double tmp[nv * W];
#pragma GCC unroll 4
      for (int v = 0; v < nv; ++v) store_v(tmp + v * W, acc[r][v]);
      for (int j = 0; j < n_valid; ++j) out[j] = accumulate ? out[j] + tmp[j] : tmp[j];
    }
  }
}

using KernelFn = void (*)(const double*, const double*, int64_t, int64_t, const double*, int64_t, double*, int64_t,
                          bool, int);

template <int mr, int... vs>
constexpr void fill_row(KernelFn* row, std::integer_sequence<int, vs...>) {
  ((row[vs] = &kernel<mr, vs + 1>), ...);
}
template <int... rs>
struct KernelTable {
  KernelFn fn[MR][NV];
  constexpr KernelTable() : fn{} { (fill_row<rs + 1>(fn[rs], std::make_integer_sequence<int, NV>{}), ...); }
};
template <int... rs>
constexpr KernelTable<rs...> make_table(std::integer_sequence<int, rs...>) {
  return KernelTable<rs...>{};
}
constexpr auto kTable = make_table(std::make_integer_sequence<int, MR>{});

// Pack B(k0 .. k0+kc, j0 .. j0+nc) into NR-wide panels, k-major within a panel, zero padded.
// Full panels take constant-width paths the compiler turns into vector copies / unrolled loads.
// With `ragged_only` (B read in place) only a ragged last panel is packed.
void pack_b(const MatmulArgs& x, int64_t k0, int64_t kc, int64_t j0, int64_t nc, double* out, bool ragged_only) {
  const int64_t rs = x.b_rs, cs = x.b_cs;
  for (int64_t jp = 0; jp < nc; jp += NR) {
    const int64_t w = nc - jp < NR ? nc - jp : NR;
    if (ragged_only && w == NR) continue;
    double* d = out + jp * kc;
    const double* s = x.b + k0 * rs + (j0 + jp) * cs;
    if (w == NR && cs == 1) {  // row-major B: each k row of the panel is NR contiguous values
      for (int64_t k = 0; k < kc; ++k, d += NR, s += rs) std::memcpy(d, s, NR * sizeof(double));
    } else if (w == NR) {  // strided / transposed B: NR independent streams along k
      for (int64_t k = 0; k < kc; ++k, d += NR, s += rs) {
#pragma GCC unroll 32
        for (int j = 0; j < NR; ++j) d[j] = s[j * cs];
      }
    } else {  // ragged last panel
      for (int64_t k = 0; k < kc; ++k, d += NR, s += rs) {
        std::memset(d, 0, NR * sizeof(double));  // the kernel loads whole vectors: pad with zeros
        for (int64_t j = 0; j < w; ++j) d[j] = s[j * cs];
      }
    }
  }
}

// Pack A(i0 .. i0+mc, k0 .. k0+kc) into MR-tall panels, k-major within a panel. A ragged last
// panel keeps the MR stride; its missing rows are never read (its kernel has fewer rows).
void pack_a(const MatmulArgs& x, int64_t i0, int64_t mc, int64_t k0, int64_t kc, double* out) {
  const int64_t rs = x.a_rs, cs = x.a_cs;
  for (int64_t ip = 0; ip < mc; ip += MR) {
    const int64_t h = mc - ip < MR ? mc - ip : MR;
    double* d = out + ip * kc;
    const double* s = x.a + (i0 + ip) * rs + k0 * cs;
    if (h == MR && rs == 1) {  // transposed A: each k column of the panel is MR contiguous values
      for (int64_t k = 0; k < kc; ++k, d += MR, s += cs) std::memcpy(d, s, MR * sizeof(double));
    } else if (h == MR) {  // row-major A: MR streams along k
      for (int64_t k = 0; k < kc; ++k, d += MR, s += cs) {
#pragma GCC unroll 32
        for (int i = 0; i < MR; ++i) d[i] = s[i * rs];
      }
    } else {  // ragged last panel
      for (int64_t k = 0; k < kc; ++k, d += MR, s += cs)
        for (int64_t i = 0; i < h; ++i) d[i] = s[i * rs];
    }
  }
}

// Few rows and a row-major B: stream B's rows instead of tiling. For rows i0 .. i0+R and columns
// j0 .. j0+nb, acc[r][j] runs over k in ascending order, up to four k steps per pass over acc:
// fma(a3, b3, fma(a2, b2, fma(a1, b1, fma(a0, b0, acc)))) is the serial loop's own sequence, and
// the first pass starts from +0.0. B is read along its rows, which the prefetchers follow at any
// row stride. acc (ld apart) is C itself for Overwrite, scratch for Accumulate.
template <int R, int U, bool First>
inline void rows_pass(const MatmulArgs& x, int64_t i0, int64_t j0, int64_t nb, int64_t k, double* acc, int64_t ld) {
  const double* b[U];
  for (int u = 0; u < U; ++u) b[u] = x.b + (k + u) * x.b_rs + j0;
  double a[R][U];
  for (int r = 0; r < R; ++r)
    for (int u = 0; u < U; ++u) a[r][u] = x.a[(i0 + r) * x.a_rs + (k + u) * x.a_cs];
  int64_t j = 0;
  for (; j + W <= nb; j += W) {
    vd v[U];
#pragma GCC unroll 4
    for (int u = 0; u < U; ++u) v[u] = load_v(b[u] + j);
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) {
      vd t = First ? vd{} : load_v(acc + r * ld + j);
#pragma GCC unroll 4
      for (int u = 0; u < U; ++u) t = fma_v(v[u], a[r][u], t);
      store_v(acc + r * ld + j, t);
    }
  }
  for (; j < nb; ++j)
    for (int r = 0; r < R; ++r) {
      double t = First ? 0.0 : acc[r * ld + j];
      for (int u = 0; u < U; ++u) t = __builtin_fma(a[r][u], b[u][j], t);
      acc[r * ld + j] = t;
    }
}

template <int R>
void rows_block(const MatmulArgs& x, int64_t i0, int64_t j0, int64_t nb, double* acc, int64_t ld) {
  const int64_t K = x.k;  // >= 1
  int64_t k = 0;
  if (K >= 4) {
    rows_pass<R, 4, true>(x, i0, j0, nb, 0, acc, ld);
    for (k = 4; k + 4 <= K; k += 4) rows_pass<R, 4, false>(x, i0, j0, nb, k, acc, ld);
  } else {
    rows_pass<R, 1, true>(x, i0, j0, nb, 0, acc, ld);
    k = 1;
  }
  for (; k < K; ++k) rows_pass<R, 1, false>(x, i0, j0, nb, k, acc, ld);
}

void rows_path(const MatmulArgs& x) {
  const bool accumulate = x.store == MatmulStore::Accumulate;
  alignas(64) double scratch[kRowsMax * kRowsChunk];
  for (int64_t i0 = 0; i0 < x.m; i0 += kRowsMax) {
    const int64_t r = x.m - i0 < kRowsMax ? x.m - i0 : kRowsMax;
    for (int64_t j0 = 0; j0 < x.n; j0 += kRowsChunk) {
      const int64_t nb = x.n - j0 < kRowsChunk ? x.n - j0 : kRowsChunk;
      double* c = x.c + i0 * x.n + j0;
      double* acc = accumulate ? scratch : c;
      const int64_t ld = accumulate ? nb : x.n;
      switch (r) {
        case 1:
          rows_block<1>(x, i0, j0, nb, acc, ld);
          break;
        case 2:
          rows_block<2>(x, i0, j0, nb, acc, ld);
          break;
        case 3:
          rows_block<3>(x, i0, j0, nb, acc, ld);
          break;
        default:
          rows_block<4>(x, i0, j0, nb, acc, ld);
          break;
      }
      if (accumulate)
        for (int64_t i = 0; i < r; ++i)
          for (int64_t j = 0; j < nb; ++j) c[i * x.n + j] = c[i * x.n + j] + acc[i * nb + j];
    }
  }
}

}  // namespace

void matmul_reference(const MatmulArgs& x) {
  for (int64_t i = 0; i < x.m; ++i) {
    for (int64_t j = 0; j < x.n; ++j) {
      const double acc = gr_dot(x.a + i * x.a_rs, x.a_cs, x.b + j * x.b_cs, x.b_rs, x.k);
      double& c = x.c[i * x.n + j];
      c = x.store == MatmulStore::Accumulate ? c + acc : acc;
    }
  }
}

namespace {

void matmul_serial(const MatmulArgs& x) {
  const int64_t M = x.m, N = x.n, K = x.k;
  if (M <= 0 || N <= 0) return;
  const bool accumulate = x.store == MatmulStore::Accumulate;
  if (K <= 0) {  // acc = +0.0; C = C + 0.0 still turns -0.0 into +0.0, so do the add.
    for (int64_t t = 0; t < M * N; ++t) x.c[t] = accumulate ? x.c[t] + 0.0 : 0.0;
    return;
  }
  if (M <= kRowsPathM && x.b_cs == 1) {
    rows_path(x);
    return;
  }

  thread_local Scratch a_buf, b_buf, t_buf;
  const int64_t kc_max = K < KC ? K : KC;
  const int64_t nc_max = N < NC ? (N + NR - 1) / NR * NR : NC;
  const int64_t mc_max = M < MC ? (M + MR - 1) / MR * MR : MC;
  double* bp = b_buf.get(static_cast<size_t>(kc_max * nc_max));
  double* ap = a_buf.get(static_cast<size_t>(kc_max * mc_max));
  // Few rows: each B value is used by at most a few row panels, so packing would cost about as
  // much as it saves; read full panels of a row-major B in place.
  const bool direct_b = x.b_cs == 1 && M <= kDirectBRows && x.b_rs <= kDirectBLd;
  // Accumulate with more than one k slice parks the running acc for an M x nc block in scratch.
  const bool park_in_scratch = accumulate && K > KC;
  double* park = park_in_scratch ? t_buf.get(static_cast<size_t>(M * (N < NC ? N : NC))) : nullptr;

  for (int64_t j0 = 0; j0 < N; j0 += NC) {
    const int64_t nc = N - j0 < NC ? N - j0 : NC;
    for (int64_t k0 = 0; k0 < K; k0 += KC) {
      const int64_t kc = K - k0 < KC ? K - k0 : KC;
      const bool first = k0 == 0, last = k0 + kc == K;
      pack_b(x, k0, kc, j0, nc, bp, direct_b);
      for (int64_t i0 = 0; i0 < M; i0 += MC) {
        const int64_t mc = M - i0 < MC ? M - i0 : MC;
        pack_a(x, i0, mc, k0, kc, ap);
        for (int64_t jp = 0; jp < nc; jp += NR) {
          const int n_valid = static_cast<int>(nc - jp < NR ? nc - jp : NR);
          const int nv = (n_valid + W - 1) / W;
          const bool in_place = direct_b && n_valid == NR;
          const double* bpanel = in_place ? x.b + k0 * x.b_rs + j0 + jp : bp + jp * kc;
          const int64_t ldb = in_place ? x.b_rs : NR;
          for (int64_t ip = 0; ip < mc; ip += MR) {
            const int m_valid = static_cast<int>(mc - ip < MR ? mc - ip : MR);
            const int64_t i = i0 + ip, j = j0 + jp;
            double* c_tile = x.c + i * N + j;
            const double* init = nullptr;
            int64_t ld_init = 0;
            double* dst = c_tile;
            int64_t ld_dst = N;
            bool acc_store = accumulate;
            if (park_in_scratch) {
              double* p_tile = park + i * nc + jp;
              if (!first) init = p_tile, ld_init = nc;
              if (!last) dst = p_tile, ld_dst = nc, acc_store = false;
            } else if (!first) {  // Overwrite: the running acc is parked in C itself
              init = c_tile, ld_init = N;
            }
            kTable.fn[m_valid - 1][nv - 1](ap + ip * kc, bpanel, ldb, kc, init, ld_init, dst, ld_dst, acc_store,
                                           n_valid);
          }
        }
      }
    }
  }
}

}  // namespace

// Threads split the OUTPUT rows: every element is still computed by one thread in ascending k,
// so any thread count gives the same bytes. Small products stay serial (a wake-up costs µs).
void matmul_exact(const MatmulArgs& x) {
  constexpr int64_t kMinRowsPerTask = 8;
  constexpr double kMinFlops = 1 << 20;
  const int threads = num_threads();
  const double flops = 2.0 * static_cast<double>(x.m) * static_cast<double>(x.n) * static_cast<double>(x.k);
  if (threads <= 1 || x.m < 2 * kMinRowsPerTask || flops < kMinFlops) return matmul_serial(x);
  const int64_t tasks = std::min<int64_t>(threads, x.m / kMinRowsPerTask);
  const int64_t rows = (x.m + tasks - 1) / tasks;
  parallel_for(tasks, [&](int64_t t) {
    const int64_t i0 = t * rows, i1 = std::min(x.m, i0 + rows);
    if (i0 >= i1) return;
    MatmulArgs part = x;
    part.a = x.a + i0 * x.a_rs;
    part.c = x.c + i0 * x.n;
    part.m = i1 - i0;
    matmul_serial(part);
  });
}

}  // namespace gr
