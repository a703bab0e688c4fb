// episode.h — one training episode on a device, whatever schedules its launches: the per-node
// replay (replay::Program) or the fused megakernels over the same buffers (fuse::FusedProgram).
// Callers (lib/train's DeviceRunner and replay check, the tests, bench_replay) hold an Episode and
// never ask which kind it is.
//
//   ep.set_input(x, rows);                 // minibatch rows into a leaf's device buffer
//   ep.forward(); ep.backward(); opt.step(); // launch by launch, or:
//   ep.capture_episode(&opt); ... ep.run_episode(&opt);  // forward + backward + update as one
//   ep.loss(); ep.value(v, out); ep.grad(v, out); ep.sync_params_to(tape);
//
// Values and gradients always live in a replay::Program's buffers (program()); an Episode is a
// launch schedule over them, so reading results never depends on the schedule.
#pragma once
#include <cstddef>
#include <span>
#include <string>

#include "grad/tape.h"

namespace gr::replay {

class Program;
class DeviceOptimizer;

class Episode {
 public:
  virtual ~Episode() = default;

  // ---- data: the program's buffers --------------------------------------------------------------
  // Fresh values for a param or const (same element count): minibatch rows, or new weights.
  virtual void set_input(Var leaf, std::span<const double> values) = 0;
  virtual double loss() = 0;                             // element 0 of the loss value
  virtual void value(Var v, std::span<double> out) = 0;  // out.size() == numel
  virtual void grad(Var v, std::span<double> out) = 0;   // zeros for nodes backward never reaches
  virtual void sync_params_to(Tape& tape) = 0;           // every parameter's device value into the tape

  // ---- launch by launch -------------------------------------------------------------------------
  virtual void forward() = 0;
  // Zeroes every gradient, seeds dL/dloss = 1, then the descending walk (one episode's backward).
  virtual void backward() = 0;

  // ---- whole episodes ---------------------------------------------------------------------------
  // forward + backward (+ opt's device half) as one backend capture (on CUDA: one graph); replaces
  // the backend's previous capture. An error inside the capture is rethrown as itself.
  virtual void capture_episode(DeviceOptimizer* opt = nullptr) = 0;
  // The backend still holds this episode's capture (no other program captured since).
  virtual bool has_episode() const = 0;
  // opt->prepare() (host half) then the backend's replay; opt must be the one captured with.
  virtual void run_episode(DeviceOptimizer* opt = nullptr) = 0;

  // ---- description ------------------------------------------------------------------------------
  virtual size_t forward_launches() const = 0;
  virtual size_t backward_launches() const = 0;  // including the zero-fill and the seed
  size_t launches_per_episode(size_t optimizer_launches = 0) const {
    return forward_launches() + backward_launches() + optimizer_launches;
  }
  // "F forward + B backward + O optimizer launches per episode", with what the schedule replaces.
  virtual std::string launch_summary(size_t optimizer_launches) const = 0;
  virtual bool fused() const = 0;  // generated megakernels (run.json's "fused")

  // The per-node program that owns the buffers (node views, device addresses, launch geometry).
  virtual Program& program() = 0;
  // The dropout key of the next episodes (replay::Program::set_dropout_key; the same buffers).
  void set_dropout_key(const DropoutKey& key);
  virtual const Program& program() const = 0;
};

}  // namespace gr::replay
