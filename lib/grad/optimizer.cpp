#include "grad/optimizer.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <tuple>
#include <type_traits>

#include "gr_device.h"
#include "gr_optim.h"
#include "tensor/parallel.h"

namespace gr {

namespace {

constexpr int64_t kParallelElems = 1 << 15;
constexpr int64_t kNormChunk = 64;  // elements per update chunk when the norm rides along
// Continuing the norm's lanes over a gradient element costs about this fraction of updating one
// (a read of g against a read of w, g, m, v and a write of w, m, v): it sizes task 0's share.
constexpr double kNormPerUpdate = 0.25;

static_assert(std::tuple_size_v<Optimizer::NormLanes> == GR_NORM_LANES);

// Doubles per native SIMD register. LaneSums holds the 16 lanes as registers of this many: a GCC
// vector wider than the target's registers (16 doubles are 2 zmm) is kept in memory, so the
// lanes' chain went through a store and a reload in every iteration (~1 element per cycle; now
// one add per register: 200K doubles in 15 µs, ~3.5 per cycle). Same operations, lane for lane.
#if defined(__AVX512F__)
constexpr int kNormPart = 8;
#elif defined(__AVX__)
constexpr int kNormPart = 4;
#else
constexpr int kNormPart = 2;
#endif
constexpr int kNormParts = GR_NORM_LANES / kNormPart;

// The gradient norm's lanes (kernels/gr_optim.h gr_norm_lanes) in R, held in GCC vectors while a
// pass runs. Every norm of this file, whole or in pieces, goes through here; between passes the
// lanes are stored as doubles (an f32 tape's hold floats exactly). The whole blocks of 16 run as
// GCC vectors — lane j of part p is lane p·kNormPart + j of the definition, and vector + and ×
// are the IEEE operations elementwise (not contracted: -ffp-contract=off) — because GCC's own
// vectorizer loads the 16 doubles of an f32 block piecewise. tests/test_optimizer.cpp holds this
// to gr_norm_lanes bit for bit over random lengths and starting lanes.
template <class R>
class LaneSums {
 public:
  explicit LaneSums(const Optimizer::NormLanes& lanes) {
    R acc[GR_NORM_LANES];
    for (int j = 0; j < GR_NORM_LANES; ++j) acc[j] = static_cast<R>(lanes[j]);
    std::memcpy(v_, acc, sizeof v_);
  }
  void store(Optimizer::NormLanes& lanes) const {
    R acc[GR_NORM_LANES];
    std::memcpy(acc, v_, sizeof v_);
    for (int j = 0; j < GR_NORM_LANES; ++j) lanes[j] = static_cast<double>(acc[j]);
  }
  // Continues the lanes over g[0..n), g[0] being element `first` of its parameter.
  void add(const double* g, int64_t n, int64_t first) {
    int64_t e = std::min(n, (GR_NORM_LANES - first % GR_NORM_LANES) % GR_NORM_LANES);
    if (e > 0) scalar(g, e, first);
    // Locals, not the member: g is a double*, so a store through it could change v_ as far as the
    // compiler knows.
    Part v[kNormParts];
    for (int p = 0; p < kNormParts; ++p) v[p] = v_[p];
    for (; e + GR_NORM_LANES <= n; e += GR_NORM_LANES) {
      for (int p = 0; p < kNormParts; ++p) {
        Wide w;
        std::memcpy(&w, g + e + p * kNormPart, sizeof w);
        const Part x = __builtin_convertvector(w, Part);
        v[p] = v[p] + x * x;
      }
    }
    for (int p = 0; p < kNormParts; ++p) v_[p] = v[p];
    if (e < n) scalar(g + e, n - e, 0);
  }

 private:
  typedef double Wide __attribute__((vector_size(kNormPart * sizeof(double))));
  typedef R Part __attribute__((vector_size(kNormPart * sizeof(R))));
  void scalar(const double* g, int64_t n, int64_t first) {  // the definition itself, for ends
    R acc[GR_NORM_LANES];
    std::memcpy(acc, v_, sizeof v_);
    gr_norm_lanes<R, double>(acc, g, n, first);
    std::memcpy(v_, acc, sizeof v_);
  }
  Part v_[kNormParts];
};

// The lanes continued over g[0..n) in the tape's precision (g[0]: element `first` of its parameter).
void add_lanes(DType real, Optimizer::NormLanes& lanes, const double* g, int64_t n, int64_t first) {
  const auto run = [&](auto zero) {
    LaneSums<decltype(zero)> sums(lanes);
    sums.add(g, n, first);
    sums.store(lanes);
  };
  if (real == DType::F32) run(float{});
  else run(double{});
}

template <class R>
double norm_of(Optimizer::NormLanes lanes) {
  R acc[GR_NORM_LANES];
  for (int j = 0; j < GR_NORM_LANES; ++j) acc[j] = static_cast<R>(lanes[j]);
  return static_cast<double>(gr_sqrt(gr_norm_fold(acc)));
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

template <class R, class M>
void sgd_momentum_update(double* __restrict w, const double* __restrict g, M* __restrict b, int64_t n, double a,
                         const AdamScalars& k, bool nesterov) {
  const R cs = R(k.cs), ar = R(a), lr = R(k.lr), mu = R(k.mu);
  for (int64_t i = 0; i < n; ++i) {
    R bi = R(b[i]);
    w[i] = gr_opt_sgd_momentum(R(w[i]), gr_opt_ge(R(g[i]), cs, ar, R(w[i])), &bi, lr, mu, nesterov);
    b[i] = static_cast<M>(bi);
  }
}

template <class R, class M>
void adam_update(double* __restrict w, const double* __restrict g, M* __restrict m, M* __restrict v, int64_t n,
                 double a, const AdamScalars& k) {
  const R cs = R(k.cs), ar = R(a), lr = R(k.lr), wd = R(k.wd), lr_t = R(k.lr_t), b1 = R(k.b1), b2 = R(k.b2),
          omb1 = R(k.omb1), omb2 = R(k.omb2), eps = R(k.eps);
  for (int64_t i = 0; i < n; ++i) {
    const R ge = gr_opt_ge(R(g[i]), cs, ar, R(w[i]));
    R mi = R(m[i]), vi = R(v[i]);
    w[i] = gr_opt_adam(gr_opt_decay(R(w[i]), lr, wd), ge, &mi, &vi, lr_t, b1, b2, omb1, omb2, eps);
    m[i] = static_cast<M>(mi);
    v[i] = static_cast<M>(vi);
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
  const int64_t offset = flat_;
  params_.push_back({p, l2, offset, n.numel()});
  flat_ = offset + n.numel();
  if (real_ == DType::F32) {
    mf_.resize(static_cast<size_t>(flat_), 0.0f);
    vf_.resize(static_cast<size_t>(flat_), 0.0f);
  } else {
    m_.resize(static_cast<size_t>(flat_), 0.0);
    v_.resize(static_cast<size_t>(flat_), 0.0);
  }
}

std::vector<double> Optimizer::read(int which, int64_t off, int64_t n) const {
  std::vector<double> out(static_cast<size_t>(n));
  if (real_ == DType::F32) {
    const float* src = (which == 0 ? mf_ : vf_).data() + off;
    for (int64_t k = 0; k < n; ++k) out[static_cast<size_t>(k)] = static_cast<double>(src[k]);
  } else {
    const double* src = (which == 0 ? m_ : v_).data() + off;
    std::copy(src, src + n, out.begin());
  }
  return out;
}

void Optimizer::write(int which, int64_t off, int64_t n, std::span<const double> x) {
  if (static_cast<int64_t>(x.size()) != n)
    throw Error("optimizer: moments of " + std::to_string(n) + " elements, given " + std::to_string(x.size()));
  if (real_ == DType::F32) {
    float* dst = (which == 0 ? mf_ : vf_).data() + off;
    for (int64_t k = 0; k < n; ++k) dst[k] = static_cast<float>(x[static_cast<size_t>(k)]);
  } else {
    std::copy(x.begin(), x.end(), (which == 0 ? m_ : v_).data() + off);
  }
}

double Optimizer::adam_lr_t(int64_t t) const {
  const double td = static_cast<double>(t);
  return lr_ * std::sqrt(1.0 - std::pow(adam_.beta2, td)) / (1.0 - std::pow(adam_.beta1, td));
}

double Optimizer::grad_norm(Tape& tape) const {
  NormLanes lanes{};
  for (const Entry& e : params_) {
    if (!tape.node(e.var).touched) continue;
    const std::span<double> g = tape.param_grad(e.var);
    add_lanes(real_, lanes, g.data(), static_cast<int64_t>(g.size()), 0);
  }
  return norm_from_lanes(lanes);
}

double Optimizer::norm_from_lanes(NormLanes lanes) const {
  return real_ == DType::F32 ? norm_of<float>(lanes) : norm_of<double>(lanes);
}

void Optimizer::begin_step(double norm) {
  last_norm_ = norm;
  if (real_ == DType::F32) {  // the device's grk_clip_scale in float
    const float nf = static_cast<float>(norm), maxn = static_cast<float>(clip_);
    last_cs_ = clip_ > 0.0 && nf > maxn ? __fdiv_rn(maxn, nf) : 1.0f;
  } else {
    last_cs_ = clip_ > 0.0 && norm > clip_ ? __ddiv_rn(clip_, norm) : 1.0;
  }
  advance();
}

void Optimizer::advance() {
  if (kind_ == OptimizerKind::Adam) {
    ++t_;
    last_lr_t_ = adam_lr_t(t_);
  }
}

void Optimizer::update_serial(Tape& tape, size_t i, int64_t lo, int64_t n, const double* g, NormLanes* lanes) {
  const Entry& e = params_[i];
  const double b1 = adam_.beta1, b2 = adam_.beta2;
  const AdamScalars k{last_cs_, b1, b2, 1.0 - b1, 1.0 - b2, adam_.eps, last_lr_t_, lr_, adam_.weight_decay, sgd_.momentum};
  double* w = tape.param_value(e.var).data() + lo;
  const auto run = [&](auto zero) {
    using R = decltype(zero);
    R* m;
    R* v;
    if constexpr (std::is_same_v<R, float>) m = mf_.data(), v = vf_.data();
    else m = m_.data(), v = v_.data();
    m += e.offset + lo;
    v += e.offset + lo;
    const auto update = [&](int64_t a, int64_t len) {
      if (kind_ == OptimizerKind::Adam) adam_update<R>(w + a, g + a, m + a, v + a, len, e.l2, k);
      else if (sgd_.momentum != 0.0) sgd_momentum_update<R>(w + a, g + a, m + a, len, e.l2, k, sgd_.nesterov);
      else sgd_update<R>(w + a, g + a, len, e.l2, k);
    };
    if (!lanes) return update(0, n);
    // The norm's lanes continued over these elements chunk by chunk, each right after the chunk's
    // update, while its gradients are still in L1 (one pass over g instead of two).
    LaneSums<R> sums(*lanes);
    for (int64_t a = 0; a < n; a += kNormChunk) {
      const int64_t len = std::min(kNormChunk, n - a);
      update(a, len);
      sums.add(g + a, len, lo + a);
    }
    sums.store(*lanes);
  };
  if (real_ == DType::F32) run(float{});
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

// No clipping, several threads: the norm is only logged, so it need not come first. Task 0
// updates the head of every parameter with the norm's lanes riding along, then continues the
// lanes over the tail (gradients are only read by the update); the other tasks update the tails
// meanwhile. Each element is still updated once, and the lanes still run over every element in
// order, so the bits are those of one thread. Task 0's head is shorter, so the tasks end together.
void Optimizer::step_norm_alongside(Tape& tape) {
  begin_step(0.0);
  const int64_t others = num_threads() - 1;
  // Task 0: h·U + (1 − h)·N; each other task: (1 − h)·U / others. Equal when h is the value
  // below; with many threads the norm alone outweighs a share (h < 0), and task 0 updates nothing.
  const double q = 1.0 / static_cast<double>(others);
  const double head = std::max(0.0, (q - kNormPerUpdate) / (1.0 + q - kNormPerUpdate));
  NormLanes lanes{};
  parallel_for(others + 1, [&](int64_t task) {
    for (size_t i = 0; i < params_.size(); ++i) {
      if (!tape.node(params_[i].var).touched) continue;
      const int64_t n = params_[i].len;
      const double* g = tape.param_grad(params_[i].var).data();
      // A whole number of norm chunks in the head; a small parameter stays whole on task 0.
      const int64_t cut = n < kParallelElems / 4 ? n : static_cast<int64_t>(head * static_cast<double>(n)) / kNormChunk * kNormChunk;
      if (task == 0) {
        update_serial(tape, i, 0, cut, g, &lanes);
        add_lanes(real_, lanes, g + cut, n - cut, cut);
        continue;
      }
      const int64_t per = (n - cut + others - 1) / others;
      const int64_t a = cut + (task - 1) * per, len = std::min(n, a + per) - a;
      if (len > 0) update_serial(tape, i, a, len, g + a);
    }
  });
  last_norm_ = norm_from_lanes(lanes);
}

void Optimizer::step(Tape& tape) {
  if (clip_ <= 0.0 && num_threads() >= 2 && flat_ >= kParallelElems)
    return step_norm_alongside(tape);
  // Clipping needs the norm first (sixteen lanes are a short pass); then the elements are split
  // over the threads.
  if (clip_ > 0.0) {
    begin_step(grad_norm(tape));
    for (size_t i = 0; i < params_.size(); ++i) {
      if (!tape.node(params_[i].var).touched) continue;  // backward never reached it: skip, do not decay
      update_elements(tape, i, 0, params_[i].len, tape.param_grad(params_[i].var).data());
    }
    return;
  }
  // One thread, no clipping: the norm is only logged (metrics.csv grad_norm), so it is summed in
  // the update's own pass: the same lanes as grad_norm, over the same elements in the same order.
  begin_step(0.0);
  NormLanes lanes{};
  for (size_t i = 0; i < params_.size(); ++i) {
    if (!tape.node(params_[i].var).touched) continue;
    update_serial(tape, i, 0, params_[i].len, tape.param_grad(params_[i].var).data(), &lanes);
  }
  last_norm_ = norm_from_lanes(lanes);
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

void Optimizer::add_norm_lanes(int64_t lo, int64_t hi, const double* g, NormLanes& lanes, std::span<const char> active) const {
  for (size_t i = 0; i < params_.size(); ++i) {
    const Entry& e = params_[i];
    const int64_t a = std::max(lo, e.offset), b = std::min(hi, e.offset + e.len);
    if (a >= b || !active[i]) continue;
    add_lanes(real_, lanes, g + (a - lo), b - a, a - e.offset);
  }
}

}  // namespace gr
