// tape_gather.cpp — embedding on the CPU tape: the forward gather and the table's backward, over the
// one definition of kernels/gr_ops_gather.h (docs/numerics.md "embedding").
//
// Shapes: ids S (rank ≥ 1, P = numel(S) positions; a const or data, never a gradient), table [V, D],
// y = S + [D]. The backward adds the output gradient's rows into the table's slot position by
// position ascending, which per table element is exactly gr_embedding_bwd_b's chain (the per-node
// device kernel computes one element per thread over the same chain), in O(P·D) instead of O(V·P·D).
#include "gr_ops_gather.h"
#include "grad/tape.h"
#include "grad/tape_real.h"

namespace gr {

Var Tape::embedding(Var ids, Var table) {
  const Op op = Op::Embedding;
  if (!usable(op, ids) || !usable(op, table)) return Var{};
  const Shape si = nodes_[ids.id].shape, st = nodes_[table.id].shape;
  if (st.rank() != 2) return poison(op, "needs a table [V,D], got " + st.str());
  if (si.rank() >= kMaxDims)
    return poison(op, "ids " + si.str() + " have rank " + std::to_string(si.rank()) + "; at most " +
                          std::to_string(kMaxDims - 1) + " (the output adds one axis)");
  if (nodes_[ids.id].requires_grad)
    return poison(op, "ids must be integer ids from data or a const; they depend on a parameter (ids get no gradient)");
  int64_t dims[kMaxDims];
  for (int d = 0; d < si.rank(); ++d) dims[d] = si[d];
  dims[si.rank()] = st[1];
  Node* n = push(op, ids.id, table.id, Shape(std::span<const int64_t>(dims, static_cast<size_t>(si.rank() + 1))));
  if (!n->val) return Var{size() - 1};
  const double* pi = nodes_[ids.id].val;
  const double* pt = nodes_[table.id].val;
  const int64_t V = st[0], D = st[1];
  // A copy either way: the f32 tape's values are floats held in doubles (exact), and a NaN row is
  // NaN in both types. gr_embedding_row decides the row in R (ids narrowed to float as the f32
  // device module reads them).
  by_real([&](auto zero) {
    using R = decltype(zero);
    for (int64_t p = 0; p < si.numel(); ++p) {
      const int64_t r = gr_embedding_row(static_cast<R>(pi[p]), V);
      double* out = n->val + p * D;
      if (r < 0)
        for (int64_t d = 0; d < D; ++d) out[d] = static_cast<double>(gr_rdiv(R(0), R(0)));
      else
        for (int64_t d = 0; d < D; ++d) out[d] = pt[r * D + d];
    }
  });
  return Var{size() - 1};
}

template <class R>
void Tape::embedding_backward(const Node& n, const double* g) {
  if (!nodes_[n.b].requires_grad) return;  // the ids never take a gradient (Tape::embedding refuses them)
  const Shape& st = nodes_[n.b].shape;
  const int64_t V = st[0], D = st[1], P = nodes_[n.a].numel();
  const double* pi = nodes_[n.a].val;
  double* slot = ensure_grad(n.b);  // rows no id selects keep their value (zeroed when fresh)
  for (int64_t p = 0; p < P; ++p) {
    const int64_t r = gr_embedding_row(static_cast<R>(pi[p]), V);
    if (r < 0) continue;
    for (int64_t d = 0; d < D; ++d) accumulate_into(slot[r * D + d], static_cast<R>(g[p * D + d]));
  }
}

template void Tape::embedding_backward<double>(const Node&, const double*);
template void Tape::embedding_backward<float>(const Node&, const double*);

}  // namespace gr
