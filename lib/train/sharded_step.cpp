#include "train/sharded_step.h"

#include <algorithm>
#include <cstring>
#include <tuple>

#include "io/errors.h"
#include "replay/replay.h"
#include "train/device_runner.h"

namespace gr {

namespace {

// Rank q's flat range [lo[q], lo[q+1]): P split as evenly as integers allow, in rank order.
std::vector<int64_t> owner_starts(int64_t P, int64_t R) {
  std::vector<int64_t> lo(static_cast<size_t>(R + 1));
  for (int64_t q = 0; q <= R; ++q) lo[static_cast<size_t>(q)] = q * P / R;
  return lo;
}

}  // namespace

ShardTraffic shard_traffic(int64_t P, int64_t S, int64_t R) {
  ShardTraffic t;
  if (R <= 1) return t;
  const std::vector<int64_t> lo = owner_starts(P, R);
  const int64_t mine = lo[1] - lo[0], k = S / R;
  // Rank 0's traffic: slices out, params out, losses, the norm's lanes to rank 1; the norm comes back.
  const int64_t lanes = std::tuple_size_v<Optimizer::NormLanes>;
  t.send_doubles = k * (P - mine) + mine * (R - 1) + (k + 1) * (R - 1) + lanes;
  t.recv_doubles = (S - k) * mine + (P - mine) + (k + 1) * (R - 1) + 1;
  return t;
}

ShardedStep::ShardedStep(Model& model, Optimizer& opt, dist::Comm& comm, std::unique_ptr<device::Backend> backend, FuseMode fuse)
    : model_(model), opt_(opt), comm_(comm), backend_(std::move(backend)) {
  const Spec& spec = model.spec();
  S_ = model.program().shards;
  R_ = comm.size();
  r_ = comm.rank();
  if (S_ % R_ != 0)
    throw InputError(spec.path, "/train/shards",
                     std::to_string(R_) + " processes cannot share " + std::to_string(S_) +
                         " shards evenly (run a process count that divides train.shards)");
  s_lo_ = r_ * (S_ / R_);
  s_hi_ = s_lo_ + S_ / R_;
  P_ = opt.flat_size();
  lo_ = owner_starts(P_, R_);
  const int64_t k = S_ / R_, mine = lo_[static_cast<size_t>(r_) + 1] - lo_[static_cast<size_t>(r_)];
  for (int64_t q = 0; q < R_; ++q) {
    const int64_t lq = lo_[static_cast<size_t>(q)], nq = lo_[static_cast<size_t>(q) + 1] - lq;
    scount_.push_back(k * nq), sdispl_.push_back(k * lq);
    rcount_.push_back(k * mine), rdispl_.push_back(q * k * mine);
    pcount_.push_back(nq), pdispl_.push_back(lq);
    lcount_.push_back(k + 1), ldispl_.push_back(q * (k + 1));
  }
  send_.resize(static_cast<size_t>(std::max<int64_t>(k * P_, mine)));
  recv_.resize(static_cast<size_t>(S_ * mine));
  acc_.resize(static_cast<size_t>(mine));
  flat_.resize(static_cast<size_t>(P_));
  params_.resize(static_cast<size_t>(P_));
  gather_counts_d_.resize(static_cast<size_t>(R_ * (k + 1)));

  // Which parameters backward reaches is structural: one recording of a shard says it.
  const int64_t b = model.program().batch;
  std::vector<int64_t> rows(static_cast<size_t>(b));
  for (int64_t i = 0; i < b; ++i) rows[static_cast<size_t>(i)] = i;
  const std::vector<Var>& nodes = model.record(model.data().train, rows, model.dropout_key(1));
  const Var loss = nodes[static_cast<size_t>(model.program().loss)];
  if (backend_) {
    if (spec.data && !spec.train.drop_last)
      throw InputError(spec.path, "/train/drop_last", "a device program has one static batch shape; set drop_last to true");
    replay::ReplayOptions ro;
    ro.dtype = DType::F64;
    auto program = std::make_unique<replay::Program>(*backend_, model.tape(), loss, ro);
    active_.resize(opt.count());
    for (size_t i = 0; i < opt.count(); ++i) active_[i] = program->backward_active(opt.param(i)) ? 1 : 0;
    model.reset();
    episode_ = make_episode(std::move(program), fuse);
    episode_->capture_episode(nullptr);  // forward + backward; the optimizer runs on the host, sharded
  } else {
    if (!model.tape().backward(loss)) throw Error("backward failed: " + model.tape().error());
    active_ = opt.touched(model.tape());
    model.reset();
  }
}

ShardedStep::~ShardedStep() = default;

void ShardedStep::shard_gradient(const DataTable& table, std::span<const int64_t> rows, int64_t t, int64_t s, double* flat,
                                 double* loss) {
  const double share = 1.0 / static_cast<double>(S_);  // every shard holds 1/S of the step's rows
  Tape& tape = model_.tape();
  if (episode_) {
    const std::vector<Var>& slots = model_.slots();
    for (size_t i = 0; i < slots.size(); ++i) {
      const std::span<double> dst = tape.leaf_values(slots[i]);
      gather_rows(table.tensors[i], rows, dst.data());
      episode_->set_input(slots[i], dst);
    }
    episode_->set_dropout_key(model_.dropout_key(t, s));
    episode_->run_episode(nullptr);
    *loss = episode_->loss();
  } else {
    const std::vector<Var>& nodes = model_.record(table, rows, model_.dropout_key(t, s));
    if (nodes.empty())
      throw InputError(model_.spec().path, "/train/shards",
                       "a shard of " + std::to_string(rows.size()) + " rows does not fit the graph");
    const Var lv = nodes[static_cast<size_t>(model_.program().loss)];
    *loss = tape.scalar(lv);
    if (!tape.backward(lv)) throw Error("backward failed: " + tape.error());
  }
  for (size_t i = 0; i < opt_.count(); ++i) {
    double* g = flat + opt_.offset(i);
    const int64_t n = (i + 1 < opt_.count() ? opt_.offset(i + 1) : P_) - opt_.offset(i);
    if (!active_[i]) {
      std::fill_n(g, n, 0.0);
      continue;
    }
    if (episode_) episode_->grad(opt_.param(i), {g, static_cast<size_t>(n)});
    else std::memcpy(g, tape.param_grad(opt_.param(i)).data(), static_cast<size_t>(n) * sizeof(double));
    for (int64_t j = 0; j < n; ++j) g[j] = share * g[j];  // S = 1: share 1, exact
  }
  if (!episode_) model_.reset();
}

ShardedStep::Outcome ShardedStep::step(const DataTable& table, std::span<const int64_t> rows, int64_t t, bool interrupt_requested) {
  GR_ASSERT(static_cast<int64_t>(rows.size()) % S_ == 0);
  const size_t per = rows.size() / static_cast<size_t>(S_);
  const int64_t k = S_ / R_;
  std::vector<double> local_losses(static_cast<size_t>(k + 1));
  for (int64_t j = 0; j < k; ++j) {
    const int64_t s = s_lo_ + j;
    // One process: the shard's gradient goes straight to its place in the receive order.
    double* flat = R_ == 1 ? recv_.data() + j * P_ : flat_.data();
    shard_gradient(table, rows.subspan(static_cast<size_t>(s) * per, per), t, s, flat, &local_losses[static_cast<size_t>(j)]);
    if (R_ > 1)
      for (int64_t q = 0; q < R_; ++q) {
        const int64_t lq = lo_[static_cast<size_t>(q)], nq = lo_[static_cast<size_t>(q) + 1] - lq;
        std::memcpy(send_.data() + k * lq + j * nq, flat_.data() + lq, static_cast<size_t>(nq) * sizeof(double));
      }
  }
  local_losses[static_cast<size_t>(k)] = interrupt_requested ? 1.0 : 0.0;
  Outcome out{};
  exchange_and_update(local_losses, interrupt_requested, out);
  return out;
}

void ShardedStep::exchange_and_update(const std::vector<double>& local_losses, bool interrupt, Outcome& out) {
  const int64_t k = S_ / R_, lo = lo_[static_cast<size_t>(r_)], hi = lo_[static_cast<size_t>(r_) + 1], mine = hi - lo;
  // 1. reduce-scatter: every shard's slice of our range arrives in shard order; we sum it.
  if (R_ > 1) comm_.alltoallv(send_.data(), scount_, sdispl_, recv_.data(), rcount_, rdispl_);
  const int64_t stride = R_ == 1 ? P_ : mine;  // one process: recv_ holds whole flat vectors
  for (int64_t i = 0; i < mine; ++i) acc_[static_cast<size_t>(i)] = recv_[static_cast<size_t>(i)];
  for (int64_t s = 1; s < S_; ++s) {
    const double* g = recv_.data() + s * stride;
    for (int64_t i = 0; i < mine; ++i) acc_[static_cast<size_t>(i)] = acc_[static_cast<size_t>(i)] + g[i];
  }
  // 2. the norm: its lanes continued rank after rank, in the flat order of one process.
  Optimizer::NormLanes lanes{};
  const int lanes_n = static_cast<int>(lanes.size());
  if (r_ > 0) comm_.recv(r_ - 1, lanes.data(), lanes_n);
  opt_.add_norm_lanes(lo, hi, acc_.data(), lanes, active_);
  if (r_ + 1 < R_) comm_.send(r_ + 1, lanes.data(), lanes_n);
  double norm = r_ + 1 == R_ ? opt_.norm_from_lanes(lanes) : 0.0;
  if (R_ > 1) comm_.broadcast(&norm, 1, static_cast<int>(R_ - 1));
  // 3. the optimizer on our range.
  opt_.begin_step(norm);
  opt_.step_range(model_.tape(), lo, hi, acc_.data(), active_);
  // 4. parameters back to every rank (and to the device).
  Tape& tape = model_.tape();
  if (R_ > 1) {
    for (size_t i = 0; i < opt_.count(); ++i) {  // our range of the flat parameters
      const std::span<const double> w = tape.param_value(opt_.param(i));
      const int64_t a = std::max(lo, opt_.offset(i)), b = std::min(hi, opt_.offset(i) + static_cast<int64_t>(w.size()));
      if (a < b) std::memcpy(send_.data() + (a - lo), w.data() + (a - opt_.offset(i)), static_cast<size_t>(b - a) * sizeof(double));
    }
    comm_.allgatherv(send_.data(), mine, params_.data(), pcount_, pdispl_);
    for (size_t i = 0; i < opt_.count(); ++i) {
      const std::span<double> w = tape.param_value(opt_.param(i));
      std::memcpy(w.data(), params_.data() + opt_.offset(i), w.size() * sizeof(double));
    }
  }
  if (episode_)
    for (size_t i = 0; i < opt_.count(); ++i)
      if (active_[i]) episode_->set_input(opt_.param(i), tape.param_value(opt_.param(i)));
  // The losses and the stop flags of every rank, summed in shard order.
  std::vector<double>& all = gather_counts_d_;
  if (R_ > 1) comm_.allgatherv(local_losses.data(), k + 1, all.data(), lcount_, ldispl_);
  else std::copy(local_losses.begin(), local_losses.end(), all.begin());
  const double share = 1.0 / static_cast<double>(S_);
  double loss = 0.0;
  for (int64_t q = 0; q < R_; ++q) {
    for (int64_t j = 0; j < k; ++j) {
      const double term = share * all[static_cast<size_t>(q * (k + 1) + j)];
      loss = q == 0 && j == 0 ? term : loss + term;
    }
    interrupt = interrupt || all[static_cast<size_t>(q * (k + 1) + k)] != 0.0;
  }
  out.loss = loss;
  out.grad_norm = norm;
  out.interrupt = interrupt;
}

void ShardedStep::gather_optimizer_state() {
  if (R_ == 1 || !opt_.has_moments()) return;
  const int64_t lo = lo_[static_cast<size_t>(r_)], mine = lo_[static_cast<size_t>(r_) + 1] - lo;
  for (int which = 0; which < 2; ++which) {
    std::vector<double> flat = which == 0 ? opt_.m_flat() : opt_.v_flat();
    std::memcpy(send_.data(), flat.data() + lo, static_cast<size_t>(mine) * sizeof(double));
    comm_.gatherv0(send_.data(), mine, flat.data(), pcount_, pdispl_);
    if (which == 0) opt_.set_m_flat(flat);
    else opt_.set_v_flat(flat);
  }
}

std::string ShardedStep::describe() const {
  const int64_t lo = lo_[static_cast<size_t>(r_)], hi = lo_[static_cast<size_t>(r_) + 1];
  return std::to_string(S_) + " shards of " + std::to_string(model_.program().batch) + " rows on " + std::to_string(R_) +
         (R_ == 1 ? " process" : " processes") + "; rank " + std::to_string(r_) + ": shards [" + std::to_string(s_lo_) + ", " +
         std::to_string(s_hi_) + "), parameters [" + std::to_string(lo) + ", " + std::to_string(hi) + ") of " +
         std::to_string(P_) + (episode_ ? ", forward and backward on the device" : "");
}

}  // namespace gr
