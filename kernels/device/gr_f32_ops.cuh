// gr_f32_ops.cuh — float twins of the shared scalar and lane definitions (kernels/gr_ops_scalar.h,
// kernels/gr_ops_lane.h) for the f32 replay module only (GR_F32). Same formulas, same orders, every
// operation a float rn intrinsic; exp and log are the project's deterministic double functions
// rounded once to float (__double2float_rn), so an f32 program gives the same bits on the host
// backend and on CUDA. f32 is a separate mode with a tolerance against the f64 tape (docs/replay.md);
// these overloads are picked by the kernels' argument types, so the kernel text is shared.
#if defined(GR_F32) && GR_F32

GR_HD static inline float gr_exp(float x) { return __double2float_rn(gr_exp((double)x)); }
GR_HD static inline float gr_log(float x) { return __double2float_rn(gr_log((double)x)); }
GR_HD static inline float gr_sqrt(float x) { return __fsqrt_rn(x); }
GR_HD static inline float gr_accumulate(float slot, float c) { return __fadd_rn(slot, c); }

GR_HD static inline float gr_add_fwd(float a, float b) { return __fadd_rn(a, b); }
GR_HD static inline float gr_add_bwd_a(float g) { return g; }
GR_HD static inline float gr_add_bwd_b(float g) { return g; }
GR_HD static inline float gr_sub_fwd(float a, float b) { return __fsub_rn(a, b); }
GR_HD static inline float gr_sub_bwd_a(float g) { return g; }
GR_HD static inline float gr_sub_bwd_b(float g) { return -g; }
GR_HD static inline float gr_mul_fwd(float a, float b) { return __fmul_rn(a, b); }
GR_HD static inline float gr_mul_bwd_a(float g, float b) { return __fmul_rn(g, b); }
GR_HD static inline float gr_mul_bwd_b(float g, float a) { return __fmul_rn(g, a); }
GR_HD static inline float gr_div_fwd(float a, float b) { return __fdiv_rn(a, b); }
GR_HD static inline float gr_div_bwd_a(float g, float b) { return __fdiv_rn(g, b); }
GR_HD static inline float gr_div_bwd_b(float g, float y, float b) { return -__fdiv_rn(__fmul_rn(g, y), b); }

GR_HD static inline float gr_neg_fwd(float x) { return -x; }
GR_HD static inline float gr_neg_bwd(float g) { return -g; }
GR_HD static inline float gr_adds_fwd(float x, float s) { return __fadd_rn(x, s); }
GR_HD static inline float gr_adds_bwd(float g) { return g; }
GR_HD static inline float gr_muls_fwd(float x, float s) { return __fmul_rn(x, s); }
GR_HD static inline float gr_muls_bwd(float g, float s) { return __fmul_rn(g, s); }
GR_HD static inline float gr_relu_fwd(float x) { return x > 0.0f ? x : (x != x ? x : 0.0f); }
GR_HD static inline float gr_relu_bwd(float g, float x) { return x > 0.0f ? g : 0.0f; }
GR_HD static inline float gr_sigmoid_fwd(float x) { return __fdiv_rn(1.0f, __fadd_rn(1.0f, gr_exp(-x))); }
GR_HD static inline float gr_sigmoid_bwd(float g, float y) { return __fmul_rn(g, __fmul_rn(y, __fsub_rn(1.0f, y))); }
GR_HD static inline float gr_tanh_fwd(float x) {
  const int sign = (int)0x80000000u;
  const float ax = __int_as_float(__float_as_int(x) & ~sign);
  const float t = gr_exp(__fmul_rn(-2.0f, ax));
  const float r = __fdiv_rn(__fsub_rn(1.0f, t), __fadd_rn(1.0f, t));
  return __int_as_float((__float_as_int(r) & ~sign) | (__float_as_int(x) & sign));
}
GR_HD static inline float gr_tanh_bwd(float g, float y) { return __fmul_rn(g, __fsub_rn(1.0f, __fmul_rn(y, y))); }
GR_HD static inline float gr_exp_fwd(float x) { return gr_exp(x); }
GR_HD static inline float gr_exp_bwd(float g, float y) { return __fmul_rn(g, y); }
GR_HD static inline float gr_log_fwd(float x) { return gr_log(x); }
GR_HD static inline float gr_log_bwd(float g, float x) { return __fdiv_rn(g, x); }
GR_HD static inline float gr_sqrt_fwd(float x) { return gr_sqrt(x); }
GR_HD static inline float gr_sqrt_bwd(float g, float y) { return __fdiv_rn(g, __fmul_rn(2.0f, y)); }

GR_HD static inline float gr_lane_max(const float* x, long long len, long long stride) {
  float m = x[0];
  for (long long k = 1; k < len; ++k)
    if (x[k * stride] > m) m = x[k * stride];
  return m;
}
GR_HD static inline float gr_lane_sumexp(const float* x, long long len, long long stride, float m) {
  float s = 0.0f;
  for (long long k = 0; k < len; ++k) s = __fadd_rn(s, gr_exp(__fsub_rn(x[k * stride], m)));
  return s;
}
GR_HD static inline void gr_softmax_lane_fwd(const float* x, float* y, long long len, long long stride) {
  const float m = gr_lane_max(x, len, stride);
  float s = 0.0f;
  for (long long k = 0; k < len; ++k) {
    const float e = gr_exp(__fsub_rn(x[k * stride], m));
    y[k * stride] = e;
    s = __fadd_rn(s, e);
  }
  for (long long k = 0; k < len; ++k) y[k * stride] = __fdiv_rn(y[k * stride], s);
}
GR_HD static inline void gr_softmax_lane_bwd(const float* g, const float* y, float* slot, long long len,
                                             long long stride) {
  float d = 0.0f;
  for (long long k = 0; k < len; ++k) d = __fadd_rn(d, __fmul_rn(g[k * stride], y[k * stride]));
  for (long long k = 0; k < len; ++k) {
    const long long i = k * stride;
    slot[i] = __fadd_rn(slot[i], __fmul_rn(y[i], __fsub_rn(g[i], d)));
  }
}
GR_HD static inline void gr_log_softmax_lane_fwd(const float* x, float* y, long long len, long long stride) {
  const float m = gr_lane_max(x, len, stride);
  const float l = gr_log(gr_lane_sumexp(x, len, stride, m));
  for (long long k = 0; k < len; ++k) y[k * stride] = __fsub_rn(__fsub_rn(x[k * stride], m), l);
}
GR_HD static inline void gr_log_softmax_lane_bwd(const float* g, const float* y, float* slot, long long len,
                                                 long long stride) {
  float sg = 0.0f;
  for (long long k = 0; k < len; ++k) sg = __fadd_rn(sg, g[k * stride]);
  for (long long k = 0; k < len; ++k) {
    const long long i = k * stride;
    slot[i] = __fadd_rn(slot[i], __fsub_rn(g[i], __fmul_rn(gr_exp(y[i]), sg)));
  }
}
GR_HD static inline float gr_sce_row_fwd(const float* x, const float* t, long long len) {
  const float m = gr_lane_max(x, len, 1);
  const float l = gr_log(gr_lane_sumexp(x, len, 1, m));
  float r = 0.0f;
  for (long long k = 0; k < len; ++k) r = __fadd_rn(r, __fmul_rn(t[k], __fsub_rn(__fsub_rn(x[k], m), l)));
  return r;
}
GR_HD static inline float gr_sce_finish(float row_sum, long long rows) { return __fdiv_rn(-row_sum, (float)rows); }
GR_HD static inline void gr_sce_row_bwd(const float* x, const float* t, float q, float* slot_x, float* slot_t,
                                        long long len) {
  const float m = gr_lane_max(x, len, 1);
  const float l = gr_log(gr_lane_sumexp(x, len, 1, m));
  float tt = 0.0f;
  for (long long k = 0; k < len; ++k) tt = __fadd_rn(tt, t[k]);
  for (long long k = 0; k < len; ++k) {
    const float ls = __fsub_rn(__fsub_rn(x[k], m), l);
    if (slot_x) slot_x[k] = __fadd_rn(slot_x[k], __fmul_rn(q, __fsub_rn(__fmul_rn(gr_exp(ls), tt), t[k])));
    if (slot_t) slot_t[k] = __fadd_rn(slot_t[k], -__fmul_rn(q, ls));
  }
}

#endif
