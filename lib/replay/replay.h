// replay.h — the device replay engine (docs/replay.md): capture one recorded tape
// episode onto a device Backend and run it there with per-node kernels, bit-identical to the CPU
// tape for f64.
//
//   Program prog(backend, tape, loss);        // value buffer per node, gradient per backward-active node
//   DeviceOptimizer opt(prog, cpu_optimizer); // runs for it: its config, t and lr; moments uploaded
//   prog.capture_episode(&opt);               // optional: forward + backward + update as one episode
//   for each minibatch:
//     prog.set_input(x, rows); prog.set_input(y, targets);
//     prog.run_episode(&opt);                 // or: prog.forward(); prog.backward(); opt.step();
//     log(prog.loss());
//   prog.sync_params_to(tape);                // trained weights back into the tape
//
// Program is the per-node Episode (episode.h); lib/fuse's FusedProgram is the fused one over the
// same buffers. After capture the tape is not needed (except as the target of sync_params_to): the
// graph is static. Everything that cannot be captured fails closed with a gr::Error naming the node.
#pragma once
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "device/backend.h"
#include "grad/optimizer.h"
#include "grad/tape.h"
#include "replay/episode.h"

namespace gr::replay {

// The complete device kernel text (kernels/device/*.cuh, concatenated at build time); the f32
// module is the same text with `#define GR_F32 1` in front.
const std::string& kernel_source(DType dtype = DType::F64);
const std::string& detail_kernel_text();  // the generated concatenation (f64)
// The head of that text alone (kernels/device/gr_prelude.cuh: the shared headers, gr_real, the GRK_
// macros), with `#define GR_F32 1` in front for f32: what a generated module (lib/fuse) compiles
// against. Its kernels call only the shared inline/template functions of the headers, so a fused
// module carries no per-node kernel (those run from the Program's own module).
const std::string& kernel_prelude(DType dtype = DType::F64);
const std::string& detail_prelude_text();  // the generated prelude text (f64)
// Every kernel name the source exports (for tests and diagnostics).
const std::vector<std::string>& kernel_names();

struct ReplayOptions {
  // Threads per block for every parallel launch; 0 = 1 on the host backend, 128 on CUDA.
  unsigned block = 0;
  // Cap on blocks per launch (kernels are grid-stride, so any cap is correct).
  unsigned max_grid = 65535;
  // F64: bit-identical to the CPU tape. F32: the same kernels over float (uploads and downloads
  // convert; exp/log are the deterministic f64 functions rounded to float), bit-identical between
  // backends and within a tolerance of the tape (docs/replay.md).
  DType dtype = DType::F64;
};

class DeviceOptimizer;

class Program final : public Episode {
 public:
  // Mirrors nodes [0, tape.size()) of a healthy tape; `loss` is the node backward seeds from.
  // Uploads every param and every const that has host values; lazy and dropped consts get a
  // buffer and no upload (fill them with set_input). Compiles (or fetches from the backend's disk
  // cache) the kernel module. The backend must outlive the Program.
  Program(device::Backend& backend, const Tape& tape, Var loss, ReplayOptions options = {});
  ~Program() override;
  Program(const Program&) = delete;
  Program& operator=(const Program&) = delete;

  // Fresh values for a param or const (same element count): minibatch rows, or new weights.
  void set_input(Var leaf, std::span<const double> values) override;
  // The key every dropout node's mask uses from the next launch on (the constructor takes the
  // tape's dropout_key()); captured episodes read it from device memory, so no recapture.
  void set_dropout_key(const DropoutKey& key);
  // Recomputes every non-leaf value, in tape order (one or more launches per node).
  void forward() override;
  // Zeroes EVERY gradient buffer (parameters' too: one device backward is one episode, like the
  // tape after reset_to), seeds dL/dloss = 1 and walks the backward-active nodes in descending id.
  void backward() override;
  double loss() override;                                // downloads element 0 of the loss value
  void value(Var v, std::span<double> out) override;     // out.size() == numel
  void grad(Var v, std::span<double> out) override;      // zeros for nodes backward never reaches
  // Writes every parameter's device value into tape.param_value(p) (same node structure).
  void sync_params_to(Tape& tape) override;

  // Records forward + backward (+ the optimizer's device half when opt is given) as one episode
  // with backend.begin_capture/end_capture (on CUDA: one graph). Replaces a previous capture. An
  // error inside the capture is rethrown as itself (the capture is aborted, not ended).
  void capture_episode(DeviceOptimizer* opt = nullptr) override;
  // The backend holds this program's episode: false again once another program (or a
  // FusedProgram) captured on the same backend since. Destroying the program drops its episode.
  bool has_episode() const override { return episode_id_ != 0 && be_.capture_id() == episode_id_; }
  // One captured episode: opt->prepare() (host half: t, lr_t, ctl upload) then backend.replay().
  // Pass the optimizer the episode was captured with (or nullptr if none). Throws when the
  // backend's episode is not this program's (see has_episode).
  void run_episode(DeviceOptimizer* opt = nullptr) override;

  // ---- introspection ----------------------------------------------------------------------------
  int32_t size() const { return static_cast<int32_t>(nodes_.size()); }
  Var loss_var() const { return Var{loss_}; }
  bool backward_active(Var v) const;
  size_t forward_launches() const override { return fwd_.size(); }
  size_t backward_launches() const override { return bwd_.size(); }  // including the zero-fill and the seed
  std::string launch_summary(size_t optimizer_launches) const override {
    return std::to_string(fwd_.size()) + " forward + " + std::to_string(bwd_.size()) + " backward + " +
           std::to_string(optimizer_launches) + " optimizer launches per episode";
  }
  bool fused() const override { return false; }
  Program& program() override { return *this; }
  const Program& program() const override { return *this; }
  device::Backend& backend() { return be_; }
  DType dtype() const { return opt_.dtype; }

  // ---- fusion hooks (lib/fuse, docs/fusion.md) ----------------------------------------------------
  struct NodeView {
    Op op = Op::Const;
    Shape shape;
    int64_t numel = 0;
    int32_t a = -1, b = -1;
    int32_t axis = 0;  // normalized, or kAllAxes
    double scalar = 0.0;
    bool causal = false;  // a causal softmax (gr_softmax_causal_lane_*; fused lane stage: row s is lane s)
    bool active = false;  // backward-active: has a gradient buffer
  };
  NodeView node_view(int32_t id) const;
  uint64_t value_address(int32_t id) const { return vptr(id); }  // device address of node id's values
  uint64_t grad_address(int32_t id) const { return gptr(id); }    // 0 when not backward-active
  device::Buffer grad_slab() const { return grads_; }              // every gradient, one buffer
  int64_t grad_elements() const { return grad_elems_; }
  unsigned block() const { return block_; }
  unsigned max_grid() const { return opt_.max_grid; }
  // The per-node launches of one node, exactly those forward()/backward() run for it (backward
  // excludes the zero-fill and the seed); and their counts.
  void run_node_forward(int32_t id);
  void run_node_backward(int32_t id);
  size_t node_forward_launches(int32_t id) const;
  size_t node_backward_launches(int32_t id) const;

 private:
  friend class DeviceOptimizer;
  struct Launch {
    device::Kernel* kernel = nullptr;
    unsigned grid = 1, block = 1;
    int nargs = 0;
    uint64_t args[16] = {};
  };
  struct NodeInfo {
    Op op = Op::Const;
    Shape shape;
    int64_t numel = 0;
    int64_t val_off = 0;   // elements into the value slab
    int64_t grad_off = -1; // elements into the gradient slab; -1: not backward-active
    int32_t a = -1, b = -1;
    int32_t c = -1;          // a Batch op's running variance (b: its running mean)
    int32_t axis = 0;
    bool causal = false;     // a causal softmax
    double scalar = 0.0;
    double momentum = 0.0;   // a Batch op's
    bool state = false;      // a leaf a Batch op updates in place (its running statistics): synced back
    int64_t meta_off = -1;  // int64s into the metadata slab (binary, slice)
  };
  void check_var(Var v, const char* what) const;
  uint64_t vptr(int32_t id) const;
  uint64_t gptr(int32_t id) const;
  uint64_t mptr(int64_t off) const;
  int64_t key_off_ = 0;  // the dropout key's three int64s in the metadata slab
  void upload_real(device::Buffer dst, const double* src, int64_t n, int64_t elem_off);
  void download_real(double* dst, device::Buffer src, int64_t n, int64_t elem_off);
  void add(std::vector<Launch>& list, const char* kernel, int64_t work, std::initializer_list<uint64_t> args);
  void add_serial(std::vector<Launch>& list, const char* kernel, std::initializer_list<uint64_t> args);
  // One block of min(threads, block()) threads (fitted to the kernel's limit): a kernel whose
  // threads split a fixed amount of work and meet at a barrier (the gradient norm's 16 lanes).
  void add_one_block(std::vector<Launch>& list, const char* kernel, unsigned threads, std::initializer_list<uint64_t> args);
  void run(const std::vector<Launch>& list);
  void run_range(const std::vector<Launch>& list, size_t begin, size_t end);
  void plan_forward(int32_t id);
  void plan_backward(int32_t id);
  bool active(int32_t id) const { return id >= 0 && nodes_[static_cast<size_t>(id)].grad_off >= 0; }
  device::Kernel* kernel(const char* name);

  device::Backend& be_;
  ReplayOptions opt_;
  unsigned block_ = 1;
  size_t esize_ = sizeof(double);  // bytes per element of the value/gradient/moment buffers
  std::vector<float> stage_;       // f32 conversion staging
  device::Module* module_ = nullptr;
  std::vector<std::pair<std::string, device::Kernel*>> kernels_;
  std::vector<NodeInfo> nodes_;
  int32_t loss_ = -1;
  device::Buffer vals_, grads_, meta_;
  int64_t grad_elems_ = 0;
  std::vector<Launch> fwd_, bwd_;
  std::vector<size_t> fwd_at_;                      // node id -> first launch in fwd_ (size n + 1)
  std::vector<std::pair<size_t, size_t>> bwd_at_;   // node id -> [begin, end) in bwd_
  uint64_t episode_id_ = 0;  // backend.capture_id() of this program's capture (0: none)
  const DeviceOptimizer* episode_opt_ = nullptr;
};

// The device half of gr::Optimizer (docs/numerics.md), over a Program's parameters. Every registered
// parameter that is backward-active is "touched" on the device; a registered parameter the loss
// does not depend on is skipped (not decayed), as on the tape.
//
// One owner: the Optimizer it is made for. Its configuration (kind, Adam config, clip, registered
// params and L2), its learning rate (set_lr there takes effect at the next step) and its step
// counter t (advanced there by each device step) are read from it, never copied; the moments are
// uploaded at construction, live on the device while it steps, and come back with store_moments().
class DeviceOptimizer {
 public:
  // `owner` must outlive this object. Every registered param must be a param node of the program.
  // track_norm: compute the gradient norm (ctl[4], norm_address()) every step even without clip,
  // with the clip kernel at an infinite max norm (cs stays 1: the same update bits).
  DeviceOptimizer(Program& prog, Optimizer& owner, bool track_norm = false);
  DeviceOptimizer(Program& prog, Optimizer&& owner, bool track_norm = false) = delete;  // the owner must outlive it
  ~DeviceOptimizer();
  DeviceOptimizer(const DeviceOptimizer&) = delete;
  DeviceOptimizer& operator=(const DeviceOptimizer&) = delete;

  // One update from the gradients on the device: prepare() + the device launches.
  void step();
  // The host half of a step: the owner's advance() (Adam: t += 1, lr_t with host pow), then upload
  // [lr, lr_t, cs = 1, maxn] of the owner into the control buffer.
  void prepare();

  Optimizer& owner() { return owner_; }
  size_t count() const { return params_.size(); }
  Var param(size_t i) const { return params_[i].var; }
  // Adam moments of registered parameter i (checkpoints).
  void download_moments(size_t i, std::span<double> m, std::span<double> v);
  void upload_moments(size_t i, std::span<const double> m, std::span<const double> v);
  // The device's moments into the owner (checkpoints, weights files): with its t, the whole state.
  void store_moments();
  // Per-step scalars of the last step, read back from the control buffer.
  double last_clip_scale();
  double last_lr_t() const { return owner_.last_lr_t(); }
  size_t launches_per_step() const { return launches_.size(); }
  // Device address of the last step's gradient norm (a double; 0 until a step ran), when clipping
  // or track_norm: Optimizer::grad_norm's bits for f64 programs.
  uint64_t norm_address() const { return ctl_.handle + 4 * sizeof(double); }
  // The device half of a step only (no prepare()): for episodes captured by lib/fuse.
  void run_launches();

 private:
  friend class Program;
  struct Entry {
    Var var;
    double l2;
    int64_t len, moff;
    bool active;
  };
  Program& prog_;
  Optimizer& owner_;  // config, lr, t and adam_lr_t() (the one lr_t formula): read, never copied
  std::vector<Entry> params_;
  device::Buffer ctl_, m_, v_, tab_;
  std::vector<Program::Launch> launches_;
};

}  // namespace gr::replay
