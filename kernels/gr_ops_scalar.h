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

// |x|: the bit operation; d|x|/dx = sign(x), 0 at x = 0 (PyTorch's choice).
template <class T> GR_HD static inline T gr_abs_fwd(T x) { return gr_abs(x); }
template <class T> GR_HD static inline T gr_abs_bwd(T g, T x) { return x > T(0) ? g : (x < T(0) ? -g : T(0)); }

// x^s for the scalar attribute s. An integer s with |s| <= 64 multiplies by squaring (any sign of
// x; 1/x^|s| for s < 0), in the fixed order of the bits of |s|; any other s is exp(s·log x), so
// x < 0 gives NaN, x = 0 gives 0 (s > 0) or +inf (s < 0), as PyTorch does. s = 0 gives 1.
template <class T> GR_HD static inline T gr_pow(T x, T s) {
  const T as = gr_abs(s);
  if (as <= T(64) && T(static_cast<long long>(as)) == as) {
    long long k = static_cast<long long>(as);
    T result = T(1), base = x;
    while (k > 0) {
      if (k & 1) result = gr_rmul(result, base);
      k >>= 1;
      if (k > 0) base = gr_rmul(base, base);
    }
    return s < T(0) ? gr_rdiv(T(1), result) : result;
  }
  return gr_exp(gr_rmul(s, gr_log(x)));
}
template <class T> GR_HD static inline T gr_pow_fwd(T x, T s) { return gr_pow(x, s); }
template <class T> GR_HD static inline T gr_pow_bwd(T g, T x, T s) { return gr_rmul(g, gr_rmul(s, gr_pow(x, gr_rsub(s, T(1))))); }

// sin and cos: the deterministic functions of gr_math.h (faithful for |x| <= 2^20·π/2).
template <class T> GR_HD static inline T gr_sin_fwd(T x) { return gr_sin(x); }
template <class T> GR_HD static inline T gr_sin_bwd(T g, T x) { return gr_rmul(g, gr_cos(x)); }
template <class T> GR_HD static inline T gr_cos_fwd(T x) { return gr_cos(x); }
template <class T> GR_HD static inline T gr_cos_bwd(T g, T x) { return -gr_rmul(g, gr_sin(x)); }

// GELU, PyTorch's tanh approximation: y = x/2 · (1 + tanh(u)), u = √(2/π)·(x + 0.044715·x³).
// dy/dx = (1 + t)/2 + (x/2)·(1 − t²)·√(2/π)·(1 + 3·0.044715·x²); the second term is dropped where
// 1 − t² is exactly 0 (|u| > ~19), so a huge x (x² = inf) gives 1 or 0 rather than 0·inf.
template <class T> GR_HD static inline T gr_gelu_tanh(T x) {
  const T c = T(0.7978845608028654), a = T(0.044715);  // √(2/π), PyTorch's constant
  return gr_tanh_fwd(gr_rmul(c, gr_radd(x, gr_rmul(gr_rmul(a, gr_rmul(x, x)), x))));
}
// The _t forms take t = gr_gelu_tanh(x) computed already: the CPU tape computes it once in the
// forward, keeps it, and its backward reads it instead of computing the tanh (an exp) again.
template <class T> GR_HD static inline T gr_gelu_fwd_t(T x, T t) { return gr_rmul(gr_rmul(T(0.5), x), gr_radd(T(1), t)); }
template <class T> GR_HD static inline T gr_gelu_fwd(T x) { return gr_gelu_fwd_t(x, gr_gelu_tanh(x)); }
template <class T> GR_HD static inline T gr_gelu_bwd_t(T g, T x, T t) {
  const T c = T(0.7978845608028654), a3 = T(0.134145);  // 3·0.044715
  const T sech2 = gr_rsub(T(1), gr_rmul(t, t));
  const T first = gr_rmul(T(0.5), gr_radd(T(1), t));
  const T second = sech2 == T(0) ? T(0)
                                 : gr_rmul(gr_rmul(gr_rmul(T(0.5), x), sech2), gr_rmul(c, gr_radd(T(1), gr_rmul(a3, gr_rmul(x, x)))));
  return gr_rmul(g, gr_radd(first, second));
}
template <class T> GR_HD static inline T gr_gelu_bwd(T g, T x) { return gr_gelu_bwd_t(g, x, gr_gelu_tanh(x)); }

// Binary cross-entropy on a logit a with target b, per element (PyTorch's reduction='none'; a spec
// takes its mean): max(a, 0) − a·b + log(1 + exp(−|a|)), stable for any |a| because exp sees
// −|a| ≤ 0. d/da = σ(a) − b (σ as gr_sigmoid_fwd); d/db = −a.
template <class T> GR_HD static inline T gr_bce_logits_fwd(T a, T b) {
  return gr_radd(gr_rsub(gr_relu_fwd(a), gr_rmul(a, b)), gr_log(gr_radd(T(1), gr_exp(-gr_abs(a)))));
}
template <class T> GR_HD static inline T gr_bce_logits_bwd_a(T g, T a, T b) {
  return gr_rmul(g, gr_rsub(gr_sigmoid_fwd(a), b));
}
template <class T> GR_HD static inline T gr_bce_logits_bwd_b(T g, T a) { return -gr_rmul(g, a); }

// ---- accumulation: the one way a contribution lands in a gradient slot -------------------------
template <class T> GR_HD static inline T gr_accumulate(T slot, T c) { return gr_radd(slot, c); }
