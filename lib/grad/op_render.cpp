#include "grad/op_render.h"

#include "tensor/shape.h"

namespace gr {

std::string render_call(Op op, CallSide side, const Operands& o) {
  const OpInfo& info = op_info(op);
  if (!info.elementwise()) throw Error("render_call: " + std::string(info.name) + " is not an elementwise op");
  std::string_view args;
  std::string fn = "gr_" + std::string(info.stem);
  switch (side) {
    case CallSide::Fwd: args = info.fwd, fn += "_fwd"; break;
    case CallSide::A: args = info.bwd_a, fn += info.cls == OpClass::Binary ? "_bwd_a" : "_bwd"; break;
    case CallSide::B: args = info.bwd_b, fn += "_bwd_b"; break;
  }
  if (args == "none") throw Error("render_call: " + std::string(info.name) + " has no such function");
  std::string out = fn + "(";
  for (size_t i = 0; i < args.size(); i += 2) {  // one letter per argument, '_'-separated
    if (i) out += ", ";
    switch (args[i]) {
      case 'g': out += o.g; break;
      case 'a': out += o.a; break;
      case 'b': out += o.b; break;
      case 'y': out += o.y; break;
      case 's': out += o.s; break;
      default: throw Error("render_call: bad argument list \"" + std::string(args) + "\" in the row of " + std::string(info.name));
    }
  }
  return out + ")";
}

std::string render_sum(const std::string& add, const std::string& zero, const std::string* terms, size_t count) {
  std::string acc = zero;
  for (size_t i = 0; i < count; ++i) acc = add + "(" + acc + ", " + terms[i] + ")";
  return acc;
}

}  // namespace gr
