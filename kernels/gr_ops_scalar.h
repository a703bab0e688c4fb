// gr_ops_scalar.h — THE per-element arithmetic of every elementwise op, forward and backward.
//
// One definition for every path (DESIGN §2): the CPU tape calls these in its loops; per-node and
// fused device kernels and the scalar emitter inline the same functions. Only the loops differ.
//
// Naming: gr_<op>_fwd computes the output element; gr_<op>_bwd_<input> returns that input's
// contribution c, which the caller adds into the input's gradient slot as `slot = slot + c`.
//   x, a, b : input elements      y : the output element      g : dL/dy      s : the op's scalar
// Negation (-v) is exact in IEEE arithmetic, so it needs no intrinsic.
#pragma once
#include "gr_device.h"
#include "gr_math.h"

// ---- binary: out = a ∘ b (numpy broadcasting chooses which elements meet) -------------------
GR_HD static inline double gr_add_fwd(double a, double b) { return __dadd_rn(a, b); }
GR_HD static inline double gr_add_bwd_a(double g) { return g; }
GR_HD static inline double gr_add_bwd_b(double g) { return g; }

GR_HD static inline double gr_sub_fwd(double a, double b) { return __dsub_rn(a, b); }
GR_HD static inline double gr_sub_bwd_a(double g) { return g; }
GR_HD static inline double gr_sub_bwd_b(double g) { return -g; }

GR_HD static inline double gr_mul_fwd(double a, double b) { return __dmul_rn(a, b); }
GR_HD static inline double gr_mul_bwd_a(double g, double b) { return __dmul_rn(g, b); }
GR_HD static inline double gr_mul_bwd_b(double g, double a) { return __dmul_rn(g, a); }

GR_HD static inline double gr_div_fwd(double a, double b) { return __ddiv_rn(a, b); }
GR_HD static inline double gr_div_bwd_a(double g, double b) { return __ddiv_rn(g, b); }
// d(a/b)/db = -a/b² = -y/b; spelled g*y/b so no b² can overflow.
GR_HD static inline double gr_div_bwd_b(double g, double y, double b) {
  return -__ddiv_rn(__dmul_rn(g, y), b);
}

// ---- unary: y = f(x [, s]) --------------------------------------------------------------------
GR_HD static inline double gr_neg_fwd(double x) { return -x; }
GR_HD static inline double gr_neg_bwd(double g) { return -g; }

GR_HD static inline double gr_adds_fwd(double x, double s) { return __dadd_rn(x, s); }
GR_HD static inline double gr_adds_bwd(double g) { return g; }

GR_HD static inline double gr_muls_fwd(double x, double s) { return __dmul_rn(x, s); }
GR_HD static inline double gr_muls_bwd(double g, double s) { return __dmul_rn(g, s); }

// relu lets NaN through (x > 0 is false for NaN, so it is tested explicitly).
GR_HD static inline double gr_relu_fwd(double x) { return x > 0.0 ? x : (x != x ? x : 0.0); }
GR_HD static inline double gr_relu_bwd(double g, double x) { return x > 0.0 ? g : 0.0; }

GR_HD static inline double gr_sigmoid_fwd(double x) {
  return __ddiv_rn(1.0, __dadd_rn(1.0, gr_exp(-x)));
}
GR_HD static inline double gr_sigmoid_bwd(double g, double y) {
  return __dmul_rn(g, __dmul_rn(y, __dsub_rn(1.0, y)));
}

// tanh via t = exp(-2|x|) ∈ (0, 1]: no overflow for large |x|, and the sign comes back exactly.
GR_HD static inline double gr_tanh_fwd(double x) {
  const long long sign = (long long)(0x8000000000000000ULL);
  const double ax = gr_from_bits(gr_bits(x) & ~sign);
  const double t = gr_exp(__dmul_rn(-2.0, ax));
  const double r = __ddiv_rn(__dsub_rn(1.0, t), __dadd_rn(1.0, t));
  return gr_from_bits((gr_bits(r) & ~sign) | (gr_bits(x) & sign));
}
GR_HD static inline double gr_tanh_bwd(double g, double y) {
  return __dmul_rn(g, __dsub_rn(1.0, __dmul_rn(y, y)));
}

GR_HD static inline double gr_exp_fwd(double x) { return gr_exp(x); }
GR_HD static inline double gr_exp_bwd(double g, double y) { return __dmul_rn(g, y); }

GR_HD static inline double gr_log_fwd(double x) { return gr_log(x); }
GR_HD static inline double gr_log_bwd(double g, double x) { return __ddiv_rn(g, x); }

GR_HD static inline double gr_sqrt_fwd(double x) { return gr_sqrt(x); }
GR_HD static inline double gr_sqrt_bwd(double g, double y) { return __ddiv_rn(g, __dmul_rn(2.0, y)); }

// ---- accumulation: the one way a contribution lands in a gradient slot -------------------------
GR_HD static inline double gr_accumulate(double slot, double c) { return __dadd_rn(slot, c); }
