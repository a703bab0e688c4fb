// step_engine.h — one training step, whichever engine runs it: the CPU tape, a device (one captured
// episode per step: train/device_runner.h) or the shards of a data-parallel step
// (train/sharded_step.h). The training loop (train/trainer.cpp) drives all three the same way and
// gets each step's loss and gradient norm from every one the same way, after every step.
#pragma once
#include <cstdint>
#include <memory>
#include <span>
#include <string>

#include "device/backend.h"
#include "dist/comm.h"
#include "grad/optimizer.h"
#include "spec/spec.h"
#include "train/model.h"

namespace gr {

class StepEngine {
 public:
  struct Finish {
    double grad_norm = 0.0;           // the step's global gradient norm (Optimizer::last_grad_norm's bits)
    bool interrupt = false;           // SIGINT/SIGTERM seen (by every rank): stop after this step
    int64_t steps_on_one_thread = 0;  // --threads auto on the CPU tape: steps so far that ran on 1 thread
  };
  virtual ~StepEngine() = default;
  // Forward and backward over `rows` of `table`; t is the run's step (1-based; the key of its
  // dropout masks). Returns the step's loss. A device runs the update here too (one captured
  // episode), and so do the shards (one collective step); the CPU tape leaves it to finish(), so a
  // step whose loss is not finite changes no parameter there.
  virtual double run(const DataTable& table, std::span<const int64_t> rows, int64_t t) = 0;
  // The rest of the step (the CPU tape's update) and what it reports.
  virtual Finish finish() = 0;
  // Parameters and optimizer state back on the tape and in the Optimizer, host copies restored:
  // before an evaluation, a checkpoint or the files (a no-op on the CPU tape).
  virtual void sync() {}
  // The host copies of the fixed leaves while a device holds them (HostCopies): bytes freed.
  virtual size_t release_host_copies() { return 0; }
  virtual void restore_host_copies() {}
  // Before a checkpoint (collective for the shards): the whole optimizer state where rank 0 reads it.
  virtual void gather_optimizer_state() {}
  // The tape holds the run's state after every step, so the run may stop (interrupt) and
  // checkpoint inside an epoch: the CPU tape and the shards; a device syncs once per epoch.
  virtual bool stops_mid_epoch() const = 0;
  // A checkpoint after the first 100 steps of a long first epoch (the CPU tape's).
  virtual bool early_checkpoint() const { return false; }
  virtual bool fused() const { return false; }
  virtual bool tunes_threads() const { return false; }
  virtual std::string describe() const = 0;
};

// The engine of a run: the shards when train.shards > 1 or several processes (f64; on `backend`
// when given), else the device on `backend` (engine.dtype, engine.fuse), else the CPU tape (with
// auto_threads: each step on 1 thread or all, by timing: train/thread_tuner.h).
std::unique_ptr<StepEngine> make_step_engine(Model& model, Optimizer& opt, dist::Comm& comm, const DeviceSpec& engine,
                                             std::unique_ptr<device::Backend> backend, bool auto_threads);

}  // namespace gr
