// gr_ops_lane.h — per-lane arithmetic of the lane ops (softmax, log_softmax, softmax
// cross-entropy), forward and backward: one definition for the CPU tape and every device kernel.
//
// A lane is `len` elements `stride` apart (an axis of a tensor). Orders (the numerics contract):
//   m = running max (x[k] > m replaces; NaN propagates through the later exp/sum)
//   s = Σ_{k ascending} exp(x[k] − m), from 0.0
// softmax      y[k] = exp(x[k] − m) / s
//   backward   d = Σ_{asc} g[k]·y[k];              slot[k] += y[k]·(g[k] − d)
// log_softmax  y[k] = (x[k] − m) − log(s)
//   backward   sg = Σ_{asc} g[k];                  slot[k] += g[k] − exp(y[k])·sg
// softmax cross-entropy of one row with target row t (one-hot or any weights):
//   row value  r = Σ_{asc} t[k]·((x[k] − m) − log(s));   the op's loss is −(Σ_{rows asc} r) / rows
//   backward   with q = g/rows, T = Σ_{asc} t[k], p[k] = exp((x[k] − m) − log(s)):
//              slot_x[k] += q·(p[k]·T − t[k]);          slot_t[k] += −(q·((x[k] − m) − log(s)))
#pragma once
#include "gr_device.h"
#include "gr_math.h"

GR_HD static inline double gr_lane_max(const double* x, long long len, long long stride) {
  double m = x[0];
  for (long long k = 1; k < len; ++k)
    if (x[k * stride] > m) m = x[k * stride];
  return m;
}

GR_HD static inline double gr_lane_sumexp(const double* x, long long len, long long stride, double m) {
  double s = 0.0;
  for (long long k = 0; k < len; ++k) s = __dadd_rn(s, gr_exp(__dsub_rn(x[k * stride], m)));
  return s;
}

GR_HD static inline void gr_softmax_lane_fwd(const double* x, double* y, long long len, long long stride) {
  const double m = gr_lane_max(x, len, stride);
  double s = 0.0;
  for (long long k = 0; k < len; ++k) {
    const double e = gr_exp(__dsub_rn(x[k * stride], m));
    y[k * stride] = e;
    s = __dadd_rn(s, e);
  }
  for (long long k = 0; k < len; ++k) y[k * stride] = __ddiv_rn(y[k * stride], s);
}

GR_HD static inline void gr_softmax_lane_bwd(const double* g, const double* y, double* slot, long long len,
                                             long long stride) {
  double d = 0.0;
  for (long long k = 0; k < len; ++k) d = __dadd_rn(d, __dmul_rn(g[k * stride], y[k * stride]));
  for (long long k = 0; k < len; ++k) {
    const long long i = k * stride;
    slot[i] = __dadd_rn(slot[i], __dmul_rn(y[i], __dsub_rn(g[i], d)));
  }
}

GR_HD static inline void gr_log_softmax_lane_fwd(const double* x, double* y, long long len, long long stride) {
  const double m = gr_lane_max(x, len, stride);
  const double l = gr_log(gr_lane_sumexp(x, len, stride, m));
  for (long long k = 0; k < len; ++k) y[k * stride] = __dsub_rn(__dsub_rn(x[k * stride], m), l);
}

GR_HD static inline void gr_log_softmax_lane_bwd(const double* g, const double* y, double* slot, long long len,
                                                 long long stride) {
  double sg = 0.0;
  for (long long k = 0; k < len; ++k) sg = __dadd_rn(sg, g[k * stride]);
  for (long long k = 0; k < len; ++k) {
    const long long i = k * stride;
    slot[i] = __dadd_rn(slot[i], __dsub_rn(g[i], __dmul_rn(gr_exp(y[i]), sg)));
  }
}

// One row of softmax cross-entropy: returns r = Σ t[k]·log_softmax(x)[k] (contiguous row).
GR_HD static inline double gr_sce_row_fwd(const double* x, const double* t, long long len) {
  const double m = gr_lane_max(x, len, 1);
  const double l = gr_log(gr_lane_sumexp(x, len, 1, m));
  double r = 0.0;
  for (long long k = 0; k < len; ++k) r = __dadd_rn(r, __dmul_rn(t[k], __dsub_rn(__dsub_rn(x[k], m), l)));
  return r;
}

// The loss from the row values' ascending sum.
GR_HD static inline double gr_sce_finish(double row_sum, long long rows) {
  return __ddiv_rn(-row_sum, (double)rows);
}

// Backward of one row. q = g / rows. slot_x or slot_t may be null (no gradient wanted there).
GR_HD static inline void gr_sce_row_bwd(const double* x, const double* t, double q, double* slot_x, double* slot_t,
                                        long long len) {
  const double m = gr_lane_max(x, len, 1);
  const double l = gr_log(gr_lane_sumexp(x, len, 1, m));
  double tt = 0.0;
  for (long long k = 0; k < len; ++k) tt = __dadd_rn(tt, t[k]);
  for (long long k = 0; k < len; ++k) {
    const double ls = __dsub_rn(__dsub_rn(x[k], m), l);
    if (slot_x) slot_x[k] = __dadd_rn(slot_x[k], __dmul_rn(q, __dsub_rn(__dmul_rn(gr_exp(ls), tt), t[k])));
    if (slot_t) slot_t[k] = __dadd_rn(slot_t[k], -__dmul_rn(q, ls));
  }
}
