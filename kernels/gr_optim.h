// gr_optim.h — THE per-element optimizer updates, for the CPU tape's Optimizer (lib/grad) and the
// device optimizer's kernels (kernels/device/gr_opt_kernels.cuh): one text, the same bits.
//
// Per element, with the step's scalars (docs/numerics.md §optimizer):
//   ge = g·cs + α·w                          cs: global-norm clip scale, α: the parameter's L2
//   SGD            w = w − lr·ge
//   SGD momentum   b = μ·b + ge;  d = nesterov ? ge + μ·b : b;  w = w − lr·d     (PyTorch's SGD,
//                  dampening 0; b starts at 0, so the first step's b is ge)
//   Adam / AdamW   w = w·(1 − lr·wd) first (AdamW's decoupled decay; wd = 0 for Adam skips it);
//                  m = β1·m + (1−β1)·ge;  v = β2·v + (1−β2)·(ge·ge);  w = w − (lr_t·m) / (sqrt(v) + ε)
// lr and lr_t = lr·sqrt(1 − β2^t)/(1 − β1^t) come from the host each step (schedules included).
// Templates over the element type, every operation an rn intrinsic (gr_device.h).
#pragma once
#include "gr_device.h"

template <class T> GR_HD static inline T gr_opt_ge(T g, T cs, T alpha, T w) {
  return gr_radd(gr_rmul(g, cs), gr_rmul(alpha, w));
}

template <class T> GR_HD static inline T gr_opt_sgd(T w, T ge, T lr) { return gr_rsub(w, gr_rmul(lr, ge)); }

// Updates the momentum buffer *b and returns the new weight.
template <class T> GR_HD static inline T gr_opt_sgd_momentum(T w, T ge, T* b, T lr, T mu, bool nesterov) {
  const T bi = gr_radd(gr_rmul(mu, *b), ge);
  *b = bi;
  const T d = nesterov ? gr_radd(ge, gr_rmul(mu, bi)) : bi;
  return gr_rsub(w, gr_rmul(lr, d));
}

// AdamW's decoupled decay, before the Adam step: w·(1 − lr·wd); wd = 0 leaves w as it is.
template <class T> GR_HD static inline T gr_opt_decay(T w, T lr, T wd) {
  return wd == T(0) ? w : gr_rmul(w, gr_rsub(T(1), gr_rmul(lr, wd)));
}

// Updates *m and *v and returns the new weight.
template <class T>
GR_HD static inline T gr_opt_adam(T w, T ge, T* m, T* v, T lr_t, T b1, T b2, T omb1, T omb2, T eps) {
  const T mi = gr_radd(gr_rmul(b1, *m), gr_rmul(omb1, ge));
  const T vi = gr_radd(gr_rmul(b2, *v), gr_rmul(omb2, gr_rmul(ge, ge)));
  *m = mi;
  *v = vi;
  return gr_rsub(w, gr_rdiv(gr_rmul(lr_t, mi), gr_radd(gr_sqrt(vi), eps)));
}

// ---- The gradient norm's Σ g·g (docs/numerics.md "Gradient norm") ------------------------------
// GR_NORM_LANES partial sums, each a serial chain lane = lane + g·g (a multiply, then an add: never
// fused). Element e of a parameter — e counted from that parameter's first element — adds into lane
// e % GR_NORM_LANES; parameters follow one another in registration order with the lanes carried
// over (each parameter starts again at lane 0). gr_norm_fold then folds the lanes pairwise — lane j
// += lane j+8, then j+4, j+2, j+1 — and lane 0 is Σ g·g. Sixteen independent chains instead of one:
// one vector register of floats (two of doubles) on the CPU, and no chain as long as the model.
#define GR_NORM_LANES 16

// Adds g[0..n) into the lanes; g[0] is element `first` of its parameter. S is the storage type (an
// f32 CPU tape stores floats in doubles), T the arithmetic type.
template <class T, class S>
GR_HD static inline void gr_norm_lanes(T* lanes, const S* g, long long n, long long first) {
  T acc[GR_NORM_LANES];  // a local copy: the compiler need not assume g aliases the lanes
  for (int j = 0; j < GR_NORM_LANES; ++j) acc[j] = lanes[j];
  long long e = 0;
  for (int j = (int)(first % GR_NORM_LANES); j != 0 && e < n; j = (j + 1) % GR_NORM_LANES, ++e)
    acc[j] = gr_radd(acc[j], gr_rmul(T(g[e]), T(g[e])));  // up to the next multiple of 16
  for (; e + GR_NORM_LANES <= n; e += GR_NORM_LANES)
    for (int j = 0; j < GR_NORM_LANES; ++j) acc[j] = gr_radd(acc[j], gr_rmul(T(g[e + j]), T(g[e + j])));
  for (int j = 0; e < n; ++j, ++e) acc[j] = gr_radd(acc[j], gr_rmul(T(g[e]), T(g[e])));
  for (int j = 0; j < GR_NORM_LANES; ++j) lanes[j] = acc[j];
}

// Lane j's chain over one parameter's g[0..n): its elements j, j + 16, j + 32, ... in ascending
// order — exactly what gr_norm_lanes(lanes, g, n, 0) adds into lane j, one lane at a time, so the
// device can run the 16 lanes as 16 threads (grk_clip_scale) with the same bits.
template <class T, class S>
GR_HD static inline T gr_norm_lane(T lane, const S* g, long long n, int j) {
  for (long long e = j; e < n; e += GR_NORM_LANES) lane = gr_radd(lane, gr_rmul(T(g[e]), T(g[e])));
  return lane;
}

// Σ g·g from the lanes (they are folded in place).
template <class T> GR_HD static inline T gr_norm_fold(T* lanes) {
  for (int w = GR_NORM_LANES / 2; w >= 1; w /= 2)
    for (int j = 0; j < w; ++j) lanes[j] = gr_radd(lanes[j], lanes[j + w]);
  return lanes[0];
}
