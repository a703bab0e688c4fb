// tape_lanes.cpp — forward of the lane ops (softmax, log_softmax, softmax cross-entropy,
// cross-entropy with class ids), the row ops (Class Row: layer_norm, ...), the
// window ops (slice, concat) and the composite mse.
#include <cmath>
#include <cstring>
#include <type_traits>
#include <vector>

#include "gr_ops_lane.h"
#include "grad/row_lanes.h"
#include "grad/tape.h"
#include "grad/tape_real.h"
#include "tensor/reduce.h"

namespace gr {

// softmax / log_softmax along one axis: lane (o, i) of [outer, L, inner] has stride `inner`.
Var Tape::lane(Op op, Var x, int64_t axis, bool causal) {
  if (op != Op::Softmax && op != Op::LogSoftmax) throw Error("lane: " + std::string(op_name(op)) + " is not softmax or log_softmax");
  if (!usable(op, x)) return Var{};
  const Shape in = nodes_[x.id].shape;
  int ax = 0;
  try {
    ax = in.normalize_axis(axis);
  } catch (const Error& e) {
    return poison(op, e.what());
  }
  if (causal && (op != Op::Softmax || in.rank() < 2 || ax != in.rank() - 1))
    return poison(op, "causal needs the last axis of [..., T, T] (query, key), got axis " + std::to_string(axis) + " of " +
                          in.str());
  Node* n = push(op, x.id, -1, in);
  n->axis = ax;
  n->causal = causal;
  if (n->val) by_real([&](auto r) { lane_values<decltype(r)>(*n, nodes_[x.id].val, ax); });
  return Var{size() - 1};
}

template <class R>
void Tape::lane_values(Node& n, const double* px, int ax) {
  const AxisLanes l = axis_lanes(n.shape, ax);
  if (n.causal) {  // lanes of the last axis (stride 1), each over its visible prefix
    const int64_t tq = n.shape[n.shape.rank() - 2];
    for (int64_t o = 0; o < l.outer; ++o) {
      const int64_t vis = gr_causal_visible(o, tq, l.len), base = o * l.len;
      if constexpr (std::is_same_v<R, double>) {
        gr_softmax_causal_lane_fwd(px + base, n.val + base, l.len, 1LL, vis);
      } else {
        float* x = scratch(static_cast<size_t>(2 * l.len));
        narrow_lane(px + base, l.len, 1, x);
        gr_softmax_causal_lane_fwd(x, x + l.len, l.len, 1LL, vis);
        widen_lane(x + l.len, l.len, n.val + base, 1);
      }
    }
    return;
  }
  const auto fwd = [&](const R* x, R* y, int64_t stride) {
    if (n.op == Op::Softmax) gr_softmax_lane_fwd(x, y, l.len, stride);
    else if (n.op == Op::LogSoftmax) gr_log_softmax_lane_fwd(x, y, l.len, stride);
    else throw Error("lane: " + std::string(op_name(n.op)) + " is not softmax or log_softmax");
  };
  int64_t o0 = 0;
  if constexpr (std::is_same_v<R, double>) {
    // Softmax over the last axis, eight lanes at a time (their serial chains overlap).
    constexpr int G = 8;
    if (n.op == Op::Softmax && l.inner == 1)
      for (; o0 + G <= l.outer; o0 += G) gr_softmax_rows_fwd<G>(px + o0 * l.len, n.val + o0 * l.len, l.len);
  }
  for (int64_t o = o0; o < l.outer; ++o)
    for (int64_t i = 0; i < l.inner; ++i) {
      const int64_t base = o * l.len * l.inner + i;
      if constexpr (std::is_same_v<R, double>) {
        // A literal stride 1 for the last axis, so the lane's loops vectorize over contiguous
        // elements (a runtime stride loads two at a time); the same operations either way.
        if (l.inner == 1) fwd(px + base, n.val + base, 1);
        else fwd(px + base, n.val + base, l.inner);
      } else {
        float* x = scratch(static_cast<size_t>(2 * l.len));
        narrow_lane(px + base, l.len, l.inner, x);
        fwd(x, x + l.len, 1);
        widen_lane(x + l.len, l.len, n.val + base, l.inner);
      }
    }
}

Var Tape::softmax(Var x, int64_t axis, bool causal) { return lane(Op::Softmax, x, axis, causal); }
Var Tape::log_softmax(Var x, int64_t axis) { return lane(Op::LogSoftmax, x, axis); }

// softmax_cross_entropy: logits [N,C], targets [N,C] (one-hot rows) → [1], the mean over rows of
// −Σ_c t·log_softmax(x); stable for large logits because every exp sees x − max ≤ 0.
Var Tape::softmax_cross_entropy(Var logits, Var targets) {
  const Op op = Op::SoftmaxCrossEntropy;
  if (!usable(op, logits) || !usable(op, targets)) return Var{};
  const Shape sx = nodes_[logits.id].shape, st = nodes_[targets.id].shape;
  if (sx.rank() != 2 || !(sx == st))
    return poison(op, "needs logits [N,C] and one-hot targets of the same shape, got " + sx.str() + " and " + st.str());
  Node* n = push(op, logits.id, targets.id, Shape{1});
  if (!n->val) return Var{size() - 1};
  const int64_t rows = sx[0], C = sx[1];
  const double* px = nodes_[logits.id].val;
  const double* pt = nodes_[targets.id].val;
  n->val[0] = by_real([&](auto zero) {
    using R = decltype(zero);
    R total = 0;
    for (int64_t r = 0; r < rows; ++r) {
      if constexpr (std::is_same_v<R, double>) {
        total = gr_radd(total, gr_sce_row_fwd(px + r * C, pt + r * C, C));
      } else {
        float* x = scratch(static_cast<size_t>(2 * C));
        narrow_lane(px + r * C, C, 1, x);
        narrow_lane(pt + r * C, C, 1, x + C);
        total = gr_radd(total, gr_sce_row_fwd(x, x + C, C));
      }
    }
    return static_cast<double>(gr_sce_finish(total, rows));
  });
  return Var{size() - 1};
}

namespace {
// A row op's forward over one contiguous row: its row's gr_<stem>_lane_fwd (an exhaustive switch
// generated from the table; Row ops only reach it).
template <class T>
void row_fwd(Op op, const T* x, T* y, int64_t len, T eps) {
  switch (op) {
#define GR_TAPE_ROW_FWD(E, name, arity, cls, attrs, stem, ...)                                  \
  GR_OP_IF_ROW_##cls(case Op::E: return gr_##stem##_lane_fwd(x, y, static_cast<long long>(len), 1LL, eps);) \
  GR_OP_IF_NOT_ROW_##cls(case Op::E: break;)
    GR_OP_TABLE(GR_TAPE_ROW_FWD)
#undef GR_TAPE_ROW_FWD
  }
  throw Error("row_fwd: " + std::string(op_name(op)) + " is not a row op");
}
}  // namespace

// A row op over the last axis: row r is lane (r, 0) of [rows, L, 1]; eps rides in the node's scalar.
Var Tape::row_op(Op op, Var x, double eps) {
  if (!op_info(op).row()) throw Error("row_op: " + std::string(op_name(op)) + " is not a row op");
  if (!usable(op, x)) return Var{};
  if (!(eps > 0.0) || !std::isfinite(eps)) return poison(op, "eps must be a finite number > 0, got " + std::to_string(eps));
  const Shape in = nodes_[x.id].shape;  // the class's Shape rule: Same
  Node* n = push(op, x.id, -1, in);
  n->axis = in.rank() - 1;
  n->scalar = eps;
  if (!n->val) return Var{size() - 1};
  const int64_t L = in[in.rank() - 1];
  const double* px = nodes_[x.id].val;
  const int64_t rows = in.numel() / L;
  // layer_norm: kRowBlock rows side by side (row_lanes.h: each row's bytes as the one-row rule's).
  // Each blocked row's r is kept for backward (Node::kept: layer_norm_rows_bwd_r reads g and y only).
  const int64_t blocked = op == Op::LayerNorm ? rows / kRowBlock * kRowBlock : 0;
  if (blocked > 0) keep(n, blocked);
  if (real_ == DType::F64) {
    for (int64_t r = 0; r < blocked; r += kRowBlock)
      layer_norm_rows_fwd<kRowBlock>(px + r * L, n->val + r * L, L, eps, n->kept + r);
    for (int64_t r = blocked; r < rows; ++r) row_fwd(op, px + r * L, n->val + r * L, L, eps);
    return Var{size() - 1};
  }
  for (int64_t r = 0; r < blocked; r += kRowBlock) {
    float* w = scratch(static_cast<size_t>(2 * kRowBlock * L));
    float rr[kRowBlock];
    narrow_lane(px + r * L, kRowBlock * L, 1, w);
    layer_norm_rows_fwd<kRowBlock>(w, w + kRowBlock * L, L, static_cast<float>(eps), rr);
    widen_lane(w + kRowBlock * L, kRowBlock * L, n->val + r * L, 1);
    widen_lane(rr, kRowBlock, n->kept + r, 1);
  }
  for (int64_t r = blocked; r < rows; ++r) {
    float* row = scratch(static_cast<size_t>(2 * L));
    narrow_lane(px + r * L, L, 1, row);
    row_fwd(op, row, row + L, L, static_cast<float>(eps));
    widen_lane(row + L, L, n->val + r * L, 1);
  }
  return Var{size() - 1};
}

// cross_entropy: logits [N,C] and class ids [N] or [N,1] → [1], the mean over rows of
// −log_softmax(x)[id]; an id that is not an integer in [0, C) gives NaN (gr_ce_row_fwd).
Var Tape::cross_entropy(Var logits, Var ids) {
  const Op op = Op::CrossEntropy;
  if (!usable(op, logits) || !usable(op, ids)) return Var{};
  const Shape sx = nodes_[logits.id].shape, si = nodes_[ids.id].shape;
  // [N,T,C] logits with ids [N,T] (a sequence model's next-token loss) are the [N·T, C] case with
  // ids [N·T]: the same rows in row-major order, the mean over all N·T of them.
  const bool ids_fit = (sx.rank() == 2 && ((si.rank() == 1 && si[0] == sx[0]) || (si.rank() == 2 && si[0] == sx[0] && si[1] == 1))) ||
                       (sx.rank() == 3 && si.rank() == 2 && si[0] == sx[0] && si[1] == sx[1]);
  if (!ids_fit)
    return poison(op, "needs logits [N,C] and class ids [N] or [N,1], or logits [N,T,C] and ids [N,T], got " + sx.str() +
                          " and " + si.str());
  Node* n = push(op, logits.id, ids.id, Shape{1});
  if (!n->val) return Var{size() - 1};
  const int64_t C = sx[sx.rank() - 1], rows = sx.numel() / C;
  const double* px = nodes_[logits.id].val;
  const double* pc = nodes_[ids.id].val;
  keep(n, 2 * rows);  // each row's max and log-sum-exp, for backward (ce_row_bwd_ml)
  n->val[0] = by_real([&](auto zero) {
    using R = decltype(zero);
    R total = 0;
    std::vector<R> e(static_cast<size_t>(C));  // a row's exps (row_lanes.h ce_row_fwd)
    R ml[2];
    for (int64_t r = 0; r < rows; ++r) {
      if constexpr (std::is_same_v<R, double>) {
        total = gr_radd(total, ce_row_fwd(px + r * C, pc[r], C, e.data(), ml));
      } else {
        float* x = scratch(static_cast<size_t>(C));
        narrow_lane(px + r * C, C, 1, x);
        total = gr_radd(total, ce_row_fwd(x, static_cast<float>(pc[r]), C, e.data(), ml));
      }
      n->kept[2 * r] = static_cast<double>(ml[0]), n->kept[2 * r + 1] = static_cast<double>(ml[1]);
    }
    return static_cast<double>(gr_sce_finish(total, rows));
  });
  return Var{size() - 1};
}

// dropout: y[e] = x[e]·factor(e) in training (gr_dropout_factor), else x[e].
Var Tape::dropout(Var x, double rate) {
  const Op op = Op::Dropout;
  if (!usable(op, x)) return Var{};
  if (!(rate >= 0.0 && rate < 1.0)) return poison(op, "rate must be in [0, 1), got " + std::to_string(rate));
  const Shape in = nodes_[x.id].shape;
  Node* n = push(op, x.id, -1, in);
  n->scalar = rate;
  n->starts[0] = static_cast<int64_t>(dropout_key_.seed);
  n->starts[1] = static_cast<int64_t>(dropout_key_.step);
  n->starts[2] = dropout_key_.training ? 1 : 0;
  if (!n->val) return Var{size() - 1};
  const double* px = nodes_[x.id].val;
  const uint64_t id = static_cast<uint64_t>(size() - 1);
  by_real([&](auto zero) {
    using R = decltype(zero);
    const R scale = gr_dropout_scale(static_cast<R>(rate));  // the mask compares in double (gr_ops_lane.h)
    for (int64_t e = 0; e < in.numel(); ++e)
      n->val[e] = dropout_key_.training ? gr_rmul(static_cast<R>(px[e]), gr_dropout_factor(dropout_key_.seed, dropout_key_.step, id,
                                                                                           static_cast<uint64_t>(e), rate, scale))
                                        : px[e];
  });
  return Var{size() - 1};
}

// slice: the window [starts, stops) per dim (negative indices count from the end).
Var Tape::slice(Var x, std::span<const int64_t> starts, std::span<const int64_t> stops) {
  const Op op = Op::Slice;
  if (!usable(op, x)) return Var{};
  const Shape in = nodes_[x.id].shape;
  if (starts.size() != static_cast<size_t>(in.rank()) || stops.size() != static_cast<size_t>(in.rank()))
    return poison(op, "starts and stops need one entry per dim of " + in.str());
  int64_t lo[kMaxDims], dims[kMaxDims];
  for (int d = 0; d < in.rank(); ++d) {
    const int64_t s = starts[d] < 0 ? starts[d] + in[d] : starts[d];
    const int64_t e = stops[d] < 0 ? stops[d] + in[d] : stops[d];
    if (s < 0 || e > in[d] || s >= e)
      return poison(op, "window [" + std::to_string(starts[d]) + ", " + std::to_string(stops[d]) + ") of dim " +
                            std::to_string(d) + " is empty or outside " + in.str());
    lo[d] = s;
    dims[d] = e - s;
  }
  Node* n = push(op, x.id, -1, Shape(std::span<const int64_t>(dims, static_cast<size_t>(in.rank()))));
  std::copy(lo, lo + in.rank(), n->starts);
  if (!n->val) return Var{size() - 1};
  // Walk the window row by row along the last dim (contiguous in both tensors).
  const Strides st = row_major_strides(in);
  const int r = in.rank();
  const int64_t inner = dims[r - 1], rows = n->numel() / inner;
  int64_t idx[kMaxDims] = {};
  for (int64_t row = 0; row < rows; ++row) {
    int64_t src = lo[r - 1];
    for (int d = 0; d < r - 1; ++d) src += (lo[d] + idx[d]) * st.s[d];
    std::memcpy(n->val + row * inner, nodes_[x.id].val + src, static_cast<size_t>(inner) * sizeof(double));
    for (int d = r - 2; d >= 0; --d) {
      if (++idx[d] < dims[d]) break;
      idx[d] = 0;
    }
  }
  return Var{size() - 1};
}

// concat: a and b joined along axis; every other dim must match.
Var Tape::concat(Var a, Var b, int64_t axis) {
  const Op op = Op::Concat;
  if (!usable(op, a) || !usable(op, b)) return Var{};
  const Shape sa = nodes_[a.id].shape, sb = nodes_[b.id].shape;
  int ax = 0;
  try {
    ax = sa.normalize_axis(axis);
  } catch (const Error& e) {
    return poison(op, e.what());
  }
  bool fits = sa.rank() == sb.rank();
  for (int d = 0; fits && d < sa.rank(); ++d) fits = d == ax || sa[d] == sb[d];
  if (!fits) return poison(op, "shapes " + sa.str() + " and " + sb.str() + " differ off axis " + std::to_string(ax));
  int64_t dims[kMaxDims];
  std::copy(sa.dims().begin(), sa.dims().end(), dims);
  dims[ax] = sa[ax] + sb[ax];
  Shape out;
  try {
    out = Shape(std::span<const int64_t>(dims, static_cast<size_t>(sa.rank())));
  } catch (const Error& e) {
    return poison(op, e.what());
  }
  Node* n = push(op, a.id, b.id, out);
  n->axis = ax;
  if (!n->val) return Var{size() - 1};
  // Each outer index copies a's block then b's block (contiguous runs of len*inner).
  const AxisLanes la = axis_lanes(sa, ax), lb = axis_lanes(sb, ax);
  const int64_t ca = la.len * la.inner, cb = lb.len * lb.inner;
  for (int64_t o = 0; o < la.outer; ++o) {
    std::memcpy(n->val + o * (ca + cb), nodes_[a.id].val + o * ca, static_cast<size_t>(ca) * sizeof(double));
    std::memcpy(n->val + o * (ca + cb) + ca, nodes_[b.id].val + o * cb, static_cast<size_t>(cb) * sizeof(double));
  }
  return Var{size() - 1};
}

// mse = mean((y − t)²), recorded as sub, mul (fan-out of the difference), mean.
Var Tape::mse(Var y, Var target) {
  const Var d = sub(y, target);
  return mean(mul(d, d));
}

}  // namespace gr
