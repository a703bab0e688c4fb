// optimizer.h — SGD and Adam over tape parameters, per-parameter L2, global-norm clipping (§5).
//
// Per step, for the registered parameters whose gradient backward touched (others are skipped,
// not decayed — PyTorch's None-grad rule):
//   clip (maxn > 0): sq = Σ g·g (16 lanes, kernels/gr_optim.h gr_norm_lanes); norm = sqrt(sq);
//                    cs = norm > maxn ? maxn / norm : 1
//   ge = g·cs + α·w
//   SGD : w = w − lr·ge; with momentum μ: b = μ·b + ge, d = nesterov ? ge + μ·b : b, w = w − lr·d
//   Adam: t += 1; lr_t = lr·sqrt(1 − β2^t) / (1 − β1^t)   (host pow; shipped to devices as a scalar)
//         AdamW first decays w = w·(1 − lr·wd) (decoupled, PyTorch's formula); then
//         m = β1·m + (1−β1)·ge;  v = β2·v + (1−β2)·(ge·ge);  w = w − (lr_t·m) / (sqrt(v) + ε)
// (1−β computed at run time; the Kingma–Ba / scikit-learn placement of ε.) The per-element text is
// kernels/gr_optim.h, shared with the device optimizer's kernels.
#pragma once
#include <array>
#include <cstdint>
#include <span>
#include <vector>

#include "grad/tape.h"

namespace gr {

enum class OptimizerKind { Sgd, Adam };

struct AdamConfig {
  double beta1 = 0.9, beta2 = 0.999, eps = 1e-8;
  double weight_decay = 0.0;  // > 0: AdamW's decoupled decay
};

struct SgdConfig {
  double momentum = 0.0;  // 0: plain SGD, no buffer
  bool nesterov = false;
};

class Optimizer {
 public:
  static Optimizer sgd(double lr, SgdConfig config = {}) {
    Optimizer o(OptimizerKind::Sgd, lr, {});
    o.sgd_ = config;
    return o;
  }
  static Optimizer adam(double lr, AdamConfig config = {}) { return Optimizer(OptimizerKind::Adam, lr, config); }

  // Register a parameter with its own L2 coefficient (weights α, biases 0). The tape's precision
  // is the update's: an f32 tape's parameters are updated in float (the f32 device optimizer's bits).
  void add(Tape& tape, Var param, double l2 = 0.0);
  void set_clip(double max_norm) { clip_ = max_norm; }  // 0 = off
  // One update from the gradients on the tape; parameters change in place on the tape.
  void step(Tape& tape);
  // The global L2 norm of the touched parameters' gradients: sqrt(Σ g·g) summed in 16 lanes
  // (kernels/gr_optim.h gr_norm_lanes) — the one definition behind clipping and metrics.csv's grad_norm.
  double grad_norm(Tape& tape) const;

  // ---- the step in pieces, for sharded training (lib/train/sharded_step.h) -----------------------
  // The flat parameter vector is the registered parameters' elements in registration order
  // (parameter i at offset(i)); step(tape) is begin_step(grad_norm(tape)) then step_range over all
  // of it with the tape's gradients.
  int64_t flat_size() const { return flat_; }
  int64_t offset(size_t i) const { return params_[i].offset; }
  int64_t len(size_t i) const { return params_[i].len; }
  // The step's scalars from the global gradient norm: clip scale, then advance().
  void begin_step(double norm);
  // The step counter's part of a step: Adam's t += 1 and lr_t for it (SGD: nothing). The device
  // optimizer (replay::DeviceOptimizer) calls this on the Optimizer it runs for, so t and lr live
  // here only, whichever engine steps.
  void advance();
  // Which registered parameters the last backward touched (active[i] for parameter i).
  std::vector<char> touched(const Tape& tape) const;
  // Updates the flat elements [lo, hi) of the active parameters from g (g[0] is element lo); the
  // moments of other elements are not touched (ZeRO stage 1: a rank owns [lo, hi)).
  void step_range(Tape& tape, int64_t lo, int64_t hi, const double* g, std::span<const char> active);
  // grad_norm's lanes, continued over the active elements of [lo, hi) (resumable, so ranks owning
  // consecutive ranges reproduce the one process's norm exactly: the lanes travel rank to rank).
  using NormLanes = std::array<double, 16>;  // GR_NORM_LANES partial sums, in the tape's precision
  void add_norm_lanes(int64_t lo, int64_t hi, const double* g, NormLanes& lanes, std::span<const char> active) const;
  double norm_from_lanes(NormLanes lanes) const;  // grad_norm's fold and square root

  OptimizerKind kind() const { return kind_; }
  double lr() const { return lr_; }
  void set_lr(double lr) { lr_ = lr; }
  double clip() const { return clip_; }
  const AdamConfig& adam_config() const { return adam_; }
  const SgdConfig& sgd_config() const { return sgd_; }
  // Per-element state: Adam's m and v, or SGD's momentum buffer (in m).
  bool has_moments() const { return kind_ == OptimizerKind::Adam || sgd_.momentum != 0.0; }
  int64_t t() const { return t_; }
  void set_t(int64_t t) { t_ = t; }
  size_t count() const { return params_.size(); }
  Var param(size_t i) const { return params_[i].var; }
  double l2(size_t i) const { return params_[i].l2; }
  // Adam moments (or SGD's momentum buffer, m) of parameter i (registration order), copied out as
  // doubles and written back (checkpoints, the device optimizer). On an f32 tape they are held as
  // floats, so what is written is rounded to float (a float's value is kept exactly).
  std::vector<double> m(size_t i) const { return read(0, params_[i].offset, params_[i].len); }
  std::vector<double> v(size_t i) const { return read(1, params_[i].offset, params_[i].len); }
  void set_m(size_t i, std::span<const double> x) { write(0, params_[i].offset, params_[i].len, x); }
  void set_v(size_t i, std::span<const double> x) { write(1, params_[i].offset, params_[i].len, x); }
  // The moments as flat vectors over the flat parameter vector (offset(i) is parameter i's start).
  std::vector<double> m_flat() const { return read(0, 0, flat_); }
  std::vector<double> v_flat() const { return read(1, 0, flat_); }
  void set_m_flat(std::span<const double> x) { write(0, 0, flat_, x); }
  void set_v_flat(std::span<const double> x) { write(1, 0, flat_, x); }
  // Per-step scalars of the last step (devices take them as inputs).
  double last_clip_scale() const { return last_cs_; }
  double last_grad_norm() const { return last_norm_; }  // grad_norm() of the last step's gradients
  double last_lr_t() const { return last_lr_t_; }
  // lr_t for step t (Adam), exactly as step() computes it.
  double adam_lr_t(int64_t t) const;

 private:
  Optimizer(OptimizerKind kind, double lr, AdamConfig config) : kind_(kind), lr_(lr), adam_(config) {}
  void update_elements(Tape& tape, size_t i, int64_t lo, int64_t n, const double* g);  // over the threads
  // On this thread; with `lanes`, also continues the norm's lanes over g (in the tape's precision).
  void update_serial(Tape& tape, size_t i, int64_t lo, int64_t n, const double* g, NormLanes* lanes = nullptr);
  void step_norm_alongside(Tape& tape);  // no clipping, several threads
  struct Entry {
    Var var;
    double l2;
    int64_t offset, len;
  };
  OptimizerKind kind_;
  double lr_;
  AdamConfig adam_;
  SgdConfig sgd_;
  double clip_ = 0.0;
  int64_t t_ = 0;
  std::vector<Entry> params_;
  // The moments in the tape's precision: an f64 tape's in m_, v_; an f32 tape's as floats in mf_,
  // vf_ (the device's f32 moments), which halves the update's moment traffic against doubles
  // holding floats (mlp1024 f32, docs/performance.md "mlp1024 f32 step").
  std::vector<double> m_, v_;
  std::vector<float> mf_, vf_;
  int64_t flat_ = 0;
  std::vector<double> read(int which, int64_t off, int64_t n) const;  // which: 0 m, 1 v
  void write(int which, int64_t off, int64_t n, std::span<const double> x);
  DType real_ = DType::F64;      // the registered parameters' tape's (add)
  double last_cs_ = 1.0, last_lr_t_ = 0.0, last_norm_ = 0.0;
};

}  // namespace gr
