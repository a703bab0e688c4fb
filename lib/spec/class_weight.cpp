// class_weight.cpp — see class_weight.h.
#include "spec/class_weight.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "io/errors.h"
#include "spec/dataset.h"

namespace gr {

namespace {

std::string g17(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.17g", v);
  return buf;
}

}  // namespace

bool lower_class_weight(const JsonAt& j, const NodeSpec& n, Spec& spec, std::vector<NodeSpec>& nodes) {
  const bool has_cw = j.has("class_weight"), has_pw = j.has("pos_weight");
  if (!has_cw && !has_pw) return false;
  const JsonAt at = j.at(has_cw ? "class_weight" : "pos_weight");
  const bool loss_op = n.kind == NodeSpec::Kind::Op &&
                       (n.op == Op::SoftmaxCrossEntropy || n.op == Op::CrossEntropy || n.op == Op::BceWithLogits);
  if (!loss_op) at.fail("class weights apply to softmax_cross_entropy, cross_entropy and bce_with_logits only");
  if (has_cw && has_pw) j.at("pos_weight").fail("give \"class_weight\" or \"pos_weight\", not both (pos_weight p is class_weight [1, p])");
  if (has_pw && n.op != Op::BceWithLogits) at.fail("pos_weight applies to bce_with_logits (use class_weight)");
  std::vector<double> w;
  if (has_pw) {
    w = {1.0, at.number()};
  } else if (at.is_string()) {
    if (at.str() != "balanced") at.fail("class_weight is a list of weights, one per class, or \"balanced\"");
    spec.balanced_weights.push_back(j.pointer());
    return false;  // unweighted until resolve_balanced_weights' --set item gives the list
  } else {
    for (const JsonAt& e : at.array()) w.push_back(e.number());
  }
  for (double v : w)
    if (!std::isfinite(v) || v < 0) at.fail("class weights must be finite numbers >= 0");
  if (w.size() < 2) at.fail("class_weight needs one weight per class (at least 2)");
  if (n.op == Op::BceWithLogits && w.size() != 2) at.fail("bce_with_logits has 2 classes (0 and 1): class_weight [w0, w1]");
  const std::string id = n.id, where = at.pointer();
  auto node = [&](const std::string& name, Op op, std::vector<std::string> inputs, double scalar = 0.0) -> NodeSpec& {
    NodeSpec g;
    g.id = name;
    g.pointer = where;
    g.op = op;
    g.inputs = std::move(inputs);
    g.scalar = scalar;
    g.generated = true;
    nodes.push_back(std::move(g));
    return nodes.back();
  };
  auto constant = [&](const std::string& name, std::vector<int64_t> shape, std::vector<double> values) {
    spec.consts.push_back(ConstSpec{name, where, std::move(shape), std::move(values)});
  };
  const std::string x = n.inputs[0], y = n.inputs[1];
  if (n.op == Op::BceWithLogits) {
    constant(id + ".one", {1}, {1.0});
    constant(id + ".zero", {1}, {0.0});
    node(id + ".sp_neg", Op::BceWithLogits, {x, id + ".one"});   // softplus(−x): the loss of class 1
    node(id + ".sp_pos", Op::BceWithLogits, {x, id + ".zero"});  // softplus(x): the loss of class 0
    node(id + ".w_pos", Op::MulScalar, {y}, w[1]);
    node(id + ".neg_y", Op::Neg, {y});
    node(id + ".y_neg", Op::AddScalar, {id + ".neg_y"}, 1.0);  // 1 − y
    node(id + ".w_neg", Op::MulScalar, {id + ".y_neg"}, w[0]);
    node(id + ".l_pos", Op::Mul, {id + ".w_pos", id + ".sp_neg"});
    node(id + ".l_neg", Op::Mul, {id + ".w_neg", id + ".sp_pos"});
    NodeSpec& last = node(id, Op::Add, {id + ".l_pos", id + ".l_neg"});
    last.generated = false, last.pointer = n.pointer, last.weighted = n.op, last.weighted_inputs = n.inputs;
    return true;
  }
  const int64_t k = static_cast<int64_t>(w.size());
  std::string t = y;
  if (n.op == Op::CrossEntropy) {  // one-hot rows from the ids, exactly: relu(1 − |id − c|)
    NodeSpec check = n;  // the unweighted loss, off the loss's path: the ids are checked as cross_entropy's
    check.id = id + ".ids";
    nodes.push_back(check);
    std::vector<double> classes;
    for (int64_t c = 0; c < k; ++c) classes.push_back(static_cast<double>(c));
    constant(id + ".classes", {1, k}, classes);
    node(id + ".ids_col", Op::Reshape, {y}).shape = {-1, 1};
    node(id + ".id_diff", Op::Sub, {id + ".ids_col", id + ".classes"});
    node(id + ".id_dist", Op::Abs, {id + ".id_diff"});
    node(id + ".id_neg", Op::Neg, {id + ".id_dist"});
    node(id + ".id_near", Op::AddScalar, {id + ".id_neg"}, 1.0);
    node(id + ".one_hot", Op::Relu, {id + ".id_near"});
    t = id + ".one_hot";
  }
  constant(id + ".class_weight", {k, 1}, w);
  node(id + ".w_row", Op::Matmul, {t, id + ".class_weight"});
  node(id + ".w_sum", Op::Sum, {id + ".w_row"});
  node(id + ".rows", Op::Sum, {t});
  node(id + ".scale", Op::Div, {id + ".rows", id + ".w_sum"});
  node(id + ".row_scale", Op::Mul, {id + ".w_row", id + ".scale"});
  node(id + ".t_scaled", Op::Mul, {t, id + ".row_scale"});
  NodeSpec& last = node(id, Op::SoftmaxCrossEntropy, {x, id + ".t_scaled"});
  last.generated = false, last.pointer = n.pointer, last.weighted = n.op, last.weighted_inputs = n.inputs;
  return true;
}

std::vector<std::string> resolve_balanced_weights(const Spec& spec) {
  std::vector<std::string> sets;
  if (spec.balanced_weights.empty()) return sets;
  if (!spec.data) throw InputError(spec.path, spec.balanced_weights[0] + "/class_weight", "\"balanced\" needs data");
  const Datasets d = load_datasets(spec);
  for (const std::string& ptr : spec.balanced_weights) {
    const NodeSpec* n = nullptr;
    for (const NodeSpec& g : spec.graph)
      if (g.pointer == ptr && !g.generated) n = &g;
    const std::string at = ptr + "/class_weight";
    if (!n) throw InputError(spec.path, at, "internal: the node of this class_weight is not in the graph");
    size_t label = d.train.names.size();
    for (size_t i = 0; i < d.train.names.size(); ++i)
      if (d.train.names[i] == n->inputs[1]) label = i;
    if (label == d.train.names.size())
      throw InputError(spec.path, at, "\"balanced\" counts the labels of the training rows, but \"" + n->inputs[1] + "\" is not a data input");
    const Tensor& y = d.train.tensors[label];
    const int64_t rows = d.train.rows, width = rows ? y.numel() / rows : 0;
    int64_t k = n->op == Op::BceWithLogits ? 2 : width > 1 ? width : 0;
    if (k == 0) {  // class ids: the label's categories, else the largest id + 1
      const InputFit& fit = d.fit[label];
      if (fit.categorical) k = static_cast<int64_t>(fit.categories.size());
      else
        for (int64_t r = 0; r < rows; ++r) k = std::max(k, static_cast<int64_t>(y.data()[r * width]) + 1);
    }
    std::vector<int64_t> count(static_cast<size_t>(std::max<int64_t>(k, 0)), 0);
    for (int64_t r = 0; r < rows; ++r) {
      int64_t c = 0;
      if (n->op == Op::SoftmaxCrossEntropy) {  // one-hot rows: the argmax
        for (int64_t q = 1; q < width; ++q)
          if (y.data()[r * width + q] > y.data()[r * width + c]) c = q;
      } else {
        const double v = y.data()[r * width];
        if (n->op == Op::BceWithLogits && v != 0.0 && v != 1.0)
          throw InputError(spec.path, at, "\"balanced\" counts 0/1 labels, but training row " + std::to_string(r) + " has " + g17(v));
        c = static_cast<int64_t>(v);
      }
      if (c >= 0 && c < k) ++count[static_cast<size_t>(c)];
    }
    std::string list;
    for (int64_t c = 0; c < k; ++c) {
      if (count[static_cast<size_t>(c)] == 0)
        throw InputError(spec.path, at, "class " + std::to_string(c) + " has no training row, so its balanced weight n / (k · 0) is infinite; give the weights as a list");
      const double wc = static_cast<double>(rows) / (static_cast<double>(k) * static_cast<double>(count[static_cast<size_t>(c)]));
      list += (list.empty() ? "" : ",") + g17(wc);
    }
    sets.push_back(at + "=[" + list + "]");
  }
  return sets;
}

}  // namespace gr
