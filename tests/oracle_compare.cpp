// oracle_compare.cpp — the PyTorch oracle's comparison (support/oracle_support.h): the tape's loss,
// gradients, node values and running statistics against torch's answer, as relative errors.
#include <algorithm>
#include <cmath>
#include <cstdio>

#include "support/oracle_support.h"

namespace gr::test::oracle {

std::string Comparison::summary() const {
  char a[160], b[96], c[64];
  std::snprintf(a, sizeof a, "oracle: loss rel err %.3g, worst grad rel err %.3g over %lld elements", loss_rel,
                worst_grad_rel, static_cast<long long>(grad_elems));
  std::snprintf(b, sizeof b, "; normwise %.3g), worst node value rel err %.3g", worst_grad_normwise,
                worst_value_rel);
  std::snprintf(c, sizeof c, ")");
  return std::string(a) + " (at " + worst_grad_at + b + " (at " + worst_value_at + c +
         (problem.empty() ? "" : "; PROBLEM: " + problem);
}

std::string node_label(const Tape& t, int32_t id) {
  return "node " + std::to_string(id) + " " + std::string(gr::op_name(t.node(id).op)) + " " + t.node(id).shape.str();
}

// Gradients: |g_tape − g_torch| / max(|g_torch|, floor) per element, floor = 2^-20 · max |g_torch| of
// that parameter (so an element that is ~0 by cancellation is judged against its tensor's scale).
// Node values: max |v_tape − v_torch| / max |v_torch| per node (normwise; intermediates can be ~0).
Comparison compare(Graph& g, const OracleResult& r, const Tolerances& tol) {
  Comparison c;
  c.tol = tol;
  Tape& t = g.tape;
  const double tl = t.scalar(g.loss);
  c.loss_rel = std::fabs(tl - r.loss) / std::max(std::fabs(r.loss), 1e-300);
  if (!(c.loss_rel == c.loss_rel)) c.loss_rel = INFINITY;
  for (const Var p : g.params) {
    const auto it = r.grads.find(p.id);
    const auto tg = t.grad(p).values();
    if (it == r.grads.end() || it->second.size() != tg.size()) {
      c.problem += "no or wrong-sized torch gradient for " + node_label(t, p.id) + ". ";
      continue;
    }
    double scale = 0.0;
    for (double x : it->second) scale = std::max(scale, std::fabs(x));
    const double floor = std::max(scale * tol.floor, 1e-300);
    double diff = 0.0;
    for (size_t e = 0; e < tg.size(); ++e) {
      const double o = it->second[e];
      const double dd = std::fabs(tg[e] - o);
      diff = (dd == dd) ? std::max(diff, dd) : INFINITY;
      double err = std::fabs(tg[e] - o) / std::max(std::fabs(o), floor);
      if (!(err == err)) err = INFINITY;
      ++c.grad_elems;
      if (err > c.worst_grad_rel || c.worst_grad_at.empty()) {
        c.worst_grad_rel = err;
        c.worst_grad_at = "param " + node_label(t, p.id) + " [" + std::to_string(e) + "]: tape " + hex_bits(tg[e]) +
                          " torch " + hex_bits(o);
      }
    }
    c.worst_grad_normwise = std::max(c.worst_grad_normwise, diff / std::max(scale, 1e-300));
  }
  if (r.grads.size() != g.params.size()) c.problem += "torch returned gradients for a different set of params. ";
  if (static_cast<int32_t>(r.values.size()) != t.size()) c.problem += "torch returned a different number of nodes. ";
  for (const auto& [id, ov] : r.values) {
    if (id < 0 || id >= t.size() || static_cast<int64_t>(ov.size()) != t.node(id).numel()) {
      c.problem += "bad value record for node " + std::to_string(id) + ". ";
      continue;
    }
    const auto tv = t.value(Var{id}).values();
    double scale = 0.0, diff = 0.0;
    for (size_t e = 0; e < ov.size(); ++e) {
      scale = std::max(scale, std::fabs(ov[e]));
      const double dd = std::fabs(tv[e] - ov[e]);
      diff = (dd == dd) ? std::max(diff, dd) : INFINITY;
    }
    const double err = diff / std::max(scale, 1e-300);
    if (err > c.worst_value_rel || c.worst_value_at.empty()) {
      c.worst_value_rel = err;
      c.worst_value_at = node_label(t, id);
    }
  }
  return c;
}

// The running statistics: every batch node's update on the tape (Tape::update_running_stats, after
// the comparisons above: it writes the leaves in place) against torch's, max |diff| / max |value| per
// node. Returns the worst; `at` names it. Every batch node must have torch's answer.
double compare_states(Graph& g, const OracleResult& r, std::string& at) {
  Tape& t = g.tape;
  double worst = 0.0;
  int nodes = 0;
  for (int32_t id = 0; id < t.size(); ++id) {
    const gr::Node& n = t.node(id);
    if (!gr::op_info(n.op).batch()) continue;
    ++nodes;
    const auto it = r.states.find(id);
    if (it == r.states.end() || static_cast<int64_t>(it->second.size()) != 2 * t.node(n.b).numel()) {
      at = "no torch running statistics for " + node_label(t, id);
      return INFINITY;
    }
    t.update_running_stats(Var{id});
    const int64_t C = t.node(n.b).numel();
    double scale = 0.0, diff = 0.0;
    for (int64_t e = 0; e < 2 * C; ++e) {
      const double tv = e < C ? t.value(Var{n.b}).data[e] : t.value(Var{n.c}).data[e - C], ov = it->second[static_cast<size_t>(e)];
      scale = std::max(scale, std::fabs(ov));
      const double dd = std::fabs(tv - ov);
      diff = dd == dd ? std::max(diff, dd) : INFINITY;
    }
    const double err = diff / std::max(scale, 1e-300);
    if (err >= worst) worst = err, at = node_label(t, id);
  }
  if (nodes == 0) at = "no batch node in the graph";
  return nodes == 0 ? INFINITY : worst;
}

}  // namespace gr::test::oracle
