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
// MR x NR register tile (MR broadcasts of A times NV vectors of B per k) runs over every panel
// pair. Edge tiles use smaller instantiations of the same kernel (fewer rows / vectors). With few
// rows, B is read in place rather than packed; with a narrow C, A is read in place (broadcasts
// are scalar loads either way) and a transposed A gets 2*MR-row tiles; with very few rows (<= 8),
// a wide row-major B, a row-streaming loop (acc rows in C or on the stack, four k steps per pass)
// replaces tiling. Threads split C into row and/or column blocks (matmul_exact, at the end).
// Tuning numbers and measurements: docs/performance.md.
#include "tensor/matmul.h"

#include "gr_reduce.h"
#include "tensor/matmul_pack.h"
#include "tensor/matmul_simd.h"
#include "tensor/parallel.h"

#include <algorithm>
#include <cstddef>
#include <cstdlib>
#include <cstring>
#include <type_traits>
#include <new>
#include <utility>

// Register tile: MR rows x NV vectors (NR = NV*W columns). Accumulators: MR*NV vector registers.
#ifndef GR_MM_MR
#if GR_MM_W == 8
#define GR_MM_MR 6  // 6 x 32: 24 accumulators + 4 B vectors + broadcast of 32 zmm
#elif GR_MM_W == 4
#define GR_MM_MR 6  // 6 x 8: 12 accumulators of 16 ymm
#else
#define GR_MM_MR 4  // 4 x 4: 8 accumulators of 16 xmm
#endif
#endif
#ifndef GR_MM_NV
#if GR_MM_W == 8
// 6 x 4 vectors beat 12 x 2, 14 x 2 and 8 x 3 on Zen 5 (AVX-512, 2 FMA pipes): per k step 6
// broadcasts + 4 loads feed 24 FMAs, fewer loads per FMA than 12 x 2's 12 + 2.
#define GR_MM_NV 4
#else
#define GR_MM_NV 2
#endif
#endif
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

namespace gr {
namespace {

constexpr int MR = GR_MM_MR;
constexpr int NV = GR_MM_NV;
constexpr int64_t KC = GR_MM_KC;
constexpr int64_t MC = (GR_MM_MC + MR - 1) / MR * MR;
// Lanes and panel widths of element type T: a float vector holds twice the doubles' lanes, so its
// tile is twice as wide in columns with the same registers.
template <class T>
struct Geo {
  static constexpr int W = detail::Simd<T>::W;
  static constexpr int NR = NV * W;
  static constexpr int64_t NC = (GR_MM_NC + NR - 1) / NR * NR;
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
constexpr int64_t kSwapMaxN = GR_MM_SWAP_MAX_N;  // narrow C computed as Cᵀ = Bᵀ·Aᵀ ...
constexpr int64_t kSwapMinM = GR_MM_SWAP_MIN_M;  // ... when it has at least this many rows
constexpr int kTransInit = 1, kTransDst = 2;     // kernel's `trans` bits: init / dst hold the tile transposed
constexpr int kPlusZero = 4;  // and: an overwriting store writes acc + 0 (MatmulStore::OntoZero)

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

// C's rows to and from the arithmetic type T when C is stored wider (C = double holding floats,
// the f32 tape): the conversions are exact, so C stored either way holds the same values.
template <class T, class C>
inline typename detail::Simd<T>::V load_c(const C* p) {
  using V = typename detail::Simd<T>::V;
  if constexpr (std::is_same_v<T, C>) {
    return load_v(p);
  } else {
    typedef C CV __attribute__((vector_size(Geo<T>::W * sizeof(C))));
    CV c;
    std::memcpy(&c, p, sizeof c);
    return __builtin_convertvector(c, V);
  }
}
template <class T, class C>
inline void store_c(C* p, typename detail::Simd<T>::V v) {
  if constexpr (std::is_same_v<T, C>) {
    store_v(p, v);
  } else {
    typedef C CV __attribute__((vector_size(Geo<T>::W * sizeof(C))));
    const CV c = __builtin_convertvector(v, CV);
    std::memcpy(p, &c, sizeof c);
  }
}

// The micro-kernel: rows 0..mr-1 of an MR-stride packed A panel times vectors 0..nv-1 of a B
// panel whose k rows are ldb apart (NR when packed, b_rs when B is read in place), over kc steps.
//   init == nullptr: acc starts at +0.0 (the start of the k loop);
//   otherwise acc starts at init[r*ld_init + j] (the running value parked by the previous slice).
//   At the end: dst[r*ld_dst + j] = acc, or with `accumulate`, dst = dst + acc; or with the
//   kPlusZero bit (and not `accumulate`), dst = acc + 0.
// Only the first n_valid columns are read from init and written to dst. init and dst are stored
// as C (T, or double holding T's values); the arithmetic is T's.
// A is an MR-stride packed panel, or with `direct_a` A itself: A(r, k) = ap[r*ars + k*acs].
// With tiles > 1 the kernel runs that many tiles down the rows, each mr rows below the last (one
// call per column panel rather than per tile: on small products the call costs as much as a tile).
template <class T, class C, int mr, int nv, bool direct_a>
void kernel(const T* __restrict a_first, int64_t ars, int64_t acs, const T* __restrict b_first, int64_t ldb,
            int64_t kc, const C* init, int64_t ld_init, C* dst, int64_t ld_dst, bool accumulate,
            int n_valid, int trans, int tiles) {
  using V = typename detail::Simd<T>::V;
  constexpr int W = Geo<T>::W;
  if (!direct_a) ars = 1, acs = MR;  // compile-time strides for the packed panel
  const bool full = n_valid == nv * W;
  const int64_t a_step = direct_a ? mr * ars : MR * kc;
  const int64_t init_step = trans & kTransInit ? mr : mr * ld_init;
  const int64_t dst_step = trans & kTransDst ? mr : mr * ld_dst;
  for (int tile = 0; tile < tiles; ++tile, a_first += a_step, dst += dst_step, init = init ? init + init_step : init) {
  const T* __restrict ap = a_first;
  const T* __restrict bp = b_first;
  V acc[mr][nv];
  if (init == nullptr) {
#pragma GCC unroll 16
    for (int r = 0; r < mr; ++r)
#pragma GCC unroll 8
      for (int v = 0; v < nv; ++v) acc[r][v] = V{};
  } else {
#pragma GCC unroll 16
    for (int r = 0; r < mr; ++r) {
      const C* src = init + r * ld_init;
      if ((trans & kTransInit) || !full) {
        T tmp[nv * W] = {};
        if (trans & kTransInit)  // init holds the tile transposed: element (r, j) at init[j*ld + r]
          for (int j = 0; j < n_valid; ++j) tmp[j] = static_cast<T>(init[j * ld_init + r]);
        else
          for (int j = 0; j < n_valid; ++j) tmp[j] = static_cast<T>(src[j]);
#pragma GCC unroll 8
        for (int v = 0; v < nv; ++v) acc[r][v] = load_v(tmp + v * W);
      } else {
#pragma GCC unroll 8
        for (int v = 0; v < nv; ++v) acc[r][v] = load_c<T>(src + v * W);
      }
    }
  }

  // Unrolled by 4: the loop's own overhead (pointer bumps, compare, branch) is then small next
  // to the MR*NV FMAs of each step.
#pragma GCC unroll 4
  for (int64_t k = 0; k < kc; ++k) {
    V b[nv];
#pragma GCC unroll 8
    for (int v = 0; v < nv; ++v) b[v] = load_v(bp + v * W);
#pragma GCC unroll 16
    for (int r = 0; r < mr; ++r) {
      const T a = ap[r * ars];
#pragma GCC unroll 8
      for (int v = 0; v < nv; ++v) acc[r][v] = detail::Simd<T>::fma(b[v], a, acc[r][v]);  // one rounding per lane
    }
    ap += acs;
    bp += ldb;
  }

  const bool plus_zero = trans & kPlusZero;
  // One element's store: C = C + acc, +0 + acc or acc, in T.
  const auto store_one = [&](C& o, T t) {
    o = static_cast<C>(accumulate ? static_cast<T>(o) + t : plus_zero ? t + T(0) : t);
  };
#pragma GCC unroll 16
  for (int r = 0; r < mr; ++r) {
    C* out = dst + r * ld_dst;
    if (trans & kTransDst) {  // C is written transposed: element (r, j) at dst[j*ld + r]
      T tmp[nv * W];
#pragma GCC unroll 8
      for (int v = 0; v < nv; ++v) store_v(tmp + v * W, acc[r][v]);
      for (int j = 0; j < n_valid; ++j) store_one(dst[j * ld_dst + r], tmp[j]);
    } else if (full) {
#pragma GCC unroll 8
      for (int v = 0; v < nv; ++v) {
        if (accumulate)
          store_c<T>(out + v * W, load_c<T>(out + v * W) + acc[r][v]);
        else if (plus_zero)
          store_c<T>(out + v * W, acc[r][v] + V{});
        else
          store_c<T>(out + v * W, acc[r][v]);
      }
    } else {
      T tmp[nv * W];
#pragma GCC unroll 8
      for (int v = 0; v < nv; ++v) store_v(tmp + v * W, acc[r][v]);
      for (int j = 0; j < n_valid; ++j) store_one(out[j], tmp[j]);
    }
  }
  }
}

template <class T, class C>
using KernelFn = void (*)(const T*, int64_t, int64_t, const T*, int64_t, int64_t, const C*, int64_t,
                          C*, int64_t, bool, int, int, int);

// With C stored wider than T, A is always packed: no direct-A kernels.
template <class T, class C, int mr, int... vs>
constexpr void fill_row(KernelFn<T, C>* row, std::integer_sequence<int, vs...>) {
  ((row[vs] = &kernel<T, C, mr, vs + 1, false>), ...);
  if constexpr (std::is_same_v<T, C>) ((row[NV + vs] = &kernel<T, C, mr, vs + 1, true>), ...);
}
template <class T, class C, int... rs>
struct KernelTable {
  KernelFn<T, C> fn[MR][2 * NV];  // [rows - 1][vectors - 1], then the same with direct A
  constexpr KernelTable() : fn{} { (fill_row<T, C, rs + 1>(fn[rs], std::make_integer_sequence<int, NV>{}), ...); }
};
template <class T, class C, int... rs>
constexpr KernelTable<T, C, rs...> make_table(std::integer_sequence<int, rs...>) {
  return KernelTable<T, C, rs...>{};
}
template <class T, class C>
constexpr auto kTable = make_table<T, C>(std::make_integer_sequence<int, MR>{});

// Two-panel kernels (2*NV vectors) for 1 .. kWideRows rows, with A packed or in place.
constexpr int kWideRows = 3;
template <class T, int... rs>
struct WideTable {
  KernelFn<T, T> fn[kWideRows][2]{{&kernel<T, T, rs + 1, 2 * NV, false>, &kernel<T, T, rs + 1, 2 * NV, true>}...};
};
template <class T, int... rs>
constexpr WideTable<T, rs...> make_wide(std::integer_sequence<int, rs...>) {
  return {};
}
template <class T>
constexpr auto kWideTable = make_wide<T>(std::make_integer_sequence<int, kWideRows>{});

template <class T>
void reference(const MatmulArgsOf<T>& x) {
  for (int64_t i = 0; i < x.m; ++i) {
    for (int64_t j = 0; j < x.n; ++j) {
      const T acc = gr_dot(x.a + i * x.a_rs, x.a_cs, x.b + j * x.b_cs, x.b_rs, x.k);
      T& c = x.c[i * x.n + j];
      c = x.store == MatmulStore::Accumulate ? c + acc : x.store == MatmulStore::OntoZero ? T(0) + acc : acc;
    }
  }
}


// C's rows are ldc apart (x.n for the whole product; more for a column block of a threaded one).
// With trans_c, C is stored transposed: element (i, j) at x.c[j*ldc + i].
// S != T (A, B and C stored wider than the arithmetic): A and B always packed, narrowed on the
// way; C read and written by the kernel's stores, converted there.
template <class T, class S>
void matmul_serial(const MatmulArgsOf<T, S>& x, int64_t ldc, bool trans_c = false) {
  constexpr bool in_place_ok = std::is_same_v<T, S>;  // A or B may be read where they are
  constexpr int W = Geo<T>::W, NR = Geo<T>::NR;
  constexpr int64_t NC = Geo<T>::NC;
  const int64_t M = x.m, N = x.n, K = x.k;
  if (M <= 0 || N <= 0) return;
  const bool accumulate = x.store == MatmulStore::Accumulate;
  const bool onto_zero = x.store == MatmulStore::OntoZero;
  if (K <= 0) {  // acc = +0.0; C = C + 0.0 still turns -0.0 into +0.0, so do the add.
    for (int64_t i = 0; i < M; ++i)
      for (int64_t j = 0; j < N; ++j) {
        S& c = x.c[i * ldc + j];
        c = static_cast<S>(accumulate ? static_cast<T>(c) + T(0) : T(0));
      }
    return;
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
  if (!trans_c && N <= kSwapMaxN && M >= kSwapMinM && x.a_rs == 1 && x.a_cs <= kDirectBLd) {
    MatmulArgsOf<T, S> t = x;
    t.a = x.b, t.a_rs = x.b_cs, t.a_cs = x.b_rs;
    t.b = x.a, t.b_rs = x.a_cs, t.b_cs = x.a_rs;
    t.m = N, t.n = M;
    return matmul_serial(t, ldc, true);
  }
  if constexpr (in_place_ok) {
    if (!trans_c && M <= kRowsPathM && x.b_cs == 1 && (N > kRowsPathMinN || K < 4)) {
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
  const bool direct_a = in_place_ok && N <= kDirectANc;
  // Accumulate with more than one k slice parks the running acc for an M x nc block in scratch.
  const bool park_in_scratch = accumulate && K > KC;
  S* park = park_in_scratch ? t_buf.get(static_cast<size_t>(M * (N < NC ? N : NC))) : nullptr;

  for (int64_t j0 = 0; j0 < N; j0 += NC) {
    const int64_t nc = N - j0 < NC ? N - j0 : NC;
    for (int64_t k0 = 0; k0 < K; k0 += KC) {
      const int64_t kc = K - k0 < KC ? K - k0 : KC;
      const bool first = k0 == 0, last = k0 + kc == K;
      pack_b<NR>(x, k0, kc, j0, nc, bp, direct_b);
      for (int64_t i0 = 0; i0 < M; i0 += MC) {
        const int64_t mc = M - i0 < MC ? M - i0 : MC;
        if (!direct_a) pack_a<MR>(x, i0, mc, k0, kc, ap);
        for (int64_t jp = 0; jp < nc;) {
          // At most kWideRows rows and B in place: two panels in one tile, twice the independent
          // accumulators (1x64x64 is otherwise bound by the FMA latency of 4 chains).
          const bool wide = direct_b && mc <= kWideRows && nc - jp >= 2 * NR;
          const int n_valid = wide ? 2 * NR : static_cast<int>(nc - jp < NR ? nc - jp : NR);
          const int nv = (n_valid + W - 1) / W;
          const bool in_place = direct_b && n_valid >= NR;
          const T* bpanel = bp + jp * kc;
          if constexpr (in_place_ok)
            if (in_place) bpanel = x.b + k0 * x.b_rs + j0 + jp;
          const int64_t ldb = in_place ? x.b_rs : NR;
          // One register tile: rows ip .. ip+rows of this block, by kernel `fn`.
          auto tile = [&](int64_t ip, KernelFn<T, S> fn, int tiles = 1) {
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
            } else if (!first) {  // Overwrite: the running acc is parked in C itself
              init = c_tile, ld_init = ldc, trans |= t_c & kTransInit;
            }
            if constexpr (in_place_ok) {
              if (direct_a)
                return fn(x.a + i * x.a_rs + k0 * x.a_cs, x.a_rs, x.a_cs, bpanel, ldb, kc, init, ld_init, dst, ld_dst,
                          acc_store, n_valid, trans, tiles);
            }
            fn(ap + ip * kc, 1, MR, bpanel, ldb, kc, init, ld_init, dst, ld_dst, acc_store, n_valid, trans, tiles);
          };
          int64_t ip = 0;
          if constexpr (in_place_ok) {
            if (wide) {
              tile(0, kWideTable<T>.fn[mc - 1][direct_a ? 1 : 0]);
              jp += 2 * NR;
              continue;
            }
          }
          // A panel of one or two vectors gives an MR-row tile only MR or 2*MR accumulators, too
          // few to hide the FMA latency; with A in place (no MR-row packing) take 2*MR rows. Only
          // for a transposed A (dW = Xᵀ·g), whose 2*MR values per k are contiguous: 2*MR rows of
          // a row-major A a power-of-two stride apart conflict in L1 (256x1024x10 ran 6% slower).
          if constexpr (in_place_ok) {
            if (direct_a && nv <= 2 && x.a_rs == 1 && mc >= 2 * MR) {
              const int tiles = static_cast<int>(mc / (2 * MR));
              tile(ip, nv == 1 ? &kernel<T, S, 2 * MR, 1, true> : &kernel<T, S, 2 * MR, 2, true>, tiles);
              ip += tiles * 2 * MR;
            }
          }
          const int col = (direct_a ? NV : 0) + nv - 1;
          if (mc - ip >= MR) {
            const int tiles = static_cast<int>((mc - ip) / MR);
            tile(ip, kTable<T, S>.fn[MR - 1][col], tiles);
            ip += tiles * MR;
          }
          if (ip < mc) tile(ip, kTable<T, S>.fn[mc - ip - 1][col]);
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
  const int threads = num_threads();
  const double flops = 2.0 * static_cast<double>(x.m) * static_cast<double>(x.n) * static_cast<double>(x.k);
  if (threads <= 1 || flops < kMinFlops) return matmul_serial(x, x.n);
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
