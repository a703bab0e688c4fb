#include "grad/optimizer.h"

#include <algorithm>
#include <cmath>

#include "gr_device.h"
#include "gr_optim.h"
#include "tensor/parallel.h"

namespace gr {

namespace {

constexpr int64_t kParallelElems = 1 << 15;

struct AdamScalars {
  double cs, b1, b2, omb1, omb2, eps, lr_t, lr, wd, mu;
};

// The update loops take restrict pointers and no branches that depend on the element, so the
// compiler vectorizes them; SIMD lanes perform the same IEEE operations as scalar code (and nothing
// is contracted into FMA). The per-element text is kernels/gr_optim.h (the device's too).
void sgd_update(double* __restrict w, const double* __restrict g, int64_t n, double a, const AdamScalars& k) {
  for (int64_t i = 0; i < n; ++i) w[i] = gr_opt_sgd(w[i], gr_opt_ge(g[i], k.cs, a, w[i]), k.lr);
}

void sgd_momentum_update(double* __restrict w, const double* __restrict g, double* __restrict b, int64_t n, double a,
                         const AdamScalars& k, bool nesterov) {
  for (int64_t i = 0; i < n; ++i) w[i] = gr_opt_sgd_momentum(w[i], gr_opt_ge(g[i], k.cs, a, w[i]), &b[i], k.lr, k.mu, nesterov);
}

void adam_update(double* __restrict w, const double* __restrict g, double* __restrict m, double* __restrict v, int64_t n,
                 double a, const AdamScalars& k) {
  for (int64_t i = 0; i < n; ++i) {
    const double ge = gr_opt_ge(g[i], k.cs, a, w[i]);
    w[i] = gr_opt_adam(gr_opt_decay(w[i], k.lr, k.wd), ge, &m[i], &v[i], k.lr_t, k.b1, k.b2, k.omb1, k.omb2, k.eps);
  }
}

}  // namespace

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

double Optimizer::grad_norm(Tape& tape) const {
  double sq = 0.0;
  for (const Entry& e : params_) {
    if (!tape.node(e.var).touched) continue;
    for (double g : tape.param_grad(e.var)) sq = __dadd_rn(sq, __dmul_rn(g, g));
  }
  return gr_sqrt(sq);
}

void Optimizer::step(Tape& tape) {
  // Every step: clipping needs it, and the trainer logs it (metrics.csv grad_norm).
  const double norm = grad_norm(tape);
  last_norm_ = norm;
  const double cs = clip_ > 0.0 && norm > clip_ ? __ddiv_rn(clip_, norm) : 1.0;
  last_cs_ = cs;
  if (kind_ == OptimizerKind::Adam) {
    ++t_;
    last_lr_t_ = adam_lr_t(t_);
  }
  const double b1 = adam_.beta1, b2 = adam_.beta2;
  const AdamScalars k{cs, b1, b2, 1.0 - b1, 1.0 - b2, adam_.eps, last_lr_t_, lr_, adam_.weight_decay, sgd_.momentum};
  for (const Entry& e : params_) {
    if (!tape.node(e.var).touched) continue;  // backward never reached it: skip, do not decay
    double* w = tape.param_value(e.var).data();
    const double* g = tape.param_grad(e.var).data();
    double* m = m_.data() + e.offset;
    double* v = v_.data() + e.offset;
    // Elementwise, so chunks may run on any thread (and in SIMD lanes) without changing a bit.
    const int64_t chunks = e.len >= kParallelElems ? num_threads() : 1;
    const int64_t per = (e.len + chunks - 1) / chunks;
    parallel_for(chunks, [&](int64_t c) {
      const int64_t lo = c * per, n = std::min(e.len, lo + per) - lo;
      if (n <= 0) return;
      if (kind_ == OptimizerKind::Adam) adam_update(w + lo, g + lo, m + lo, v + lo, n, e.l2, k);
      else if (sgd_.momentum != 0.0) sgd_momentum_update(w + lo, g + lo, m + lo, n, e.l2, k, sgd_.nesterov);
      else sgd_update(w + lo, g + lo, n, e.l2, k);
    });
  }
}

}  // namespace gr
