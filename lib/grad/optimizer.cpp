#include "grad/optimizer.h"

#include <cmath>

#include "gr_device.h"

namespace gr {

void Optimizer::add(Tape& tape, Var p, double l2) {
  const Node& n = tape.node(p);
  if (n.op != Op::Param) throw Error("optimizer: node " + std::to_string(p.id) + " is not a parameter");
  for (const Entry& e : params_)
    if (e.var == p) throw Error("optimizer: parameter " + std::to_string(p.id) + " is registered twice");
  const int64_t offset = static_cast<int64_t>(m_.size());
  params_.push_back({p, l2, offset, n.numel()});
  m_.resize(static_cast<size_t>(offset + n.numel()), 0.0);
  v_.resize(static_cast<size_t>(offset + n.numel()), 0.0);
}

double Optimizer::adam_lr_t(int64_t t) const {
  const double td = static_cast<double>(t);
  return lr_ * std::sqrt(1.0 - std::pow(adam_.beta2, td)) / (1.0 - std::pow(adam_.beta1, td));
}

void Optimizer::step(Tape& tape) {
  double cs = 1.0;
  if (clip_ > 0.0) {
    double sq = 0.0;
    for (const Entry& e : params_) {
      if (!tape.node(e.var).touched) continue;
      for (double g : tape.param_grad(e.var)) sq = __dadd_rn(sq, __dmul_rn(g, g));
    }
    const double norm = gr_sqrt(sq);
    cs = norm > clip_ ? __ddiv_rn(clip_, norm) : 1.0;
  }
  last_cs_ = cs;
  if (kind_ == OptimizerKind::Adam) {
    ++t_;
    last_lr_t_ = adam_lr_t(t_);
  }
  const double b1 = adam_.beta1, b2 = adam_.beta2, omb1 = 1.0 - b1, omb2 = 1.0 - b2, eps = adam_.eps;
  const double lr_t = last_lr_t_;
  for (const Entry& e : params_) {
    if (!tape.node(e.var).touched) continue;  // backward never reached it: skip, do not decay
    std::span<double> w = tape.param_value(e.var);
    std::span<const double> g = tape.param_grad(e.var);
    double* m = m_.data() + e.offset;
    double* v = v_.data() + e.offset;
    const double a = e.l2;
    for (int64_t i = 0; i < e.len; ++i) {
      const double ge = __dadd_rn(__dmul_rn(g[i], cs), __dmul_rn(a, w[i]));
      if (kind_ == OptimizerKind::Sgd) {
        w[i] = __dsub_rn(w[i], __dmul_rn(lr_, ge));
      } else {
        m[i] = __dadd_rn(__dmul_rn(b1, m[i]), __dmul_rn(omb1, ge));
        v[i] = __dadd_rn(__dmul_rn(b2, v[i]), __dmul_rn(omb2, __dmul_rn(ge, ge)));
        w[i] = __dsub_rn(w[i], __ddiv_rn(__dmul_rn(lr_t, m[i]), __dadd_rn(gr_sqrt(v[i]), eps)));
      }
    }
  }
}

}  // namespace gr
