// gr_ops_scalar.h — THE per-element arithmetic of every elementwise op, forward and backward.
//
// One definition for every path (docs/design.md §2): the CPU tape calls these in its loops; per-node and
// fused device kernels and the scalar emitter inline the same functions. Only the loops differ.
// Templates over the element type T (double everywhere; float in f32 device programs): every
// operation is a gr_radd/gr_rsub/gr_rmul/gr_rdiv, the rn intrinsic of T (gr_device.h).
//
// Naming: gr_<op>_fwd computes the output element; gr_<op>_bwd_<input> returns that input's
// contribution c, which the caller adds into the input's gradient slot as `slot = slot + c`.
//   x, a, b : input elements      y : the output element      g : dL/dy      s : the op's scalar
// Negation (-v) is exact in IEEE arithmetic, so it needs no intrinsic.
#pragma once
#include "gr_device.h"
#include "gr_math.h"

// ---- binary: out = a ∘ b (numpy broadcasting chooses which elements meet) -------------------
template <class T> GR_HD static inline T gr_add_fwd(T a, T b) { return gr_radd(a, b); }
template <class T> GR_HD static inline T gr_add_bwd_a(T g) { return g; }
template <class T> GR_HD static inline T gr_add_bwd_b(T g) { return g; }

template <class T> GR_HD static inline T gr_sub_fwd(T a, T b) { return gr_rsub(a, b); }
template <class T> GR_HD static inline T gr_sub_bwd_a(T g) { return g; }
template <class T> GR_HD static inline T gr_sub_bwd_b(T g) { return -g; }

template <class T> GR_HD static inline T gr_mul_fwd(T a, T b) { return gr_rmul(a, b); }
template <class T> GR_HD static inline T gr_mul_bwd_a(T g, T b) { return gr_rmul(g, b); }
template <class T> GR_HD static inline T gr_mul_bwd_b(T g, T a) { return gr_rmul(g, a); }

template <class T> GR_HD static inline T gr_div_fwd(T a, T b) { return gr_rdiv(a, b); }
template <class T> GR_HD static inline T gr_div_bwd_a(T g, T b) { return gr_rdiv(g, b); }
// d(a/b)/db = -a/b² = -y/b; spelled g*y/b so no b² can overflow.
template <class T> GR_HD static inline T gr_div_bwd_b(T g, T y, T b) { return -gr_rdiv(gr_rmul(g, y), b); }

// ---- unary: y = f(x [, s]) --------------------------------------------------------------------
template <class T> GR_HD static inline T gr_neg_fwd(T x) { return -x; }
template <class T> GR_HD static inline T gr_neg_bwd(T g) { return -g; }

template <class T> GR_HD static inline T gr_adds_fwd(T x, T s) { return gr_radd(x, s); }
template <class T> GR_HD static inline T gr_adds_bwd(T g) { return g; }

template <class T> GR_HD static inline T gr_muls_fwd(T x, T s) { return gr_rmul(x, s); }
template <class T> GR_HD static inline T gr_muls_bwd(T g, T s) { return gr_rmul(g, s); }

// relu lets NaN through (x > 0 is false for NaN, so it is tested explicitly).
template <class T> GR_HD static inline T gr_relu_fwd(T x) { return x > T(0) ? x : (x != x ? x : T(0)); }
template <class T> GR_HD static inline T gr_relu_bwd(T g, T x) { return x > T(0) ? g : T(0); }

template <class T> GR_HD static inline T gr_sigmoid_fwd(T x) { return gr_rdiv(T(1), gr_radd(T(1), gr_exp(-x))); }
template <class T> GR_HD static inline T gr_sigmoid_bwd(T g, T y) { return gr_rmul(g, gr_rmul(y, gr_rsub(T(1), y))); }

// tanh via t = exp(-2|x|) ∈ (0, 1]: no overflow for large |x|, and the sign comes back exactly.
template <class T> GR_HD static inline T gr_tanh_fwd(T x) {
  const T t = gr_exp(gr_rmul(T(-2), gr_abs(x)));
  return gr_copysign(gr_rdiv(gr_rsub(T(1), t), gr_radd(T(1), t)), x);
}
template <class T> GR_HD static inline T gr_tanh_bwd(T g, T y) { return gr_rmul(g, gr_rsub(T(1), gr_rmul(y, y))); }

template <class T> GR_HD static inline T gr_exp_fwd(T x) { return gr_exp(x); }
template <class T> GR_HD static inline T gr_exp_bwd(T g, T y) { return gr_rmul(g, y); }

template <class T> GR_HD static inline T gr_log_fwd(T x) { return gr_log(x); }
template <class T> GR_HD static inline T gr_log_bwd(T g, T x) { return gr_rdiv(g, x); }

template <class T> GR_HD static inline T gr_sqrt_fwd(T x) { return gr_sqrt(x); }
template <class T> GR_HD static inline T gr_sqrt_bwd(T g, T y) { return gr_rdiv(g, gr_rmul(T(2), y)); }

// ---- accumulation: the one way a contribution lands in a gradient slot -------------------------
template <class T> GR_HD static inline T gr_accumulate(T slot, T c) { return gr_radd(slot, c); }
