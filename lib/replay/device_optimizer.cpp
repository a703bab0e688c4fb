// device_optimizer.cpp — the device optimizer: SGD/Adam with per-parameter L2 and global-norm
// clip, SGD momentum/Nesterov and AdamW, mirroring gr::Optimizer bit for bit (kernels/gr_optim.h); per-step scalars ride a small control buffer so a
// captured episode never freezes them.
#include "replay/detail.h"
#include "replay/replay.h"

#include <algorithm>
#include <cstring>
#include <limits>

#include "tensor/reduce.h"

namespace gr::replay {

using namespace detail;

namespace {
// The control buffer (gr_opt_kernels.cuh): ctl[0..4] the step's scalars, ctl[8..24) the gradient
// norm's lanes between grk_clip_scale's two phases.
constexpr unsigned kNormLanes = 16;  // GR_NORM_LANES (kernels/gr_optim.h)
constexpr size_t kCtlDoubles = 8 + kNormLanes;
}  // namespace

// ---- the device optimizer ----------------------------------------------------------------------------
DeviceOptimizer::DeviceOptimizer(Program& prog, Optimizer& owner, bool track_norm) : prog_(prog), owner_(owner) {
  const Optimizer& config = owner;
  int64_t total = 0;
  std::vector<int64_t> tab;
  for (size_t i = 0; i < config.count(); ++i) {
    const Var p = config.param(i);
    if (p.id < 0 || p.id >= prog.size() || prog.nodes_[static_cast<size_t>(p.id)].op != Op::Param)
      throw Error("replay: optimizer: registered parameter " + std::to_string(p.id) +
                  " is not a param node of the captured program");
    const Program::NodeInfo& n = prog.nodes_[static_cast<size_t>(p.id)];
    params_.push_back({p, config.l2(i), n.numel, total, n.grad_off >= 0});
    total += n.numel;
    if (n.grad_off >= 0) {
      tab.push_back(n.grad_off);
      tab.push_back(n.numel);
    }
  }
  device::Backend& be = prog.be_;
  ctl_ = be.alloc(kCtlDoubles * sizeof(double));
  const bool adam = owner_.kind() == OptimizerKind::Adam;
  const SgdConfig& sc = owner_.sgd_config();
  if (owner_.has_moments()) {  // Adam's m and v; SGD momentum keeps its buffer in m (v stays zero)
    m_ = be.alloc(static_cast<size_t>(std::max<int64_t>(total, 1)) * prog.esize_);
    v_ = be.alloc(static_cast<size_t>(std::max<int64_t>(total, 1)) * prog.esize_);
    for (size_t i = 0; i < params_.size(); ++i) upload_moments(i, owner_.m(i), owner_.v(i));
  }
  const int64_t active_count = static_cast<int64_t>(tab.size() / 2);
  if (tab.empty()) tab.push_back(0);
  tab_ = be.alloc(tab.size() * sizeof(int64_t));
  be.upload(tab_, tab.data(), tab.size() * sizeof(int64_t));

  // The device half of a step, fixed at construction (capturable).
  // The norm's 16 lanes (docs/numerics.md) as up to 16 threads of one block, folded by thread 0.
  if ((owner_.clip() > 0.0 || track_norm) && active_count > 0)
    prog.add_one_block(launches_, detail::kernel_named("clip_scale"), kNormLanes, {prog.grads_.handle, tab_.handle, I(active_count), ctl_.handle});
  const AdamConfig& ac = owner_.adam_config();
  const double b1 = ac.beta1, b2 = ac.beta2;
  for (const Entry& e : params_) {
    if (!e.active) continue;  // the loss does not depend on it: skipped, not decayed
    const uint64_t w = prog.vptr(e.var.id), g = prog.gptr(e.var.id);
    if (adam)
      prog.add(launches_, detail::kernel_named("adam"), e.len,
               {w, g, m_.handle + static_cast<uint64_t>(e.moff) * prog.esize_, v_.handle + static_cast<uint64_t>(e.moff) * prog.esize_,
                ctl_.handle, D(e.l2), D(b1), D(b2), D(1.0 - b1), D(1.0 - b2), D(ac.eps), D(ac.weight_decay), I(e.len)});
    else if (sc.momentum != 0.0)
      prog.add(launches_, detail::kernel_named("sgd_momentum"), e.len,
               {w, g, m_.handle + static_cast<uint64_t>(e.moff) * prog.esize_, ctl_.handle, D(e.l2), D(sc.momentum),
                I(sc.nesterov ? 1 : 0), I(e.len)});
    else
      prog.add(launches_, detail::kernel_named("sgd"), e.len, {w, g, ctl_.handle, D(e.l2), I(e.len)});
  }
}

DeviceOptimizer::~DeviceOptimizer() {
  try {
    device::Backend& be = prog_.be_;
    be.free(ctl_);
    be.free(tab_);
    if (m_.bytes) be.free(m_);
    if (v_.bytes) be.free(v_);
  } catch (...) {
  }
}

void DeviceOptimizer::prepare() {
  owner_.advance();
  // Without clip the max norm is infinite: a tracked norm never scales (cs = 1, as on the CPU).
  const double maxn = owner_.clip() > 0.0 ? owner_.clip() : std::numeric_limits<double>::infinity();
  const double ctl[5] = {owner_.lr(), owner_.last_lr_t(), 1.0, maxn, 0.0};
  prog_.be_.upload(ctl_, ctl, sizeof ctl);
}

void DeviceOptimizer::run_launches() { prog_.run(launches_); }

void DeviceOptimizer::step() {
  prepare();
  prog_.run(launches_);
}

double DeviceOptimizer::last_clip_scale() {
  double cs = 1.0;
  prog_.be_.download(&cs, ctl_, sizeof cs, 2 * sizeof(double));
  return cs;
}

void DeviceOptimizer::download_moments(size_t i, std::span<double> m, std::span<double> v) {
  if (i >= params_.size()) throw Error("replay: optimizer: no registered parameter " + std::to_string(i));
  const Entry& e = params_[i];
  if (static_cast<int64_t>(m.size()) != e.len || static_cast<int64_t>(v.size()) != e.len)
    throw Error("replay: optimizer: moments of parameter " + std::to_string(e.var.id) + " have " +
                std::to_string(e.len) + " elements");
  if (!m_.bytes) {  // plain SGD keeps no moments
    std::fill(m.begin(), m.end(), 0.0);
    std::fill(v.begin(), v.end(), 0.0);
    return;
  }
  prog_.download_real(m.data(), m_, e.len, e.moff);
  prog_.download_real(v.data(), v_, e.len, e.moff);
}

void DeviceOptimizer::upload_moments(size_t i, std::span<const double> m, std::span<const double> v) {
  if (i >= params_.size()) throw Error("replay: optimizer: no registered parameter " + std::to_string(i));
  const Entry& e = params_[i];
  if (static_cast<int64_t>(m.size()) != e.len || static_cast<int64_t>(v.size()) != e.len)
    throw Error("replay: optimizer: moments of parameter " + std::to_string(e.var.id) + " have " +
                std::to_string(e.len) + " elements");
  if (!m_.bytes) return;
  prog_.upload_real(m_, m.data(), e.len, e.moff);
  prog_.upload_real(v_, v.data(), e.len, e.moff);
}

void DeviceOptimizer::store_moments() {
  for (size_t i = 0; i < params_.size(); ++i) {
    std::vector<double> m(static_cast<size_t>(params_[i].len)), v(m.size());
    download_moments(i, m, v);
    owner_.set_m(i, m);
    owner_.set_v(i, v);
  }
}


}  // namespace gr::replay
