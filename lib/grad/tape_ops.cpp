// tape_ops.cpp — every op's forward: check and infer the shape, record the node, compute the value
// with the shared scalar definitions (kernels/) and the CPU loops (lib/tensor/).
// Shapes:  B batch · M,K,N matmul dims · L lane (axis) length
#include <algorithm>
#include <cstring>

#include "gr_ops_lane.h"
#include "gr_ops_elementwise.h"
#include "grad/owned.h"
#include "grad/tape.h"
#include "grad/tape_real.h"
#include "tensor/broadcast.h"
#include "tensor/matmul.h"
#include "tensor/reduce.h"

namespace gr {

// ---- elementwise -------------------------------------------------------------------------------
// f takes and returns R (the tape's arithmetic type); values are stored as double, exactly.
template <class R, class F>
Var Tape::binary(Op op, Var a, Var b, F f) {
  if (!usable(op, a) || !usable(op, b)) return Var{};
  // a's shape, in the blocks of the matmul that wrote a (grad/owned.h): b's element for a's element
  // base + j is pb[base + j] (same shape) or pb[j] (b a row vector of a: a bias, ib = e mod N).
  auto owned = [&](bool b_is_row) {
    Node* n = push(op, a.id, b.id, nodes_[a.id].shape);
    if (n->val) {
      const double* pa = nodes_[a.id].val;
      const double* pb = nodes_[b.id].val;
      double* y = n->val;
      if (b_is_row)  // bb[j]: j is the column
        for_each_owned(n->shape, [&](int64_t base, int64_t c0, int64_t c1) {
          for (int64_t j = c0; j < c1; ++j) y[base + j] = f(R(pa[base + j]), R(pb[j]));
        });
      else
        for_each_owned_run(n->shape, [&](int64_t lo, int64_t hi) {
          for (int64_t e = lo; e < hi; ++e) y[e] = f(R(pa[e]), R(pb[e]));
        });
    }
    return Var{size() - 1};
  };
  if (nodes_[a.id].shape == nodes_[b.id].shape) return owned(false);  // no broadcast: ia = ib = e
  {  // one side a single element that stretches over the other's shape: ia = e, ib = 0 (or mirrored)
    const Shape &sa = nodes_[a.id].shape, &sb = nodes_[b.id].shape;
    const bool b1 = sb.numel() == 1 && sb.rank() <= sa.rank(), a1 = sa.numel() == 1 && sa.rank() <= sb.rank();
    if (a1 || b1) {
      Node* n = push(op, a.id, b.id, b1 ? sa : sb);
      if (n->val) {
        const double* pa = nodes_[a.id].val;
        const double* pb = nodes_[b.id].val;
        double* y = n->val;
        const int64_t count = n->numel();
        if (b1)
          for (int64_t e = 0; e < count; ++e) y[e] = f(R(pa[e]), R(pb[0]));
        else
          for (int64_t e = 0; e < count; ++e) y[e] = f(R(pa[0]), R(pb[e]));
      }
      return Var{size() - 1};
    }
  }
  if (is_row_vector_of(nodes_[b.id].shape, nodes_[a.id].shape)) return owned(true);  // a bias: [.., N] + [N]
  if (ChannelRun cr; is_channel_vector_of(nodes_[b.id].shape, nodes_[a.id].shape, cr)) {  // a conv bias [.., C, 1, 1], a position table
    Node* n = push(op, a.id, b.id, nodes_[a.id].shape);
    if (n->val) {
      const double* pa = nodes_[a.id].val;
      const double* pb = nodes_[b.id].val;
      double* y = n->val;
      if (cr.q == 1) {  // b a trailing block of a ([T, D] over [N, T, D]): rows of cr.c, the loop over c runs wide
        for (int64_t p = 0; p < cr.p; ++p)
          for (int64_t c = 0; c < cr.c; ++c) y[p * cr.c + c] = f(R(pa[p * cr.c + c]), R(pb[c]));
      } else {
        for (int64_t p = 0, e = 0; p < cr.p; ++p)
          for (int64_t c = 0; c < cr.c; ++c, e += cr.q) {
            const R bc = R(pb[c]);
            for (int64_t q = 0; q < cr.q; ++q) y[e + q] = f(R(pa[e + q]), bc);
          }
      }
    }
    return Var{size() - 1};
  }
  BroadcastMap m;
  try {
    m = broadcast_map(nodes_[a.id].shape, nodes_[b.id].shape);
  } catch (const Error& e) {
    return poison(op, e.what());
  }
  Node* n = push(op, a.id, b.id, m.out);
  if (n->val) {
    const double* pa = nodes_[a.id].val;
    const double* pb = nodes_[b.id].val;
    double* y = n->val;
    for_each_broadcast(m, [&](int64_t e, int64_t ia, int64_t ib) { y[e] = f(R(pa[ia]), R(pb[ib])); });
  }
  return Var{size() - 1};
}

template <class R, class F>
Var Tape::unary(Op op, Var x, double s, F f) {
  if (!usable(op, x)) return Var{};
  Node* n = push(op, x.id, -1, nodes_[x.id].shape);
  n->scalar = s;
  if (n->val) {
    const double* px = nodes_[x.id].val;
    double* y = n->val;
    for_each_owned_run(n->shape, [&](int64_t lo, int64_t hi) {
      for (int64_t e = lo; e < hi; ++e) y[e] = f(R(px[e]));
    });
  }
  return Var{size() - 1};
}

// GELU keeps its tanh: t = gr_gelu_tanh(x) goes to a block of its own after the value and y =
// gr_gelu_fwd_t(x, t); backward's gr_gelu_bwd_t reads t instead of computing the tanh — an exp,
// most of GELU's time — a second time (issue 43 item 8: the words transformer's GELU backward was
// 7-8% of its step). The bytes are gr_gelu_fwd/_bwd's: those are the _t forms with t computed inline.
Var Tape::gelu_keeping_tanh(Var x) {
  if (!usable(Op::Gelu, x)) return Var{};
  Node* n = push(Op::Gelu, x.id, -1, nodes_[x.id].shape);
  if (!n->val) return Var{size() - 1};
  keep(n, n->numel());
  by_real([&](auto r) {
    using R = decltype(r);
    const double* px = nodes_[x.id].val;
    double *y = n->val, *t = n->kept;
    for_each_owned_run(n->shape, [&](int64_t lo, int64_t hi) {
      for (int64_t e = lo; e < hi; ++e) {
        const R xe = R(px[e]), te = gr_gelu_tanh(xe);
        t[e] = te;
        y[e] = gr_gelu_fwd_t(xe, te);
      }
    });
  });
  return Var{size() - 1};
}

// Every elementwise op through its row: gr_ew_<stem>::fwd is the row's gr_<stem>_fwd, in R; the
// scalar attribute is rounded to R once, as a device kernel's GRK_REAL does.
Var Tape::unary_op(Op op, Var x, double s) {
  if (op == Op::Gelu) return gelu_keeping_tanh(x);
  if (!(op_info(op).attrs & kAttrScalar)) s = 0.0;
  switch (op) {
#define GR_TAPE_UNARY_FWD(E, name, arity, cls, attrs, stem, ...) \
  case Op::E:                                                    \
    GR_OP_IF_UNARY_##cls(return by_real([&](auto r) {                                             \
      using R = decltype(r);                                                                         \
      return unary<R>(op, x, s, [sr = R(s)](R v) { return gr_ew_##stem::fwd(v, R(0), sr); });     \
    });) break;
    GR_OP_TABLE(GR_TAPE_UNARY_FWD)
#undef GR_TAPE_UNARY_FWD
  }
  return poison(op, "is not a unary elementwise op");
}

Var Tape::binary_op(Op op, Var a, Var b) {
  switch (op) {
#define GR_TAPE_BINARY_FWD(E, name, arity, cls, attrs, stem, ...) \
  case Op::E:                                                     \
    GR_OP_IF_BINARY_##cls(return by_real([&](auto r) {                                            \
      using R = decltype(r);                                                                         \
      return binary<R>(op, a, b, [](R x, R y) { return gr_ew_##stem::fwd(x, y, R(0)); });          \
    });) break;
    GR_OP_TABLE(GR_TAPE_BINARY_FWD)
#undef GR_TAPE_BINARY_FWD
  }
  return poison(op, "is not a binary elementwise op");
}

Var Tape::add(Var a, Var b) { return binary_op(Op::Add, a, b); }
Var Tape::sub(Var a, Var b) { return binary_op(Op::Sub, a, b); }
Var Tape::mul(Var a, Var b) { return binary_op(Op::Mul, a, b); }
Var Tape::div(Var a, Var b) { return binary_op(Op::Div, a, b); }
Var Tape::neg(Var x) { return unary_op(Op::Neg, x); }
Var Tape::adds(Var x, double s) { return unary_op(Op::AddScalar, x, s); }
Var Tape::muls(Var x, double s) { return unary_op(Op::MulScalar, x, s); }
Var Tape::relu(Var x) { return unary_op(Op::Relu, x); }
Var Tape::sigmoid(Var x) { return unary_op(Op::Sigmoid, x); }
Var Tape::tanh(Var x) { return unary_op(Op::Tanh, x); }
Var Tape::exp(Var x) { return unary_op(Op::Exp, x); }
Var Tape::log(Var x) { return unary_op(Op::Log, x); }
Var Tape::sqrt(Var x) { return unary_op(Op::Sqrt, x); }

// ---- reductions: all axes → [1]; one axis → that axis removed (or kept as 1) ---------------------
Var Tape::reduce(Op op, Var x, int64_t axis, bool keepdims) {
  if (!usable(op, x)) return Var{};
  const Shape in = nodes_[x.id].shape;
  Shape out{1};
  int ax = kAllAxes;
  if (axis != kAllAxes) {
    try {
      ax = in.normalize_axis(axis);
    } catch (const Error& e) {
      return poison(op, e.what());
    }
    int64_t dims[kMaxDims];
    int r = 0;
    for (int d = 0; d < in.rank(); ++d)
      if (d != ax) dims[r++] = in[d];
      else if (keepdims) dims[r++] = 1;
    if (r == 0) dims[r++] = 1;
    out = Shape(std::span<const int64_t>(dims, static_cast<size_t>(r)));
  }
  Node* n = push(op, x.id, -1, out);
  n->axis = ax;
  n->keepdims = keepdims;
  if (n->val) by_real([&](auto r) { reduce_values<decltype(r)>(*n, nodes_[x.id].val, in); });
  return Var{size() - 1};
}

namespace {
// A fold reduction's value of one lane: its row's gr_<stem>_fold_fwd (an exhaustive switch generated
// from the table; fold rows only reach it).
template <class T>
T fold_fwd(Op op, const T* x, int64_t len, int64_t stride) {
  switch (op) {
#define GR_TAPE_FOLD_FWD(E, name, arity, cls, attrs, stem, fwd, ...)                                            \
  GR_OP_IF_FOLD(cls, fwd, case Op::E: return gr_##stem##_fold_fwd(x, static_cast<long long>(len), static_cast<long long>(stride));) \
  GR_OP_IF_NOT_FOLD(cls, fwd, case Op::E: break;)
    GR_OP_TABLE(GR_TAPE_FOLD_FWD)
#undef GR_TAPE_FOLD_FWD
  }
  throw Error("fold_fwd: " + std::string(op_name(op)) + " is not a fold reduction");
}
}  // namespace

// A reduction's values, summed in R (gr_sum's order); a fold reduction (max, ...) runs its rule over
// each lane in R (f32: over a float copy of the lane).
template <class R>
void Tape::reduce_values(Node& n, const double* px, const Shape& in) {
  if (op_info(n.op).fold()) {
    const AxisLanes l = n.axis == kAllAxes ? AxisLanes{1, in.numel(), 1} : axis_lanes(in, n.axis);
    for (int64_t o = 0; o < l.outer; ++o)
      for (int64_t i = 0; i < l.inner; ++i) {
        const double* lane = px + o * l.len * l.inner + i;
        if constexpr (std::is_same_v<R, double>) {
          n.val[o * l.inner + i] = fold_fwd(n.op, lane, l.len, l.inner);
        } else {
          float* w = scratch(static_cast<size_t>(l.len));
          narrow_lane(lane, l.len, l.inner, w);
          n.val[o * l.inner + i] = static_cast<double>(fold_fwd(n.op, w, l.len, 1));
        }
      }
    return;
  }
  const bool mean = n.op == Op::Mean;
  if (n.axis == kAllAxes) {
    const R s = sum_ascending<R>(px, in.numel());
    n.val[0] = mean ? gr_rdiv(s, static_cast<R>(in.numel())) : s;
    return;
  }
  const AxisLanes l = axis_lanes(in, n.axis);
  sum_lanes<R>(px, l, n.val);
  if (mean)
    for (int64_t e = 0; e < n.numel(); ++e) n.val[e] = gr_rdiv(static_cast<R>(n.val[e]), static_cast<R>(l.len));
}

Var Tape::sum(Var x) { return reduce(Op::Sum, x, kAllAxes, false); }
Var Tape::mean(Var x) { return reduce(Op::Mean, x, kAllAxes, false); }
Var Tape::sum(Var x, int64_t axis, bool keepdims) { return reduce(Op::Sum, x, axis, keepdims); }
Var Tape::mean(Var x, int64_t axis, bool keepdims) { return reduce(Op::Mean, x, axis, keepdims); }
Var Tape::max(Var x) { return reduce(Op::Max, x, kAllAxes, false); }
Var Tape::max(Var x, int64_t axis, bool keepdims) { return reduce(Op::Max, x, axis, keepdims); }
Var Tape::fold_op(Op op, Var x, int64_t axis, bool keepdims) {
  if (!op_info(op).fold()) throw Error("fold_op: " + std::string(op_name(op)) + " is not a fold reduction");
  return reduce(op, x, axis, keepdims);
}

// ---- contractions ------------------------------------------------------------------------------
// matmul: [..., M, K]·[K, N] → [..., M, N] (nn.Linear's batch shape on the left). Row-major, the
// leading axes and M are one axis of R = numel(a) / K rows, so it is the [R,K]·[K,N] product: the
// same kernels on every path, and dW = Aᵀ·g sums over all R rows in ascending row-major order.
Var Tape::matmul(Var a, Var b) {
  if (!usable(Op::Matmul, a) || !usable(Op::Matmul, b)) return Var{};
  const Shape sa = nodes_[a.id].shape, sb = nodes_[b.id].shape;
  if (sa.rank() < 2 || sb.rank() != 2 || sa[sa.rank() - 1] != sb[0])
    return poison(Op::Matmul, "needs [M,K]·[K,N] or [..., M, K]·[K, N], got " + sa.str() + " and " + sb.str());
  int64_t dims[kMaxDims];
  std::copy(sa.dims().begin(), sa.dims().end(), dims);
  dims[sa.rank() - 1] = sb[1];
  const int64_t K = sb[0], rows = sa.numel() / K;
  Node* n = push(Op::Matmul, a.id, b.id, Shape(std::span<const int64_t>(dims, static_cast<size_t>(sa.rank()))));
  if (n->val)
    matmul_in(real_, {nodes_[a.id].val, K, 1, nodes_[b.id].val, sb[1], 1, n->val, rows, K, sb[1], MatmulStore::Overwrite});
  return Var{size() - 1};
}

// bmm: [Ba,M,K]·[Bb,K,N] → [B,M,N], Ba and Bb each B or 1 (a batch of 1 is shared by every batch).
Var Tape::bmm(Var a, Var b) {
  if (!usable(Op::Bmm, a) || !usable(Op::Bmm, b)) return Var{};
  const Shape sa = nodes_[a.id].shape, sb = nodes_[b.id].shape;
  if (sa.rank() != 3 || sb.rank() != 3 || sa[2] != sb[1] || (sa[0] != sb[0] && sa[0] != 1 && sb[0] != 1))
    return poison(Op::Bmm, "needs [B,M,K]·[B,K,N] (a batch of 1 broadcasts), got " + sa.str() + " and " + sb.str());
  const int64_t batches = std::max(sa[0], sb[0]), M = sa[1], K = sa[2], N = sb[2];
  Node* n = push(Op::Bmm, a.id, b.id, Shape{batches, M, N});
  if (!n->val) return Var{size() - 1};
  const double* pa = nodes_[a.id].val;
  const double* pb = nodes_[b.id].val;
  for (int64_t i = 0; i < batches; ++i)
    matmul_in(real_, {pa + (sa[0] == 1 ? 0 : i) * M * K, K, 1, pb + (sb[0] == 1 ? 0 : i) * K * N, N, 1, n->val + i * M * N,
                      M, K, N, MatmulStore::Overwrite});
  return Var{size() - 1};
}

// ---- data movement -----------------------------------------------------------------------------
// transpose: swaps the last two axes: [..., R, C] → [..., C, R]
Var Tape::transpose(Var x) {
  if (!usable(Op::Transpose, x)) return Var{};
  const Shape in = nodes_[x.id].shape;
  if (in.rank() < 2) return poison(Op::Transpose, "needs at least 2 dims, got " + in.str());
  int64_t dims[kMaxDims];
  std::copy(in.dims().begin(), in.dims().end(), dims);
  std::swap(dims[in.rank() - 2], dims[in.rank() - 1]);
  Node* n = push(Op::Transpose, x.id, -1, Shape(std::span<const int64_t>(dims, static_cast<size_t>(in.rank()))));
  if (!n->val) return Var{size() - 1};
  const int64_t R = in[in.rank() - 2], C = in[in.rank() - 1], mats = in.numel() / (R * C);
  const double* px = nodes_[x.id].val;
  for (int64_t m = 0; m < mats; ++m)
    for (int64_t r = 0; r < R; ++r)
      for (int64_t c = 0; c < C; ++c) n->val[m * R * C + c * R + r] = px[m * R * C + r * C + c];
  return Var{size() - 1};
}

Var Tape::reshape(Var x, std::span<const int64_t> shape) {
  if (!usable(Op::Reshape, x)) return Var{};
  const Shape in = nodes_[x.id].shape;
  int64_t dims[kMaxDims];
  if (shape.empty() || shape.size() > static_cast<size_t>(kMaxDims))
    return poison(Op::Reshape, "target shape must have 1.." + std::to_string(kMaxDims) + " dims");
  int infer = -1;
  int64_t known = 1;
  for (size_t d = 0; d < shape.size(); ++d) {
    dims[d] = shape[d];
    if (shape[d] == -1 && infer < 0) infer = static_cast<int>(d);
    else if (shape[d] <= 0) return poison(Op::Reshape, "bad target dim " + std::to_string(shape[d]) + " (one -1 allowed)");
    else known *= shape[d];
    if (known > kMaxElems) return poison(Op::Reshape, "target shape is too large");
  }
  if (infer >= 0) {
    if (in.numel() % known != 0)
      return poison(Op::Reshape, "cannot infer -1: " + in.str() + " does not divide into the target");
    dims[infer] = in.numel() / known;
  }
  Shape out;
  try {
    out = Shape(std::span<const int64_t>(dims, shape.size()));
  } catch (const Error& e) {
    return poison(Op::Reshape, e.what());
  }
  if (out.numel() != in.numel())
    return poison(Op::Reshape, "cannot reshape " + in.str() + " to " + out.str() + " (element counts differ)");
  // A leaf's value can change (set_value, the optimizer, drop_value): copy it. An op's value is
  // fixed once recorded: view it.
  const bool leaf_input = nodes_[x.id].op == Op::Param || nodes_[x.id].op == Op::Const;
  Node* n = push(Op::Reshape, x.id, -1, out, !leaf_input);
  if (n->val && leaf_input) std::memcpy(n->val, nodes_[x.id].val, static_cast<size_t>(out.numel()) * sizeof(double));
  return Var{size() - 1};
}

}  // namespace gr
