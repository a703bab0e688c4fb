// graph_walk.h — the part of a program's walk that both exports (ONNX: export_onnx.cpp, PyTorch:
// export_torch.cpp) share: which nodes, inputs, parameters and consts the prediction node needs
// (every needed node comes before the ones that use it, so a walk in node order meets each input
// first), each parameter checked against the weights file, and a Ref resolved to what the export
// calls it (a value name in ONNX, a Python expression in torch).
#pragma once
#include <cstddef>
#include <set>
#include <string>
#include <vector>

#include "io/safetensors.h"
#include "spec/program.h"

namespace gr {

// Names unique within one export: `take("x")` gives x, then x_2, x_3, … (ONNX value names, the torch
// module's attribute names).
class UniqueNames {
 public:
  std::string take(const std::string& wanted) {
    std::string name = wanted;
    for (int k = 2; used_.contains(name); ++k) name = wanted + "_" + std::to_string(k);
    used_.insert(name);
    return name;
  }

 private:
  std::set<std::string> used_;
};


// A window op's geometry as both exports write it (the tape's, tape_window.cpp): kernel, stride,
// dilation, groups and the pads top, left, bottom, right resolved against the input x ("same": the
// smaller half first). `w`: conv2d's weight shape (the kernel is its last two dims).
struct WindowGeometry {
  int64_t kh = 1, kw = 1, sh = 1, sw = 1, dh = 1, dw = 1, groups = 1, pt = 0, pl = 0, pb = 0, pr = 0;
  bool symmetric() const { return pt == pb && pl == pr; }
};
WindowGeometry window_geometry(const NodeSpec& n, const Shape& x, const Shape& w);

struct GraphWalk {
  const Program& p;
  const SafetensorsFile& weights;
  std::vector<bool> needed_node, needed_input, needed_param, needed_const;

  // Marks what node `output` needs: itself, every node it reads (transitively) and their leaves.
  void mark(int output);
  // The weights' tensor of parameter `index`; InputError when it is missing or its shape is not the spec's.
  const Tensor& weight(int index) const;
  // The row shape input `i` declares ("shape": docs/spec.md), empty when none: the export takes
  // the flat columns (or rows already of that shape), preprocesses them flat and reshapes last.
  std::vector<int64_t> declared_rows(size_t i) const {
    if (p.spec->data)
      for (const InputSpec& in : p.spec->data->inputs)
        if (in.name == p.input_names[i]) return in.row_shape;
    return {};
  }
  // What a Ref is called in the export: the entry of the table of its kind.
  template <class T>
  static const T& pick(const Ref& r, const std::vector<T>& input, const std::vector<T>& param, const std::vector<T>& cnst,
                       const std::vector<T>& node) {
    const auto k = static_cast<size_t>(r.index);
    switch (r.kind) {
      case Ref::Kind::Input: return input[k];
      case Ref::Kind::Param: return param[k];
      case Ref::Kind::Const: return cnst[k];
      case Ref::Kind::Node: return node[k];
    }
    return node[k];
  }
};

}  // namespace gr
