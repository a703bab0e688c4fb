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

double Optimizer::norm_from_sq(double sq) { return gr_sqrt(sq); }

void Optimizer::begin_step(double norm) {
  last_norm_ = norm;
  last_cs_ = clip_ > 0.0 && norm > clip_ ? __ddiv_rn(clip_, norm) : 1.0;
  if (kind_ == OptimizerKind::Adam) {
    ++t_;
    last_lr_t_ = adam_lr_t(t_);
  }
}

void Optimizer::update_serial(Tape& tape, size_t i, int64_t lo, int64_t n, const double* g) {
  const Entry& e = params_[i];
  const double b1 = adam_.beta1, b2 = adam_.beta2;
  const AdamScalars k{last_cs_, b1, b2, 1.0 - b1, 1.0 - b2, adam_.eps, last_lr_t_, lr_, adam_.weight_decay, sgd_.momentum};
  double* w = tape.param_value(e.var).data() + lo;
  double* m = m_.data() + e.offset + lo;
  double* v = v_.data() + e.offset + lo;
  if (kind_ == OptimizerKind::Adam) adam_update(w, g, m, v, n, e.l2, k);
  else if (sgd_.momentum != 0.0) sgd_momentum_update(w, g, m, n, e.l2, k, sgd_.nesterov);
  else sgd_update(w, g, n, e.l2, k);
}

void Optimizer::update_elements(Tape& tape, size_t i, int64_t lo, int64_t n, const double* g) {
  // Elementwise, so chunks may run on any thread (and in SIMD lanes) without changing a bit.
  const int64_t chunks = n >= kParallelElems ? num_threads() : 1;
  const int64_t per = (n + chunks - 1) / chunks;
  parallel_for(chunks, [&](int64_t c) {
    const int64_t a = c * per, len = std::min(n, a + per) - a;
    if (len > 0) update_serial(tape, i, lo + a, len, g + a);
  });
}

void Optimizer::step(Tape& tape) {
  const int threads = num_threads();
  if (clip_ > 0.0 || threads < 2 || m_.size() < static_cast<size_t>(kParallelElems)) {
    // Every step: clipping needs the norm first, and the trainer logs it (metrics.csv grad_norm).
    begin_step(grad_norm(tape));
    for (size_t i = 0; i < params_.size(); ++i) {
      if (!tape.node(params_[i].var).touched) continue;  // backward never reached it: skip, do not decay
      update_elements(tape, i, 0, params_[i].len, tape.param_grad(params_[i].var).data());
    }
    return;
  }
  // Without clipping the update does not need the norm (the clip scale is 1 whatever it is), so
  // one thread sums the norm — one serial chain by definition, ~0.5 ns per element — while the
  // others update. Each element is still updated by one thread with the same operations.
  begin_step(0.0);
  double norm = 0.0;
  const int64_t updaters = threads - 1;
  parallel_for(threads, [&](int64_t task) {
    if (task == 0) {
      norm = grad_norm(tape);
      return;
    }
    for (size_t i = 0; i < params_.size(); ++i) {
      if (!tape.node(params_[i].var).touched) continue;
      const int64_t n = params_[i].len, per = (n + updaters - 1) / updaters, a = (task - 1) * per;
      const int64_t len = std::min(n, a + per) - a;
      if (len > 0) update_serial(tape, i, a, len, tape.param_grad(params_[i].var).data() + a);
    }
  });
  last_norm_ = norm;
}

std::vector<char> Optimizer::touched(const Tape& tape) const {
  std::vector<char> out(params_.size());
  for (size_t i = 0; i < params_.size(); ++i) out[i] = tape.node(params_[i].var).touched ? 1 : 0;
  return out;
}

void Optimizer::step_range(Tape& tape, int64_t lo, int64_t hi, const double* g, std::span<const char> active) {
  for (size_t i = 0; i < params_.size(); ++i) {
    const Entry& e = params_[i];
    const int64_t a = std::max(lo, e.offset), b = std::min(hi, e.offset + e.len);
    if (a >= b || !active[i]) continue;
    update_elements(tape, i, a - e.offset, b - a, g + (a - lo));
  }
}

double Optimizer::partial_sq(int64_t lo, int64_t hi, const double* g, double sq, std::span<const char> active) const {
  for (size_t i = 0; i < params_.size(); ++i) {
    const Entry& e = params_[i];
    const int64_t a = std::max(lo, e.offset), b = std::min(hi, e.offset + e.len);
    if (a >= b || !active[i]) continue;
    for (int64_t j = a; j < b; ++j) sq = __dadd_rn(sq, __dmul_rn(g[j - lo], g[j - lo]));
  }
  return sq;
}

}  // namespace gr
