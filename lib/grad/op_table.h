// op_table.h — the op enum and per-op facts, generated from the rows of kernels/gr_op_table.h.
#pragma once
#include <array>
#include <cstdint>
#include <optional>
#include <string_view>

#include "gr_op_table.h"

namespace gr {

enum class Op : uint8_t {
#define GR_OP_ENUM(E, ...) E,
  GR_OP_TABLE(GR_OP_ENUM)
#undef GR_OP_ENUM
};

enum class OpClass : uint8_t { Leaf, Unary, Binary, Reduction, Contraction, Lane, Movement, Random, Row, Batch, Window };
enum class ShapeRule : uint8_t { Leaf, Same, Broadcast, Reduce, Matmul, Bmm, Transpose, Reshape, Slice, Concat, Loss, Window, Gather };
enum class FusionClass : uint8_t { Opaque, Elementwise, Matmul, Lane, Reduce, LaneLoss, Copy };
enum class Domain : uint8_t { None, Any, Positive, AwayFromZero, OneHot, ClassId };

enum OpAttr : uint32_t {
  kAttrNone = 0,
  kAttrScalar = 1u << 0,    // "scalar": adds, muls
  kAttrAxis = 1u << 1,      // "axis": negative counts from the end
  kAttrKeepdims = 1u << 2,  // "keepdims" for axis reductions
  kAttrShape = 1u << 3,     // "shape": reshape target, one -1 allowed
  kAttrWindow = 1u << 4,    // "starts"/"stops": slice
  kAttrEps = 1u << 5,       // "eps": layer_norm (kept in the node's scalar; default 1e-5)
  kAttrRate = 1u << 6,      // "rate": dropout (kept in the node's scalar; default 0.5)
  kAttrMomentum = 1u << 7,  // "momentum": batch_norm's running-statistics update (the node's momentum; default 0.1)
  kAttrConv = 1u << 8,      // "stride", "padding", "dilation", "groups": conv2d (the node's Window)
  kAttrPool = 1u << 9,      // "kernel", "stride", "padding": max_pool2d, avg_pool2d (the node's Window)
  kAttrCausal = 1u << 10,   // "causal": softmax over the last axis of [..., Tq, Tk], row q sees keys <= q (the node's causal)
};

// A window op's attributes as a spec writes them (docs/spec.md): the tape resolves them against the
// input's shape into the node's gr_window. 0 means the default: stride 1 (pools: the kernel).
struct WindowAttrs {
  enum class Pad { Explicit, Same, Valid };
  int64_t kh = 0, kw = 0;  // pools: the kernel (conv2d: w's last two dims)
  int64_t sh = 0, sw = 0;
  Pad pad = Pad::Explicit;
  int64_t ph = 0, pw = 0;  // Explicit: rows added at top and bottom, columns at left and right
  int64_t dh = 1, dw = 1, groups = 1;
};

struct OpInfo {
  Op op;
  std::string_view name;
  int arity;
  OpClass cls;
  uint32_t attrs;
  std::string_view stem;   // gr_<stem>_fwd / _bwd[_a,_b], grk_<stem>_* kernels
  std::string_view fwd;    // argument letters of gr_<stem>_fwd, '_'-separated ("none": no function)
  std::string_view bwd_a;  // ... of the a-side backward (gr_<stem>_bwd or _bwd_a)
  std::string_view bwd_b;  // ... of the b-side backward (gr_<stem>_bwd_b)
  ShapeRule shape;
  FusionClass fusion;
  bool emit_scalar;
  Domain dom_a, dom_b;
  std::string_view torch;  // the op over torch tensors a, b and float s (a fold: a, dim d, keepdim k; "" = by hand)
  std::string_view onnx;   // an elementwise or fold row's opset-13 ONNX operator ("" = none: the export refuses it)

  constexpr bool elementwise() const { return cls == OpClass::Unary || cls == OpClass::Binary; }
  constexpr bool leaf() const { return cls == OpClass::Leaf; }
  constexpr bool row() const { return cls == OpClass::Row; }
  // A batch-statistics op (batch_norm): gr_<stem>_chan_fwd / _bwd / _update in gr_ops_batch.h.
  constexpr bool batch() const { return cls == OpClass::Batch; }
  // A fold reduction (max, ...): its rule is gr_<stem>_fold_fwd / _bwd in gr_ops_lane.h.
  constexpr bool fold() const { return cls == OpClass::Reduction && fwd == "fold"; }
  // A window op (conv2d, the pools over NCHW): its rules are gr_<stem>_win_* in gr_ops_window.h.
  constexpr bool window() const { return cls == OpClass::Window; }
};

namespace op_table_detail {
inline constexpr bool kEmitYes = true, kEmitNo = false;
}

inline constexpr std::array kOps = {
#define GR_OP_INFO(E, name, arity, cls, attrs, stem, fwd, bwda, bwdb, shape, fusion, emit, da, db, torch, onnx) \
  OpInfo{Op::E,          name,           arity,         OpClass::cls,        attrs,                           \
         #stem,          #fwd,           #bwda,         #bwdb,               ShapeRule::shape,                \
         FusionClass::fusion, op_table_detail::kEmit##emit, Domain::da, Domain::db, torch, onnx},
    GR_OP_TABLE(GR_OP_INFO)
#undef GR_OP_INFO
};

inline constexpr size_t kOpCount = kOps.size();

constexpr const OpInfo& op_info(Op op) { return kOps[static_cast<size_t>(op)]; }
constexpr std::string_view op_name(Op op) { return op_info(op).name; }

// Look an op up by its spec name.
inline std::optional<Op> op_by_name(std::string_view name) {
  for (const OpInfo& info : kOps)
    if (info.name == name) return info.op;
  return std::nullopt;
}

// Every row is in enum order (the table is indexed by the enum).
constexpr bool op_rows_in_order() {
  for (size_t i = 0; i < kOps.size(); ++i)
    if (static_cast<size_t>(kOps[i].op) != i) return false;
  return true;
}
static_assert(op_rows_in_order(), "kernels/gr_op_table.h: rows must be in enum order");

// A Row op's generic rules (the tape, replay, fusion, exports) rely on what its class promises.
constexpr bool row_rows_fit() {
  for (const OpInfo& info : kOps)
    if (info.row() && !(info.arity == 1 && info.attrs == kAttrEps && info.shape == ShapeRule::Same &&
                        info.fusion == FusionClass::Lane && !info.emit_scalar && !info.torch.empty()))
      return false;
  return true;
}
static_assert(row_rows_fit(), "kernels/gr_op_table.h: a Row op has arity 1, attrs kAttrEps, Shape Same, Fusion Lane, "
                              "Emit No and a torch expression");

// A Batch op's generic rules (the tape, replay, the spec's state leaves) rely on what its class promises.
constexpr bool batch_rows_fit() {
  for (const OpInfo& info : kOps)
    if (info.batch() && !(info.arity == 1 && info.attrs == (kAttrEps | kAttrMomentum) && info.shape == ShapeRule::Same &&
                          info.fusion == FusionClass::Opaque && !info.emit_scalar))
      return false;
  return true;
}
static_assert(batch_rows_fit(), "kernels/gr_op_table.h: a Batch op has arity 1, attrs kAttrEps | kAttrMomentum, Shape Same, "
                                "Fusion Opaque and Emit No");

// The elementwise classes' generic rules (Tape::unary_op / binary_op, the replay plan, the fused
// stages) give a unary op its input's shape and a binary op the broadcast shape: their Shape column.
constexpr bool elementwise_rows_fit() {
  for (const OpInfo& info : kOps)
    if ((info.cls == OpClass::Unary && (info.arity != 1 || info.shape != ShapeRule::Same)) ||
        (info.cls == OpClass::Binary && (info.arity != 2 || info.shape != ShapeRule::Broadcast)))
      return false;
  return true;
}
static_assert(elementwise_rows_fit(), "kernels/gr_op_table.h: a Unary row has arity 1 and Shape Same, a Binary row "
                                      "arity 2 and Shape Broadcast");

// A Window op's generic rules (the tape, replay, fusion) rely on what its class promises: Shape Window,
// never fused or emitted, rules win/win and BwdB win exactly when it has a second input (conv2d's w).
constexpr bool window_rows_fit() {
  for (const OpInfo& info : kOps)
    if (info.window() && !(info.shape == ShapeRule::Window && info.fusion == FusionClass::Opaque && !info.emit_scalar &&
                           info.fwd == "win" && info.bwd_a == "win" && (info.bwd_b == "win") == (info.arity == 2) &&
                           (info.attrs == kAttrConv || info.attrs == kAttrPool) && !info.torch.empty()))
      return false;
  return true;
}
static_assert(window_rows_fit(), "kernels/gr_op_table.h: a Window op has Shape Window, Fusion Opaque, Emit No, Fwd/BwdA "
                                 "win, BwdB win iff arity 2, attrs kAttrConv or kAttrPool and a torch expression");

}  // namespace gr
