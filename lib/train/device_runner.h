// device_runner.h — the training step of `gradrun train --device host|cuda`: the episode recorded
// once on the tape, captured to the device (forward + backward + optimizer as one episode), and
// replayed per batch with fresh inputs. f64 programs give the same bits as the CPU tape. The
// episode is a replay::Episode: per-node or fused is decided once, in the constructor.
#pragma once
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "device/backend.h"
#include "grad/optimizer.h"
#include "replay/episode.h"
#include "replay/replay.h"
#include "spec/spec.h"
#include "train/model.h"

namespace gr {

// The host copies of a model's fixed leaves (Model::fixed_leaves: frozen parameters and consts)
// while an f64 episode holds them on the device (docs/use-a-model.md "Host copies on devices"):
// release drops every one that has its own pages (Tape::drop_value) and returns the bytes freed;
// restore downloads them back from the episode's buffers, the bytes that were uploaded. Idempotent.
class HostCopies {
 public:
  explicit HostCopies(Model& model) : model_(model) {}
  size_t release();
  void restore(replay::Episode& episode);  // the episode that holds them

 private:
  Model& model_;
  std::vector<Var> released_;  // the fixed leaves whose host copies are dropped now
};

class DeviceRunner {
 public:
  // fuse: Off — per-node launches; On — fused megakernels (lib/fuse); Auto — fused when the backend
  // has launch latency to save (Capabilities::real_gpu) and the plan removes launches.
  // block / max_grid: the launch geometry (replay::ReplayOptions; 0 = the backend's default block).
  // opt: the run's optimizer, the one owner of its state (replay::DeviceOptimizer steps it); it must
  // outlive the runner.
  DeviceRunner(Model& model, Optimizer& opt, std::unique_ptr<device::Backend> backend, DType dtype,
               FuseMode fuse = FuseMode::Off, unsigned block = 0, unsigned max_grid = 65535);
  ~DeviceRunner();

  // One optimizer step on these training rows, all on the device: the row indices are uploaded,
  // the rows gathered from the training set (uploaded once) into the input slots, the episode
  // replayed; then its loss and gradient norm (Optimizer::grad_norm, computed by the device
  // optimizer's clip kernel), stored side by side on the device, come back in one download.
  // `run_step`: the run's step t (1-based), the key of its dropout masks.
  struct StepLoss {
    double loss, grad_norm;
  };
  StepLoss step(std::span<const int64_t> rows, int64_t run_step);
  // Parameters back into the tape and the device's moments back into the Optimizer the runner was
  // made with (its one owner: t and lr are there already), and the host copies of the fixed leaves
  // back (restore_host_copies): the tape is whole again (checkpoints, weights, evaluation).
  void sync();
  // HostCopies over this episode, as the original library's drop_consts after a capture. Either
  // dtype: an f32 run's tape holds its values rounded to float already (Model(.., DType::F32)), so
  // the device's float copies widen back to the same bytes.
  // Between release and restore nothing may record on the tape: the trainer restores (sync) before
  // every evaluation and file.
  size_t release_host_copies() { return host_copies_.release(); }
  void restore_host_copies() { host_copies_.restore(*episode_); }
  std::string describe() const;
  replay::Episode& episode() { return *episode_; }
  replay::DeviceOptimizer& optimizer() { return *dopt_; }
  bool fused() const { return episode_->fused(); }
  // Fills the input slots with `rows` and uploads them (no episode run).
  void upload_batch(const DataTable& table, std::span<const int64_t> rows);

 private:
  Model& model_;
  std::unique_ptr<device::Backend> backend_;
  std::unique_ptr<replay::Episode> episode_;        // owns the replay::Program
  std::unique_ptr<replay::DeviceOptimizer> dopt_;  // over episode_->program(): destroyed first
  // Device-side batches: the training set per input (f64), the batch's row indices, the step's
  // [loss, gradient norm] as two doubles.
  std::vector<device::Buffer> data_;
  device::Buffer index_{}, report_{};
  device::Kernel *gather_ = nullptr, *store_loss_ = nullptr, *store_norm_ = nullptr;
  unsigned gather_block_ = 1;  // the program's block, fitted to the gather kernel's limit
  HostCopies host_copies_{model_};
};

// The episode of a captured program: the program itself (Off), or fused kernels over its buffers
// (On; Auto when the backend has launch latency to save and the plan removes launches).
std::unique_ptr<replay::Episode> make_episode(std::unique_ptr<replay::Program> prog, FuseMode mode);

}  // namespace gr
