// gr_ops_batch.h — per-channel arithmetic of the batch-statistics ops (Class Batch: batch_norm),
// forward, backward and the running-statistics update: one definition for the CPU tape (f64 and f32)
// and every device kernel (host and CUDA).
//
// x is viewed as [N, C, S] (S = H·W for [N,C,H,W], 1 for [N,C]); channel c's M = N·S elements are
// visited in ONE order everywhere: n ascending, then s ascending (element (n·C + c)·S + s).
//   mean = (Σ x) / M          v = Σ (x − mean)²          var = v / M (biased)
//   training:  r = 1 / sqrt(var + eps),            y = (x − mean)·r
//   eval:      r = 1 / sqrt(running_var + eps),    y = (x − running_mean)·r
//   backward (training)  mg = (Σ g) / M,  mgy = (Σ g·y) / M   (two separate sums, in the order above)
//                        slot += r·((g − mg) − y·mgy)           (r recomputed from x, as layer_norm)
//   backward (eval)      slot += g·r
//   running update (each training step, after the forward, from the same sums):
//     running_mean = (1 − m)·running_mean + m·mean
//     running_var  = (1 − m)·running_var  + m·(v / (M − 1))   (the unbiased variance, as PyTorch)
// Every + − · / is one rounding (gr_radd & co., no fma), as layer_norm's lane rule.
#pragma once
#include "gr_device.h"
#include "gr_math.h"

// The index of element k (0 ≤ k < M, the documented order) of channel c.
GR_HD static inline long long gr_batch_at(long long k, long long c, long long C, long long S) {
  const long long n = k / S, s = k - n * S;
  return (n * C + c) * S + s;
}

// Channel c's batch mean (*mean_out) and the sum of squared deviations v (returned).
template <class T>
GR_HD static inline T gr_batch_norm_sums(const T* x, long long N, long long C, long long S, long long c, T* mean_out) {
  const long long M = N * S;
  T s = T(0);
  for (long long k = 0; k < M; ++k) s = gr_radd(s, x[gr_batch_at(k, c, C, S)]);
  const T mean = gr_rdiv(s, (T)M);
  T v = T(0);
  for (long long k = 0; k < M; ++k) {
    const T d = gr_rsub(x[gr_batch_at(k, c, C, S)], mean);
    v = gr_radd(v, gr_rmul(d, d));
  }
  *mean_out = mean;
  return v;
}

// Channel c's shift and factor: y = (x − *shift)·r (training: the batch's; eval: the running ones).
template <class T>
GR_HD static inline T gr_batch_norm_coeffs(const T* x, const T* rm, const T* rv, long long N, long long C, long long S,
                                           long long c, bool training, T eps, T* shift) {
  if (!training) {
    *shift = rm[c];
    return gr_rdiv(T(1), gr_sqrt(gr_radd(rv[c], eps)));
  }
  const T v = gr_batch_norm_sums(x, N, C, S, c, shift);
  return gr_rdiv(T(1), gr_sqrt(gr_radd(gr_rdiv(v, (T)(N * S)), eps)));
}

template <class T>
GR_HD static inline void gr_batch_norm_chan_fwd(const T* x, const T* rm, const T* rv, T* y, long long N, long long C,
                                                long long S, long long c, bool training, T eps) {
  T shift;
  const T r = gr_batch_norm_coeffs(x, rm, rv, N, C, S, c, training, eps, &shift);
  for (long long k = 0; k < N * S; ++k) {
    const long long i = gr_batch_at(k, c, C, S);
    y[i] = gr_rmul(gr_rsub(x[i], shift), r);
  }
}

template <class T>
GR_HD static inline void gr_batch_norm_chan_bwd(const T* g, const T* x, const T* y, const T* rm, const T* rv, T* slot,
                                                long long N, long long C, long long S, long long c, bool training, T eps) {
  T shift;
  const T r = gr_batch_norm_coeffs(x, rm, rv, N, C, S, c, training, eps, &shift);
  const long long M = N * S;
  if (!training) {
    for (long long k = 0; k < M; ++k) {
      const long long i = gr_batch_at(k, c, C, S);
      slot[i] = gr_radd(slot[i], gr_rmul(g[i], r));
    }
    return;
  }
  T sg = T(0), sgy = T(0);
  for (long long k = 0; k < M; ++k) sg = gr_radd(sg, g[gr_batch_at(k, c, C, S)]);
  for (long long k = 0; k < M; ++k) {
    const long long i = gr_batch_at(k, c, C, S);
    sgy = gr_radd(sgy, gr_rmul(g[i], y[i]));
  }
  const T mg = gr_rdiv(sg, (T)M), mgy = gr_rdiv(sgy, (T)M);
  for (long long k = 0; k < M; ++k) {
    const long long i = gr_batch_at(k, c, C, S);
    slot[i] = gr_radd(slot[i], gr_rmul(r, gr_rsub(gr_rsub(g[i], mg), gr_rmul(y[i], mgy))));
  }
}

// The running statistics of channel c after one training step (in place). M ≥ 2 (the op refuses
// a training batch with one value per channel, as PyTorch does).
template <class T>
GR_HD static inline void gr_batch_norm_chan_update(const T* x, T* rm, T* rv, long long N, long long C, long long S,
                                                   long long c, T momentum) {
  T mean;
  const T v = gr_batch_norm_sums(x, N, C, S, c, &mean);
  const T keep = gr_rsub(T(1), momentum);
  rm[c] = gr_radd(gr_rmul(keep, rm[c]), gr_rmul(momentum, mean));
  rv[c] = gr_radd(gr_rmul(keep, rv[c]), gr_rmul(momentum, gr_rdiv(v, (T)(N * S - 1))));
}
