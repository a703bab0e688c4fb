// gr_node_kernels.cuh — the per-node kernels of the replay engine (lib/replay, docs/replay.md), f64.
//
// One forward kernel and one backward kernel per input side for EVERY op of kernels/gr_op_table.h, built
// on the shared scalar/lane definitions (gr_ops_scalar.h, gr_ops_lane.h), so the bits equal the CPU
// tape's. Every output element (or gradient slot) is computed by ONE thread, serially, in exactly
// the CPU's order (docs/replay.md lists the orders); threads never share a slot, so there are no
// atomics and no barriers. Grid- and block-stride loops make every kernel correct for any launch
// geometry; serial kernels (sum over all axes, softmax cross-entropy forward) do their work in the
// first thread only. Every parameter is 8 bytes (docs/device.md). The text compiles under NVRTC and
// under the host compiler (host_shim.h); lib/replay embeds it after gr_prelude.cuh
// (the f32 module is the same text over float: see gr_prelude.cuh).
// The element type gr_real, GRK_LOOP and the arithmetic macros come from gr_prelude.cuh.

// Every elementwise op is a row of kernels/gr_op_table.h; its kernels below are generated from
// the row and call the row's scalar functions through gr_ew_<stem> (gr_ops_elementwise.h).

GR_HD static inline void grk_bin_index(const long long* m, long long e, long long* ia, long long* ib) {
  const long long r = m[0];
  if (r == 0) {
    *ia = e;
    *ib = e;
    return;
  }
  long long rem = e, xa = 0, xb = 0;
  for (long long d = 0; d < r; ++d) {
    const long long c = rem / m[9 + d];
    rem -= c * m[9 + d];
    xa += c * m[17 + d];
    xb += c * m[25 + d];
  }
  *ia = xa;
  *ib = xb;
}

template <class OP>
GR_HD static inline void grk_binary_fwd(const gr_real* a, const gr_real* b, gr_real* y, const long long* m, long long n) {
  GRK_LOOP(e, n) {
    long long ia, ib;
    grk_bin_index(m, e, &ia, &ib);
    y[e] = OP::fwd(a[ia], b[ib], (gr_real)0);
  }
}

// The contribution of output element e to side `side` (0 = a, 1 = b): backward.cpp's rules.
template <class OP>
GR_HD static inline gr_real grk_bin_contrib(int side, gr_real g, gr_real a, gr_real b, gr_real y) {
  return side == 0 ? OP::bwd_a(g, a, b, y, (gr_real)0) : OP::bwd_b(g, a, b, y, (gr_real)0);
}

// One thread per slot i of the side's input: it walks the output elements that map to i in
// ascending e (an odometer over the dims where the input is stretched, last dim fastest) and adds
// each contribution straight into the slot, as backward.cpp's for_each_broadcast walk does.
template <class OP>
GR_HD static inline void grk_binary_bwd(int side, const gr_real* g, const gr_real* a, const gr_real* b, const gr_real* y,
                                        gr_real* slot, const long long* m, long long nslot) {
  const long long r = m[0];
  const long long* xs = m + (side == 0 ? 17 : 25);
  GRK_LOOP(i, nslot) {
    if (r == 0) {
      slot[i] = gr_accumulate(slot[i], grk_bin_contrib<OP>(side, g[i], a[i], b[i], y[i]));
      continue;
    }
    long long idx[GRK_MAXD];
    long long rem = i;
    for (long long d = r - 1; d >= 0; --d) {
      const long long xd = xs[d] == 0 ? 1 : m[1 + d];
      idx[d] = rem % xd;
      rem /= xd;
    }
    for (;;) {
      long long e = 0, ia = 0, ib = 0;
      for (long long d = 0; d < r; ++d) {
        e += idx[d] * m[9 + d];
        ia += idx[d] * m[17 + d];
        ib += idx[d] * m[25 + d];
      }
      slot[i] = gr_accumulate(slot[i], grk_bin_contrib<OP>(side, g[e], a[ia], b[ib], y[e]));
      long long d = r - 1;
      for (; d >= 0; --d) {  // advance over the stretched dims only
        if (xs[d] != 0 || m[1 + d] == 1) continue;
        if (++idx[d] < m[1 + d]) break;
        idx[d] = 0;
      }
      if (d < 0) break;
    }
  }
}

// ---- binary elementwise with numpy broadcasting: grk_<stem>_fwd, _bwd_a, _bwd_b -------------------
// Metadata block (long long): m[0] = rank r of the output (0: a, b and out share one shape, ia = ib = e);
// m[1..8] out dims, m[9..16] out row-major strides, m[17..24] a's strides aligned into the out dims
// (0 where a is stretched or missing), m[25..32] b's likewise.
#define GRK_BINARY_KERNELS(stem)                                                                                \
  extern "C" __global__ void grk_##stem##_fwd(const gr_real* a, const gr_real* b, gr_real* y, const long long* m,  \
                                              long long n) {                                                   \
    grk_binary_fwd<gr_ew_##stem>(a, b, y, m, n);                                                                \
    GRK_TEST_FLIP(GR_KERNEL_STR(grk_##stem##_fwd), y, n)                                                                    \
  }                                                                                                             \
  GR_EXPORT_KERNEL(grk_##stem##_fwd)                                                                            \
  extern "C" __global__ void grk_##stem##_bwd_a(const gr_real* g, const gr_real* a, const gr_real* b,              \
                                                const gr_real* y, gr_real* slot, const long long* m, long long n) { \
    grk_binary_bwd<gr_ew_##stem>(0, g, a, b, y, slot, m, n);                                                    \
  }                                                                                                             \
  GR_EXPORT_KERNEL(grk_##stem##_bwd_a)                                                                          \
  extern "C" __global__ void grk_##stem##_bwd_b(const gr_real* g, const gr_real* a, const gr_real* b,              \
                                                const gr_real* y, gr_real* slot, const long long* m, long long n) { \
    grk_binary_bwd<gr_ew_##stem>(1, g, a, b, y, slot, m, n);                                                    \
  }                                                                                                             \
  GR_EXPORT_KERNEL(grk_##stem##_bwd_b)

// ---- unary elementwise: y[e] = f(x[e], s); slot[e] += c(g[e], x[e], y[e], s): grk_<stem>_fwd, _bwd --------
#define GRK_UNARY_KERNELS(stem)                                                                                 \
  extern "C" __global__ void grk_##stem##_fwd(const gr_real* x, gr_real* y, double s, long long n) {              \
    GRK_LOOP(e, n) y[e] = gr_ew_##stem::fwd(x[e], (gr_real)0, GRK_REAL(s));                                     \
    GRK_TEST_FLIP(GR_KERNEL_STR(grk_##stem##_fwd), y, n)                                                                    \
  }                                                                                                             \
  GR_EXPORT_KERNEL(grk_##stem##_fwd)                                                                            \
  extern "C" __global__ void grk_##stem##_bwd(const gr_real* g, const gr_real* x, const gr_real* y, gr_real* slot,  \
                                              double s, long long n) {                                          \
    GRK_LOOP(e, n) slot[e] = gr_accumulate(slot[e], gr_ew_##stem::bwd_a(g[e], x[e], (gr_real)0, y[e], GRK_REAL(s))); \
  }                                                                                                             \
  GR_EXPORT_KERNEL(grk_##stem##_bwd)

#define GRK_ELEMENTWISE_KERNELS(E, name, arity, cls, attrs, stem, ...) \
  GR_OP_IF_UNARY_##cls(GRK_UNARY_KERNELS(stem)) GR_OP_IF_BINARY_##cls(GRK_BINARY_KERNELS(stem))
GR_OP_TABLE(GRK_ELEMENTWISE_KERNELS)

// reshape: the same elements in the same order; its gradient lands element for element.
extern "C" __global__ void grk_reshape_fwd(const gr_real* x, gr_real* y, double s, long long n) {
  (void)s;
  GRK_LOOP(e, n) y[e] = x[e];
}
GR_EXPORT_KERNEL(grk_reshape_fwd)
extern "C" __global__ void grk_reshape_bwd(const gr_real* g, const gr_real* x, const gr_real* y, gr_real* slot, double s,
                                           long long n) {
  (void)x;
  (void)y;
  (void)s;
  GRK_LOOP(e, n) slot[e] = gr_accumulate(slot[e], g[e]);
}
GR_EXPORT_KERNEL(grk_reshape_bwd)

// ---- reductions -------------------------------------------------------------------------------------
// All axes: ONE thread, gr_sum (kernels/gr_reduce.h, as reduce.cpp); mean divides by n.
extern "C" __global__ void grk_sum_all_fwd(const gr_real* x, gr_real* y, long long n, long long mean) {
  if (!GRK_FIRST_THREAD) return;
  const gr_real acc = gr_sum(x, n, 1);
  y[0] = mean ? GRK_DIV(acc, (gr_real)n) : acc;
}
GR_EXPORT_KERNEL(grk_sum_all_fwd)

// Every element gets g[0] (mean: g[0] / n).
extern "C" __global__ void grk_sum_all_bwd(const gr_real* g, gr_real* slot, long long n, long long mean) {
  GRK_LOOP(e, n) {
    const gr_real gi = mean ? GRK_DIV(g[0], (gr_real)n) : g[0];
    slot[e] = gr_accumulate(slot[e], gi);
  }
}
GR_EXPORT_KERNEL(grk_sum_all_bwd)

// One axis, as lanes [outer, len, inner]: thread per lane (o, i), gr_sum over the strided lane (sum_lanes).
extern "C" __global__ void grk_sum_axis_fwd(const gr_real* x, gr_real* y, long long outer, long long len,
                                            long long inner, long long mean) {
  GRK_LOOP(l, outer * inner) {
    const long long o = l / inner, i = l - o * inner;
    const gr_real acc = gr_sum(x + o * len * inner + i, len, inner);
    y[l] = mean ? GRK_DIV(acc, (gr_real)len) : acc;
  }
}
GR_EXPORT_KERNEL(grk_sum_axis_fwd)

extern "C" __global__ void grk_sum_axis_bwd(const gr_real* g, gr_real* slot, long long outer, long long len,
                                            long long inner, long long mean) {
  GRK_LOOP(e, outer * len * inner) {
    const long long i = e % inner, o = e / (len * inner);
    const gr_real gl = g[o * inner + i];
    const gr_real gi = mean ? GRK_DIV(gl, (gr_real)len) : gl;
    slot[e] = gr_accumulate(slot[e], gi);
  }
}
GR_EXPORT_KERNEL(grk_sum_axis_bwd)

// ---- contractions: [batches] × [M,K]·[K,N]; a batch stride of 0 = a shared (broadcast) batch -----------
// C[b,i,j] = gr_dot(row i of A, column j of B) (matmul.h's contract, kernels/gr_reduce.h).
GR_HD static inline void grk_bmm_fwd_impl(const gr_real* A, const gr_real* B, gr_real* C, long long batches, long long M,
                                          long long K, long long N, long long sa, long long sb) {
  GRK_LOOP(e, batches * M * N) {
    const long long bt = e / (M * N), r = e - bt * M * N, i = r / N, j = r - i * N;
    const gr_real* a = A + bt * sa + i * K;
    const gr_real* b = B + bt * sb + j;
    C[e] = gr_dot(a, 1, b, N, K);
  }
}

// dA[i,k] = dA[i,k] + Σ_{j asc} g[i,j]·B[k,j], a fresh accumulator per batch; a shared A (sa = 0,
// slot count M·K) sums its batches in ascending order, each added into the slot (backward.cpp bmm()).
GR_HD static inline void grk_bmm_bwd_a_impl(const gr_real* g, const gr_real* B, gr_real* dA, long long batches, long long M,
                                            long long K, long long N, long long sa, long long sb) {
  const long long nslot = (sa == 0 ? 1 : batches) * M * K;
  GRK_LOOP(s, nslot) {
    const long long own = s / (M * K), r = s - own * M * K, i = r / K, k = r - i * K;
    const long long b0 = sa == 0 ? 0 : own, b1 = sa == 0 ? batches : own + 1;
    for (long long bt = b0; bt < b1; ++bt) {
      const gr_real* gr = g + bt * M * N + i * N;
      const gr_real* br = B + bt * sb + k * N;
      dA[s] = GRK_ADD(dA[s], gr_dot(gr, 1, br, 1, N));
    }
  }
}

// dB[k,j] = dB[k,j] + Σ_{i asc} A[i,k]·g[i,j], likewise.
GR_HD static inline void grk_bmm_bwd_b_impl(const gr_real* A, const gr_real* g, gr_real* dB, long long batches, long long M,
                                            long long K, long long N, long long sa, long long sb) {
  const long long nslot = (sb == 0 ? 1 : batches) * K * N;
  GRK_LOOP(s, nslot) {
    const long long own = s / (K * N), r = s - own * K * N, k = r / N, j = r - k * N;
    const long long b0 = sb == 0 ? 0 : own, b1 = sb == 0 ? batches : own + 1;
    for (long long bt = b0; bt < b1; ++bt) {
      const gr_real* ac = A + bt * sa + k;
      const gr_real* gc = g + bt * M * N + j;
      dB[s] = GRK_ADD(dB[s], gr_dot(ac, K, gc, N, M));
    }
  }
}

extern "C" __global__ void grk_matmul_fwd(const gr_real* A, const gr_real* B, gr_real* C, long long M, long long K,
                                          long long N) {
  grk_bmm_fwd_impl(A, B, C, 1, M, K, N, 0, 0);
}
GR_EXPORT_KERNEL(grk_matmul_fwd)
extern "C" __global__ void grk_matmul_bwd_a(const gr_real* g, const gr_real* B, gr_real* dA, long long M, long long K,
                                            long long N) {
  grk_bmm_bwd_a_impl(g, B, dA, 1, M, K, N, 0, 0);
}
GR_EXPORT_KERNEL(grk_matmul_bwd_a)
extern "C" __global__ void grk_matmul_bwd_b(const gr_real* A, const gr_real* g, gr_real* dB, long long M, long long K,
                                            long long N) {
  grk_bmm_bwd_b_impl(A, g, dB, 1, M, K, N, 0, 0);
}
GR_EXPORT_KERNEL(grk_matmul_bwd_b)

extern "C" __global__ void grk_bmm_fwd(const gr_real* A, const gr_real* B, gr_real* C, long long batches, long long M,
                                       long long K, long long N, long long sa, long long sb) {
  grk_bmm_fwd_impl(A, B, C, batches, M, K, N, sa, sb);
}
GR_EXPORT_KERNEL(grk_bmm_fwd)
extern "C" __global__ void grk_bmm_bwd_a(const gr_real* g, const gr_real* B, gr_real* dA, long long batches, long long M,
                                         long long K, long long N, long long sa, long long sb) {
  grk_bmm_bwd_a_impl(g, B, dA, batches, M, K, N, sa, sb);
}
GR_EXPORT_KERNEL(grk_bmm_bwd_a)
extern "C" __global__ void grk_bmm_bwd_b(const gr_real* A, const gr_real* g, gr_real* dB, long long batches, long long M,
                                         long long K, long long N, long long sa, long long sb) {
  grk_bmm_bwd_b_impl(A, g, dB, batches, M, K, N, sa, sb);
}
GR_EXPORT_KERNEL(grk_bmm_bwd_b)

// ---- data movement ------------------------------------------------------------------------------------
// transpose of the last two axes: x [mats, R, C] → y [mats, C, R].
extern "C" __global__ void grk_transpose_fwd(const gr_real* x, gr_real* y, long long mats, long long R, long long C) {
  GRK_LOOP(e, mats * R * C) {
    const long long m = e / (R * C), rem = e - m * R * C, c = rem / R, r = rem - c * R;
    y[e] = x[m * R * C + r * C + c];
  }
}
GR_EXPORT_KERNEL(grk_transpose_fwd)
extern "C" __global__ void grk_transpose_bwd(const gr_real* g, gr_real* slot, long long mats, long long R, long long C) {
  GRK_LOOP(s, mats * R * C) {
    const long long m = s / (R * C), rem = s - m * R * C, r = rem / C, c = rem - r * C;
    slot[s] = gr_accumulate(slot[s], g[m * R * C + c * R + r]);
  }
}
GR_EXPORT_KERNEL(grk_transpose_bwd)

// slice: metadata m[0] = rank r, m[1..8] out dims, m[9..16] the input's row-major strides,
// m[17..24] the window starts. Out element e reads (and its gradient lands in) input index src(e);
// the window is injective, so every slot gets at most one contribution.
GR_HD static inline long long grk_slice_src(const long long* m, long long e) {
  const long long r = m[0];
  long long rem = e, src = 0;
  for (long long d = r - 1; d >= 0; --d) {
    const long long c = rem % m[1 + d];
    rem /= m[1 + d];
    src += (m[17 + d] + c) * m[9 + d];
  }
  return src;
}
extern "C" __global__ void grk_slice_fwd(const gr_real* x, gr_real* y, const long long* m, long long n) {
  GRK_LOOP(e, n) y[e] = x[grk_slice_src(m, e)];
}
GR_EXPORT_KERNEL(grk_slice_fwd)
extern "C" __global__ void grk_slice_bwd(const gr_real* g, gr_real* slot, const long long* m, long long n) {
  GRK_LOOP(e, n) {
    const long long s = grk_slice_src(m, e);
    slot[s] = gr_accumulate(slot[s], g[e]);
  }
}
GR_EXPORT_KERNEL(grk_slice_bwd)

// concat along an axis: per outer index, a's block of ca elements then b's block of cb.
extern "C" __global__ void grk_concat_fwd(const gr_real* a, const gr_real* b, gr_real* y, long long outer, long long ca,
                                          long long cb) {
  GRK_LOOP(e, outer * (ca + cb)) {
    const long long o = e / (ca + cb), j = e - o * (ca + cb);
    y[e] = j < ca ? a[o * ca + j] : b[o * cb + (j - ca)];
  }
}
GR_EXPORT_KERNEL(grk_concat_fwd)
extern "C" __global__ void grk_concat_bwd_a(const gr_real* g, gr_real* slot, long long outer, long long ca,
                                            long long cb) {
  GRK_LOOP(s, outer * ca) {
    const long long o = s / ca, j = s - o * ca;
    slot[s] = gr_accumulate(slot[s], g[o * (ca + cb) + j]);
  }
}
GR_EXPORT_KERNEL(grk_concat_bwd_a)
extern "C" __global__ void grk_concat_bwd_b(const gr_real* g, gr_real* slot, long long outer, long long ca,
                                            long long cb) {
  GRK_LOOP(s, outer * cb) {
    const long long o = s / cb, j = s - o * cb;
    slot[s] = gr_accumulate(slot[s], g[o * (ca + cb) + ca + j]);
  }
}
GR_EXPORT_KERNEL(grk_concat_bwd_b)

// ---- lane ops: one thread per lane (o, i) of [outer, len, inner], the shared lane functions ------------
#define GRK_LANE_KERNELS(name)                                                                                  \
  extern "C" __global__ void grk_##name##_fwd(const gr_real* x, gr_real* y, long long outer, long long len,        \
                                              long long inner) {                                                \
    GRK_LOOP(l, outer * inner) {                                                                                \
      const long long o = l / inner, i = l - o * inner, base = o * len * inner + i;                             \
      gr_##name##_lane_fwd(x + base, y + base, len, inner);                                                     \
    }                                                                                                           \
  }                                                                                                             \
  GR_EXPORT_KERNEL(grk_##name##_fwd)                                                                            \
  extern "C" __global__ void grk_##name##_bwd(const gr_real* g, const gr_real* y, gr_real* slot, long long outer,  \
                                              long long len, long long inner) {                                 \
    GRK_LOOP(l, outer * inner) {                                                                                \
      const long long o = l / inner, i = l - o * inner, base = o * len * inner + i;                             \
      gr_##name##_lane_bwd(g + base, y + base, slot + base, len, inner);                                        \
    }                                                                                                           \
  }                                                                                                             \
  GR_EXPORT_KERNEL(grk_##name##_bwd)

GRK_LANE_KERNELS(softmax)
GRK_LANE_KERNELS(log_softmax)

// causal softmax: one thread per last-axis lane l of [outer = ...·Tq, len = Tk]; lane l is query row
// l mod tq and sees its first min(l mod tq + 1, len) keys (gr_softmax_causal_lane_*; the masked tail
// is +0 forward and never touched backward).
extern "C" __global__ void grk_softmax_causal_fwd(const gr_real* x, gr_real* y, long long outer, long long len,
                                                  long long tq) {
  GRK_LOOP(l, outer) gr_softmax_causal_lane_fwd(x + l * len, y + l * len, len, 1LL, gr_causal_visible(l, tq, len));
}
GR_EXPORT_KERNEL(grk_softmax_causal_fwd)
extern "C" __global__ void grk_softmax_causal_bwd(const gr_real* g, const gr_real* y, gr_real* slot, long long outer,
                                                  long long len, long long tq) {
  GRK_LOOP(l, outer)
  gr_softmax_causal_lane_bwd(g + l * len, y + l * len, slot + l * len, len, 1LL, gr_causal_visible(l, tq, len));
}
GR_EXPORT_KERNEL(grk_softmax_causal_bwd)

// softmax cross-entropy forward: ONE thread sums the row values in ascending row order.
extern "C" __global__ void grk_sce_fwd(const gr_real* x, const gr_real* t, gr_real* y, long long rows, long long C) {
  if (!GRK_FIRST_THREAD) return;
  gr_real total = 0;
  for (long long r = 0; r < rows; ++r) total = GRK_ADD(total, gr_sce_row_fwd(x + r * C, t + r * C, C));
  y[0] = gr_sce_finish(total, rows);
}
GR_EXPORT_KERNEL(grk_sce_fwd)

// Backward: one thread per row (rows touch disjoint slots); sx or st may be null (no gradient there).
extern "C" __global__ void grk_sce_bwd(const gr_real* g, const gr_real* x, const gr_real* t, gr_real* sx, gr_real* st,
                                       long long rows, long long C) {
  GRK_LOOP(r, rows) {
    const gr_real q = GRK_DIV(g[0], (gr_real)rows);
    gr_sce_row_bwd(x + r * C, t + r * C, q, sx ? sx + r * C : 0, st ? st + r * C : 0, C);
  }
}
GR_EXPORT_KERNEL(grk_sce_bwd)

// ---- fold reductions (max, ...) over a lane of [outer, len, inner] (or over everything: 1, n, 1): one thread
// per lane, grk_<stem>_fwd / _bwd from the rows (gr_<stem>_fold_fwd / _bwd; lanes own disjoint slots) ----------
#define GRK_FOLD_KERNELS(stem)                                                                                  \
  extern "C" __global__ void grk_##stem##_fwd(const gr_real* x, gr_real* y, long long outer, long long len,       \
                                              long long inner) {                                                \
    GRK_LOOP(l, outer * inner) {                                                                                \
      const long long o = l / inner, i = l - o * inner, base = o * len * inner + i;                             \
      y[l] = gr_##stem##_fold_fwd(x + base, len, inner);                                                        \
    }                                                                                                           \
  }                                                                                                             \
  GR_EXPORT_KERNEL(grk_##stem##_fwd)                                                                            \
  extern "C" __global__ void grk_##stem##_bwd(const gr_real* g, const gr_real* x, const gr_real* y, gr_real* slot, \
                                              long long outer, long long len, long long inner) {                \
    GRK_LOOP(l, outer * inner) {                                                                                \
      const long long o = l / inner, i = l - o * inner, base = o * len * inner + i;                             \
      gr_##stem##_fold_bwd(g[l], x + base, y[l], slot + base, len, inner);                                      \
    }                                                                                                           \
  }                                                                                                             \
  GR_EXPORT_KERNEL(grk_##stem##_bwd)

#define GRK_FOLD_OP_KERNELS(E, name, arity, cls, attrs, stem, fwd, ...) GR_OP_IF_FOLD(cls, fwd, GRK_FOLD_KERNELS(stem))
GR_OP_TABLE(GRK_FOLD_OP_KERNELS)

// ---- row ops (Class Row: layer_norm, ...) over the last axis, one thread per row: grk_<stem>_fwd, _bwd ----
#define GRK_ROW_KERNELS(stem)                                                                                   \
  extern "C" __global__ void grk_##stem##_fwd(const gr_real* x, gr_real* y, long long rows, long long len, double eps) { \
    GRK_LOOP(r, rows) gr_##stem##_lane_fwd(x + r * len, y + r * len, len, 1LL, GRK_REAL(eps));                 \
  }                                                                                                             \
  GR_EXPORT_KERNEL(grk_##stem##_fwd)                                                                            \
  extern "C" __global__ void grk_##stem##_bwd(const gr_real* g, const gr_real* x, const gr_real* y, gr_real* slot,  \
                                              long long rows, long long len, double eps) {                      \
    GRK_LOOP(r, rows) gr_##stem##_lane_bwd(g + r * len, x + r * len, y + r * len, slot + r * len, len, 1LL, GRK_REAL(eps)); \
  }                                                                                                             \
  GR_EXPORT_KERNEL(grk_##stem##_bwd)

#define GRK_ROW_OP_KERNELS(E, name, arity, cls, attrs, stem, ...) GR_OP_IF_ROW_##cls(GRK_ROW_KERNELS(stem))
GR_OP_TABLE(GRK_ROW_OP_KERNELS)

// ---- batch-statistics ops (Class Batch: batch_norm), one thread per channel: grk_<stem>_fwd, _bwd, _update ----
// rm, rv: the running statistics [C]; key = {seed, step, training} in the metadata slab (as dropout's):
// training uses the batch statistics and _update writes the step's running statistics in place (it runs
// right after _fwd in the forward plan); outside training _update does nothing (gr_ops_batch.h).
#define GRK_BATCH_KERNELS(stem)                                                                                  \
  extern "C" __global__ void grk_##stem##_fwd(const gr_real* x, const gr_real* rm, const gr_real* rv, gr_real* y,   \
                                              const long long* key, long long N, long long C, long long S,       \
                                              double eps) {                                                      \
    GRK_LOOP(c, C) gr_##stem##_chan_fwd(x, rm, rv, y, N, C, S, c, key[2] != 0, GRK_REAL(eps));                   \
  }                                                                                                              \
  GR_EXPORT_KERNEL(grk_##stem##_fwd)                                                                             \
  extern "C" __global__ void grk_##stem##_bwd(const gr_real* g, const gr_real* x, const gr_real* y,                \
                                              const gr_real* rm, const gr_real* rv, gr_real* slot,                \
                                              const long long* key, long long N, long long C, long long S,       \
                                              double eps) {                                                      \
    GRK_LOOP(c, C) gr_##stem##_chan_bwd(g, x, y, rm, rv, slot, N, C, S, c, key[2] != 0, GRK_REAL(eps));          \
  }                                                                                                              \
  GR_EXPORT_KERNEL(grk_##stem##_bwd)                                                                             \
  extern "C" __global__ void grk_##stem##_update(const gr_real* x, gr_real* rm, gr_real* rv, const long long* key, \
                                                 long long N, long long C, long long S, double momentum) {       \
    if (!key[2]) return;                                                                                         \
    GRK_LOOP(c, C) gr_##stem##_chan_update(x, rm, rv, N, C, S, c, GRK_REAL(momentum));                           \
  }                                                                                                              \
  GR_EXPORT_KERNEL(grk_##stem##_update)

#define GRK_BATCH_OP_KERNELS(E, name, arity, cls, attrs, stem, ...) GR_OP_IF_BATCH_##cls(GRK_BATCH_KERNELS(stem))
GR_OP_TABLE(GRK_BATCH_OP_KERNELS)
// ---- window ops (Class Window: conv2d, max_pool2d, avg_pool2d) over NCHW, the geometry a gr_window block of
// the metadata slab: one thread per output element (grk_<stem>_fwd) or per slot of x (grk_<stem>_bwd_a) or
// of w (grk_<stem>_bwd_b, conv2d), each gr_<stem>_win_* of gr_ops_window.h added once into its slot ----------
#define GRK_WINDOW_KERNELS(stem)                                                                                \
  extern "C" __global__ void grk_##stem##_fwd(const gr_real* x, const gr_real* w, gr_real* y, const long long* m,     \
                                              long long n) {                                                    \
    const gr_window win = gr_window_load(m);                                                                    \
    GRK_LOOP(e, n) y[e] = gr_##stem##_win_fwd<gr_real, gr_real>(x, w, win, e);                                  \
  }                                                                                                             \
  GR_EXPORT_KERNEL(grk_##stem##_fwd)                                                                            \
  extern "C" __global__ void grk_##stem##_bwd_a(const gr_real* g, const gr_real* x, const gr_real* w, gr_real* slot, \
                                                const long long* m, long long n) {                              \
    const gr_window win = gr_window_load(m);                                                                    \
    GRK_LOOP(i, n) slot[i] = gr_accumulate(slot[i], gr_##stem##_win_bwd_a<gr_real, gr_real>(g, x, w, win, i));  \
  }                                                                                                             \
  GR_EXPORT_KERNEL(grk_##stem##_bwd_a)
#define GRK_WINDOW_KERNELS_B(stem)                                                                              \
  extern "C" __global__ void grk_##stem##_bwd_b(const gr_real* g, const gr_real* x, const gr_real* w, gr_real* slot, \
                                                const long long* m, long long n) {                              \
    const gr_window win = gr_window_load(m);                                                                    \
    GRK_LOOP(i, n) slot[i] = gr_accumulate(slot[i], gr_##stem##_win_bwd_b<gr_real, gr_real>(g, x, w, win, i));  \
  }                                                                                                             \
  GR_EXPORT_KERNEL(grk_##stem##_bwd_b)

#define GRK_WINDOW_OP_KERNELS(E, name, arity, cls, attrs, stem, fwd, bwda, bwdb, ...) \
  GR_OP_IF_WINDOW_##cls(GRK_WINDOW_KERNELS(stem) GR_OP_IF_WIN_BWDB_##bwdb(GRK_WINDOW_KERNELS_B(stem)))
GR_OP_TABLE(GRK_WINDOW_OP_KERNELS)

// ---- cross-entropy with class ids: the forward in ONE thread (rows ascending), the backward per row -----
extern "C" __global__ void grk_ce_fwd(const gr_real* x, const gr_real* ids, gr_real* y, long long rows, long long C) {
  if (!GRK_FIRST_THREAD) return;
  gr_real total = 0;
  for (long long r = 0; r < rows; ++r) total = GRK_ADD(total, gr_ce_row_fwd(x + r * C, ids[r], C));
  y[0] = gr_sce_finish(total, rows);
}
GR_EXPORT_KERNEL(grk_ce_fwd)

extern "C" __global__ void grk_ce_bwd(const gr_real* g, const gr_real* x, const gr_real* ids, gr_real* sx, long long rows,
                                      long long C) {
  GRK_LOOP(r, rows) {
    const gr_real q = GRK_DIV(g[0], (gr_real)rows);
    gr_ce_row_bwd(x + r * C, ids[r], q, sx + r * C, C);
  }
}
GR_EXPORT_KERNEL(grk_ce_bwd)

// ---- dropout: the counter mask of gr_ops_lane.h; key = {seed, step, training} in the metadata slab -----
extern "C" __global__ void grk_dropout_fwd(const gr_real* x, gr_real* y, const long long* key, double rate, long long node,
                                           long long n) {
  const gr_real scale = gr_dropout_scale(GRK_REAL(rate));
  GRK_LOOP(e, n) {
    y[e] = key[2] ? GRK_MUL(x[e], gr_dropout_factor((unsigned long long)key[0], (unsigned long long)key[1],
                                                    (unsigned long long)node, (unsigned long long)e, rate, scale))
                  : x[e];
  }
}
GR_EXPORT_KERNEL(grk_dropout_fwd)

extern "C" __global__ void grk_dropout_bwd(const gr_real* g, gr_real* slot, const long long* key, double rate, long long node,
                                           long long n) {
  const gr_real scale = gr_dropout_scale(GRK_REAL(rate));
  GRK_LOOP(e, n) {
    const gr_real c = key[2] ? GRK_MUL(g[e], gr_dropout_factor((unsigned long long)key[0], (unsigned long long)key[1],
                                                               (unsigned long long)node, (unsigned long long)e, rate, scale))
                             : g[e];
    slot[e] = GRK_ADD(slot[e], c);
  }
}
GR_EXPORT_KERNEL(grk_dropout_bwd)
