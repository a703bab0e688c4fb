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

WindowGeometry window_geometry(const NodeSpec& n, const Shape& x, const Shape& w) {
  const WindowAttrs& at = n.window;
  const bool conv = n.op == Op::Conv2d;
  WindowGeometry g;
  g.kh = conv ? w[2] : at.kh, g.kw = conv ? w[3] : at.kw;
  g.sh = at.sh ? at.sh : (conv ? 1 : g.kh), g.sw = at.sw ? at.sw : (conv ? 1 : g.kw);
  if (conv) g.dh = at.dh, g.dw = at.dw, g.groups = at.groups;
  const auto same = [](int64_t in, int64_t k, int64_t s, int64_t d, int64_t& lo, int64_t& hi) {
    const int64_t out = (in + s - 1) / s, total = std::max<int64_t>((out - 1) * s + (k - 1) * d + 1 - in, 0);
    lo = total / 2, hi = total - lo;
  };
  switch (at.pad) {
    case WindowAttrs::Pad::Explicit: g.pt = g.pb = at.ph, g.pl = g.pr = at.pw; break;
    case WindowAttrs::Pad::Same:
      same(x[2], g.kh, g.sh, g.dh, g.pt, g.pb);
      same(x[3], g.kw, g.sw, g.dw, g.pl, g.pr);
      break;
    case WindowAttrs::Pad::Valid: break;
  }
  return g;
}

}  // namespace gr
