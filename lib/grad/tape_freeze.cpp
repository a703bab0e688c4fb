// tape_freeze.cpp — frozen parameters (docs/spec.md "trainable"): a param leaf that requires no
// gradient. requires_grad propagates when a node is pushed, so freezing only means something before
// any op consumed the param; afterwards it is refused rather than silently half-applied.
#include "grad/tape.h"

namespace gr {

void Tape::freeze(Var p) {
  if (node(p).op != Op::Param) throw Error("freeze: node " + std::to_string(p.id) + " is not a parameter");
  for (int32_t id = p.id + 1; id < size(); ++id)
    if (nodes_[static_cast<size_t>(id)].a == p.id || nodes_[static_cast<size_t>(id)].b == p.id)
      throw Error("freeze: parameter " + std::to_string(p.id) + " is already an input of node " + std::to_string(id));
  nodes_[static_cast<size_t>(p.id)].requires_grad = false;
}

}  // namespace gr
