#include "train/step_engine.h"

#include <chrono>
#include <cmath>
#include <optional>

#include "io/errors.h"
#include "tensor/diag.h"
#include "tensor/parallel.h"
#include "train/device_runner.h"
#include "train/run_state.h"
#include "train/sharded_step.h"
#include "train/thread_tuner.h"

namespace gr {

namespace {

// The CPU tape: record, backward, then (finish) the optimizer step and reset to the mark.
class TapeStep final : public StepEngine {
 public:
  TapeStep(Model& model, Optimizer& opt, bool auto_threads) : model_(model), opt_(opt) {
    if (auto_threads && num_threads() > 1) tuner_.emplace(num_threads());
  }
  double run(const DataTable& table, std::span<const int64_t> rows, int64_t t) override {
    if (tuner_) {  // only auto times steps
      start_ = std::chrono::steady_clock::now();
      if (tuner_->next() != num_threads()) set_num_threads(tuner_->next());
    }
    const std::vector<Var>& nodes = model_.record(table, rows, model_.dropout_key(t));
    const Var loss = nodes[static_cast<size_t>(model_.program().loss)];
    const double value = model_.tape().scalar(loss);
    if (!model_.tape().backward(loss)) throw Error("backward failed: " + model_.tape().error());
    if (!std::isfinite(value)) model_.reset();  // no update follows: the run stops at this step
    else model_.update_running_stats();        // batch_norm's running statistics: one update per step
    return value;
  }
  Finish finish() override {
    opt_.step(model_.tape());
    Finish f{opt_.last_grad_norm(), InterruptGuard::requested(), 0};
    model_.reset();
    if (tuner_) {
      if (tuner_->record(std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count()))
        diag::debug(tuner_->describe());
      f.steps_on_one_thread = tuner_->steps_on(1);
    }
    return f;
  }
  bool stops_mid_epoch() const override { return true; }
  bool early_checkpoint() const override { return true; }
  bool tunes_threads() const override { return tuner_.has_value(); }
  std::string describe() const override { return "cpu tape"; }

 private:
  Model& model_;
  Optimizer& opt_;
  std::optional<ThreadTuner> tuner_;
  std::chrono::steady_clock::time_point start_{};
};

// A device: forward, backward and the optimizer step replayed as one episode; the step's loss and
// gradient norm downloaded after it.
class DeviceStep final : public StepEngine {
 public:
  DeviceStep(Model& model, Optimizer& opt, std::unique_ptr<device::Backend> backend, const DeviceSpec& engine)
      : runner_(model, opt, std::move(backend), engine.dtype, engine.fuse) {}
  double run(const DataTable&, std::span<const int64_t> rows, int64_t t) override {
    const DeviceRunner::StepLoss s = runner_.step(rows, t);
    norm_ = s.grad_norm;
    return s.loss;
  }
  Finish finish() override { return Finish{norm_, false, 0}; }
  void sync() override { runner_.sync(); }
  size_t release_host_copies() override { return runner_.release_host_copies(); }
  void restore_host_copies() override { runner_.restore_host_copies(); }
  bool stops_mid_epoch() const override { return false; }
  bool fused() const override { return runner_.fused(); }
  std::string describe() const override { return "device: " + runner_.describe(); }

 private:
  DeviceRunner runner_;
  double norm_ = 0.0;
};

// The shards' gradients summed in shard order, the optimizer sharded over the ranks.
class ShardStep final : public StepEngine {
 public:
  ShardStep(Model& model, Optimizer& opt, dist::Comm& comm, std::unique_ptr<device::Backend> backend, FuseMode fuse)
      : shards_(model, opt, comm, std::move(backend), fuse) {}
  double run(const DataTable& table, std::span<const int64_t> rows, int64_t t) override {
    out_ = shards_.step(table, rows, t, InterruptGuard::requested());
    return out_.loss;
  }
  Finish finish() override { return Finish{out_.grad_norm, out_.interrupt, 0}; }
  void sync() override { shards_.restore_host_copies(); }
  size_t release_host_copies() override { return shards_.release_host_copies(); }
  void restore_host_copies() override { shards_.restore_host_copies(); }
  void gather_optimizer_state() override { shards_.gather_optimizer_state(); }
  bool stops_mid_epoch() const override { return true; }
  std::string describe() const override { return "shards: " + shards_.describe(); }

 private:
  ShardedStep shards_;
  ShardedStep::Outcome out_{};
};

}  // namespace

std::unique_ptr<StepEngine> make_step_engine(Model& model, Optimizer& opt, dist::Comm& comm, const DeviceSpec& engine,
                                             std::unique_ptr<device::Backend> backend, bool auto_threads) {
  const Spec& spec = model.spec();
  if (spec.train.shards > 1 || comm.size() > 1) {
    if (engine.dtype != DType::F64)
      throw InputError(spec.path, "/train/shards", "sharded training runs in f64 (its all-reduce and optimizer are f64); drop --dtype f32");
    return std::make_unique<ShardStep>(model, opt, comm, std::move(backend), engine.fuse);
  }
  if (engine.kind != DeviceKind::Cpu) return std::make_unique<DeviceStep>(model, opt, std::move(backend), engine);
  return std::make_unique<TapeStep>(model, opt, auto_threads);
}

}  // namespace gr
