// op_table.h — the op enum and per-op facts, generated from ops.def.
#pragma once
#include <array>
#include <cstdint>
#include <optional>
#include <string_view>

namespace gr {

enum class Op : uint8_t {
#define GR_OP(e, name, arity, kind, attrs, fuse, emit) e,
#include "grad/ops.def"
#undef GR_OP
};

enum class OpKind : uint8_t { Leaf, Elementwise, Reduction, Contraction, Lane, Movement };
enum class RowFusion : uint8_t { No, Elementwise, Matmul, LastAxis };

enum OpAttr : uint32_t {
  kAttrNone = 0,
  kAttrScalar = 1u << 0,    // "scalar": adds, muls
  kAttrAxis = 1u << 1,      // "axis": negative counts from the end
  kAttrKeepdims = 1u << 2,  // "keepdims" for axis reductions
  kAttrShape = 1u << 3,     // "shape": reshape target, one -1 allowed
  kAttrWindow = 1u << 4,    // "starts"/"stops": slice
};

struct OpInfo {
  Op op;
  std::string_view name;
  int arity;
  OpKind kind;
  uint32_t attrs;
  RowFusion row_fusion;
  bool emit_scalar;
};

inline constexpr std::array kOps = {
#define GR_OP(e, name, arity, kind, attrs, fuse, emit) \
  OpInfo{Op::e, name, arity, OpKind::kind, attrs, RowFusion::fuse, emit_##emit},
#define emit_Yes true
#define emit_No false
#include "grad/ops.def"
#undef emit_Yes
#undef emit_No
#undef GR_OP
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

}  // namespace gr
