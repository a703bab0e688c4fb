// evaluate.cpp — see evaluate.h.
#include "train/evaluate.h"

#include <cmath>
#include <optional>
#include <vector>

namespace gr {

// Index of the largest element (the first on ties), of row r of a [rows, cols] block.
int64_t argmax_row(const double* x, int64_t cols) {
  int64_t best = 0;
  for (int64_t c = 1; c < cols; ++c)
    if (x[c] > x[best]) best = c;
  return best;
}

int64_t predicted_class(const double* x, int64_t cols) { return cols == 1 ? (x[0] > 0.0 ? 1 : 0) : argmax_row(x, cols); }

int64_t unfit_last_batch(Model& model, const DataTable& table) {
  const int64_t batch = model.program().batch;
  if (table.rows == 0 || batch <= 0 || table.rows % batch == 0) return 0;
  std::vector<int64_t> rows(static_cast<size_t>(table.rows % batch));
  for (size_t i = 0; i < rows.size(); ++i) rows[i] = static_cast<int64_t>(i);
  const bool fits = !model.record(table, rows).empty();
  model.reset();
  return fits ? 0 : static_cast<int64_t>(rows.size());
}

InputError unfit_batch_error(const Model& model, int64_t table_rows, const std::string& rows_name) {
  const int64_t batch = model.program().batch;
  return InputError(model.spec().path, "/train/batch_size",
                    "the last batch of " + std::to_string(table_rows % batch) + " of the " + std::to_string(table_rows) + " rows of " +
                        rows_name + " does not fit the graph's fixed shapes (batch " + std::to_string(batch) +
                        "), so those rows could not be evaluated; choose a batch_size that divides " + std::to_string(table_rows) +
                        " (or change the rows), or make the graph's shapes follow the batch");
}

Classifier classifier_of(const Program& p) {
  if (p.metric_logits >= 0) return {p.metric_logits, p.metric_labels, p.metric_label_ids, p.metric_binary, p.metric_positions};
  if (p.loss < 0 || !p.spec || !p.spec->data) return {};
  auto ref = [&](const std::string& name, Ref::Kind kind) {
    const auto it = p.names.find(name);
    return it != p.names.end() && it->second.kind == kind ? it->second.index : -1;
  };
  auto op_of = [](const NodeSpec& n) { return n.weighted.value_or(n.op); };
  auto inputs_of = [](const NodeSpec& n) -> const std::vector<std::string>& { return n.weighted ? n.weighted_inputs : n.inputs; };
  const NodeSpec* n = p.nodes[static_cast<size_t>(p.loss)].spec;
  if (n->kind != NodeSpec::Kind::Op) return {};
  bool bce = false;
  if ((op_of(*n) == Op::Mean || op_of(*n) == Op::Sum) && inputs_of(*n).size() == 1) {  // mean(bce_with_logits(z, y))
    const int inner = ref(inputs_of(*n)[0], Ref::Kind::Node);
    if (inner < 0) return {};
    n = p.nodes[static_cast<size_t>(inner)].spec;
    if (n->kind != NodeSpec::Kind::Op || op_of(*n) != Op::BceWithLogits) return {};
    bce = true;
  }
  const Op op = op_of(*n);
  if (!bce && op != Op::SoftmaxCrossEntropy && op != Op::CrossEntropy) return {};
  const std::vector<std::string>& in = inputs_of(*n);
  if (in.size() != 2) return {};
  Classifier c{ref(in[0], Ref::Kind::Node), ref(in[1], Ref::Kind::Input), op == Op::CrossEntropy, bce};
  if (c.logits < 0 || c.labels < 0) return {};
  const Shape& sx = p.nodes[static_cast<size_t>(c.logits)].shape;
  const Shape& sy = p.input_shapes[static_cast<size_t>(c.labels)];
  const bool one_per_row = sy.rank() == 1 || (sy.rank() == 2 && sy[1] == 1);
  if (sx.rank() != 2 || (bce && (sx[1] != 1 || !one_per_row)) || (c.ids && !one_per_row) || (!bce && !c.ids && !(sx == sy))) return {};
  return c;
}

int64_t classifier_classes(const Program& p) {
  const Classifier c = classifier_of(p);
  if (c.logits < 0) return 0;
  const Shape& s = p.nodes[static_cast<size_t>(c.logits)].shape;
  return s.rank() == 2 ? class_count(s[1]) : s.rank() == 3 ? s[2] : 0;
}

Regression regression_of(const Model& model) { return regression_of(model.program()); }

Regression regression_of(const Program& p) {
  const Spec& spec = *p.spec;
  if (!spec.data || p.loss < 0) return {};
  auto same_shape = [&](int node, int input) { return p.nodes[static_cast<size_t>(node)].shape == p.input_shapes[static_cast<size_t>(input)]; };
  if (spec.metrics.regression) {  // declared: it must fit, or the user hears why
    const Ref out = p.names.at(spec.metrics.output), tgt = p.names.at(spec.metrics.target);
    if (out.kind != Ref::Kind::Node)
      throw InputError(spec.path, "/metrics/regression/output", "\"" + spec.metrics.output + "\" is not a graph node");
    if (tgt.kind != Ref::Kind::Input)
      throw InputError(spec.path, "/metrics/regression/target", "\"" + spec.metrics.target + "\" is not a data input");
    if (!same_shape(out.index, tgt.index))
      throw InputError(spec.path, "/metrics/regression",
                       "output \"" + spec.metrics.output + "\" has shape " + p.nodes[static_cast<size_t>(out.index)].shape.str() +
                           " but target \"" + spec.metrics.target + "\" has " + p.input_shapes[static_cast<size_t>(tgt.index)].str());
    return {out.index, tgt.index};
  }
  // Undeclared: an mse loss between a node and a data input is a regression on that input.
  const ProgramNode& loss = p.nodes[static_cast<size_t>(p.loss)];
  if (loss.spec->kind != NodeSpec::Kind::Mse || loss.inputs.size() != 2) return {};
  for (int k = 0; k < 2; ++k) {
    const Ref a = loss.inputs[static_cast<size_t>(k)], b = loss.inputs[static_cast<size_t>(1 - k)];
    if (a.kind == Ref::Kind::Node && b.kind == Ref::Kind::Input && same_shape(a.index, b.index)) return {a.index, b.index};
  }
  return {};
}

Evaluation evaluate_metrics(Model& model, const DataTable& table, const std::string& rows_name, bool skip_unfit) {
  const Program& p = model.program();
  Evaluation ev;
  if (table.rows == 0) return ev;
  const Regression reg = regression_of(model);
  // The regression target's column means over every row of the table (SS_tot is about them).
  const Tensor* target = reg.output >= 0 ? &table.tensors[static_cast<size_t>(reg.target)] : nullptr;
  const int64_t width = target ? target->numel() / table.rows : 0;
  // A standardized target: MAE and RMSE in the data's units (prediction and target each mapped back
  // by x·std + mean); R² is the same in either unit and stays computed as trained.
  const std::vector<double>* t_mean = nullptr;
  const std::vector<double>* t_std = nullptr;
  if (target && static_cast<size_t>(reg.target) < model.data().mean.size() &&
      static_cast<int64_t>(model.data().mean[static_cast<size_t>(reg.target)].size()) == width && width > 0) {
    t_mean = &model.data().mean[static_cast<size_t>(reg.target)];
    t_std = &model.data().std[static_cast<size_t>(reg.target)];
  }
  std::vector<double> mean(static_cast<size_t>(width), 0.0), ss_res(mean.size(), 0.0), ss_tot(mean.size(), 0.0);
  for (int64_t r = 0; target && r < table.rows; ++r)
    for (int64_t c = 0; c < width; ++c) mean[static_cast<size_t>(c)] = mean[static_cast<size_t>(c)] + target->data()[r * width + c];
  for (double& m : mean) m = m / static_cast<double>(table.rows);
  double loss_sum = 0.0, rows_seen = 0.0, correct = 0.0, abs_sum = 0.0, sq_sum = 0.0;
  std::vector<int64_t> rows;
  std::optional<ClassTally> tally;
  const Classifier cls = classifier_of(p);
  for (int64_t start = 0; start < table.rows; start += p.batch) {
    const int64_t end = std::min(table.rows, start + p.batch);
    rows.clear();
    for (int64_t r = start; r < end; ++r) rows.push_back(r);
    const std::vector<Var>& nodes = model.record(table, rows);
    if (nodes.empty()) {  // a remainder the graph's fixed shapes cannot take
      model.reset();
      if (skip_unfit) break;
      throw unfit_batch_error(model, table.rows, rows_name);
    }
    const double n = static_cast<double>(rows.size());
    loss_sum = loss_sum + model.tape().scalar(nodes[static_cast<size_t>(p.loss)]) * n;
    rows_seen = rows_seen + n;
    if (cls.logits >= 0) {  // accuracy (with metrics.accuracy) and the class metrics
      const ConstTensorView logits = model.tape().value(nodes[static_cast<size_t>(cls.logits)]);
      const Tensor& labels = table.tensors[static_cast<size_t>(cls.labels)];
      const int64_t cols = logits.shape[logits.shape.rank() - 1], positions = cls.positions;
      if (!tally) tally.emplace(class_count(cols));
      for (size_t i = 0; i < rows.size(); ++i)
        for (int64_t t = 0; t < positions; ++t) {  // one classification per (row, position)
          const double* x = logits.data + (static_cast<int64_t>(i) * positions + t) * cols;
          const int64_t at = rows[i] * positions + t;  // the label's (row, position) in the table
          const int64_t predicted = predicted_class(x, cols);
          const double label = cls.ids || cls.binary ? labels.data()[at] : 0.0;
          const bool counted = label >= 0.0 && label < static_cast<double>(class_count(cols)) && label == std::floor(label);
          const int64_t truth = cls.ids || cls.binary ? (counted ? static_cast<int64_t>(label) : -1) : argmax_row(labels.data() + at * cols, cols);
          const bool hit = cls.ids || cls.binary ? static_cast<double>(predicted) == label : predicted == truth;
          if (hit) correct = correct + 1.0;
          tally->add(truth, x, cols);
        }
    }
    if (target) {  // residuals element by element: rows ascending, columns ascending
      const ConstTensorView out = model.tape().value(nodes[static_cast<size_t>(reg.output)]);
      for (size_t i = 0; i < rows.size(); ++i)
        for (int64_t c = 0; c < width; ++c) {
          const double t = target->data()[rows[i] * width + c];
          const double y = out.data[static_cast<int64_t>(i) * width + c];
          const double d = y - t;
          const double dt = t - mean[static_cast<size_t>(c)];
          const double du = t_mean ? to_data_units(y, (*t_mean)[static_cast<size_t>(c)], (*t_std)[static_cast<size_t>(c)]) -
                                         to_data_units(t, (*t_mean)[static_cast<size_t>(c)], (*t_std)[static_cast<size_t>(c)])
                                   : d;
          abs_sum = abs_sum + std::fabs(du);
          sq_sum = sq_sum + du * du;
          ss_res[static_cast<size_t>(c)] = ss_res[static_cast<size_t>(c)] + d * d;
          ss_tot[static_cast<size_t>(c)] = ss_tot[static_cast<size_t>(c)] + dt * dt;
        }
    }
    model.reset();
  }
  if (rows_seen == 0) return ev;
  ev.loss = loss_sum / rows_seen;
  if (p.metric_logits >= 0) ev.accuracy = correct / (rows_seen * static_cast<double>(cls.positions));
  if (tally) ev.classes = tally->finish();
  if (target && width > 0) {
    const double elems = rows_seen * static_cast<double>(width);
    ev.mae = abs_sum / elems;
    ev.rmse = std::sqrt(sq_sum / elems);
    double r2 = 0.0;
    for (size_t c = 0; c < mean.size(); ++c) r2 = r2 + (ss_tot[c] > 0.0 ? 1.0 - ss_res[c] / ss_tot[c] : Evaluation::kNaN);
    ev.r2 = r2 / static_cast<double>(width);
  }
  return ev;
}

std::pair<double, double> evaluate(Model& model, const DataTable& table, const std::string& rows_name) {
  const Evaluation ev = evaluate_metrics(model, table, rows_name);
  return {ev.loss, ev.accuracy};
}

double train_accuracy(Model& model) {
  if (!model.spec().data || model.program().metric_logits < 0) return Evaluation::kNaN;
  return evaluate_metrics(model, model.data().train, "the training rows", /*skip_unfit=*/true).accuracy;
}

}  // namespace gr
