// matmul_pack.h — private to lib/tensor's matmul.cpp: packing A and B into the contiguous panels
// the register tile reads (GotoBLAS-style). Packing only copies values (narrowing doubles that
// hold floats, exactly), so it cannot change a bit of the serial-k loop (matmul.h).
#pragma once
#include <cstdint>
#include <cstring>
#include <type_traits>

#include "tensor/matmul_simd.h"

namespace gr::detail {

// Columns 0 .. cols-1 (a multiple of WS) of a panel of a transposed B (B(k, j) = s[k + j*cs]: each
// column contiguous in k) into k-major rows ld apart: WS columns x WS k values (WS = the lanes of
// the stored type S) are loaded as WS vectors, transposed in registers and stored as WS pieces of
// panel rows, narrowed to T on the way when S is wider; the last kc % WS k values go one by one.
template <class T, class S>
void pack_transposed(const S* s, int64_t cs, int64_t kc, T* d, int64_t ld, int64_t cols) {
  constexpr int WS = Simd<S>::W;
  using VS = typename Simd<S>::V;
  typedef T VT __attribute__((vector_size(WS * sizeof(T))));  // WS lanes of T
  // Column groups outer: WS streams along k at a time, which the prefetchers follow (k outer, a
  // 64-column panel reads 64 columns far apart at once: 16x6400x150 Bᵀ spent 3x its kernel time
  // packing that way).
  const int64_t k_vec = kc / WS * WS;
  for (int64_t jb = 0; jb < cols; jb += WS)
    for (int64_t k = 0; k < k_vec; k += WS) {
      VS r[WS];
      for (int i = 0; i < WS; ++i) r[i] = load_v(s + (jb + i) * cs + k);
      transpose_block<S>(r);
      for (int l = 0; l < WS; ++l) {
        const VT v = __builtin_convertvector(r[l], VT);  // exact: the values are T's
        std::memcpy(d + (k + l) * ld + jb, &v, sizeof v);
      }
    }
  for (int64_t k = k_vec; k < kc; ++k)
    for (int64_t j = 0; j < cols; ++j) d[k * ld + j] = static_cast<T>(s[j * cs + k]);
}

// The k-row stride of a ragged B panel w < NR columns wide: whole vectors only, so a narrow C's
// kernel reads (and packing writes) no more than it uses.
template <class T>
constexpr int64_t ragged_ld(int64_t w) {
  return (w + Simd<T>::W - 1) / Simd<T>::W * Simd<T>::W;
}

// Pack B(k0 .. k0+kc, j0 .. j0+nc) into NR-wide panels, k-major within a panel (a ragged last one
// narrower: ragged_ld), zero padded.
// Full panels take constant-width paths the compiler turns into vector copies / unrolled loads.
// With `ragged_only` (B read in place) only a ragged last panel is packed.
// Values stored as S (double holding floats) are narrowed on the way: static_cast is exact for them.
template <int NR, class T, class S>
void pack_b(const MatmulArgsOf<T, S>& x, int64_t k0, int64_t kc, int64_t j0, int64_t nc, T* out, bool ragged_only) {
  const int64_t rs = x.b_rs, cs = x.b_cs;
  for (int64_t jp = 0; jp < nc; jp += NR) {
    const int64_t w = nc - jp < NR ? nc - jp : NR;
    if (ragged_only && w == NR) continue;
    T* d = out + jp * kc;
    const S* s = x.b + k0 * rs + (j0 + jp) * cs;
    if (w == NR && cs == 1) {  // row-major B: each k row of the panel is NR contiguous values
      for (int64_t k = 0; k < kc; ++k, d += NR, s += rs) {
        if constexpr (std::is_same_v<T, S>) {
          std::memcpy(d, s, NR * sizeof(T));
        } else {
          for (int j = 0; j < NR; ++j) d[j] = static_cast<T>(s[j]);
        }
      }
    } else if (w == NR && rs == 1) {  // transposed B: square blocks transposed in registers
      static_assert(NR % Simd<S>::W == 0);
      pack_transposed(s, cs, kc, d, NR, NR);
    } else if (w == NR) {  // strided B: NR independent streams along k
      for (int64_t k = 0; k < kc; ++k, d += NR, s += rs) {
#pragma GCC unroll 32
        for (int j = 0; j < NR; ++j) d[j] = static_cast<T>(s[j * cs]);
      }
    } else {  // ragged last panel: k rows ragged_ld(w) apart, padded with zeros to whole vectors
      // No memset/memcpy per k: those library calls cost more than a narrow C's kernel.
      const int64_t ld = ragged_ld<T>(w);
      if constexpr (std::is_same_v<T, S>) {
        if (cs == 1) {  // row-major B: whole vectors, the last one partial (load_n zero fills)
          constexpr int W = Simd<T>::W;
          for (int64_t k = 0; k < kc; ++k, d += ld, s += rs)
            for (int64_t j = 0; j < ld; j += W) store_v(d + j, load_n(s + j, static_cast<int>(w - j < W ? w - j : W)));
          continue;
        }
      }
      // Transposed B: whole groups of WS columns transposed in registers, as full panels are (a
      // conv's dW = G·colsᵀ has N = C·kh·kw: 6x50176x25 took 2.0 ms gathering 25 columns one by one).
      // The pad vector first: it may overlap the blocked columns.
      const int64_t blocked = rs == 1 ? w / Simd<S>::W * Simd<S>::W : 0;
      T* const d0 = d;
      const S* const s0 = s;
      for (int64_t k = 0; k < kc; ++k, d += ld, s += rs) {
        store_v(d + ld - Simd<T>::W, typename Simd<T>::V{});  // the last vector, holding the pad
        for (int64_t j = blocked; j < w; ++j) d[j] = static_cast<T>(s[j * cs]);  // strided or narrowed
      }
      if (blocked > 0) pack_transposed(s0, cs, kc, d0, ld, blocked);
    }
  }
}

// Pack A(i0 .. i0+mc, k0 .. k0+kc) into MR-tall panels, k-major within a panel. A ragged last
// panel keeps the MR stride; its missing rows are never read (its kernel has fewer rows).
template <int MR, class T, class S>
void pack_a(const MatmulArgsOf<T, S>& x, int64_t i0, int64_t mc, int64_t k0, int64_t kc, T* out) {
  const int64_t rs = x.a_rs, cs = x.a_cs;
  int64_t ip = 0;
  if (rs == 1 && mc >= 2 * MR) {
    // Transposed A (dW = Xᵀ·g, a conv's dcols = Wᵀ·G): the block's k-th values are one contiguous
    // run of mc. Read each run once, k outer, and deal it out to every full panel. Panel by panel
    // instead, each panel walks kc runs cs apart, re-reading every cache line once per panel it
    // touches; with cs a multiple of 4 KiB (1024 doubles) all of them fall in the same L1 sets.
    // Interleaved A/B, best of 3 (doubles holding floats): 1024x256x1024 Aᵀ 6.40 -> 5.99 ms,
    // 150x16x6400 Aᵀ 490 -> 436 µs, 72x16x4096 Aᵀ 141 -> 129 µs; f64 the same within noise.
    const int64_t full = mc / MR * MR;
    const S* s = x.a + i0 + k0 * cs;
    for (int64_t k = 0; k < kc; ++k, s += cs) {
      T* d = out + k * MR;
      for (int64_t p = 0; p < full; p += MR, d += MR * kc) {
#pragma GCC unroll 32
        for (int i = 0; i < MR; ++i) d[i] = static_cast<T>(s[p + i]);
      }
    }
    ip = full;
  }
  for (; ip < mc; ip += MR) {
    const int64_t h = mc - ip < MR ? mc - ip : MR;
    T* d = out + ip * kc;
    const S* s = x.a + (i0 + ip) * rs + k0 * cs;
    if (h == MR && rs == 1) {  // transposed A: each k column of the panel is MR contiguous values
      for (int64_t k = 0; k < kc; ++k, d += MR, s += cs) {
        if constexpr (std::is_same_v<T, S>) {
          std::memcpy(d, s, MR * sizeof(T));
        } else {
          for (int i = 0; i < MR; ++i) d[i] = static_cast<T>(s[i]);
        }
      }
    } else if (h == MR) {  // row-major A: MR streams along k
      for (int64_t k = 0; k < kc; ++k, d += MR, s += cs) {
#pragma GCC unroll 32
        for (int i = 0; i < MR; ++i) d[i] = static_cast<T>(s[i * rs]);
      }
    } else {  // ragged last panel: fixed width, as for B's (no library call per k)
      for (int64_t k = 0; k < kc; ++k, d += MR, s += cs) {
#pragma GCC unroll 32
        for (int i = 0; i < MR; ++i)
          if (i < h) d[i] = static_cast<T>(s[i * rs]);
      }
    }
  }
}

}  // namespace gr::detail
