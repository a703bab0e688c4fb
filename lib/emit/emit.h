// emit.h — the scalar CUDA-C emitter (docs/emit.md; reference: emitc): a recorded tape whose every
// node holds one element becomes the source of one `__device__` gradient function.
//
// The function mirrors the tape node by node:
//   • forward: one local `tN` per tape node in the loss's ancestor cone, ascending id, each computed
//     by the same scalar definition the tape used (gr_<op>_fwd from kernels/gr_ops_scalar.h; sum and
//     mean of one element spelled as the tape's loops do: 0.0 + x, then / 1.0 for mean);
//   • backward: the tape's reverse walk. Every node the walk reaches gets a local `gN = 0.0`; the
//     seed is `gL = gr_accumulate(gL, 1.0)`; then in descending id each reached node with a
//     parameter upstream hands its contributions to its inputs, a-side before b-side, each as
//     `gA = gr_accumulate(gA, c)` with c from gr_<op>_bwd_*. Inputs without a parameter upstream get
//     nothing (requires-grad propagation: const-only branches emit no backward code);
//   • one `gr_emit_grad(g, j, gP)` per parameter, in registration order (0.0 for a parameter the
//     walk never reaches).
// Leaves: parameter j reads p[j]; a bound leaf (a data input) reads its C expression; any other
// constant is inlined as a literal that reads back as the same bits.
//
// The output is self-contained: it starts with the text of kernels/gr_device.h, gr_math.h and
// gr_ops_scalar.h (kernel_text.h), so it compiles with NVRTC and with a host C++ compiler. Under
// NVRTC gr_device.h maps __dadd_rn & co. to the real intrinsics; on the host to plain operations
// (build with -ffp-contract=off).
#pragma once
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "grad/tape.h"

namespace gr {

enum class EmitSignature {
  Dataset,  // __device__ void NAME(long long x, double v, double* g, const double* p)
  Params,   // __device__ void NAME(double* g, const double* p)
};

// How a tape node is named in comments and errors.
struct EmitNodeName {
  std::string place;  // where it comes from in the spec, a JSON pointer ("/graph/3"); may be empty
  std::string label;  // a readable name ("pred", "loss (mse: mean)")
};

struct EmitRequest {
  const Tape* tape = nullptr;
  Var loss;
  std::vector<Var> params;                 // p[j], registration order; each must hold one element
  std::map<int32_t, std::string> bound;    // leaf node id → C expression (data leaves)
  std::vector<EmitNodeName> names;         // indexed by node id; missing entries read "node N"
  std::string function = "grad";
  EmitSignature signature = EmitSignature::Dataset;
  std::vector<std::string> preamble;       // comment lines placed at the top (without "// ")
};

// A node the emitter refuses: more than one element, an op without a scalar form, a leaf without a
// value. place() is the node's EmitNodeName::place (may be empty); what() includes it.
class EmitError : public Error {
 public:
  EmitError(int32_t node, std::string place, const std::string& what);
  int32_t node() const { return node_; }
  const std::string& place() const { return place_; }
  const std::string& message() const { return message_; }  // without the place

 private:
  int32_t node_;
  std::string place_, message_;
};

// The emitted source. Throws EmitError (see above) or Error (a malformed request).
std::string emit_scalar_cuda(const EmitRequest& request);

// Whether the emitter has a rule for op: one switch over the op table with no default. emit.cpp
// checks at compile time that it agrees with the table's Emit column (ops.def), so an op marked
// Emit=Yes without a rule, or a rule for an op marked No, does not build.
bool emit_has_rule(Op op);

// The names of the ops the emitter accepts, "param, const, add, ..." (for messages and docs).
std::string emit_supported_ops();

// A C/C++/CUDA spelling of v that reads back as exactly the same bits: integers below 2^53 as
// "3.0", other finite values as hexadecimal floating literals ("0x1.8p-3"; both exact, no decimal
// rounding involved), infinities and NaNs through gr_from_bits(bit pattern).
std::string c_double_literal(double v);

}  // namespace gr
