#include "interchange/graph_walk.h"

#include <algorithm>

#include "io/errors.h"

namespace gr {

void GraphWalk::mark(int output) {
  needed_node.assign(p.nodes.size(), false);
  needed_input.assign(p.input_names.size(), false);
  needed_param.assign(p.params.size(), false);
  needed_const.assign(p.spec->consts.size(), false);
  needed_node[static_cast<size_t>(output)] = true;
  for (int i = output; i >= 0; --i) {
    const ProgramNode& pn = p.nodes[static_cast<size_t>(i)];
    if (!needed_node[static_cast<size_t>(i)]) continue;
    if (pn.weight >= 0) needed_param[static_cast<size_t>(pn.weight)] = needed_param[static_cast<size_t>(pn.bias)] = true;
    for (const Ref& r : pn.inputs) {
      const auto k = static_cast<size_t>(r.index);
      switch (r.kind) {
        case Ref::Kind::Input: needed_input[k] = true; break;
        case Ref::Kind::Param: needed_param[k] = true; break;
        case Ref::Kind::Const: needed_const[k] = true; break;
        case Ref::Kind::Node: needed_node[k] = true; break;
      }
    }
  }
}

const Tensor& GraphWalk::weight(int index) const {
  const ProgramParam& pp = p.params[static_cast<size_t>(index)];
  const Tensor* t = weights.find(pp.name);
  if (!t) throw InputError(p.spec->path, pp.pointer, "the weights hold no parameter \"" + pp.name + "\"");
  if (t->shape().dims().size() != pp.shape.dims().size() || t->numel() != pp.shape.numel() ||
      !std::equal(t->shape().dims().begin(), t->shape().dims().end(), pp.shape.dims().begin()))
    throw InputError(p.spec->path, pp.pointer,
                     "parameter \"" + pp.name + "\" is " + pp.shape.str() + " in the spec but " + t->shape().str() +
                         " in the weights");
  return *t;
}

}  // namespace gr
