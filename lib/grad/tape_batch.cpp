// tape_batch.cpp — forward of the batch-statistics ops (Class Batch: batch_norm) and their
// running-statistics update, over the rules of kernels/gr_ops_batch.h (f64, and f32 on float
// working copies). The backward is backward.cpp's batch().
#include <cmath>
#include <string>

#include "gr_ops_batch.h"
#include "grad/tape.h"
#include "grad/tape_real.h"

namespace gr {

namespace {

// A Batch op's rules by its enum (generated from the table's Batch rows).
template <class T>
void batch_fwd(Op op, const T* x, const T* rm, const T* rv, T* y, int64_t N, int64_t C, int64_t S, bool training, T eps) {
#define GR_TAPE_BATCH_FWD(E, name, arity, cls, attrs, stem, ...)                                   \
  GR_OP_IF_BATCH_##cls(if (op == Op::E) {                                                           \
    for (int64_t c = 0; c < C; ++c) gr_##stem##_chan_fwd(x, rm, rv, y, N, C, S, c, training, eps); \
    return;                                                                                         \
  })
  GR_OP_TABLE(GR_TAPE_BATCH_FWD)
#undef GR_TAPE_BATCH_FWD
  throw Error("batch_fwd: " + std::string(op_name(op)) + " is not a batch-statistics op");
}

template <class T>
void batch_update(Op op, const T* x, T* rm, T* rv, int64_t N, int64_t C, int64_t S, T momentum) {
#define GR_TAPE_BATCH_UPD(E, name, arity, cls, attrs, stem, ...)                             \
  GR_OP_IF_BATCH_##cls(if (op == Op::E) {                                                     \
    for (int64_t c = 0; c < C; ++c) gr_##stem##_chan_update(x, rm, rv, N, C, S, c, momentum); \
    return;                                                                                   \
  })
  GR_OP_TABLE(GR_TAPE_BATCH_UPD)
#undef GR_TAPE_BATCH_UPD
  throw Error("batch_update: " + std::string(op_name(op)) + " is not a batch-statistics op");
}

// [N, C, S] of a batch op's input shape (S = the product of the dims after C).
void batch_dims(const Shape& s, int64_t& N, int64_t& C, int64_t& S) {
  N = s[0];
  C = s[1];
  S = s.numel() / (N * C);
}

}  // namespace

Var Tape::batch_op(Op op, Var x, Var rm, Var rv, double eps, double momentum) {
  if (!op_info(op).batch()) throw Error("batch_op: " + std::string(op_name(op)) + " is not a batch-statistics op");
  if (!usable(op, x) || !usable(op, rm) || !usable(op, rv)) return Var{};
  if (!(eps > 0.0) || !std::isfinite(eps)) return poison(op, "eps must be a finite number > 0, got " + std::to_string(eps));
  if (!(momentum >= 0.0 && momentum <= 1.0))
    return poison(op, "momentum must be in [0, 1], got " + std::to_string(momentum));
  const Shape in = nodes_[x.id].shape;
  if (in.rank() != 2 && in.rank() != 4) return poison(op, "needs x [N,C] or [N,C,H,W], got " + in.str());
  const Shape cs{in[1]};
  if (!(nodes_[rm.id].shape == cs) || !(nodes_[rv.id].shape == cs))
    return poison(op, "running statistics of x " + in.str() + " must have shape " + cs.str() + ", got " +
                          nodes_[rm.id].shape.str() + " and " + nodes_[rv.id].shape.str());
  if (nodes_[rm.id].requires_grad || nodes_[rv.id].requires_grad)
    return poison(op, "the running statistics are state, not trainable parameters");
  const bool training = dropout_key_.training;
  if (training && in.numel() / in[1] < 2)
    return poison(op, "training needs more than one value per channel, got x " + in.str());
  Node* n = push(op, x.id, rm.id, in, false, rv.id);
  n->scalar = eps;
  n->momentum = momentum;
  n->axis = 1;
  n->starts[0] = training ? 1 : 0;
  if (!n->val) return Var{size() - 1};
  int64_t N, C, S;
  batch_dims(in, N, C, S);
  const double *px = nodes_[x.id].val, *pm = nodes_[rm.id].val, *pv = nodes_[rv.id].val;
  if (real_ == DType::F64) {
    batch_fwd(op, px, pm, pv, n->val, N, C, S, training, eps);
    return Var{size() - 1};
  }
  const int64_t E = in.numel();
  float* w = scratch(static_cast<size_t>(2 * E + 2 * C));
  narrow_lane(px, E, 1, w);
  narrow_lane(pm, C, 1, w + 2 * E);
  narrow_lane(pv, C, 1, w + 2 * E + C);
  batch_fwd(op, w, w + 2 * E, w + 2 * E + C, w + E, N, C, S, training, static_cast<float>(eps));
  widen_lane(w + E, E, n->val, 1);
  return Var{size() - 1};
}

void Tape::update_running_stats(Var node) {
  const Node& n = this->node(node);
  if (!op_info(n.op).batch()) throw Error("update_running_stats: node " + std::to_string(node.id) + " is not a batch-statistics op");
  if (!n.starts[0]) return;  // recorded outside training: the running statistics were only read
  const Node &X = nodes_[n.a], &RM = nodes_[n.b], &RV = nodes_[n.c];
  if (!X.val || !RM.val || !RV.val) throw Error("update_running_stats: node " + std::to_string(node.id) + " has no host values");
  int64_t N, C, S;
  batch_dims(X.shape, N, C, S);
  if (real_ == DType::F64) {
    batch_update(n.op, X.val, RM.val, RV.val, N, C, S, n.momentum);
    return;
  }
  const int64_t E = X.numel();
  float* w = scratch(static_cast<size_t>(E + 2 * C));
  narrow_lane(X.val, E, 1, w);
  narrow_lane(RM.val, C, 1, w + E);
  narrow_lane(RV.val, C, 1, w + E + C);
  batch_update(n.op, w, w + E, w + E + C, N, C, S, static_cast<float>(n.momentum));
  widen_lane(w + E, C, RM.val, 1);
  widen_lane(w + E + C, C, RV.val, 1);
}

}  // namespace gr
