// folds.cpp — see folds.h.
#include "spec/folds.h"

#include <cmath>
#include <limits>
#include <map>

#include "io/errors.h"
#include "spec/random.h"

namespace gr {

namespace {

const NodeSpec* node_named(const Spec& spec, const std::string& id) {
  for (const NodeSpec& n : spec.graph)
    if (n.id == id) return &n;
  return nullptr;
}

// The classifier's labels: the accuracy metric's, else the loss's (the second input of
// softmax_cross_entropy or cross_entropy, or of the bce_with_logits under a mean or sum; weighted
// or not). Their index among the spec's inputs, -1 when there is none.
int label_input(const Spec& spec) {
  if (!spec.data) return -1;
  std::string label = spec.metrics.accuracy ? spec.metrics.labels : "";
  const NodeSpec* n = spec.metrics.accuracy ? nullptr : node_named(spec, spec.loss);
  auto op_of = [](const NodeSpec& m) { return m.weighted.value_or(m.op); };
  auto inputs_of = [](const NodeSpec& m) -> const std::vector<std::string>& { return m.weighted ? m.weighted_inputs : m.inputs; };
  if (n && n->kind == NodeSpec::Kind::Op && (op_of(*n) == Op::Mean || op_of(*n) == Op::Sum) && inputs_of(*n).size() == 1) {
    n = node_named(spec, inputs_of(*n)[0]);
    if (n && (n->kind != NodeSpec::Kind::Op || op_of(*n) != Op::BceWithLogits)) n = nullptr;
  }
  if (n && n->kind == NodeSpec::Kind::Op && inputs_of(*n).size() == 2 &&
      (op_of(*n) == Op::SoftmaxCrossEntropy || op_of(*n) == Op::CrossEntropy || op_of(*n) == Op::BceWithLogits))
    label = inputs_of(*n)[1];
  for (size_t i = 0; i < spec.data->inputs.size(); ++i)
    if (!label.empty() && spec.data->inputs[i].name == label) return static_cast<int>(i);
  return -1;
}

}  // namespace

bool folds_stratified(const Spec& spec) { return label_input(spec) >= 0; }

std::string folds_label(const Spec& spec) {
  const int i = label_input(spec);
  return i < 0 ? std::string() : spec.data->inputs[static_cast<size_t>(i)].name;
}

std::vector<int64_t> assign_folds(const Spec& spec, const RawTable& raw) {
  const int64_t rows = raw.rows, k = spec.data->cv_folds;
  if (k > rows)
    throw InputError(spec.path, "/data/cv/folds",
                     std::to_string(k) + " folds need at least " + std::to_string(k) + " rows; the data has " + std::to_string(rows));
  const std::vector<int64_t> perm = random_permutation(rows, spec.seed, kSplitStream);
  std::vector<int64_t> fold(static_cast<size_t>(rows), 0);
  const int label = label_input(spec);
  if (label < 0) {
    for (int64_t j = 0; j < rows; ++j) fold[static_cast<size_t>(perm[static_cast<size_t>(j)])] = j % k + 1;
    return fold;
  }
  const InputSpec& in = spec.data->inputs[static_cast<size_t>(label)];
  const RawInput& r = raw.inputs[static_cast<size_t>(label)];
  const int64_t width = rows ? static_cast<int64_t>(r.values.size()) / rows : 0;
  std::map<std::vector<double>, int64_t> group_of;  // the label's raw row → its group (first appearance order)
  std::vector<int64_t> group(static_cast<size_t>(rows));
  std::vector<double> key;
  for (int64_t row = 0; row < rows; ++row) {
    key.assign(r.values.begin() + row * width, r.values.begin() + (row + 1) * width);
    for (double& v : key) {
      if (std::isnan(v)) v = std::numeric_limits<double>::infinity();  // a missing label (refused later) sorts as one key
      else if (in.has_threshold) v = v > in.threshold ? 1.0 : 0.0;
    }
    const auto [it, added] = group_of.emplace(key, static_cast<int64_t>(group_of.size()));
    group[static_cast<size_t>(row)] = it->second;
  }
  std::vector<std::vector<int64_t>> members(group_of.size());
  for (int64_t j = 0; j < rows; ++j) {
    const int64_t row = perm[static_cast<size_t>(j)];
    members[static_cast<size_t>(group[static_cast<size_t>(row)])].push_back(row);
  }
  int64_t c = 0;
  for (const std::vector<int64_t>& m : members)
    for (int64_t row : m) fold[static_cast<size_t>(row)] = c++ % k + 1;
  return fold;
}

}  // namespace gr
