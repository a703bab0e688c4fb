#include "train/checks.h"

#include <algorithm>
#include <cmath>

#include "spec/random.h"

namespace gr {

std::vector<int64_t> first_batch_rows(const Model& model) {
  const Spec& spec = model.spec();
  if (!spec.data) return {};
  std::vector<int64_t> order = epoch_order(spec, model.data().train.rows, 0);
  order.resize(static_cast<size_t>(model.program().batch));
  return order;
}

namespace {
// `grad` and `check --fd` take the first training step: its rows and its dropout masks.
double loss_at(Model& model, const std::vector<int64_t>& rows) {
  const std::vector<Var>& nodes = model.record(model.data().train, rows, model.dropout_key(1));
  const double v = model.tape().scalar(nodes[static_cast<size_t>(model.program().loss)]);
  model.reset();
  return v;
}
}  // namespace

GradResult evaluate_gradients(Model& model) {
  const std::vector<int64_t> rows = first_batch_rows(model);
  const std::vector<Var>& nodes = model.record(model.data().train, rows, model.dropout_key(1));
  const Var loss = nodes[static_cast<size_t>(model.program().loss)];
  GradResult r;
  r.loss = model.tape().scalar(loss);
  if (!model.tape().backward(loss)) throw Error("backward failed: " + model.tape().error());
  for (const Var p : model.params()) {
    const auto g = model.tape().grad(p).values();
    r.grads.emplace_back(g.begin(), g.end());
  }
  model.reset();
  return r;
}

std::vector<FdRow> check_finite_differences(Model& model, const FdOptions& o) {
  const GradResult analytic = evaluate_gradients(model);
  const std::vector<int64_t> rows = first_batch_rows(model);
  std::vector<FdRow> out;
  for (size_t k = 0; k < model.params().size(); ++k) {
    if (!model.program().params[k].trainable) continue;  // frozen: no analytic gradient to check
    FdRow row;
    row.param = model.program().params[k].name;
    std::span<double> w = model.tape().param_value(model.params()[k]);
    const int64_t n = static_cast<int64_t>(w.size());
    const int64_t count = std::min(n, o.max_elems);
    for (int64_t j = 0; j < count; ++j) {
      const int64_t e = count == n ? j : j * n / count;
      const double saved = w[static_cast<size_t>(e)];
      w[static_cast<size_t>(e)] = saved + o.eps;
      const double lp = loss_at(model, rows);
      w[static_cast<size_t>(e)] = saved - o.eps;
      const double lm = loss_at(model, rows);
      w[static_cast<size_t>(e)] = saved;
      const double fd = (lp - lm) / (2.0 * o.eps);
      const double an = analytic.grads[k][static_cast<size_t>(e)];
      const double err = std::fabs(fd - an), scale = std::max(std::fabs(fd), std::fabs(an));
      const bool ok = err <= o.atol + o.rtol * scale;
      const double excess = err / (o.atol + o.rtol * scale);
      // A failing element outranks every passing one; among failing ones the furthest beyond wins.
      const bool shown = ok ? row.pass && (row.worst_index < 0 || err > row.max_abs) : row.pass || excess > row.worst_excess;
      if (shown) row.worst_index = e, row.worst_analytic = an, row.worst_fd = fd, row.worst_excess = excess;
      if (!ok) ++row.failing;
      row.max_abs = std::max(row.max_abs, err);
      if (scale > 0) row.max_rel = std::max(row.max_rel, err / scale);
      row.pass = row.pass && ok;
      ++row.elements;
    }
    out.push_back(row);
  }
  return out;
}

}  // namespace gr
