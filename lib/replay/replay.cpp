// replay.cpp — capture of a recorded tape episode, the per-node launch plan (forward in tape order,
// backward in descending id), the device optimizer and whole-episode capture (docs/replay.md).
//
// Memory: one value slab (every node), one gradient slab (backward-active nodes only), one
// metadata slab (broadcast and slice index blocks). Kernel pointers are slab base + offset, so a
// backward's gradient zero-fill is ONE launch over the whole gradient slab.
#include "replay/replay.h"

#include <algorithm>
#include <bit>
#include <cstring>

#include "tensor/reduce.h"

namespace gr::replay {

namespace {

uint64_t D(double d) { return std::bit_cast<uint64_t>(d); }
uint64_t I(int64_t v) { return static_cast<uint64_t>(v); }

std::string node_label(int32_t id, Op op, const Shape& shape) {
  return "node " + std::to_string(id) + " (" + std::string(op_name(op)) + " " + shape.str() + ")";
}

// Row-major strides of `in` aligned into the last dims of an r-dim output; 0 where `in` is
// missing or has size 1 (stretched).
void aligned(const Shape& in, int r, int64_t* out) {
  const int off = r - in.rank();
  int64_t stride = 1;
  for (int d = r - 1; d >= 0; --d) {
    const int k = d - off;
    if (k < 0) {
      out[d] = 0;
      continue;
    }
    out[d] = in[k] == 1 ? 0 : stride;
    stride *= in[k];
  }
}

constexpr int kBinMeta = 33;    // [r, od[8], ost[8], ast[8], bst[8]]
constexpr int kSliceMeta = 25;  // [r, od[8], ist[8], starts[8]]
static_assert(kMaxDims == 8, "the kernels' metadata blocks hold 8 dims");

}  // namespace

const std::string& kernel_source(DType dtype) {
  static const std::string f32 = "#define GR_F32 1\n" + detail_kernel_text();
  return dtype == DType::F32 ? f32 : detail_kernel_text();
}

const std::vector<std::string>& kernel_names() {
  static const std::vector<std::string> names = [] {
    std::vector<std::string> n;
    for (const char* b : {"add", "sub", "mul", "div"})
      for (const char* s : {"_fwd", "_bwd_a", "_bwd_b"}) n.push_back(std::string("grk_") + b + s);
    for (const char* u : {"neg", "adds", "muls", "relu", "sigmoid", "tanh", "exp", "log", "sqrt", "reshape",
                          "softmax", "log_softmax", "transpose", "slice", "sce"})
      for (const char* s : {"_fwd", "_bwd"}) n.push_back(std::string("grk_") + u + s);
    for (const char* k : {"grk_sum_all_fwd", "grk_sum_all_bwd", "grk_sum_axis_fwd", "grk_sum_axis_bwd",
                          "grk_matmul_fwd", "grk_matmul_bwd_a", "grk_matmul_bwd_b", "grk_bmm_fwd", "grk_bmm_bwd_a",
                          "grk_bmm_bwd_b", "grk_concat_fwd", "grk_concat_bwd_a", "grk_concat_bwd_b", "grk_fill",
                          "grk_clip_scale", "grk_sgd", "grk_adam"})
      n.push_back(k);
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
  block_ = opt_.block ? opt_.block : (be_.name() == "cuda" ? 128u : 1u);
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
    ni.axis = nd.axis;
    ni.scalar = nd.scalar;
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
    switch (nd.op) {
      case Op::Add:
      case Op::Sub:
      case Op::Mul:
      case Op::Div: {
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
        break;
      }
      case Op::Slice: {
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
        break;
      }
      default: break;
    }
  }
  if (meta.empty()) meta.push_back(0);

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
  if (grad_elems_ > 0) add(bwd_, "grk_fill", grad_elems_, {grads_.handle, D(0.0), I(grad_elems_)});
  if (active[static_cast<size_t>(loss_)]) {
    // seed: slot = 0 + 1 (gr_accumulate(0, 1) is exactly 1)
    add(bwd_, "grk_fill", nodes_[static_cast<size_t>(loss_)].numel,
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
uint64_t Program::mptr(int64_t off) const { return meta_.handle + static_cast<uint64_t>(off) * sizeof(int64_t); }

void Program::add(std::vector<Launch>& list, const char* name, int64_t work, std::initializer_list<uint64_t> args) {
  Launch l;
  l.kernel = kernel(name);
  l.block = block_;
  const int64_t blocks = (std::max<int64_t>(work, 1) + block_ - 1) / block_;
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

void Program::run(const std::vector<Launch>& list) { run_range(list, 0, list.size()); }

void Program::run_range(const std::vector<Launch>& list, size_t begin, size_t end) {
  for (size_t li = begin; li < end; ++li) {
    const Launch& l = list[li];
    void* ptrs[16];
    for (int i = 0; i < l.nargs; ++i) ptrs[i] = const_cast<uint64_t*>(&l.args[i]);
    be_.launch(l.kernel, l.grid, l.block, ptrs);
  }
}

// ---- the per-op plan ------------------------------------------------------------------------------
namespace {
const char* bin_name(Op op, int which) {  // which: 0 fwd, 1 bwd_a, 2 bwd_b
  static const char* const t[4][3] = {{"grk_add_fwd", "grk_add_bwd_a", "grk_add_bwd_b"},
                                      {"grk_sub_fwd", "grk_sub_bwd_a", "grk_sub_bwd_b"},
                                      {"grk_mul_fwd", "grk_mul_bwd_a", "grk_mul_bwd_b"},
                                      {"grk_div_fwd", "grk_div_bwd_a", "grk_div_bwd_b"}};
  const int i = op == Op::Add ? 0 : op == Op::Sub ? 1 : op == Op::Mul ? 2 : 3;
  return t[i][which];
}
}  // namespace

void Program::plan_forward(int32_t id) {
  const NodeInfo& n = nodes_[static_cast<size_t>(id)];
  const uint64_t y = vptr(id);
  switch (n.op) {
    case Op::Param:
    case Op::Const: return;  // data: nothing to compute
    case Op::Add:
    case Op::Sub:
    case Op::Mul:
    case Op::Div:
      return add(fwd_, bin_name(n.op, 0), n.numel, {vptr(n.a), vptr(n.b), y, mptr(n.meta_off), I(n.numel)});
    case Op::Neg: return add(fwd_, "grk_neg_fwd", n.numel, {vptr(n.a), y, D(n.scalar), I(n.numel)});
    case Op::AddScalar: return add(fwd_, "grk_adds_fwd", n.numel, {vptr(n.a), y, D(n.scalar), I(n.numel)});
    case Op::MulScalar: return add(fwd_, "grk_muls_fwd", n.numel, {vptr(n.a), y, D(n.scalar), I(n.numel)});
    case Op::Relu: return add(fwd_, "grk_relu_fwd", n.numel, {vptr(n.a), y, D(n.scalar), I(n.numel)});
    case Op::Sigmoid: return add(fwd_, "grk_sigmoid_fwd", n.numel, {vptr(n.a), y, D(n.scalar), I(n.numel)});
    case Op::Tanh: return add(fwd_, "grk_tanh_fwd", n.numel, {vptr(n.a), y, D(n.scalar), I(n.numel)});
    case Op::Exp: return add(fwd_, "grk_exp_fwd", n.numel, {vptr(n.a), y, D(n.scalar), I(n.numel)});
    case Op::Log: return add(fwd_, "grk_log_fwd", n.numel, {vptr(n.a), y, D(n.scalar), I(n.numel)});
    case Op::Sqrt: return add(fwd_, "grk_sqrt_fwd", n.numel, {vptr(n.a), y, D(n.scalar), I(n.numel)});
    case Op::Reshape: return add(fwd_, "grk_reshape_fwd", n.numel, {vptr(n.a), y, D(0.0), I(n.numel)});
    case Op::Sum:
    case Op::Mean: {
      const NodeInfo& x = nodes_[static_cast<size_t>(n.a)];
      const uint64_t mean = n.op == Op::Mean ? 1 : 0;
      if (n.axis == kAllAxes) return add_serial(fwd_, "grk_sum_all_fwd", {vptr(n.a), y, I(x.numel), mean});
      const AxisLanes l = axis_lanes(x.shape, n.axis);
      return add(fwd_, "grk_sum_axis_fwd", l.outer * l.inner, {vptr(n.a), y, I(l.outer), I(l.len), I(l.inner), mean});
    }
    case Op::Matmul: {
      const Shape &sa = nodes_[static_cast<size_t>(n.a)].shape, &sb = nodes_[static_cast<size_t>(n.b)].shape;
      return add(fwd_, "grk_matmul_fwd", n.numel, {vptr(n.a), vptr(n.b), y, I(sa[0]), I(sa[1]), I(sb[1])});
    }
    case Op::Bmm: {
      const Shape &sa = nodes_[static_cast<size_t>(n.a)].shape, &sb = nodes_[static_cast<size_t>(n.b)].shape;
      const int64_t M = sa[1], K = sa[2], N = sb[2];
      return add(fwd_, "grk_bmm_fwd", n.numel,
                 {vptr(n.a), vptr(n.b), y, I(n.shape[0]), I(M), I(K), I(N), I(sa[0] == 1 ? 0 : M * K),
                  I(sb[0] == 1 ? 0 : K * N)});
    }
    case Op::Transpose: {
      const Shape& s = nodes_[static_cast<size_t>(n.a)].shape;
      const int64_t R = s[s.rank() - 2], C = s[s.rank() - 1];
      return add(fwd_, "grk_transpose_fwd", n.numel, {vptr(n.a), y, I(s.numel() / (R * C)), I(R), I(C)});
    }
    case Op::Slice: return add(fwd_, "grk_slice_fwd", n.numel, {vptr(n.a), y, mptr(n.meta_off), I(n.numel)});
    case Op::Concat: {
      const AxisLanes la = axis_lanes(nodes_[static_cast<size_t>(n.a)].shape, n.axis),
                      lb = axis_lanes(nodes_[static_cast<size_t>(n.b)].shape, n.axis);
      return add(fwd_, "grk_concat_fwd", n.numel,
                 {vptr(n.a), vptr(n.b), y, I(la.outer), I(la.len * la.inner), I(lb.len * lb.inner)});
    }
    case Op::Softmax:
    case Op::LogSoftmax: {
      const AxisLanes l = axis_lanes(n.shape, n.axis);
      return add(fwd_, n.op == Op::Softmax ? "grk_softmax_fwd" : "grk_log_softmax_fwd", l.outer * l.inner,
                 {vptr(n.a), y, I(l.outer), I(l.len), I(l.inner)});
    }
    case Op::SoftmaxCrossEntropy: {
      const Shape& sx = nodes_[static_cast<size_t>(n.a)].shape;
      return add_serial(fwd_, "grk_sce_fwd", {vptr(n.a), vptr(n.b), y, I(sx[0]), I(sx[1])});
    }
  }
}

void Program::plan_backward(int32_t id) {
  const NodeInfo& n = nodes_[static_cast<size_t>(id)];
  const uint64_t g = gptr(id), y = vptr(id);
  const auto unary = [&](const char* name) {
    if (active(n.a)) add(bwd_, name, n.numel, {g, vptr(n.a), y, gptr(n.a), D(n.scalar), I(n.numel)});
  };
  switch (n.op) {
    case Op::Param:
    case Op::Const: return;
    case Op::Add:
    case Op::Sub:
    case Op::Mul:
    case Op::Div:  // the whole a-side walk, then the whole b-side walk (x∘x: a's then b's per slot)
      if (active(n.a))
        add(bwd_, bin_name(n.op, 1), nodes_[static_cast<size_t>(n.a)].numel,
            {g, vptr(n.a), vptr(n.b), y, gptr(n.a), mptr(n.meta_off), I(nodes_[static_cast<size_t>(n.a)].numel)});
      if (active(n.b))
        add(bwd_, bin_name(n.op, 2), nodes_[static_cast<size_t>(n.b)].numel,
            {g, vptr(n.a), vptr(n.b), y, gptr(n.b), mptr(n.meta_off), I(nodes_[static_cast<size_t>(n.b)].numel)});
      return;
    case Op::Neg: return unary("grk_neg_bwd");
    case Op::AddScalar: return unary("grk_adds_bwd");
    case Op::MulScalar: return unary("grk_muls_bwd");
    case Op::Relu: return unary("grk_relu_bwd");
    case Op::Sigmoid: return unary("grk_sigmoid_bwd");
    case Op::Tanh: return unary("grk_tanh_bwd");
    case Op::Exp: return unary("grk_exp_bwd");
    case Op::Log: return unary("grk_log_bwd");
    case Op::Sqrt: return unary("grk_sqrt_bwd");
    case Op::Reshape: return unary("grk_reshape_bwd");
    case Op::Sum:
    case Op::Mean: {
      if (!active(n.a)) return;
      const NodeInfo& x = nodes_[static_cast<size_t>(n.a)];
      const uint64_t mean = n.op == Op::Mean ? 1 : 0;
      if (n.axis == kAllAxes) return add(bwd_, "grk_sum_all_bwd", x.numel, {g, gptr(n.a), I(x.numel), mean});
      const AxisLanes l = axis_lanes(x.shape, n.axis);
      return add(bwd_, "grk_sum_axis_bwd", x.numel, {g, gptr(n.a), I(l.outer), I(l.len), I(l.inner), mean});
    }
    case Op::Matmul: {  // dA first, then dB (A·A: dA's contribution lands first), as backward.cpp
      const Shape &sa = nodes_[static_cast<size_t>(n.a)].shape, &sb = nodes_[static_cast<size_t>(n.b)].shape;
      const int64_t M = sa[0], K = sa[1], N = sb[1];
      if (active(n.a)) add(bwd_, "grk_matmul_bwd_a", M * K, {g, vptr(n.b), gptr(n.a), I(M), I(K), I(N)});
      if (active(n.b)) add(bwd_, "grk_matmul_bwd_b", K * N, {vptr(n.a), g, gptr(n.b), I(M), I(K), I(N)});
      return;
    }
    case Op::Bmm: {
      const Shape &sa = nodes_[static_cast<size_t>(n.a)].shape, &sb = nodes_[static_cast<size_t>(n.b)].shape;
      const int64_t B = n.shape[0], M = sa[1], K = sa[2], N = sb[2];
      const int64_t stra = sa[0] == 1 ? 0 : M * K, strb = sb[0] == 1 ? 0 : K * N;
      if (active(n.a))
        add(bwd_, "grk_bmm_bwd_a", sa.numel(), {g, vptr(n.b), gptr(n.a), I(B), I(M), I(K), I(N), I(stra), I(strb)});
      if (active(n.b))
        add(bwd_, "grk_bmm_bwd_b", sb.numel(), {vptr(n.a), g, gptr(n.b), I(B), I(M), I(K), I(N), I(stra), I(strb)});
      return;
    }
    case Op::Transpose: {
      if (!active(n.a)) return;
      const Shape& s = nodes_[static_cast<size_t>(n.a)].shape;
      const int64_t R = s[s.rank() - 2], C = s[s.rank() - 1];
      return add(bwd_, "grk_transpose_bwd", n.numel, {g, gptr(n.a), I(s.numel() / (R * C)), I(R), I(C)});
    }
    case Op::Slice:
      if (active(n.a)) add(bwd_, "grk_slice_bwd", n.numel, {g, gptr(n.a), mptr(n.meta_off), I(n.numel)});
      return;
    case Op::Concat: {
      const AxisLanes la = axis_lanes(nodes_[static_cast<size_t>(n.a)].shape, n.axis),
                      lb = axis_lanes(nodes_[static_cast<size_t>(n.b)].shape, n.axis);
      const int64_t ca = la.len * la.inner, cb = lb.len * lb.inner;
      if (active(n.a)) add(bwd_, "grk_concat_bwd_a", la.outer * ca, {g, gptr(n.a), I(la.outer), I(ca), I(cb)});
      if (active(n.b)) add(bwd_, "grk_concat_bwd_b", la.outer * cb, {g, gptr(n.b), I(la.outer), I(ca), I(cb)});
      return;
    }
    case Op::Softmax:
    case Op::LogSoftmax: {
      if (!active(n.a)) return;
      const AxisLanes l = axis_lanes(n.shape, n.axis);
      return add(bwd_, n.op == Op::Softmax ? "grk_softmax_bwd" : "grk_log_softmax_bwd", l.outer * l.inner,
                 {g, y, gptr(n.a), I(l.outer), I(l.len), I(l.inner)});
    }
    case Op::SoftmaxCrossEntropy: {
      if (!active(n.a) && !active(n.b)) return;
      const Shape& sx = nodes_[static_cast<size_t>(n.a)].shape;
      return add(bwd_, "grk_sce_bwd", sx[0],
                 {g, vptr(n.a), vptr(n.b), gptr(n.a), gptr(n.b), I(sx[0]), I(sx[1])});
    }
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
    const std::span<double> dst = tape.param_value(Var{id});
    download_real(dst.data(), vals_, n.numel, n.val_off);
  }
}

void Program::capture_episode(DeviceOptimizer* opt) {
  if (opt && &opt->prog_ != this) throw Error("replay: capture_episode: the optimizer belongs to another program");
  episode_captured_ = false;
  be_.begin_capture();
  try {
    run(fwd_);
    run(bwd_);
    if (opt) run(opt->launches_);
  } catch (...) {
    be_.end_capture();
    throw;
  }
  be_.end_capture();
  episode_captured_ = true;
  episode_opt_ = opt;
}

void Program::run_episode(DeviceOptimizer* opt) {
  if (!episode_captured_ || !be_.has_capture())
    throw Error("replay: run_episode: no captured episode (call capture_episode first)");
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

// ---- the device optimizer ----------------------------------------------------------------------------
DeviceOptimizer::DeviceOptimizer(Program& prog, const Optimizer& config) : prog_(prog), cpu_(config), t_(config.t()) {
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
  ctl_ = be.alloc(8 * sizeof(double));
  const bool adam = cpu_.kind() == OptimizerKind::Adam;
  if (adam) {
    m_ = be.alloc(static_cast<size_t>(std::max<int64_t>(total, 1)) * prog.esize_);
    v_ = be.alloc(static_cast<size_t>(std::max<int64_t>(total, 1)) * prog.esize_);
    Optimizer& src = const_cast<Optimizer&>(config);  // m()/v() are read-only here
    for (size_t i = 0; i < params_.size(); ++i) upload_moments(i, src.m(i), src.v(i));
  }
  const int64_t active_count = static_cast<int64_t>(tab.size() / 2);
  if (tab.empty()) tab.push_back(0);
  tab_ = be.alloc(tab.size() * sizeof(int64_t));
  be.upload(tab_, tab.data(), tab.size() * sizeof(int64_t));

  // The device half of a step, fixed at construction (capturable).
  if (cpu_.clip() > 0.0 && active_count > 0)
    prog.add_serial(launches_, "grk_clip_scale", {prog.grads_.handle, tab_.handle, I(active_count), ctl_.handle});
  const AdamConfig& ac = cpu_.adam_config();
  const double b1 = ac.beta1, b2 = ac.beta2;
  for (const Entry& e : params_) {
    if (!e.active) continue;  // the loss does not depend on it: skipped, not decayed
    const uint64_t w = prog.vptr(e.var.id), g = prog.gptr(e.var.id);
    if (adam)
      prog.add(launches_, "grk_adam", e.len,
               {w, g, m_.handle + static_cast<uint64_t>(e.moff) * prog.esize_, v_.handle + static_cast<uint64_t>(e.moff) * prog.esize_,
                ctl_.handle, D(e.l2), D(b1), D(b2), D(1.0 - b1), D(1.0 - b2), D(ac.eps), I(e.len)});
    else
      prog.add(launches_, "grk_sgd", e.len, {w, g, ctl_.handle, D(e.l2), I(e.len)});
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
  if (cpu_.kind() == OptimizerKind::Adam) {
    ++t_;
    last_lr_t_ = cpu_.adam_lr_t(t_);
  }
  const double ctl[5] = {cpu_.lr(), last_lr_t_, 1.0, cpu_.clip(), 0.0};
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
  if (!m_.bytes) {  // SGD keeps no moments
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

void DeviceOptimizer::store_state_to(Optimizer& cpu) {
  if (cpu.count() != params_.size()) throw Error("replay: optimizer: store_state_to needs the same registrations");
  for (size_t i = 0; i < params_.size(); ++i)
    if (cpu.param(i) != params_[i].var)
      throw Error("replay: optimizer: store_state_to needs the same registrations (parameter " + std::to_string(i) +
                  " differs)");
  cpu.set_t(t_);
  for (size_t i = 0; i < params_.size(); ++i) download_moments(i, cpu.m(i), cpu.v(i));
}


}  // namespace gr::replay
