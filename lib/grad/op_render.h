// op_render.h — the op → code-text map shared by the code generators (tinygrad's renderer idea):
// the fused kernel generator (lib/fuse) and the scalar CUDA-C emitter (lib/emit) both spell an
// elementwise op as a call of its row's scalar function with the row's arguments, e.g.
// render_call(Op::Div, Side::B, {g, a, b, y, s}) → "gr_div_bwd_b(g, y, b)". They differ only in
// what the operand texts are (array elements vs. locals, f32 vs f64 literals).
#pragma once
#include <string>

#include "grad/op_table.h"

namespace gr {

enum class CallSide { Fwd, A, B };  // the forward, or the backward for input a / b

struct Operands {
  std::string g, a, b, y, s;  // dL/dy, first input, second input, output, scalar attribute
};

// The call text; throws gr::Error for an op that is not elementwise or has no such side.
std::string render_call(Op op, CallSide side, const Operands& o);

// The text of Σ terms in the reference order of gr_sum (kernels/gr_reduce.h): a fresh accumulator
// from 0.0, each term added in order with the rn add `add`, e.g. "__dadd_rn(__dadd_rn(0.0, x), y)".
std::string render_sum(const std::string& add, const std::string& zero, const std::string* terms, size_t count);

}  // namespace gr
