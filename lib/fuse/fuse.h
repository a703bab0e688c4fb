// fuse.h — megakernel fusion over a captured replay::Program (docs/fusion.md).
//
//   replay::Program prog(backend, tape, loss);
//   fuse::Plan plan = fuse::plan(prog);            // segments + generated kernel source (no device work)
//   fuse::FusedProgram fp(prog, std::move(plan));  // compiles (disk-cached), uploads the pointer table
//   fp.forward(); fp.backward();                   // or: fp.capture_episode(&opt); fp.run_episode(&opt);
//
// FusedProgram is a replay::Episode (replay/episode.h): the same buffers as its Program, another
// launch schedule. Data access (inputs, loss, values, gradients, parameters) goes to the Program.
//
// Row segments (maximal consecutive runs of row-local nodes over the same row count B) become one
// generated forward kernel each (block = row, threads stride columns, __syncthreads between nodes,
// every node still writes its own buffer); their backward is a row-space kernel plus a
// parameter-space kernel (matmul dW and broadcast b-side reductions, in the per-node kernels' element
// orders). Serial segments (the scalar tail) become one single-thread kernel forward and one backward.
// Every gradient zero-fill and the loss seed are one launch. Nodes outside the classes keep their
// per-node launches. Fused results are bit-identical to the per-node replay (and so to the CPU tape).
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "device/backend.h"
#include "replay/replay.h"

namespace gr::fuse {

enum class SegKind { Row, Serial };

struct Segment {
  SegKind kind = SegKind::Row;
  int32_t lo = 0, hi = 0;        // inclusive node-id range (leaves inside it are skipped)
  int64_t rows = 0;              // B (row segments); 1 for serial segments
  std::vector<int32_t> nodes;    // the computing nodes of the range, ascending
  // Row segments: the next computing node after hi when it is a row-separable reduction of a
  // [B, *] input (softmax cross-entropy, sum/mean over all axes) outside every serial segment: its
  // forward stays per-node (it sums across rows), its backward becomes the row kernel's first stage.
  int32_t head = -1;
  std::string fwd;               // forward kernel
  std::string bwd_row;           // row-space backward kernel ("" = none)
  std::string bwd_param;         // parameter-space backward kernel ("" = none)
  int64_t param_width = 0;       // widest parameter-space target (its grid sizing)
  bool bwd_fused = false;        // false: the segment's nodes keep their per-node backward launches
  std::string bwd_why;           // why the backward is not fused (order safety, nothing to do)
  size_t fwd_per_node = 0, bwd_per_node = 0;  // the per-node launches the segment replaces
};

struct PlanOptions {
  bool row = true;     // row segments
  bool serial = true;  // serial segments (the scalar tail)
  bool lanes = true;   // softmax / log_softmax over the last axis in row segments, softmax
                       // cross-entropy in serial segments (beyond the reference)
};

struct Plan {
  uint64_t id = 0;  // the plan id carried by every kernel name (a hash of the generated text)
  DType dtype = DType::F64;
  int32_t nodes = 0;  // node count of the program (pointer-table layout)
  std::vector<Segment> segments;
  std::string fill;         // the one-launch zero fill (+ seed) kernel; "" when nothing has a gradient
  int64_t fill_width = 0;   // gradient elements
  std::string module_name;  // "gr_fuse_<id>"
  std::string source;       // the complete module text (replay::kernel_prelude(dtype) + generated kernels)
  std::string generated;    // the generated part alone
  // The window ops (conv2d, the pools: Fusion Opaque) of the program: they stay per-node inside a fused
  // episode (their per-node kernels launch between the segments), listed so the plan says so.
  std::vector<std::pair<int32_t, Op>> per_node_windows;
  // The embedding nodes (Fusion Opaque): per-node inside a fused episode as well, listed likewise.
  std::vector<int32_t> per_node_gathers;
  // Launches per forward / backward: the per-node replay vs this plan.
  size_t fwd_per_node = 0, bwd_per_node = 0, fwd_fused = 0, bwd_fused = 0;

  bool fuses() const { return !segments.empty(); }
  size_t per_node_launches() const { return fwd_per_node + bwd_per_node; }
  size_t fused_launches() const { return fwd_fused + bwd_fused; }
  std::string describe() const;  // segments, their nodes and kernels, launch counts
};

// Analyzes the program and generates the kernel source. Never touches the device.
Plan plan(const replay::Program& prog, PlanOptions options = {});

// Plans a recorded tape without keeping its program (`gradrun inspect`): captures the tape on
// `backend` (which compiles, or fetches from the disk cache, the per-node module) and plans it.
Plan plan_tape(device::Backend& backend, const Tape& tape, Var loss, replay::ReplayOptions replay_options = {},
               PlanOptions options = {});

// `fuse: auto`: fuse on CUDA when the plan removes launches (launch latency dominates there); the
// host backend has no launch latency, so the per-node path is already its best execution.
bool worthwhile(const Plan& plan, const device::Backend& backend);

class FusedProgram final : public replay::Episode {
 public:
  // Compiles (or fetches from the backend's disk cache) the plan's module and uploads the pointer
  // table. `prog` (and its backend) must outlive this object. The plan must come from `prog`.
  FusedProgram(replay::Program& prog, Plan plan);
  // The same, owning the program (one object to hold: lib/train's DeviceRunner).
  FusedProgram(std::unique_ptr<replay::Program> prog, Plan plan);
  ~FusedProgram() override;
  FusedProgram(const FusedProgram&) = delete;
  FusedProgram& operator=(const FusedProgram&) = delete;

  // Data: the program's buffers.
  void set_input(Var leaf, std::span<const double> values) override { prog_.set_input(leaf, values); }
  double loss() override { return prog_.loss(); }
  void value(Var v, std::span<double> out) override { prog_.value(v, out); }
  void grad(Var v, std::span<double> out) override { prog_.grad(v, out); }
  void sync_params_to(Tape& tape) override { prog_.sync_params_to(tape); }

  void forward() override;
  void backward() override;  // zero-fill + seed (one launch), then the descending walk
  // forward + backward (+ opt's device half) as one episode (on CUDA: one graph). Replaces the
  // backend's previous capture (including one made by prog.capture_episode).
  void capture_episode(replay::DeviceOptimizer* opt = nullptr) override;
  void run_episode(replay::DeviceOptimizer* opt = nullptr) override;  // opt->prepare() + backend.replay()
  bool has_episode() const override { return episode_id_ != 0 && be_.capture_id() == episode_id_; }  // as replay::Program

  size_t forward_launches() const override { return plan_.fwd_fused; }
  size_t backward_launches() const override { return plan_.bwd_fused; }
  // "fused: F forward + B backward + O optimizer launches per episode (per-node P + O)".
  std::string launch_summary(size_t optimizer_launches) const override;
  bool fused() const override { return true; }
  const Plan& plan() const { return plan_; }
  replay::Program& program() override { return prog_; }
  const replay::Program& program() const override { return prog_; }

 private:
  struct Step {
    device::Kernel* kernel = nullptr;  // generated kernel; null: the per-node launches of `node`
    unsigned grid = 1, block = 1;
    int32_t node = -1;
    int64_t rows = 0;  // the kernel's B argument
  };
  void run(const std::vector<Step>& steps, bool forward);

  replay::Program& prog_;
  device::Backend& be_;
  Plan plan_;
  device::Module* module_ = nullptr;
  device::Buffer table_;
  std::vector<Step> fwd_, bwd_;
  uint64_t episode_id_ = 0;  // backend.capture_id() of this program's capture (0: none)
  const replay::DeviceOptimizer* episode_opt_ = nullptr;
  std::unique_ptr<replay::Program> owned_;  // prog_, when this object owns it (destroyed last)
};

}  // namespace gr::fuse
