// matmul.cpp — the bit-exact CPU contraction loop (docs/numerics.md). See matmul.h for the contract.
//
// How the fast path keeps the bits of the serial-k loop:
//   * Each output element owns one accumulator (one SIMD lane of one register). It starts at +0.0
//     and sees `acc = fma(a, b, acc)` for k = 0, 1, ..., K-1 in that order: one explicit fused
//     multiply-add, one rounding (gr_dot's step, kernels/gr_reduce.h). SIMD lanes run across j
//     (and the register tile across i), never across k.
//   * The FMA is an explicit intrinsic (fma_v) or __builtin_fma, never a contraction the compiler
//     chose: -ffp-contract=off stays on for the whole project, so nothing else is fused.
//   * Packing A and B into contiguous panels (matmul_pack.h) only copies values; a transposed B
//     is transposed in registers, W x W at a time.
//   * The k loop is cut into KC-long slices for the caches, but the running accumulator flows
//     through: at the end of a slice it is stored as a double (exactly) and the next slice reloads
//     it and carries on. The sequence of roundings is the same as one unbroken loop. Overwrite
//     parks the running value in C itself; Accumulate parks it in scratch and does the final
//     C = C + acc when the last slice ends.
//
// Structure (GotoBLAS-style): for each NC-wide column block, for each KC slice, B is packed into
// NR-wide k-major panels; for each MC-tall row block A is packed into MR-tall k-major panels; an
// MR x NR register tile (matmul_kernel.h: MR broadcasts of A times NV vectors of B per k) runs
// over every panel pair, one kernel call per column panel for all its full row tiles. Edge tiles
// use smaller instantiations of the same kernel (fewer rows / vectors); all of them are compiled
// in matmul_kernels_*.cpp and picked here from the tables of matmul_tile.h. With few rows, B is read
// in place rather than packed, and up to 3 rows take two panels per tile; with a narrow C, A is
// read in place (broadcasts are scalar loads either way) and a transposed A gets 2*MR-row tiles;
// with very few rows (<= 8) and a wide row-major B, a row-streaming loop (acc rows in C or on the
// stack, four k steps per pass) replaces tiling. With a short k and C's rows 4 KiB apart, the
// tiles walk C along its rows rather than down each panel (stores, not FMAs, bound such a product).
// A 10-wide f64 C with a row-major B folds the 2-column tails of 4 rows into one vector
// (matmul_fold.cpp).
// Threads split C into row and/or column blocks (matmul_exact, at the end).
// Tuning numbers and measurements: docs/performance.md.
#include "tensor/matmul.h"

#include "gr_reduce.h"
#include "tensor/matmul_pack.h"
#include "tensor/matmul_simd.h"
#include "tensor/matmul_tile.h"
#include "tensor/parallel.h"

#include <algorithm>
#include <cstddef>
#include <cstdlib>
#include <cstring>
#include <type_traits>
#include <new>
#include <utility>

// Cache blocks (in elements): B micro-panel KC x NR in L1, A block MC x KC in L2, B block KC x NC.
#ifndef GR_MM_KC
#define GR_MM_KC 384
#endif
#ifndef GR_MM_MC
#define GR_MM_MC 192
#endif
#ifndef GR_MM_NC
#define GR_MM_NC 2048
#endif
// The tiled path reads A in place instead of packing it when N <= GR_MM_DIRECT_A_N.
#ifndef GR_MM_DIRECT_A_N
#define GR_MM_DIRECT_A_N 128
#endif
#ifndef GR_MM_SWAP_MAX_N
#define GR_MM_SWAP_MAX_N 16
#endif
#ifndef GR_MM_SWAP_MIN_M
#define GR_MM_SWAP_MIN_M 32
#endif
// Products below this many flops run on one thread (a hand-off to another core costs µs).
#ifndef GR_MM_MIN_PAR_FLOPS
#define GR_MM_MIN_PAR_FLOPS 1048576
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
#define GR_MM_DIRECT_B_ROWS 64
#endif
#ifndef GR_MM_DIRECT_B_LD
#define GR_MM_DIRECT_B_LD 512
#endif

// Tiles walk C along its rows instead of down each panel when K <= GR_MM_ROWS_OUTER_K and C's
// row stride is a multiple of 4 KiB (matmul_serial).
#ifndef GR_MM_ROWS_OUTER_K
#define GR_MM_ROWS_OUTER_K 10
#endif

namespace gr {
namespace {

using detail::kernel_grid;
using detail::KernelFn;
using detail::KernelGrid;
using detail::kPlusZero;
using detail::kTransDst;
using detail::kTransInit;
using detail::kWideRows;
using detail::MR;
constexpr int64_t KC = GR_MM_KC;
constexpr int64_t MC = (GR_MM_MC + MR - 1) / MR * MR;
// The tile's lanes and width for element type T (matmul_kernel.h), and its column block.
template <class T>
struct Geo : detail::Tile<T> {
  static constexpr int64_t NC = (GR_MM_NC + detail::Tile<T>::NR - 1) / detail::Tile<T>::NR * detail::Tile<T>::NR;
};
constexpr int kGridNR = Geo<double>::NR;  // output_grid's column panels: the double tile's width
using detail::load_v;
using detail::pack_a;
using detail::pack_b;
using detail::store_v;
constexpr int64_t kDirectBRows = GR_MM_DIRECT_B_ROWS;
constexpr int64_t kDirectBLd = GR_MM_DIRECT_B_LD;
constexpr int64_t kDirectANc = GR_MM_DIRECT_A_N;
constexpr int64_t kRowsPathM = GR_MM_ROWS_PATH_M;
constexpr int64_t kRowsPathMinN = 128;
constexpr int64_t kRowsOuterMaxK = GR_MM_ROWS_OUTER_K;
constexpr int64_t kSwapMaxN = GR_MM_SWAP_MAX_N;  // narrow C computed as Cᵀ = Bᵀ·Aᵀ ...
constexpr int64_t kSwapMinM = GR_MM_SWAP_MIN_M;  // ... when it has at least this many rows
constexpr int64_t kSwapRowMajorMinK = 256;       // ... and, for a row-major A (f32 tape), this long a k

// A 64-byte-aligned scratch buffer that only grows: steady-state calls allocate nothing.
template <class T>
struct Scratch {
  T* p = nullptr;
  size_t cap = 0;
  Scratch() = default;
  Scratch(const Scratch&) = delete;
  Scratch& operator=(const Scratch&) = delete;
  ~Scratch() { std::free(p); }
  T* get(size_t n) {
    if (n > cap) {
      std::free(p);
      p = nullptr;
      cap = 0;
      const size_t bytes = (n * sizeof(T) + 63) / 64 * 64;  // a multiple of the alignment
      p = static_cast<T*>(std::aligned_alloc(64, bytes));
      if (!p) throw std::bad_alloc();
      cap = n;
    }
    return p;
  }
};

template <class T>
void reference(const MatmulArgsOf<T>& x) {
  for (int64_t i = 0; i < x.m; ++i) {
    for (int64_t j = 0; j < x.n; ++j) {
      T& c = x.c[i * x.n + j];
      if (x.store == MatmulStore::Continue) {  // gr_dot's chain, from C instead of +0
        T acc = c;
        for (int64_t k = 0; k < x.k; ++k) acc = gr_rfma(x.a[i * x.a_rs + k * x.a_cs], x.b[k * x.b_rs + j * x.b_cs], acc);
        c = acc;
        continue;
      }
      const T acc = gr_dot(x.a + i * x.a_rs, x.a_cs, x.b + j * x.b_cs, x.b_rs, x.k);
      c = x.store == MatmulStore::Accumulate ? c + acc : x.store == MatmulStore::OntoZero ? T(0) + acc : acc;
    }
  }
}


// C's rows are ldc apart (x.n for the whole product; more for a column block of a threaded one).
// With trans_c, C is stored transposed: element (i, j) at x.c[j*ldc + i].
// S != T (A, B and C stored wider than the arithmetic): B always packed, narrowed on the way; A
// packed likewise, or for a narrow C read in place by kernels that narrow each value as they
// broadcast it; C read and written by the kernel's stores, converted there.
template <class T, class S>
void matmul_serial(const MatmulArgsOf<T, S>& x, int64_t ldc, bool trans_c = false) {
  constexpr bool in_place_ok = std::is_same_v<T, S>;  // A or B may be read where they are
  constexpr int W = Geo<T>::W, NR = Geo<T>::NR;
  constexpr int64_t NC = Geo<T>::NC;
  const int64_t M = x.m, N = x.n, K = x.k;
  if (M <= 0 || N <= 0) return;
  const bool accumulate = x.store == MatmulStore::Accumulate;
  const bool onto_zero = x.store == MatmulStore::OntoZero;
  const bool cont = x.store == MatmulStore::Continue;  // the first k slice starts from C, as later ones do
  if (K <= 0 && cont) return;  // no steps: C = acc = C
  if (K <= 0) {  // acc = +0.0; C = C + 0.0 still turns -0.0 into +0.0, so do the add.
    for (int64_t i = 0; i < M; ++i)
      for (int64_t j = 0; j < N; ++j) {
        S& c = x.c[i * ldc + j];
        c = static_cast<S>(accumulate ? static_cast<T>(c) + T(0) : T(0));
      }
    return;
  }
  // A 10-wide C with a row-major B: the 2-column tails of 4 rows share one vector
  // (matmul_fold.cpp), ahead of the swap below (128x64x10 Aᵀ: 1.97 µs folded, 2.11 swapped).
  if constexpr (std::is_same_v<T, double> && in_place_ok) {
    if (!trans_c && M >= 4 && !cont) {
      const int64_t done = detail::matmul_fold(x, ldc);
      if (done == M) return;
      if (done > 0) {  // the last 1-3 rows by the paths below
        MatmulArgsOf<T, S> rest = x;
        rest.a = x.a + done * x.a_rs;
        rest.c = x.c + done * ldc;
        rest.m = M - done;
        return matmul_serial(rest, ldc);
      }
    }
  }
  // The row-streaming path wins for few rows of a wide C (8x64x256: 3.0 µs vs 3.7 tiled) and for
  // a tiny k; otherwise the tiled path with A and B in place is faster (1x64x64: 156 ns vs 300).
  // A narrow C (N <= kSwapMaxN) fills at most two vectors per tile row, MR or 2*MR accumulators:
  // too few FMAs per broadcast. Compute Cᵀ = Bᵀ·Aᵀ instead (vectors run down C's columns) and
  // store it transposed. Each element is the same chain: fma(b, a, acc) == fma(a, b, acc),
  // since the product inside an FMA is exact. Only for a transposed A (dW = Xᵀ·g) whose Aᵀ is
  // then a row-major B read in place: packing a row-major A's columns as B panels costs more
  // than it saves (200x64x6: 5.2 µs swapped, 3.0 not), and so does a B row stride past
  // kDirectBLd (1024x256x10 Aᵀ: 107 µs swapped, 86 not).
  // With A, B and C stored wider than the arithmetic (the f32 tape), nothing is read in place and
  // packing Aᵀ as B panels pays at any layout: a transposed A packs as contiguous rows at any row
  // stride (1024x256x10 Aᵀ of doubles holding floats: 100 µs swapped, 250 not), a row-major A
  // through register transposes 8 columns at a time, and the tiles get MR x NV accumulators
  // instead of MR. A row-major A only with a long k: the swapped C is stored transposed, element
  // by element, which a short k chain does not pay for (256x1024x10: 105-109 µs swapped, 132-137
  // not; a conv's cols·Wᵀ, 6400x150x16 Bᵀ: 706 swapped, 573 not).
  const bool swap_layout_ok = in_place_ok ? x.a_rs == 1 && x.a_cs <= kDirectBLd : x.a_rs == 1 || K >= kSwapRowMajorMinK;
  if (!trans_c && N <= kSwapMaxN && M >= kSwapMinM && swap_layout_ok) {
    MatmulArgsOf<T, S> t = x;
    t.a = x.b, t.a_rs = x.b_cs, t.a_cs = x.b_rs;
    t.b = x.a, t.b_rs = x.a_cs, t.b_cs = x.a_rs;
    t.m = N, t.n = M;
    return matmul_serial(t, ldc, true);
  }
  if constexpr (in_place_ok) {
    if (!trans_c && M <= kRowsPathM && x.b_cs == 1 && (N > kRowsPathMinN || K < 4) && !cont) {
      detail::matmul_rows(x, ldc);
      return;
    }
  }

  thread_local Scratch<T> a_buf, b_buf;
  thread_local Scratch<S> t_buf;  // parked running sums, stored as C is
  const int64_t kc_max = K < KC ? K : KC;
  const int64_t nc_max = N < NC ? (N + NR - 1) / NR * NR : NC;
  const int64_t mc_max = M < MC ? (M + MR - 1) / MR * MR : MC;
  T* bp = b_buf.get(static_cast<size_t>(kc_max * nc_max));
  T* ap = a_buf.get(static_cast<size_t>(kc_max * mc_max));
  // Few rows: each B value is used by at most a few row panels, so packing would cost about as
  // much as it saves; read full panels of a row-major B in place.
  const bool direct_b = in_place_ok && x.b_cs == 1 && M <= kDirectBRows && x.b_rs <= kDirectBLd;
  // Narrow C: each A value is used by only a few column panels, so packing A costs about what it
  // saves; the kernel broadcasts A's values from where they are (each a scalar load either way).
  // Also for doubles holding floats (the f32 tape), narrowed one by one in the kernel: packing
  // 6-row panels of a row-major A was 11% of the words transformer's f32 step, and a vectorized
  // pack (8x8 register transposes) took as long — reading A is the cost, and in place A is read
  // once, by the kernel. Interleaved A/B, best of 3: that step 3325 -> 3059 us (-8%); LeNet,
  // the digits CNN and the MLPs unchanged within noise.
  const bool direct_a = N <= kDirectANc;
  const KernelGrid<T, S>& kernels = kernel_grid<T, S>(direct_a);
  // Accumulate with more than one k slice parks the running acc for an M x nc block in scratch.
  const bool park_in_scratch = accumulate && K > KC;
  S* park = park_in_scratch ? t_buf.get(static_cast<size_t>(M * (N < NC ? N : NC))) : nullptr;
  // With few k steps a tile's time goes to storing it, and walking a panel down the rows stores
  // to rows ldc apart. When that stride is a multiple of 4 KiB every row falls in the same L1
  // sets, and the stores run 4x slower (256x10x1024 Bᵀ's C stored down 32-column panels: 93 µs;
  // along its rows: 22). Then walk C along its rows instead, one MR-row tile across all panels
  // at a time. Only then: for other strides the row walk was 4-30% slower (B leaves L1).
  const bool rows_outer = !trans_c && K <= kRowsOuterMaxK && M > MR && (ldc * sizeof(S)) % 4096 == 0;

  for (int64_t j0 = 0; j0 < N; j0 += NC) {
    const int64_t nc = N - j0 < NC ? N - j0 : NC;
    for (int64_t k0 = 0; k0 < K; k0 += KC) {
      const int64_t kc = K - k0 < KC ? K - k0 : KC;
      const bool first = k0 == 0, last = k0 + kc == K;
      pack_b<NR>(x, k0, kc, j0, nc, bp, direct_b);
      for (int64_t i0 = 0; i0 < M; i0 += MC) {
        const int64_t mc = M - i0 < MC ? M - i0 : MC;
        if (!direct_a) pack_a<MR>(x, i0, mc, k0, kc, ap);
        // One column panel from jp: `wide` takes two (at most kWideRows rows, B in place: twice
        // the independent accumulators; 1x64x64 is otherwise bound by the FMA latency of 4 chains).
        struct Panel {
          int n_valid, nv;
          const T* b;
          int64_t ldb;
        };
        auto panel_at = [&](int64_t jp, bool wide) {
          Panel p;
          p.n_valid = wide ? 2 * NR : static_cast<int>(nc - jp < NR ? nc - jp : NR);
          p.nv = (p.n_valid + W - 1) / W;
          const bool in_place = direct_b && p.n_valid >= NR;
          p.b = bp + jp * kc;
          if constexpr (in_place_ok)
            if (in_place) p.b = x.b + k0 * x.b_rs + j0 + jp;
          p.ldb = in_place ? x.b_rs : p.n_valid == NR ? NR : detail::ragged_ld<T>(p.n_valid);
          return p;
        };
        // Register tiles: rows ip .. of this block times panel p at jp, by kernel `fn`.
        auto tile = [&](int64_t ip, int64_t jp, const Panel& p, KernelFn<T, S> fn, int tiles = 1) {
          const int64_t i = i0 + ip, j = j0 + jp;
          S* c_tile = trans_c ? x.c + j * ldc + i : x.c + i * ldc + j;
          const int t_c = trans_c ? kTransInit | kTransDst : 0;
          // OntoZero: every store into C adds +0. A running acc parked in C between k slices
          // then resumes from +0 where it was −0, which changes no final bit: fma(a, b, ±0)
          // differs only when a·b is ±0 itself, and the final + 0 maps either zero to +0.
          int trans = (t_c & kTransDst) | (onto_zero ? kPlusZero : 0);
          const S* init = nullptr;
          int64_t ld_init = 0;
          S* dst = c_tile;
          int64_t ld_dst = ldc;
          bool acc_store = accumulate;
          if (park_in_scratch) {
            S* p_tile = park + i * nc + jp;
            if (!first) init = p_tile, ld_init = nc;
            if (!last) dst = p_tile, ld_dst = nc, acc_store = false, trans = 0;
          } else if (!first || cont) {  // Overwrite: the running acc is parked in C itself
            init = c_tile, ld_init = ldc, trans |= t_c & kTransInit;
          }
          if (direct_a)  // A stored as S (the kernel narrows each value when S is wider)
            return fn(reinterpret_cast<const T*>(x.a + i * x.a_rs + k0 * x.a_cs), x.a_rs, x.a_cs, p.b, p.ldb, kc, init,
                      ld_init, dst, ld_dst, acc_store, p.n_valid, trans, tiles);
          fn(ap + ip * kc, 1, MR, p.b, p.ldb, kc, init, ld_init, dst, ld_dst, acc_store, p.n_valid, trans, tiles);
        };
        // The MR-row (or fewer) kernel for a panel of nv vectors, reading A packed or in place.
        auto row_kernel = [&](int64_t rows, int nv) { return kernels.fn[rows - 1][nv - 1]; };
        if (rows_outer) {
          // Walk C along its rows, one MR-row tile across every panel at a time (why: above).
          for (int64_t ip = 0; ip < mc; ip += MR) {
            const int64_t rows = mc - ip < MR ? mc - ip : MR;
            for (int64_t jp = 0; jp < nc; jp += NR) {
              const Panel p = panel_at(jp, false);
              tile(ip, jp, p, row_kernel(rows, p.nv));
            }
          }
          continue;
        }
        for (int64_t jp = 0; jp < nc;) {
          const bool wide = direct_b && mc <= kWideRows && nc - jp >= 2 * NR;
          const Panel p = panel_at(jp, wide);
          int64_t ip = 0;
          if constexpr (in_place_ok) {
            if (wide) {
              tile(0, jp, p, kernels.wide[mc - 1]);
              jp += 2 * NR;
              continue;
            }
          }
          // A panel of one or two vectors gives an MR-row tile only MR or 2*MR accumulators, too
          // few to hide the FMA latency; with A in place (no MR-row packing) take 2*MR rows. Only
          // for a transposed A (dW = Xᵀ·g), whose 2*MR values per k are contiguous: 2*MR rows of
          // a row-major A a power-of-two stride apart conflict in L1 (256x1024x10 ran 6% slower).
          if constexpr (in_place_ok) {
            if (direct_a && p.nv <= 2 && x.a_rs == 1 && mc >= 2 * MR) {
              const int tiles = static_cast<int>(mc / (2 * MR));
              tile(ip, jp, p, kernels.tall[p.nv - 1], tiles);
              ip += tiles * 2 * MR;
            }
          }
          if (mc - ip >= MR) {
            const int tiles = static_cast<int>((mc - ip) / MR);
            tile(ip, jp, p, row_kernel(MR, p.nv), tiles);
            ip += tiles * MR;
          }
          if (ip < mc) tile(ip, jp, p, row_kernel(mc - ip, p.nv));
          jp += NR;
        }
      }
    }
  }
}

}  // namespace

// Threads split the OUTPUT into a grid of row blocks x column blocks: every element is still
// computed by one thread, in ascending k, by the same serial code, so any thread count and any
// grid give the same bytes. Splitting rows makes every task pack all of B; splitting columns
// makes every task pack all of A. The grid minimizes the largest task's cost, modelled per k step
// as rows*cols FMA lanes (16 per cycle) plus (rows + cols) packed values (about 3 per cycle).
// Column blocks are whole NR-wide panels, so no task gets an extra ragged edge. The cost does not
// depend on K, so the grid is a function of the output's shape alone, and the elementwise ops and
// gradient buffers of that shape follow it (matmul.h). Products under kMinFlops stay serial:
// handing work to another core costs a few µs.
OutputGrid output_grid(int64_t m, int64_t n) {
  const int64_t threads = num_threads();
  OutputGrid best{m, n, m, n, 1, 1};
  double best_cost = -1;
  for (int64_t tc = 1; tc <= threads; ++tc) {
    const int64_t tr = threads / tc;
    int64_t cols = n;
    if (tc > 1) {
      cols = ((n + tc - 1) / tc + kGridNR - 1) / kGridNR * kGridNR;
      if (cols >= n) continue;  // too narrow to split
    }
    const int64_t rows = (m + tr - 1) / tr;
    const double cost = static_cast<double>(rows) * static_cast<double>(cols) + 5.3 * static_cast<double>(rows + cols);
    if (best_cost < 0 || cost < best_cost) {
      best_cost = cost;
      best = {m, n, rows, cols, (m + rows - 1) / rows, (n + cols - 1) / cols};
    }
  }
  return best;
}

namespace {

template <class T, class S>
void exact(const MatmulArgsOf<T, S>& x) {
  constexpr double kMinFlops = GR_MM_MIN_PAR_FLOPS;
  const double flops = 2.0 * static_cast<double>(x.m) * static_cast<double>(x.n) * static_cast<double>(x.k);
  if (flops < kMinFlops || num_threads() <= 1) return matmul_serial(x, x.n);
  const OutputGrid g = output_grid(x.m, x.n);
  if (g.tasks() <= 1) return matmul_serial(x, x.n);
  parallel_for(g.tasks(), [&](int64_t t) {
    const OutputBlock b = g.block(t);
    MatmulArgsOf<T, S> part = x;
    part.a = x.a + b.r0 * x.a_rs;
    part.b = x.b + b.c0 * x.b_cs;
    part.c = x.c + b.r0 * x.n + b.c0;
    part.m = b.r1 - b.r0;
    part.n = b.c1 - b.c0;
    matmul_serial(part, x.n);
  });
}

}  // namespace

void matmul_reference(const MatmulArgs& x) { reference(x); }
void matmul_reference(const MatmulArgsF32& x) { reference(x); }
void matmul_exact(const MatmulArgs& x) { exact(x); }
void matmul_exact(const MatmulArgsF32& x) { exact(x); }
void matmul_exact_f32(const MatmulArgs& x) {
  exact(MatmulArgsOf<float, double>{x.a, x.a_rs, x.a_cs, x.b, x.b_rs, x.b_cs, x.c, x.m, x.k, x.n, x.store});
}

}  // namespace gr
