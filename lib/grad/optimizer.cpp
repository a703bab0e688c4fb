#include "grad/optimizer.h"

#include <algorithm>
#include <cmath>

#include "gr_device.h"
#include "gr_optim.h"
#include "tensor/parallel.h"

namespace gr {

namespace {

constexpr int64_t kParallelElems = 1 << 15;
constexpr int64_t kNormChunk = 64;  // elements per update chunk when the norm rides along

// The gradient norm's sum, continued over n gradients in R: acc = acc + g·g, ascending (every
// norm of this file, whole or in pieces, is this one chain).
template <class R>
R sum_squares(const double* g, int64_t n, R acc) {
  for (int64_t j = 0; j < n; ++j) acc = gr_radd(acc, gr_rmul(R(g[j]), R(g[j])));
  return acc;
}

struct AdamScalars {
  double cs, b1, b2, omb1, omb2, eps, lr_t, lr, wd, mu;
};

// The update loops take restrict pointers and no branches that depend on the element, so the
// compiler vectorizes them; SIMD lanes perform the same IEEE operations as scalar code (and nothing
// is contracted into FMA). The per-element text is kernels/gr_optim.h (the device's too). R is the
// tape's arithmetic type: on an f32 tape the storage holds floats exactly and every scalar is
// rounded to float once, as the device kernels' GRK_REAL does.
template <class R>
void sgd_update(double* __restrict w, const double* __restrict g, int64_t n, double a, const AdamScalars& k) {
  const R cs = R(k.cs), ar = R(a), lr = R(k.lr);
  for (int64_t i = 0; i < n; ++i) w[i] = gr_opt_sgd(R(w[i]), gr_opt_ge(R(g[i]), cs, ar, R(w[i])), lr);
}

template <class R>
void sgd_momentum_update(double* __restrict w, const double* __restrict g, double* __restrict b, int64_t n, double a,
                         const AdamScalars& k, bool nesterov) {
  const R cs = R(k.cs), ar = R(a), lr = R(k.lr), mu = R(k.mu);
  for (int64_t i = 0; i < n; ++i) {
    R bi = R(b[i]);
    w[i] = gr_opt_sgd_momentum(R(w[i]), gr_opt_ge(R(g[i]), cs, ar, R(w[i])), &bi, lr, mu, nesterov);
    b[i] = bi;
  }
}

template <class R>
void adam_update(double* __restrict w, const double* __restrict g, double* __restrict m, double* __restrict v, int64_t n,
                 double a, const AdamScalars& k) {
  const R cs = R(k.cs), ar = R(a), lr = R(k.lr), wd = R(k.wd), lr_t = R(k.lr_t), b1 = R(k.b1), b2 = R(k.b2),
          omb1 = R(k.omb1), omb2 = R(k.omb2), eps = R(k.eps);
  for (int64_t i = 0; i < n; ++i) {
    const R ge = gr_opt_ge(R(g[i]), cs, ar, R(w[i]));
    R mi = R(m[i]), vi = R(v[i]);
    w[i] = gr_opt_adam(gr_opt_decay(R(w[i]), lr, wd), ge, &mi, &vi, lr_t, b1, b2, omb1, omb2, eps);
    m[i] = mi;
    v[i] = vi;
  }
}

}  // namespace

void Optimizer::add(Tape& tape, Var p, double l2) {
  const Node& n = tape.node(p);
  if (n.op != Op::Param) throw Error("optimizer: node " + std::to_string(p.id) + " is not a parameter");
  if (!params_.empty() && tape.real() != real_) throw Error("optimizer: parameters of an f64 and an f32 tape");
  real_ = tape.real();
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
  const auto norm = [&](auto zero) {
    using R = decltype(zero);
    R sq = 0;
    for (const Entry& e : params_) {
      if (!tape.node(e.var).touched) continue;
      const std::span<double> g = tape.param_grad(e.var);
      sq = sum_squares<R>(g.data(), static_cast<int64_t>(g.size()), sq);
    }
    return static_cast<double>(gr_sqrt(sq));
  };
  return real_ == Real::F32 ? norm(float{}) : norm(double{});
}

double Optimizer::norm_from_sq(double sq) { return gr_sqrt(sq); }

void Optimizer::begin_step(double norm) {
  last_norm_ = norm;
  if (real_ == Real::F32) {  // the device's grk_clip_scale in float
    const float nf = static_cast<float>(norm), maxn = static_cast<float>(clip_);
    last_cs_ = clip_ > 0.0 && nf > maxn ? __fdiv_rn(maxn, nf) : 1.0f;
  } else {
    last_cs_ = clip_ > 0.0 && norm > clip_ ? __ddiv_rn(clip_, norm) : 1.0;
  }
  if (kind_ == OptimizerKind::Adam) {
    ++t_;
    last_lr_t_ = adam_lr_t(t_);
  }
}

void Optimizer::update_serial(Tape& tape, size_t i, int64_t lo, int64_t n, const double* g, double* sq) {
  const Entry& e = params_[i];
  const double b1 = adam_.beta1, b2 = adam_.beta2;
  const AdamScalars k{last_cs_, b1, b2, 1.0 - b1, 1.0 - b2, adam_.eps, last_lr_t_, lr_, adam_.weight_decay, sgd_.momentum};
  double* w = tape.param_value(e.var).data() + lo;
  double* m = m_.data() + e.offset + lo;
  double* v = v_.data() + e.offset + lo;
  const auto run = [&](auto zero) {
    using R = decltype(zero);
    const auto update = [&](int64_t a, int64_t len) {
      if (kind_ == OptimizerKind::Adam) adam_update<R>(w + a, g + a, m + a, v + a, len, e.l2, k);
      else if (sgd_.momentum != 0.0) sgd_momentum_update<R>(w + a, g + a, m + a, len, e.l2, k, sgd_.nesterov);
      else sgd_update<R>(w + a, g + a, len, e.l2, k);
    };
    if (!sq) return update(0, n);
    // The norm's Σ g·g continued over these elements, chunk by chunk after each chunk's update: the
    // serial add chain of one chunk runs while the vector update of the next does (out of order).
    R acc = static_cast<R>(*sq);
    for (int64_t a = 0; a < n; a += kNormChunk) {
      const int64_t len = std::min(kNormChunk, n - a);
      update(a, len);
      acc = sum_squares<R>(g + a, len, acc);
    }
    *sq = static_cast<double>(acc);
  };
  if (real_ == Real::F32) run(float{});
  else run(double{});
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
  if (clip_ > 0.0) {  // clipping needs the norm first
    begin_step(grad_norm(tape));
    for (size_t i = 0; i < params_.size(); ++i) {
      if (!tape.node(params_[i].var).touched) continue;  // backward never reached it: skip, do not decay
      update_elements(tape, i, 0, params_[i].len, tape.param_grad(params_[i].var).data());
    }
    return;
  }
  if (threads < 2 || m_.size() < static_cast<size_t>(kParallelElems)) {
    // Without clipping the norm is only logged (metrics.csv grad_norm), so it is summed in the
    // update's own pass: the same sum as grad_norm (touched parameters in registration order,
    // elements ascending), on this one thread, whose serial chain now overlaps the update.
    begin_step(0.0);
    double sq = 0.0;
    for (size_t i = 0; i < params_.size(); ++i) {
      if (!tape.node(params_[i].var).touched) continue;
      update_serial(tape, i, 0, params_[i].len, tape.param_grad(params_[i].var).data(), &sq);
    }
    last_norm_ = real_ == Real::F32 ? static_cast<double>(gr_sqrt(static_cast<float>(sq))) : gr_sqrt(sq);
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
    sq = sum_squares<double>(g + (a - lo), b - a, sq);
  }
  return sq;
}

}  // namespace gr
