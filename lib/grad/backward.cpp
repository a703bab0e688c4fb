// backward.cpp — the reverse walk and every op's backward rule, in one switch over the op table
// (no default: a new op without a rule does not compile); the binary ops' broadcast sums live in
// binary_rules.h, what every rule works with (slots, write_range) in rule_context.h. Contributions land in gradient slots as
// `slot = slot + c` (gr_accumulate), in the orders of the numerics contract (§5):
//   • consumers contribute in descending node id (the reverse walk);
//   • a binary op feeds its a-side, then its b-side; each walks the output in ascending order, so a
//     broadcast slot sums its contributions in row-major subsequence order;
//   • matmul/bmm gradients are summed in a fresh accumulator per element, then added to the slot.
// A slot is not zeroed ahead: until its first contribution of the episode it holds anything
// (Tape::grad_slot), and that first contribution is written as +0 + c, the same bits.
// R is the tape's arithmetic type (tape_real.h): double, or float over floats stored in doubles.
#include <algorithm>
#include <cstring>
#include <type_traits>
#include <vector>

#include "gr_ops_lane.h"
#include "grad/row_lanes.h"
#include "grad/binary_rules.h"
#include "gr_ops_batch.h"
#include "gr_ops_elementwise.h"
#include "grad/owned.h"
#include "grad/tape.h"
#include "grad/tape_real.h"
#include "tensor/broadcast.h"
#include "tensor/matmul.h"
#include "tensor/reduce.h"

namespace gr {

template <class R>
struct TapeRules : BinaryRules<R> {
  GR_RULE_CONTEXT_NAMES(BinaryRules<R>);
  using BinaryRules<R>::binary;

  // slot[e] += c(e) for a same-shaped single input.
  template <class C>
  void unary(C c) {
    const Slot da = slot_of(n.a);
    if (!da) return;
    for_each_owned_run(n.shape, [&](int64_t lo, int64_t hi) { write_range(da, lo, hi, c); });
  }

  void reduction() {
    if (!wants(n.a)) return;
    const Node& x = in(n.a);
    const bool mean = n.op == Op::Mean;
    if (n.axis == kAllAxes) {
      const R gi = mean ? gr_rdiv(R(g[0]), static_cast<R>(x.numel())) : R(g[0]);
      write_range(slot_of(n.a), 0, x.numel(), [&](int64_t) { return gi; });
      return;
    }
    double* slot = t.ensure_grad(n.a);
    const AxisLanes l = axis_lanes(x.shape, n.axis);
    for (int64_t o = 0; o < l.outer; ++o)
      for (int64_t k = 0; k < l.len; ++k)
        for (int64_t i = 0; i < l.inner; ++i) {
          const R gl = R(g[o * l.inner + i]);
          accumulate_into(slot[(o * l.len + k) * l.inner + i], mean ? gr_rdiv(gl, static_cast<R>(l.len)) : gl);
        }
  }

  // One [M,K]·[K,N] product's gradients: dA = g·Bᵀ (Σ over j), dB = Aᵀ·g (Σ over i).
  // `fresh`: the slot (that product's part of it) is fresh: written as +0 + acc, not read.
  void matmul_grads(const double* A, const double* B, const double* gm, double* dA, double* dB, int64_t M, int64_t K,
                    int64_t N, bool fresh) {
    const MatmulStore store = fresh ? MatmulStore::OntoZero : MatmulStore::Accumulate;
    if (dA) matmul_in(t.real_, {gm, N, 1, B, 1, N, dA, M, N, K, store});
    if (dB) matmul_in(t.real_, {A, 1, K, gm, N, 1, dB, K, M, N, store});
  }

  void matmul() {
    const Node &A = in(n.a), &B = in(n.b);
    const Slot da = slot_of(n.a), db = slot_of(n.b);  // one node: the b-side finds it touched and adds
    const int64_t K = B.shape[0], rows = A.shape.numel() / K;  // [..., M, K] is [rows, K] (tape_ops.cpp)
    matmul_grads(A.val, B.val, g, da.p, nullptr, rows, K, B.shape[1], da.fresh);
    matmul_grads(A.val, B.val, g, nullptr, db.p, rows, K, B.shape[1], db.fresh);
  }

  void bmm() {
    const Node &A = in(n.a), &B = in(n.b);
    const int64_t batches = n.shape[0], M = A.shape[1], K = A.shape[2], N = B.shape[2];
    const int64_t sa = A.shape[0] == 1 ? 0 : M * K, sb = B.shape[0] == 1 ? 0 : K * N;
    const Slot da = slot_of(n.a), db = slot_of(n.b);
    // Batches own disjoint parts of a fresh slot; a shared batch-1 slot is fresh for batch 0 only.
    if (da)  // a-side first, batches ascending (a shared batch-1 slot sums them in that order)
      for (int64_t i = 0; i < batches; ++i)
        matmul_grads(A.val + i * sa, B.val + i * sb, g + i * M * N, da.p + i * sa, nullptr, M, K, N,
                     da.fresh && (sa != 0 || i == 0));
    if (db)
      for (int64_t i = 0; i < batches; ++i)
        matmul_grads(A.val + i * sa, B.val + i * sb, g + i * M * N, nullptr, db.p + i * sb, M, K, N,
                     db.fresh && (sb != 0 || i == 0));
  }

  void transpose() {
    const Slot da = slot_of(n.a);
    if (!da) return;
    const Shape& s = in(n.a).shape;
    const int64_t Rows = s[s.rank() - 2], C = s[s.rank() - 1], mats = s.numel() / (Rows * C);
    for (int64_t m = 0; m < mats; ++m)
      for (int64_t r = 0; r < Rows; ++r) {
        const int64_t row = m * Rows * C + r * C;  // slot row r of matrix m, from g's column r
        write_range(da, row, row + C, [&](int64_t e) { return R(g[m * Rows * C + (e - row) * Rows + r]); });
      }
  }

  void slice() {
    if (!wants(n.a)) return;
    const Shape& s = in(n.a).shape;
    const Strides st = row_major_strides(s);
    double* slot = t.ensure_grad(n.a);
    const int r = s.rank();
    const int64_t inner = n.shape[r - 1], rows = n.numel() / inner;
    int64_t idx[kMaxDims] = {};
    for (int64_t row = 0; row < rows; ++row) {
      int64_t dst = n.starts[r - 1];
      for (int d = 0; d < r - 1; ++d) dst += (n.starts[d] + idx[d]) * st.s[d];
      for (int64_t j = 0; j < inner; ++j) accumulate_into(slot[dst + j], R(g[row * inner + j]));
      for (int d = r - 2; d >= 0; --d) {
        if (++idx[d] < n.shape[d]) break;
        idx[d] = 0;
      }
    }
  }

  void concat() {
    const AxisLanes la = axis_lanes(in(n.a).shape, n.axis), lb = axis_lanes(in(n.b).shape, n.axis);
    const int64_t ca = la.len * la.inner, cb = lb.len * lb.inner;
    double* da = wants(n.a) ? t.ensure_grad(n.a) : nullptr;
    double* db = wants(n.b) ? t.ensure_grad(n.b) : nullptr;
    for (int64_t o = 0; o < la.outer; ++o) {
      const double* src = g + o * (ca + cb);
      if (da)
        for (int64_t j = 0; j < ca; ++j) accumulate_into(da[o * ca + j], R(src[j]));
      if (db)
        for (int64_t j = 0; j < cb; ++j) accumulate_into(db[o * cb + j], R(src[ca + j]));
    }
  }

  // vis: a causal softmax lane's visible keys (gr_softmax_causal_lane_bwd: the masked slots untouched).
  void lane_bwd(const R* g_lane, const R* y, R* slot, int64_t len, int64_t stride, int64_t vis) const {
    if (n.op == Op::Softmax && n.causal) gr_softmax_causal_lane_bwd(g_lane, y, slot, len, stride, vis);
    else if (n.op == Op::Softmax) gr_softmax_lane_bwd(g_lane, y, slot, len, stride);
    else if (n.op == Op::LogSoftmax) gr_log_softmax_lane_bwd(g_lane, y, slot, len, stride);
    else throw Error("lane backward: " + std::string(op_name(n.op)) + " is not softmax or log_softmax");
  }

  void lane() {
    if (!wants(n.a)) return;
    double* slot = t.ensure_grad(n.a);
    const AxisLanes l = axis_lanes(n.shape, n.axis);
    const int64_t tq = n.causal ? n.shape[n.shape.rank() - 2] : 1;  // causal: the last axis (inner 1)
    int64_t o0 = 0;
    if constexpr (std::is_same_v<R, double>) {
      // Softmax over the last axis, eight lanes at a time (their serial sums overlap).
      constexpr int G = 8;
      if (n.op == Op::Softmax && !n.causal && l.inner == 1)
        for (; o0 + G <= l.outer; o0 += G) {
          const int64_t base = o0 * l.len;
          gr_softmax_rows_bwd<G>(g + base, n.val + base, slot + base, l.len);
        }
    }
    for (int64_t o = o0; o < l.outer; ++o)
      for (int64_t i = 0; i < l.inner; ++i) {
        const int64_t base = o * l.len * l.inner + i, vis = n.causal ? gr_causal_visible(o, tq, l.len) : l.len;
        if constexpr (std::is_same_v<R, double>) {
          // A literal stride 1 for the last axis, so the lane's loops vectorize over contiguous
          // elements (a runtime stride loads two at a time); the same operations either way.
          if (l.inner == 1) lane_bwd(g + base, n.val + base, slot + base, l.len, 1, vis);
          else lane_bwd(g + base, n.val + base, slot + base, l.len, l.inner, vis);
        } else {  // float copies of the lane's g, y and slot; the slot goes back
          float* w = t.scratch(static_cast<size_t>(3 * l.len));
          narrow_lane(g + base, l.len, l.inner, w);
          narrow_lane(n.val + base, l.len, l.inner, w + l.len);
          narrow_lane(slot + base, l.len, l.inner, w + 2 * l.len);
          lane_bwd(w, w + l.len, w + 2 * l.len, l.len, 1, vis);
          widen_lane(w + 2 * l.len, l.len, slot + base, l.inner);
        }
      }
  }

  // A row op's backward over one contiguous row: its row's gr_<stem>_lane_bwd (an exhaustive
  // switch generated from the table; Row ops only reach it).
  template <class T>
  static void row_bwd(Op op, const T* gl, const T* x, const T* y, T* slot, int64_t len, T eps) {
    switch (op) {
#define GR_TAPE_ROW_BWD(E, name, arity, cls, attrs, stem, ...)                                                      \
  GR_OP_IF_ROW_##cls(case Op::E: return gr_##stem##_lane_bwd(gl, x, y, slot, static_cast<long long>(len), 1LL, eps);) \
  GR_OP_IF_NOT_ROW_##cls(case Op::E: break;)
      GR_OP_TABLE(GR_TAPE_ROW_BWD)
#undef GR_TAPE_ROW_BWD
    }
    throw Error("row_bwd: " + std::string(op_name(op)) + " is not a row op");
  }

  void row() {
    if (!wants(n.a)) return;
    double* slot = t.ensure_grad(n.a);
    const int64_t L = n.shape[n.shape.rank() - 1], rows = n.numel() / L;
    const double* x = in(n.a).val;
    const R eps = static_cast<R>(n.scalar);
    // Rows r .. r+h-1 through fn(g, x, y, slot) in R (f32: float copies, the slot goes back; x
    // copied only `with_x`).
    const auto run = [&](int64_t r, int64_t h, bool with_x, auto&& fn) {
      const int64_t o = r * L, B = h * L;
      if constexpr (std::is_same_v<R, double>) {
        fn(g + o, x + o, n.val + o, slot + o);
      } else {
        float* w = t.scratch(static_cast<size_t>(4 * B));
        narrow_lane(g + o, B, 1, w);
        if (with_x) narrow_lane(x + o, B, 1, w + B);
        narrow_lane(n.val + o, B, 1, w + 2 * B);
        narrow_lane(slot + o, B, 1, w + 3 * B);
        fn(w, w + B, w + 2 * B, w + 3 * B);
        widen_lane(w + 3 * B, B, slot + o, 1);
      }
    };
    // layer_norm: kRowBlock rows side by side (row_lanes.h: each row's bytes as the one-row rule's).
    const int64_t blocked = n.op == Op::LayerNorm ? rows / kRowBlock * kRowBlock : 0;
    // With each row's r kept by the forward (Tape::row_op) x is not read.
    for (int64_t r = 0; r < blocked; r += kRowBlock)
      if (n.kept) {
        R rr[kRowBlock];
        for (int w = 0; w < kRowBlock; ++w) rr[w] = R(n.kept[r + w]);
        run(r, kRowBlock, false, [&](const R* gl, const R*, const R* yl, R* sl) { layer_norm_rows_bwd_r<kRowBlock>(gl, yl, rr, sl, L); });
      } else {
        run(r, kRowBlock, true, [&](const R* gl, const R* xl, const R* yl, R* sl) { layer_norm_rows_bwd<kRowBlock>(gl, xl, yl, sl, L, eps); });
      }
    for (int64_t r = blocked; r < rows; ++r)
      run(r, 1, true, [&](const R* gl, const R* xl, const R* yl, R* sl) { row_bwd(n.op, gl, xl, yl, sl, L, eps); });
  }

  // A batch-statistics op (batch_norm): its row's gr_<stem>_chan_bwd per channel (gr_ops_batch.h),
  // training as recorded (starts[0]); the running statistics (b, c) get no gradient.
  template <class T>
  static void batch_bwd(Op op, const T* gl, const T* x, const T* y, const T* rm, const T* rv, T* slot, int64_t N, int64_t C,
                        int64_t S, bool training, T eps) {
#define GR_TAPE_BATCH_BWD(E, name, arity, cls, attrs, stem, ...)                                                   \
  GR_OP_IF_BATCH_##cls(if (op == Op::E) {                                                                          \
    for (int64_t c = 0; c < C; ++c) gr_##stem##_chan_bwd(gl, x, y, rm, rv, slot, N, C, S, c, training, eps);       \
    return;                                                                                                        \
  })
    GR_OP_TABLE(GR_TAPE_BATCH_BWD)
#undef GR_TAPE_BATCH_BWD
    throw Error("batch_bwd: " + std::string(op_name(op)) + " is not a batch-statistics op");
  }

  void batch() {
    if (!wants(n.a)) return;
    double* slot = t.ensure_grad(n.a);
    const Node& X = in(n.a);
    const int64_t N = X.shape[0], C = X.shape[1], S = X.numel() / (N * C), E = X.numel();
    const bool training = n.starts[0] != 0;
    if constexpr (std::is_same_v<R, double>) {
      batch_bwd(n.op, g, X.val, n.val, in(n.b).val, in(n.c).val, slot, N, C, S, training, n.scalar);
    } else {
      float* w = t.scratch(static_cast<size_t>(4 * E + 2 * C));
      narrow_lane(g, E, 1, w);
      narrow_lane(X.val, E, 1, w + E);
      narrow_lane(n.val, E, 1, w + 2 * E);
      narrow_lane(slot, E, 1, w + 3 * E);
      narrow_lane(in(n.b).val, C, 1, w + 4 * E);
      narrow_lane(in(n.c).val, C, 1, w + 4 * E + C);
      batch_bwd(n.op, w, w + E, w + 2 * E, w + 4 * E, w + 4 * E + C, w + 3 * E, N, C, S, training, static_cast<float>(n.scalar));
      widen_lane(w + 3 * E, E, slot, 1);
    }
  }

  // max: each lane's g lands on its first largest element (found again from the saved input).
  // A fold reduction's backward over one lane: its row's gr_<stem>_fold_bwd (an exhaustive switch
  // generated from the table; fold rows only reach it).
  template <class T>
  static void fold_bwd(Op op, T gl, const T* x, T y, T* slot, int64_t len, int64_t stride) {
    switch (op) {
#define GR_TAPE_FOLD_BWD(E, name, arity, cls, attrs, stem, fwd, ...)                                          \
  GR_OP_IF_FOLD(cls, fwd, case Op::E: return gr_##stem##_fold_bwd(gl, x, y, slot, static_cast<long long>(len), \
                                                                  static_cast<long long>(stride));)           \
  GR_OP_IF_NOT_FOLD(cls, fwd, case Op::E: break;)
      GR_OP_TABLE(GR_TAPE_FOLD_BWD)
#undef GR_TAPE_FOLD_BWD
    }
    throw Error("fold_bwd: " + std::string(op_name(op)) + " is not a fold reduction");
  }

  // A fold reduction (max, ...): each lane's rule in R (f32: over float copies of the lane and its slot).
  void fold() {
    if (!wants(n.a)) return;
    const Node& x = in(n.a);
    double* slot = t.ensure_grad(n.a);
    const AxisLanes l = n.axis == kAllAxes ? AxisLanes{1, x.numel(), 1} : axis_lanes(x.shape, n.axis);
    for (int64_t o = 0; o < l.outer; ++o)
      for (int64_t i = 0; i < l.inner; ++i) {
        const int64_t base = o * l.len * l.inner + i, at = o * l.inner + i;
        if constexpr (std::is_same_v<R, double>) {
          fold_bwd(n.op, g[at], x.val + base, n.val[at], slot + base, l.len, l.inner);
        } else {
          float* w = t.scratch(static_cast<size_t>(2 * l.len));
          narrow_lane(x.val + base, l.len, l.inner, w);
          narrow_lane(slot + base, l.len, l.inner, w + l.len);
          fold_bwd(n.op, static_cast<float>(g[at]), w, static_cast<float>(n.val[at]), w + l.len, l.len, 1);
          widen_lane(w + l.len, l.len, slot + base, l.inner);
        }
      }
  }

  void dropout(int32_t id) {
    if (!wants(n.a)) return;
    double* slot = t.ensure_grad(n.a);
    const bool training = n.starts[2] != 0;
    const uint64_t seed = static_cast<uint64_t>(n.starts[0]), step = static_cast<uint64_t>(n.starts[1]);
    const R scale = gr_dropout_scale(static_cast<R>(n.scalar));  // the mask compares the rate in double
    for (int64_t e = 0; e < n.numel(); ++e) {
      const R c = training ? gr_rmul(R(g[e]), gr_dropout_factor(seed, step, static_cast<uint64_t>(id), static_cast<uint64_t>(e), n.scalar, scale))
                           : R(g[e]);
      accumulate_into(slot[e], c);
    }
  }

  void cross_entropy() {
    if (!wants(n.a)) return;  // class ids get no gradient
    const Node& X = in(n.a);
    const int64_t C = X.shape[X.shape.rank() - 1], rows = X.shape.numel() / C;  // [N,T,C]: N·T rows
    double* sx = t.ensure_grad(n.a);
    const R q = gr_rdiv(R(g[0]), static_cast<R>(rows));
    std::vector<R> e(static_cast<size_t>(C));  // a row's exps (row_lanes.h ce_row_bwd)
    // Each row's rule: ce_row_bwd_ml from the max and log-sum-exp the forward kept, or from scratch.
    const auto row_bwd = [&](int64_t r, const R* xr, R c, R* sr) {
      if (n.kept)
        ce_row_bwd_ml(xr, c, q, sr, C, R(n.kept[2 * r]), R(n.kept[2 * r + 1]));
      else
        ce_row_bwd(xr, c, q, sr, C, e.data());
    };
    for (int64_t r = 0; r < rows; ++r) {
      if constexpr (std::is_same_v<R, double>) {
        row_bwd(r, X.val + r * C, in(n.b).val[r], sx + r * C);
      } else {
        float* w = t.scratch(static_cast<size_t>(2 * C));
        narrow_lane(X.val + r * C, C, 1, w);
        narrow_lane(sx + r * C, C, 1, w + C);
        row_bwd(r, w, static_cast<float>(in(n.b).val[r]), w + C);
        widen_lane(w + C, C, sx + r * C, 1);
      }
    }
  }

  void softmax_cross_entropy() {
    const Node &X = in(n.a), &T = in(n.b);
    const int64_t rows = X.shape[0], C = X.shape[1];
    double* sx = wants(n.a) ? t.ensure_grad(n.a) : nullptr;
    double* st = wants(n.b) ? t.ensure_grad(n.b) : nullptr;
    const R q = gr_rdiv(R(g[0]), static_cast<R>(rows));
    for (int64_t r = 0; r < rows; ++r) {
      if constexpr (std::is_same_v<R, double>) {
        gr_sce_row_bwd(X.val + r * C, T.val + r * C, q, sx ? sx + r * C : nullptr, st ? st + r * C : nullptr, C);
      } else {  // float copies of the row's x, t and slots (one copy when x and t are one node)
        float* w = t.scratch(static_cast<size_t>(4 * C));
        float* fx = sx ? w + 2 * C : nullptr;
        float* ft = st ? (st == sx ? fx : w + 3 * C) : nullptr;
        narrow_lane(X.val + r * C, C, 1, w);
        narrow_lane(T.val + r * C, C, 1, w + C);
        if (fx) narrow_lane(sx + r * C, C, 1, fx);
        if (ft && ft != fx) narrow_lane(st + r * C, C, 1, ft);
        gr_sce_row_bwd(w, w + C, q, fx, ft, C);
        if (fx) widen_lane(fx, C, sx + r * C, 1);
        if (ft && ft != fx) widen_lane(ft, C, st + r * C, 1);
      }
    }
  }

  void apply() {
    const double* y = n.val;
    const double* x = n.a >= 0 ? in(n.a).val : nullptr;
    const double* b = n.b >= 0 ? in(n.b).val : nullptr;
    const R s = static_cast<R>(n.scalar);  // rounded once, as a device kernel's GRK_REAL
    if (n.op == Op::Gelu && n.kept)  // it kept its tanh (Tape::gelu_keeping_tanh): gr_gelu_bwd with t read
      return unary([&](int64_t e) { return gr_gelu_bwd_t(R(g[e]), R(x[e]), R(n.kept[e])); });
    switch (n.op) {
      case Op::Param:
      case Op::Const: return;
      // Elementwise ops, from their rows: gr_ew_<stem>::bwd_a/bwd_b call the row's gr_<stem>_bwd*.
#define GR_TAPE_EW_BWD(E, name, arity, cls, attrs, stem, fwd, ...)                                          \
  GR_OP_IF_UNARY_##cls(case Op::E: return unary([&](int64_t e) { return gr_ew_##stem::bwd_a(R(g[e]), R(x[e]), R(0), R(y[e]), s); });) \
  GR_OP_IF_BINARY_##cls(case Op::E: return binary(                                                        \
      [&](int64_t e, int64_t ia, int64_t ib) { return gr_ew_##stem::bwd_a(R(g[e]), R(x[ia]), R(b[ib]), R(y[e]), s); }, \
      [&](int64_t e, int64_t ia, int64_t ib) { return gr_ew_##stem::bwd_b(R(g[e]), R(x[ia]), R(b[ib]), R(y[e]), s); });) \
  GR_OP_IF_ROW_##cls(case Op::E: return row();) GR_OP_IF_FOLD(cls, fwd, case Op::E: return fold();) \
  GR_OP_IF_BATCH_##cls(case Op::E: return batch();) \
  GR_OP_IF_WINDOW_##cls(case Op::E: return t.template window_backward<R>(n, g);)
      GR_OP_TABLE(GR_TAPE_EW_BWD)
#undef GR_TAPE_EW_BWD
      case Op::Sum:
      case Op::Mean: return reduction();
      case Op::Matmul: return matmul();
      case Op::Bmm: return bmm();
      case Op::Transpose: return transpose();
      case Op::Reshape: return unary([&](int64_t e) { return R(g[e]); });
      case Op::Slice: return slice();
      case Op::Concat: return concat();
      case Op::Softmax:
      case Op::LogSoftmax: return lane();
      case Op::SoftmaxCrossEntropy: return softmax_cross_entropy();
      case Op::CrossEntropy: return cross_entropy();
      case Op::Dropout: return dropout(static_cast<int32_t>(&n - &t.nodes_[0]));
      case Op::Embedding: return t.template embedding_backward<R>(n, g);
    }
  }
};

bool Tape::backward(Var loss) {
  if (!ok_) return false;
  if (loss.id < 0 || loss.id >= size()) {
    error_ = "backward: loss is not a variable of this tape (id " + std::to_string(loss.id) + ")";
    ok_ = false;
    return false;
  }
  if (!nodes_[loss.id].val) {
    error_ = "backward: node " + std::to_string(loss.id) +
             " has no host value (it depends on a lazy or dropped constant); the CPU tape cannot evaluate it";
    ok_ = false;
    return false;
  }
  for (Node& n : nodes_)  // intermediate gradients restart (read as +0); parameter gradients accumulate
    if (n.op != Op::Param) n.touched = false;
  if (!nodes_[loss.id].requires_grad) return true;  // no parameter upstream: nothing to do
  by_real([&](auto zero) {
    using R = decltype(zero);
    double* seed = ensure_grad(loss.id);
    for (int64_t e = 0; e < nodes_[loss.id].numel(); ++e) accumulate_into(seed[e], R(1));
    for (int32_t id = loss.id; id >= 0; --id) {
      const Node& n = nodes_[id];
      if (!n.requires_grad || !n.touched) continue;
      TapeRules<R>{*this, n, n.grad}.apply();
    }
  });
  return true;
}

}  // namespace gr
