// replay.cpp — capture of a recorded tape episode into device buffers, running its launches,
// downloads and whole-episode capture (docs/replay.md). The per-op launch plan is in
// replay_plan.cpp, the device optimizer in device_optimizer.cpp.
//
// Memory: one value slab (every node), one gradient slab (backward-active nodes only), one
// metadata slab (broadcast and slice index blocks). Kernel pointers are slab base + offset, so a
// backward's gradient zero-fill is ONE launch over the whole gradient slab.
#include "replay/detail.h"
#include "replay/replay.h"

#include <algorithm>
#include <array>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <set>
#include <string_view>

#include "tensor/diag.h"
#include "tensor/reduce.h"

namespace gr::replay {

using namespace detail;


namespace {

// The planted mismatch (docs/verification.md "GPU first contact"): in a GR_TEST_PLANT_MISMATCH build,
// GRADRUN_TEST_FLIP_BIT=grk_<stem>_fwd (an elementwise forward kernel) makes that kernel flip the lowest
// bit of its output element 0 (kernels/device/gr_prelude.cuh, GRK_TEST_FLIP), so scripts/gpu-check can
// show that a wrong kernel is reported as a failure naming its step. The define changes the module
// text, so the flipping modules have their own cache entries. Other builds ignore the variable.
std::string planted_mismatch() {
#ifdef GR_TEST_PLANT_MISMATCH
  const char* v = std::getenv("GRADRUN_TEST_FLIP_BIT");
  if (!v || !*v) return "";
  const std::string name = v;
  bool known = false;
  for (const OpInfo& info : kOps)
    known = known || (info.elementwise() && name == detail::elementwise_kernel(info.op, -1));
  if (!known)
    throw Error("GRADRUN_TEST_FLIP_BIT=" + name + ": not an elementwise forward kernel (grk_<op>_fwd, e.g. grk_tanh_fwd)");
  diag::warn("GRADRUN_TEST_FLIP_BIT=" + name + ": this test build's kernel " + name +
             " flips one bit of its output (a planted mismatch)");
  return "#define GR_TEST_FLIP_KERNEL \"" + name + "\"\n";
#else
  return "";
#endif
}

}  // namespace

const std::string& kernel_source(DType dtype) {
  static const std::string planted = planted_mismatch();
  static const std::string f64 = planted + detail_kernel_text();
  static const std::string f32 = "#define GR_F32 1\n" + planted + detail_kernel_text();
  return dtype == DType::F32 ? f32 : f64;
}

const std::string& kernel_prelude(DType dtype) {
  static const std::string f32 = "#define GR_F32 1\n" + detail_prelude_text();
  return dtype == DType::F32 ? f32 : detail_prelude_text();
}

// The kernel name prefix, once: the device source names its kernels grk_<...> as identifiers.
constexpr std::string_view kKernelPrefix = GR_KERNEL_STR(grk);

const char* detail::kernel_named(std::string_view what) {
  static std::mutex mu;
  static std::set<std::string, std::less<>> names;  // node-based: the c_str() stays put
  std::string name = std::string(kKernelPrefix) + "_" + std::string(what);
  const std::lock_guard<std::mutex> lock(mu);
  return names.insert(std::move(name)).first->c_str();
}

const char* detail::kernel_of(Op op, std::string_view part) {
  return kernel_named(std::string(op_info(op).stem) + "_" + std::string(part));
}

const char* detail::elementwise_kernel(Op op, int side) {
  const OpInfo& info = op_info(op);
  const bool binary = info.cls == OpClass::Binary;
  if (!info.elementwise() || side < -1 || side > (binary ? 1 : 0))
    throw Error("replay: " + std::string(op_name(op)) + " has no elementwise kernel for side " + std::to_string(side));
  return kernel_of(op, side < 0 ? "fwd" : !binary ? "bwd" : side == 0 ? "bwd_a" : "bwd_b");
}

const std::vector<std::string>& kernel_names() {
  static const std::vector<std::string> names = [] {
    std::vector<std::string> n;
    for (const OpInfo& info : kOps) {  // the elementwise, row and fold ops' kernels, from their rows
      if (info.elementwise())
        for (int side = -1; side < (info.cls == OpClass::Binary ? 2 : 1); ++side) n.push_back(detail::elementwise_kernel(info.op, side));
      if (info.row() || info.fold())
        for (const char* part : {"fwd", "bwd"}) n.push_back(detail::kernel_of(info.op, part));
      if (info.batch())
        for (const char* part : {"fwd", "bwd", "update"}) n.push_back(detail::kernel_of(info.op, part));
      if (info.window())
        for (const char* part : {"fwd", "bwd_a", "bwd_b"})
          if (info.arity == 2 || std::string_view(part) != "bwd_b") n.push_back(detail::kernel_of(info.op, part));
    }
    for (const Op op : {Op::Reshape, Op::Softmax, Op::LogSoftmax, Op::Transpose, Op::Slice, Op::SoftmaxCrossEntropy,
                        Op::CrossEntropy, Op::Dropout, Op::Matmul, Op::Bmm, Op::Concat})
      for (const char* part : {"fwd", "bwd"})
        if (!((op == Op::Matmul || op == Op::Bmm || op == Op::Concat) && std::string_view(part) == "bwd"))
          n.push_back(detail::kernel_of(op, part));
    for (const Op op : {Op::Matmul, Op::Bmm, Op::Concat})
      for (const char* part : {"bwd_a", "bwd_b"}) n.push_back(detail::kernel_of(op, part));
    for (const char* part : {"causal_fwd", "causal_bwd"}) n.push_back(detail::kernel_of(Op::Softmax, part));
    for (const char* part : {"fwd", "bwd_b"}) n.push_back(detail::kernel_of(Op::Embedding, part));  // ids: no gradient
    for (const char* part : {"all_fwd", "all_bwd", "axis_fwd", "axis_bwd"}) n.push_back(detail::kernel_of(Op::Sum, part));
    for (const char* k : {"fill", "clip_scale", "sgd", "sgd_momentum", "adam"}) n.push_back(detail::kernel_named(k));
    return n;
  }();
  return names;
}

// ---- capture -------------------------------------------------------------------------------------
Program::Program(device::Backend& backend, const Tape& tape, Var loss, ReplayOptions options)
    : be_(backend), opt_(options) {
  if (!tape.ok()) throw Error("replay: cannot capture a poisoned tape: " + tape.error());
  if (loss.id < 0 || loss.id >= tape.size())
    throw Error("replay: the loss (id " + std::to_string(loss.id) + ") is not a node of the tape (size " +
                std::to_string(tape.size()) + ")");
  esize_ = opt_.dtype == DType::F32 ? sizeof(float) : sizeof(double);
  block_ = opt_.block ? opt_.block : be_.capabilities().default_block;
  if (block_ > 1024) throw Error("replay: block size " + std::to_string(block_) + " exceeds 1024");
  if (opt_.max_grid == 0) opt_.max_grid = 1;
  loss_ = loss.id;
  const int32_t n = tape.size();
  nodes_.resize(static_cast<size_t>(n));

  // Backward-active: requires_grad and reached from the loss through requires_grad nodes — exactly
  // the nodes the tape's reverse walk touches.
  std::vector<char> active(static_cast<size_t>(n), 0);
  if (tape.node(loss).requires_grad) active[static_cast<size_t>(loss.id)] = 1;
  for (int32_t id = loss.id; id >= 0; --id) {
    if (!active[static_cast<size_t>(id)]) continue;
    const Node& nd = tape.node(id);
    for (int32_t in : {nd.a, nd.b})
      if (in >= 0 && tape.node(in).requires_grad) active[static_cast<size_t>(in)] = 1;
  }

  int64_t vtotal = 0;
  for (int32_t id = 0; id < n; ++id) {
    const Node& nd = tape.node(id);
    NodeInfo& ni = nodes_[static_cast<size_t>(id)];
    ni.op = nd.op;
    ni.shape = nd.shape;
    ni.numel = nd.numel();
    ni.a = nd.a;
    ni.b = nd.b;
    ni.c = nd.c;
    ni.axis = nd.axis;
    ni.causal = nd.causal;
    ni.scalar = nd.scalar;
    ni.momentum = nd.momentum;
    if (op_info(nd.op).batch()) nodes_[static_cast<size_t>(nd.b)].state = nodes_[static_cast<size_t>(nd.c)].state = true;
    ni.val_off = vtotal;
    vtotal += ni.numel;
    if (active[static_cast<size_t>(id)]) {
      ni.grad_off = grad_elems_;
      grad_elems_ += ni.numel;
    }
  }

  // Metadata blocks (binary broadcast maps, slice windows), one offset per node that needs one.
  std::vector<int64_t> meta;
  for (int32_t id = 0; id < n; ++id) {
    const Node& nd = tape.node(id);
    if (op_info(nd.op).cls == OpClass::Binary) {
      {
        nodes_[static_cast<size_t>(id)].meta_off = static_cast<int64_t>(meta.size());
        int64_t blk[kBinMeta] = {};
        const Shape &sa = tape.node(nd.a).shape, &sb = tape.node(nd.b).shape;
        if (!(sa == nd.shape && sb == nd.shape)) {
          const int r = nd.shape.rank();
          blk[0] = r;
          int64_t stride = 1;
          for (int d = r - 1; d >= 0; --d) {
            blk[1 + d] = nd.shape[d];
            blk[9 + d] = stride;
            stride *= nd.shape[d];
          }
          aligned(sa, r, blk + 17);
          aligned(sb, r, blk + 25);
        }
        meta.insert(meta.end(), blk, blk + kBinMeta);
      }
    } else if (op_info(nd.op).window()) {  // the geometry, gr_ops_window.h's gr_window_load order
      nodes_[static_cast<size_t>(id)].meta_off = static_cast<int64_t>(meta.size());
      const gr_window& w = nd.win;
      for (const long long v : {w.n, w.c, w.h, w.w, w.f, w.oh, w.ow, w.kh, w.kw, w.sh, w.sw, w.pt, w.pl, w.pb, w.pr, w.dh, w.dw,
                                w.groups})
        meta.push_back(static_cast<int64_t>(v));
      static_assert(kGrWindowMeta == 18, "the window metadata block");
    } else if (nd.op == Op::Slice) {
      {
        nodes_[static_cast<size_t>(id)].meta_off = static_cast<int64_t>(meta.size());
        int64_t blk[kSliceMeta] = {};
        const Shape& in = tape.node(nd.a).shape;
        const int r = in.rank();
        blk[0] = r;
        int64_t stride = 1;
        for (int d = r - 1; d >= 0; --d) {
          blk[1 + d] = nd.shape[d];
          blk[9 + d] = stride;
          blk[17 + d] = nd.starts[d];
          stride *= in[d];
        }
        meta.insert(meta.end(), blk, blk + kSliceMeta);
      }
    }
  }
  // The dropout key (seed, step, training) rides at the end of the slab: set_dropout_key rewrites it
  // between episodes, so a captured episode's masks follow the step.
  key_off_ = static_cast<int64_t>(meta.size());
  meta.push_back(static_cast<int64_t>(tape.dropout_key().seed));
  meta.push_back(static_cast<int64_t>(tape.dropout_key().step));
  meta.push_back(tape.dropout_key().training ? 1 : 0);

  module_ = be_.compile(kernel_source(opt_.dtype), opt_.dtype == DType::F32 ? "gr_replay_f32" : "gr_replay_f64");
  vals_ = be_.alloc(static_cast<size_t>(std::max<int64_t>(vtotal, 1)) * esize_);
  grads_ = be_.alloc(static_cast<size_t>(std::max<int64_t>(grad_elems_, 1)) * esize_);
  meta_ = be_.alloc(meta.size() * sizeof(int64_t));
  be_.upload(meta_, meta.data(), meta.size() * sizeof(int64_t));

  // Leaves with host values go up now; lazy and dropped consts keep a zeroed buffer.
  for (int32_t id = 0; id < n; ++id) {
    const Node& nd = tape.node(id);
    if ((nd.op == Op::Param || nd.op == Op::Const) && nd.val)
      upload_real(vals_, nd.val, nd.numel(), nodes_[static_cast<size_t>(id)].val_off);
  }

  // The launch plan.
  fwd_at_.assign(static_cast<size_t>(n) + 1, 0);
  bwd_at_.assign(static_cast<size_t>(n), {0, 0});
  for (int32_t id = 0; id < n; ++id) {
    fwd_at_[static_cast<size_t>(id)] = fwd_.size();
    plan_forward(id);
  }
  fwd_at_[static_cast<size_t>(n)] = fwd_.size();
  if (grad_elems_ > 0) add(bwd_, kernel_named("fill"), grad_elems_, {grads_.handle, D(0.0), I(grad_elems_)});
  if (active[static_cast<size_t>(loss_)]) {
    // seed: slot = 0 + 1 (gr_accumulate(0, 1) is exactly 1)
    add(bwd_, kernel_named("fill"), nodes_[static_cast<size_t>(loss_)].numel,
        {gptr(loss_), D(1.0), I(nodes_[static_cast<size_t>(loss_)].numel)});
    for (int32_t id = loss_; id >= 0; --id)
      if (active[static_cast<size_t>(id)]) {
        const size_t b0 = bwd_.size();
        plan_backward(id);
        bwd_at_[static_cast<size_t>(id)] = {b0, bwd_.size()};
      }
  }
}

Program::~Program() {
  // The episode launches into the buffers freed below: it must not outlive them.
  if (episode_id_ != 0 && be_.capture_id() == episode_id_) be_.clear_capture();
  try {
    be_.free(vals_);
    be_.free(grads_);
    be_.free(meta_);
  } catch (...) {  // during a capture, or a backend already torn down: it frees its own at exit
  }
}

device::Kernel* Program::kernel(const char* name) {
  for (auto& [k, v] : kernels_)
    if (k == name) return v;
  device::Kernel* k = be_.kernel(module_, name);
  kernels_.emplace_back(name, k);
  return k;
}

uint64_t Program::vptr(int32_t id) const {
  return vals_.handle + static_cast<uint64_t>(nodes_[static_cast<size_t>(id)].val_off) * esize_;
}
uint64_t Program::gptr(int32_t id) const {
  const int64_t off = id >= 0 ? nodes_[static_cast<size_t>(id)].grad_off : -1;
  return off < 0 ? 0 : grads_.handle + static_cast<uint64_t>(off) * esize_;
}

// f64: straight copies. f32: converted on the host (static_cast rounds to nearest, like
// __double2float_rn; float -> double is exact).
void Program::upload_real(device::Buffer dst, const double* src, int64_t n, int64_t elem_off) {
  if (esize_ == sizeof(double)) {
    be_.upload(dst, src, static_cast<size_t>(n) * sizeof(double), static_cast<size_t>(elem_off) * sizeof(double));
    return;
  }
  stage_.resize(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) stage_[static_cast<size_t>(i)] = static_cast<float>(src[i]);
  be_.upload(dst, stage_.data(), static_cast<size_t>(n) * sizeof(float), static_cast<size_t>(elem_off) * sizeof(float));
}

void Program::download_real(double* dst, device::Buffer src, int64_t n, int64_t elem_off) {
  if (esize_ == sizeof(double)) {
    be_.download(dst, src, static_cast<size_t>(n) * sizeof(double), static_cast<size_t>(elem_off) * sizeof(double));
    return;
  }
  stage_.resize(static_cast<size_t>(n));
  be_.download(stage_.data(), src, static_cast<size_t>(n) * sizeof(float), static_cast<size_t>(elem_off) * sizeof(float));
  for (int64_t i = 0; i < n; ++i) dst[i] = static_cast<double>(stage_[static_cast<size_t>(i)]);
}
void Program::set_dropout_key(const DropoutKey& key) {
  const int64_t k[3] = {static_cast<int64_t>(key.seed), static_cast<int64_t>(key.step), key.training ? 1 : 0};
  be_.upload(meta_, k, sizeof k, static_cast<size_t>(key_off_) * sizeof(int64_t));
}

uint64_t Program::mptr(int64_t off) const { return meta_.handle + static_cast<uint64_t>(off) * sizeof(int64_t); }

void Program::add(std::vector<Launch>& list, const char* name, int64_t work, std::initializer_list<uint64_t> args) {
  Launch l;
  l.kernel = kernel(name);
  l.block = device::fit_block(be_, l.kernel, block_);  // the kernel's own limit may be lower (CUDA registers)
  const int64_t blocks = (std::max<int64_t>(work, 1) + l.block - 1) / l.block;
  l.grid = static_cast<unsigned>(std::min<int64_t>(blocks, opt_.max_grid));
  l.nargs = static_cast<int>(args.size());
  std::copy(args.begin(), args.end(), l.args);
  list.push_back(l);
}

void Program::add_serial(std::vector<Launch>& list, const char* name, std::initializer_list<uint64_t> args) {
  Launch l;
  l.kernel = kernel(name);
  l.nargs = static_cast<int>(args.size());
  std::copy(args.begin(), args.end(), l.args);
  list.push_back(l);
}

void Program::add_one_block(std::vector<Launch>& list, const char* name, unsigned threads,
                            std::initializer_list<uint64_t> args) {
  Launch l;
  l.kernel = kernel(name);
  l.block = device::fit_block(be_, l.kernel, std::max(1u, std::min(threads, block_)));
  l.nargs = static_cast<int>(args.size());
  std::copy(args.begin(), args.end(), l.args);
  list.push_back(l);
}

void Program::run(const std::vector<Launch>& list) { run_range(list, 0, list.size()); }

void Program::run_range(const std::vector<Launch>& list, size_t begin, size_t end) {
  for (size_t li = begin; li < end; ++li) {
    const Launch& l = list[li];
    void* ptrs[16];
    for (int i = 0; i < l.nargs; ++i) ptrs[i] = const_cast<uint64_t*>(&l.args[i]);
    be_.launch(l.kernel, l.grid, l.block, ptrs);
  }
}

// ---- running -----------------------------------------------------------------------------------------
void Program::check_var(Var v, const char* what) const {
  if (v.id < 0 || v.id >= size())
    throw Error(std::string("replay: ") + what + ": variable id " + std::to_string(v.id) +
                " is not a node of the captured program (size " + std::to_string(size()) + ")");
}

bool Program::backward_active(Var v) const {
  check_var(v, "backward_active");
  return active(v.id);
}

void Program::set_input(Var leaf, std::span<const double> values) {
  check_var(leaf, "set_input");
  const NodeInfo& n = nodes_[static_cast<size_t>(leaf.id)];
  if (n.op != Op::Param && n.op != Op::Const)
    throw Error("replay: set_input: " + node_label(leaf.id, n.op, n.shape) +
                " is not a param or const (its value is computed on the device)");
  if (static_cast<int64_t>(values.size()) != n.numel)
    throw Error("replay: set_input: " + node_label(leaf.id, n.op, n.shape) + " needs " + std::to_string(n.numel) +
                " values, got " + std::to_string(values.size()));
  upload_real(vals_, values.data(), n.numel, n.val_off);
}

void Program::forward() { run(fwd_); }
void Program::backward() { run(bwd_); }

double Program::loss() {
  double v = 0.0;
  download_real(&v, vals_, 1, nodes_[static_cast<size_t>(loss_)].val_off);
  return v;
}

void Program::value(Var v, std::span<double> out) {
  check_var(v, "value");
  const NodeInfo& n = nodes_[static_cast<size_t>(v.id)];
  if (static_cast<int64_t>(out.size()) != n.numel)
    throw Error("replay: value: " + node_label(v.id, n.op, n.shape) + " has " + std::to_string(n.numel) +
                " elements, the output holds " + std::to_string(out.size()));
  download_real(out.data(), vals_, n.numel, n.val_off);
}

void Program::grad(Var v, std::span<double> out) {
  check_var(v, "grad");
  const NodeInfo& n = nodes_[static_cast<size_t>(v.id)];
  if (static_cast<int64_t>(out.size()) != n.numel)
    throw Error("replay: grad: " + node_label(v.id, n.op, n.shape) + " has " + std::to_string(n.numel) +
                " elements, the output holds " + std::to_string(out.size()));
  if (n.grad_off < 0) {
    std::fill(out.begin(), out.end(), 0.0);
    return;
  }
  download_real(out.data(), grads_, n.numel, n.grad_off);
}

void Program::sync_params_to(Tape& tape) {
  for (int32_t id = 0; id < size(); ++id) {
    const NodeInfo& n = nodes_[static_cast<size_t>(id)];
    if (n.op != Op::Param) continue;
    if (id >= tape.size() || tape.node(id).op != Op::Param || tape.node(id).numel() != n.numel)
      throw Error("replay: sync_params_to: the tape does not hold " + node_label(id, n.op, n.shape) +
                  " (a different node structure)");
    // A frozen parameter (no requires_grad) never changes on the device: the tape keeps its exact
    // bits (an f32 program would otherwise round them on the way back). Running statistics (state)
    // change every training step: they come back (an f32 program's are floats already).
    if (!tape.node(id).requires_grad && !n.state) continue;
    const std::span<double> dst = tape.param_value(Var{id});
    download_real(dst.data(), vals_, n.numel, n.val_off);
  }
}

void Program::capture_episode(DeviceOptimizer* opt) {
  if (opt && &opt->prog_ != this) throw Error("replay: capture_episode: the optimizer belongs to another program");
  episode_id_ = 0;
  be_.begin_capture();
  try {
    run(fwd_);
    run(bwd_);
    if (opt) run(opt->launches_);
  } catch (...) {
    // Not end_capture: a failed launch invalidates a CUDA capture, and ending it would throw
    // CAPTURE_INVALIDATED in place of the error that says what went wrong.
    be_.abort_capture();
    throw;
  }
  be_.end_capture();
  episode_id_ = be_.capture_id();
  episode_opt_ = opt;
}

void Program::run_episode(DeviceOptimizer* opt) {
  if (episode_id_ == 0 || !be_.has_capture())
    throw Error("replay: run_episode: no captured episode (call capture_episode first)");
  if (be_.capture_id() != episode_id_)
    throw Error("replay: run_episode: the backend's episode was captured by another program since (call "
                "capture_episode again)");
  if (opt != episode_opt_)
    throw Error("replay: run_episode: the episode was captured with a different optimizer (or none)");
  if (opt) opt->prepare();
  be_.replay();
}

// ---- fusion hooks ----------------------------------------------------------------------------------
Program::NodeView Program::node_view(int32_t id) const {
  check_var(Var{id}, "node_view");
  const NodeInfo& n = nodes_[static_cast<size_t>(id)];
  NodeView v;
  v.op = n.op;
  v.shape = n.shape;
  v.numel = n.numel;
  v.a = n.a;
  v.b = n.b;
  v.axis = n.axis;
  v.causal = n.causal;
  v.scalar = n.scalar;
  v.active = n.grad_off >= 0;
  return v;
}

void Program::run_node_forward(int32_t id) {
  check_var(Var{id}, "run_node_forward");
  const size_t b = fwd_at_[static_cast<size_t>(id)], e = fwd_at_[static_cast<size_t>(id) + 1];
  run_range(fwd_, b, e);
}

void Program::run_node_backward(int32_t id) {
  check_var(Var{id}, "run_node_backward");
  const auto [b, e] = bwd_at_[static_cast<size_t>(id)];
  run_range(bwd_, b, e);
}

size_t Program::node_forward_launches(int32_t id) const {
  check_var(Var{id}, "node_forward_launches");
  return fwd_at_[static_cast<size_t>(id) + 1] - fwd_at_[static_cast<size_t>(id)];
}

size_t Program::node_backward_launches(int32_t id) const {
  check_var(Var{id}, "node_backward_launches");
  return bwd_at_[static_cast<size_t>(id)].second - bwd_at_[static_cast<size_t>(id)].first;
}

}  // namespace gr::replay

namespace gr::replay {
void Episode::set_dropout_key(const DropoutKey& key) { program().set_dropout_key(key); }
}  // namespace gr::replay
