// class_weight.h — class weights on the classification losses (issue 41 item 4; docs/spec.md,
// "Class weights"): "class_weight": [w0, …] | "balanced" on softmax_cross_entropy, cross_entropy
// and bce_with_logits ("pos_weight": p on bce_with_logits is [1, p]).
//
// The parser lowers a weighted loss into ops of the table, so every path (the CPU tape, host and
// CUDA replay, fused plans, the exports, check --fd, the PyTorch oracle) computes it with no op of
// its own. For node ID with logits x [N,C] and a list w of C weights (const ID.class_weight [C,1]):
//   softmax_cross_entropy(x, t), t one-hot [N,C]  (PyTorch's F.cross_entropy(x, ids, weight=w):
//   Σ_n w_{y_n}·l_n / Σ_n w_{y_n}):
//     ID.w_row = matmul(t, ID.class_weight)  [N,1]  the row's weight w_y
//     ID.w_sum = sum(ID.w_row); ID.rows = sum(t) (N for one-hot rows); ID.scale = div(ID.rows, ID.w_sum)
//     ID.t_scaled = mul(t, mul(ID.w_row, ID.scale))   row n scaled by N·w_{y_n} / Σ w
//     ID = softmax_cross_entropy(x, ID.t_scaled)     = (1/N) Σ_n N·w_{y_n}/Σw · l_n
//   (softmax_cross_entropy's gradient is softmax(x)·Σt − t per row, right for scaled rows.)
//   cross_entropy(x, ids): the same on t = one-hot of the ids, built exactly from the integers:
//     ID.ids_col = reshape(ids, [-1, 1]); ID.classes = const [1, C] of 0..C−1;
//     t = relu(adds(neg(abs(sub(ID.ids_col, ID.classes))), 1))  (1 where id = c, else 0);
//     the unweighted ID.ids = cross_entropy(x, ids) stays in the graph, off the loss's path, so the
//     ids are checked as for cross_entropy (integers in [0, C)).
//   bce_with_logits(x, y) (elementwise; w = [w0, w1]; PyTorch's binary_cross_entropy_with_logits
//   with weight=w0 and pos_weight=w1/w0, reduction 'none'):
//     ID.sp_neg = bce_with_logits(x, 1) = softplus(−x); ID.sp_pos = bce_with_logits(x, 0) = softplus(x)
//     ID = w1·y·softplus(−x) + w0·(1 − y)·softplus(x)   (muls, adds, neg, mul, add)
//   the mean or sum after it is the spec's, as PyTorch's reduction divides by the element count.
// "balanced": w_c = n / (k · count_c) over the TRAINING rows' labels (n rows, k classes: the
// one-hot columns, the label's categories for ids, 2 for bce_with_logits); resolved before the
// spec is used, as a --set item that run.json's "overrides" and spec.json keep.
#pragma once
#include <string>
#include <vector>

#include "spec/json_reader.h"
#include "spec/spec.h"

namespace gr {

// For a graph node `n` just read from `j`: when it has "class_weight" (a list) or "pos_weight",
// appends the nodes and consts that replace it (the last node keeps n.id) and returns true; a
// "balanced" one is recorded in spec.balanced_weights and left unweighted until resolved. Throws
// InputError at the key for a weight on another op, a bad list, or a non-finite or negative weight.
bool lower_class_weight(const JsonAt& j, const NodeSpec& n, Spec& spec, std::vector<NodeSpec>& nodes);

// The --set items ("/graph/K/class_weight=[w0,…]", %.17g) that resolve every "balanced" of the
// spec from its training rows (load_datasets). InputError at /graph/K/class_weight when a class
// has no training row, or the labels are not a data input.
std::vector<std::string> resolve_balanced_weights(const Spec& spec);

}  // namespace gr
