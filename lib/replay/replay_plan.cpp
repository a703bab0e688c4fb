// replay_plan.cpp — the per-op launch plan of a captured program: which kernel, geometry and
// arguments each node's forward (tape order) and backward (descending id) launches use. Every kernel
// is named from its op's stem (kernel_of: grk_<stem>_<part>); no kernel name is written out here.
#include "replay/detail.h"
#include "replay/replay.h"

#include <algorithm>
#include <cstring>

#include "tensor/reduce.h"

namespace gr::replay {

using namespace detail;

// ---- the per-op plan ------------------------------------------------------------------------------
void Program::plan_forward(int32_t id) {
  const NodeInfo& n = nodes_[static_cast<size_t>(id)];
  const uint64_t y = vptr(id);
  // A row op (Class Row): one thread per row of the last axis, eps in the node's scalar.
  const auto row_fwd = [&] {
    const int64_t L = n.shape[n.shape.rank() - 1];
    add(fwd_, kernel_of(n.op, "fwd"), n.numel / L, {vptr(n.a), y, I(n.numel / L), I(L), D(n.scalar)});
  };
  // A fold reduction (max, ...): one thread per lane of [outer, len, inner] (all axes: one lane).
  const auto fold_fwd = [&] {
    const NodeInfo& x = nodes_[static_cast<size_t>(n.a)];
    const AxisLanes l = n.axis == kAllAxes ? AxisLanes{1, x.numel, 1} : axis_lanes(x.shape, n.axis);
    add(fwd_, kernel_of(n.op, "fwd"), l.outer * l.inner, {vptr(n.a), y, I(l.outer), I(l.len), I(l.inner)});
  };
  // A batch-statistics op: one thread per channel of x viewed as [N, C, S]; the running statistics'
  // update right after the forward (it does nothing outside training: the key's flag).
  const auto batch_fwd = [&] {
    const int64_t N = n.shape[0], C = n.shape[1], S = n.numel / (N * C);
    add(fwd_, kernel_of(n.op, "fwd"), C, {vptr(n.a), vptr(n.b), vptr(n.c), y, mptr(key_off_), I(N), I(C), I(S), D(n.scalar)});
    add(fwd_, kernel_of(n.op, "update"), C, {vptr(n.a), vptr(n.b), vptr(n.c), mptr(key_off_), I(N), I(C), I(S), D(n.momentum)});
  };
  // A window op (conv2d, pools): one thread per output element, the geometry in the metadata slab.
  const auto window_fwd = [&] {
    add(fwd_, kernel_of(n.op, "fwd"), n.numel, {vptr(n.a), n.b >= 0 ? vptr(n.b) : 0, y, mptr(n.meta_off), I(n.numel)});
  };
  switch (n.op) {
    case Op::Param:
    case Op::Const: return;  // data: nothing to compute
#define GR_PLAN_EW_FWD(E, name, arity, cls, attrs, stem, fwd, ...)                                          \
  GR_OP_IF_BINARY_##cls(case Op::E: return add(fwd_, elementwise_kernel(n.op, -1), n.numel,                   \
                                               {vptr(n.a), vptr(n.b), y, mptr(n.meta_off), I(n.numel)});) \
  GR_OP_IF_UNARY_##cls(case Op::E: return add(fwd_, elementwise_kernel(n.op, -1), n.numel, {vptr(n.a), y, D(n.scalar), I(n.numel)});) \
  GR_OP_IF_ROW_##cls(case Op::E: return row_fwd();) GR_OP_IF_FOLD(cls, fwd, case Op::E: return fold_fwd();) \
  GR_OP_IF_BATCH_##cls(case Op::E: return batch_fwd();) \
  GR_OP_IF_WINDOW_##cls(case Op::E: return window_fwd();)
    GR_OP_TABLE(GR_PLAN_EW_FWD)
#undef GR_PLAN_EW_FWD
    case Op::Reshape: return add(fwd_, kernel_of(Op::Reshape, "fwd"), n.numel, {vptr(n.a), y, D(0.0), I(n.numel)});
    case Op::Sum:
    case Op::Mean: {
      const NodeInfo& x = nodes_[static_cast<size_t>(n.a)];
      const uint64_t mean = n.op == Op::Mean ? 1 : 0;
      if (n.axis == kAllAxes) return add_serial(fwd_, kernel_of(Op::Sum, "all_fwd"), {vptr(n.a), y, I(x.numel), mean});
      const AxisLanes l = axis_lanes(x.shape, n.axis);
      return add(fwd_, kernel_of(Op::Sum, "axis_fwd"), l.outer * l.inner, {vptr(n.a), y, I(l.outer), I(l.len), I(l.inner), mean});
    }
    case Op::Matmul: {
      const Shape &sa = nodes_[static_cast<size_t>(n.a)].shape, &sb = nodes_[static_cast<size_t>(n.b)].shape;
      const int64_t K = sb[0], M = sa.numel() / K;  // [..., M, K] is [M·…, K] (tape_ops.cpp)
      return add(fwd_, kernel_of(Op::Matmul, "fwd"), n.numel, {vptr(n.a), vptr(n.b), y, I(M), I(K), I(sb[1])});
    }
    case Op::Bmm: {
      const Shape &sa = nodes_[static_cast<size_t>(n.a)].shape, &sb = nodes_[static_cast<size_t>(n.b)].shape;
      const int64_t M = sa[1], K = sa[2], N = sb[2];
      return add(fwd_, kernel_of(Op::Bmm, "fwd"), n.numel,
                 {vptr(n.a), vptr(n.b), y, I(n.shape[0]), I(M), I(K), I(N), I(sa[0] == 1 ? 0 : M * K),
                  I(sb[0] == 1 ? 0 : K * N)});
    }
    case Op::Transpose: {
      const Shape& s = nodes_[static_cast<size_t>(n.a)].shape;
      const int64_t R = s[s.rank() - 2], C = s[s.rank() - 1];
      return add(fwd_, kernel_of(Op::Transpose, "fwd"), n.numel, {vptr(n.a), y, I(s.numel() / (R * C)), I(R), I(C)});
    }
    case Op::Slice: return add(fwd_, kernel_of(Op::Slice, "fwd"), n.numel, {vptr(n.a), y, mptr(n.meta_off), I(n.numel)});
    case Op::Concat: {
      const AxisLanes la = axis_lanes(nodes_[static_cast<size_t>(n.a)].shape, n.axis),
                      lb = axis_lanes(nodes_[static_cast<size_t>(n.b)].shape, n.axis);
      return add(fwd_, kernel_of(Op::Concat, "fwd"), n.numel,
                 {vptr(n.a), vptr(n.b), y, I(la.outer), I(la.len * la.inner), I(lb.len * lb.inner)});
    }
    case Op::Softmax:
    case Op::LogSoftmax: {
      const AxisLanes l = axis_lanes(n.shape, n.axis);
      if (n.causal)  // last-axis lanes (inner 1), lane o is query row o mod Tq
        return add(fwd_, kernel_of(Op::Softmax, "causal_fwd"), l.outer,
                   {vptr(n.a), y, I(l.outer), I(l.len), I(n.shape[n.shape.rank() - 2])});
      return add(fwd_, kernel_of(n.op, "fwd"), l.outer * l.inner,
                 {vptr(n.a), y, I(l.outer), I(l.len), I(l.inner)});
    }
    case Op::SoftmaxCrossEntropy: {
      const Shape& sx = nodes_[static_cast<size_t>(n.a)].shape;
      return add_serial(fwd_, kernel_of(Op::SoftmaxCrossEntropy, "fwd"), {vptr(n.a), vptr(n.b), y, I(sx[0]), I(sx[1])});
    }
    case Op::CrossEntropy: {
      const Shape& sx = nodes_[static_cast<size_t>(n.a)].shape;
      const int64_t C = sx[sx.rank() - 1];  // [N,T,C] logits: N·T rows
      return add_serial(fwd_, kernel_of(Op::CrossEntropy, "fwd"), {vptr(n.a), vptr(n.b), y, I(sx.numel() / C), I(C)});
    }
    case Op::Dropout:
      return add(fwd_, kernel_of(Op::Dropout, "fwd"), n.numel, {vptr(n.a), y, mptr(key_off_), D(n.scalar), I(id), I(n.numel)});
    case Op::Embedding: {  // one thread per output element (gr_embedding_fwd)
      const Shape& st = nodes_[static_cast<size_t>(n.b)].shape;
      return add(fwd_, kernel_of(Op::Embedding, "fwd"), n.numel, {vptr(n.a), vptr(n.b), y, I(st[0]), I(st[1]), I(n.numel)});
    }
  }
}

void Program::plan_backward(int32_t id) {
  const NodeInfo& n = nodes_[static_cast<size_t>(id)];
  const uint64_t g = gptr(id), y = vptr(id);
  const auto unary = [&](const char* name) {
    if (active(n.a)) add(bwd_, name, n.numel, {g, vptr(n.a), y, gptr(n.a), D(n.scalar), I(n.numel)});
  };
  const auto row_bwd = [&] {
    if (!active(n.a)) return;
    const int64_t L = n.shape[n.shape.rank() - 1];
    add(bwd_, kernel_of(n.op, "bwd"), n.numel / L, {g, vptr(n.a), y, gptr(n.a), I(n.numel / L), I(L), D(n.scalar)});
  };
  // A fold reduction: one thread per lane, its g and y at the lane's output element.
  const auto fold_bwd = [&] {
    if (!active(n.a)) return;
    const NodeInfo& x = nodes_[static_cast<size_t>(n.a)];
    const AxisLanes l = n.axis == kAllAxes ? AxisLanes{1, x.numel, 1} : axis_lanes(x.shape, n.axis);
    add(bwd_, kernel_of(n.op, "bwd"), l.outer * l.inner, {g, vptr(n.a), y, gptr(n.a), I(l.outer), I(l.len), I(l.inner)});
  };
  const auto batch_bwd = [&] {
    if (!active(n.a)) return;
    const int64_t N = n.shape[0], C = n.shape[1], S = n.numel / (N * C);
    add(bwd_, kernel_of(n.op, "bwd"), C,
        {g, vptr(n.a), y, vptr(n.b), vptr(n.c), gptr(n.a), mptr(key_off_), I(N), I(C), I(S), D(n.scalar)});
  };
  // A window op: one thread per slot of each side that is active, x's side first (grk_<stem>_bwd_a, _bwd_b).
  const auto window_bwd = [&] {
    const uint64_t w = n.b >= 0 ? vptr(n.b) : 0;
    if (active(n.a))
      add(bwd_, kernel_of(n.op, "bwd_a"), nodes_[static_cast<size_t>(n.a)].numel,
          {g, vptr(n.a), w, gptr(n.a), mptr(n.meta_off), I(nodes_[static_cast<size_t>(n.a)].numel)});
    if (n.b >= 0 && active(n.b))
      add(bwd_, kernel_of(n.op, "bwd_b"), nodes_[static_cast<size_t>(n.b)].numel,
          {g, vptr(n.a), w, gptr(n.b), mptr(n.meta_off), I(nodes_[static_cast<size_t>(n.b)].numel)});
  };
  // The whole a-side walk, then the whole b-side walk (x∘x: a's then b's per slot).
  const auto binary_bwd = [&] {
    const NodeInfo &na = nodes_[static_cast<size_t>(n.a)], &nb = nodes_[static_cast<size_t>(n.b)];
    if (active(n.a))
      add(bwd_, elementwise_kernel(n.op, 0), na.numel, {g, vptr(n.a), vptr(n.b), y, gptr(n.a), mptr(n.meta_off), I(na.numel)});
    if (active(n.b))
      add(bwd_, elementwise_kernel(n.op, 1), nb.numel, {g, vptr(n.a), vptr(n.b), y, gptr(n.b), mptr(n.meta_off), I(nb.numel)});
  };
  switch (n.op) {
    case Op::Param:
    case Op::Const: return;
#define GR_PLAN_EW_BWD(E, name, arity, cls, attrs, stem, fwd, ...) \
  GR_OP_IF_BINARY_##cls(case Op::E: return binary_bwd();)        \
  GR_OP_IF_UNARY_##cls(case Op::E: return unary(elementwise_kernel(n.op, 0));) \
  GR_OP_IF_ROW_##cls(case Op::E: return row_bwd();) GR_OP_IF_FOLD(cls, fwd, case Op::E: return fold_bwd();) \
  GR_OP_IF_BATCH_##cls(case Op::E: return batch_bwd();) \
  GR_OP_IF_WINDOW_##cls(case Op::E: return window_bwd();)
    GR_OP_TABLE(GR_PLAN_EW_BWD)
#undef GR_PLAN_EW_BWD
    case Op::Reshape: return unary(kernel_of(Op::Reshape, "bwd"));
    case Op::Sum:
    case Op::Mean: {
      if (!active(n.a)) return;
      const NodeInfo& x = nodes_[static_cast<size_t>(n.a)];
      const uint64_t mean = n.op == Op::Mean ? 1 : 0;
      if (n.axis == kAllAxes) return add(bwd_, kernel_of(Op::Sum, "all_bwd"), x.numel, {g, gptr(n.a), I(x.numel), mean});
      const AxisLanes l = axis_lanes(x.shape, n.axis);
      return add(bwd_, kernel_of(Op::Sum, "axis_bwd"), x.numel, {g, gptr(n.a), I(l.outer), I(l.len), I(l.inner), mean});
    }
    case Op::Matmul: {  // dA first, then dB (A·A: dA's contribution lands first), as backward.cpp
      const Shape &sa = nodes_[static_cast<size_t>(n.a)].shape, &sb = nodes_[static_cast<size_t>(n.b)].shape;
      const int64_t K = sb[0], M = sa.numel() / K, N = sb[1];
      if (active(n.a)) add(bwd_, kernel_of(Op::Matmul, "bwd_a"), M * K, {g, vptr(n.b), gptr(n.a), I(M), I(K), I(N)});
      if (active(n.b)) add(bwd_, kernel_of(Op::Matmul, "bwd_b"), K * N, {vptr(n.a), g, gptr(n.b), I(M), I(K), I(N)});
      return;
    }
    case Op::Bmm: {
      const Shape &sa = nodes_[static_cast<size_t>(n.a)].shape, &sb = nodes_[static_cast<size_t>(n.b)].shape;
      const int64_t B = n.shape[0], M = sa[1], K = sa[2], N = sb[2];
      const int64_t stra = sa[0] == 1 ? 0 : M * K, strb = sb[0] == 1 ? 0 : K * N;
      if (active(n.a))
        add(bwd_, kernel_of(Op::Bmm, "bwd_a"), sa.numel(), {g, vptr(n.b), gptr(n.a), I(B), I(M), I(K), I(N), I(stra), I(strb)});
      if (active(n.b))
        add(bwd_, kernel_of(Op::Bmm, "bwd_b"), sb.numel(), {vptr(n.a), g, gptr(n.b), I(B), I(M), I(K), I(N), I(stra), I(strb)});
      return;
    }
    case Op::Transpose: {
      if (!active(n.a)) return;
      const Shape& s = nodes_[static_cast<size_t>(n.a)].shape;
      const int64_t R = s[s.rank() - 2], C = s[s.rank() - 1];
      return add(bwd_, kernel_of(Op::Transpose, "bwd"), n.numel, {g, gptr(n.a), I(s.numel() / (R * C)), I(R), I(C)});
    }
    case Op::Slice:
      if (active(n.a)) add(bwd_, kernel_of(Op::Slice, "bwd"), n.numel, {g, gptr(n.a), mptr(n.meta_off), I(n.numel)});
      return;
    case Op::Concat: {
      const AxisLanes la = axis_lanes(nodes_[static_cast<size_t>(n.a)].shape, n.axis),
                      lb = axis_lanes(nodes_[static_cast<size_t>(n.b)].shape, n.axis);
      const int64_t ca = la.len * la.inner, cb = lb.len * lb.inner;
      if (active(n.a)) add(bwd_, kernel_of(Op::Concat, "bwd_a"), la.outer * ca, {g, gptr(n.a), I(la.outer), I(ca), I(cb)});
      if (active(n.b)) add(bwd_, kernel_of(Op::Concat, "bwd_b"), la.outer * cb, {g, gptr(n.b), I(la.outer), I(ca), I(cb)});
      return;
    }
    case Op::Softmax:
    case Op::LogSoftmax: {
      if (!active(n.a)) return;
      const AxisLanes l = axis_lanes(n.shape, n.axis);
      if (n.causal)
        return add(bwd_, kernel_of(Op::Softmax, "causal_bwd"), l.outer,
                   {g, y, gptr(n.a), I(l.outer), I(l.len), I(n.shape[n.shape.rank() - 2])});
      return add(bwd_, kernel_of(n.op, "bwd"), l.outer * l.inner,
                 {g, y, gptr(n.a), I(l.outer), I(l.len), I(l.inner)});
    }
    case Op::SoftmaxCrossEntropy: {
      if (!active(n.a) && !active(n.b)) return;
      const Shape& sx = nodes_[static_cast<size_t>(n.a)].shape;
      return add(bwd_, kernel_of(Op::SoftmaxCrossEntropy, "bwd"), sx[0],
                 {g, vptr(n.a), vptr(n.b), gptr(n.a), gptr(n.b), I(sx[0]), I(sx[1])});
    }
    case Op::CrossEntropy: {
      if (!active(n.a)) return;
      const Shape& sx = nodes_[static_cast<size_t>(n.a)].shape;
      const int64_t C = sx[sx.rank() - 1], rows = sx.numel() / C;
      return add(bwd_, kernel_of(Op::CrossEntropy, "bwd"), rows, {g, vptr(n.a), vptr(n.b), gptr(n.a), I(rows), I(C)});
    }
    case Op::Dropout:
      if (active(n.a)) add(bwd_, kernel_of(Op::Dropout, "bwd"), n.numel, {g, gptr(n.a), mptr(key_off_), D(n.scalar), I(id), I(n.numel)});
      return;
    case Op::Embedding: {  // one thread per table element, positions ascending (gr_embedding_bwd_b); ids: none
      if (!active(n.b)) return;
      const Shape& st = nodes_[static_cast<size_t>(n.b)].shape;
      return add(bwd_, kernel_of(Op::Embedding, "bwd_b"), st.numel(),
                 {g, vptr(n.a), gptr(n.b), I(nodes_[static_cast<size_t>(n.a)].numel), I(st[0]), I(st[1])});
    }
  }
}

}  // namespace gr::replay
