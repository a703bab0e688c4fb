// device_runner.h — the training step of `gradrun train --device host|cuda`: the episode recorded
// once on the tape, captured to the device (forward + backward + optimizer as one episode), and
// replayed per batch with fresh inputs. f64 programs give the same bits as the CPU tape.
#pragma once
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "device/backend.h"
#include "fuse/fuse.h"
#include "grad/optimizer.h"
#include "replay/replay.h"
#include "train/model.h"

namespace gr {

class DeviceRunner {
 public:
  // `backend` is "host" or "cuda"; throws device::DeviceUnavailable when it cannot be had.
  // block / max_grid: the launch geometry (replay::ReplayOptions; 0 = the backend's default block).
  DeviceRunner(Model& model, Optimizer& opt, std::unique_ptr<device::Backend> backend, replay::DType dtype,
               bool fuse = false, bool fuse_auto = false, unsigned block = 0, unsigned max_grid = 65535);
  ~DeviceRunner();

  // One optimizer step on these training rows, all on the device: the row indices are uploaded,
  // the rows gathered from the training set (uploaded once) into the input slots, the episode
  // replayed, and the loss stored at `step_in_epoch` of a device loss buffer.
  void step(std::span<const int64_t> rows, int64_t step_in_epoch);
  // The losses of the first `steps` steps of this epoch: one download per epoch.
  std::vector<double> epoch_losses(int64_t steps);
  // Parameters back into the tape and the optimizer state back into `opt` (checkpoints, weights).
  void sync(Optimizer& opt);
  std::string describe() const;
  replay::Program& program() { return *program_; }
  replay::DeviceOptimizer& optimizer() { return *dopt_; }
  fuse::FusedProgram* fused() { return fused_.get(); }  // null unless fused
  // Fills the input slots with `rows` and uploads them (no episode run).
  void upload_batch(const DataTable& table, std::span<const int64_t> rows);

 private:
  Model& model_;
  std::unique_ptr<device::Backend> backend_;
  std::unique_ptr<replay::Program> program_;
  std::unique_ptr<replay::DeviceOptimizer> dopt_;
  std::unique_ptr<fuse::FusedProgram> fused_;
  // Device-side batches: the training set per input (f64), the batch's row indices, the losses.
  std::vector<device::Buffer> data_;
  device::Buffer index_{}, losses_{};
  device::Kernel *gather_ = nullptr, *store_loss_ = nullptr;
  int64_t losses_capacity_ = 0;
};

// "host" | "cuda" → a backend; "auto" → CUDA when usable, else nullptr with the reason in `why`.
std::unique_ptr<device::Backend> open_backend(const std::string& kind, std::string* why);

}  // namespace gr
