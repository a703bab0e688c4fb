// detail.h — lib/replay internals shared by its .cpp files (not part of the interface).
#pragma once
#include <bit>
#include <cstdint>
#include <string>
#include <string_view>

#include "grad/op_table.h"
#include "tensor/shape.h"

namespace gr::replay::detail {

inline uint64_t D(double d) { return std::bit_cast<uint64_t>(d); }  // a double kernel argument
inline uint64_t I(int64_t v) { return static_cast<uint64_t>(v); }   // a long long kernel argument

inline std::string node_label(int32_t id, Op op, const Shape& shape) {
  return "node " + std::to_string(id) + " (" + std::string(op_name(op)) + " " + shape.str() + ")";
}

// Row-major strides of `in` aligned into the last dims of an r-dim output; 0 where `in` is
// missing or has size 1 (stretched).
inline void aligned(const Shape& in, int r, int64_t* out) {
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

// The per-node kernel of an elementwise op's forward (side -1) or backward for input side 0 / 1:
// grk_<stem>_fwd, grk_<stem>_bwd (unary), grk_<stem>_bwd_a / _bwd_b (binary), named from its row.
const char* elementwise_kernel(Op op, int side);
// The per-node kernel grk_<stem>_<part> of an op, named from its row's stem (every kernel of
// kernels/device/gr_node_kernels.cuh that belongs to an op is named so); a stable pointer.
const char* kernel_of(Op op, std::string_view part);
// A kernel that belongs to no op (the optimizers', the gradient fill): grk_<what>.
const char* kernel_named(std::string_view what);

constexpr int kBinMeta = 33;    // [r, od[8], ost[8], ast[8], bst[8]]
constexpr int kSliceMeta = 25;  // [r, od[8], ist[8], starts[8]]
static_assert(kMaxDims == 8, "the kernels' metadata blocks hold 8 dims");

}  // namespace gr::replay::detail
