// spec_graph.h — the parts of the spec parser shared between spec.cpp (the document),
// spec_graph.cpp (graph nodes: ops with their attributes, dense layers) and spec_data.cpp (data).
// Internal to lib/spec.
#pragma once
#include <set>

#include "spec/json_reader.h"
#include "spec/spec.h"

namespace gr {

// An INIT value (docs/spec.md): a kind name, {"kind": ...}, {"values": [...]} or a file.
InitSpec read_init(const JsonAt& j);
// One graph node: an op with its inputs and attributes, "mse", or a dense layer.
NodeSpec read_node(const JsonAt& j);
// A layer node other than dense (spec_layers.cpp: conv2d, max_pool2d, avg_pool2d, batch_norm,
// flatten) as op nodes, the last with the layer's id; `inputs`: the layer's as written, `params`:
// the names of the parameters it creates. False when `j` is no such layer.
struct LoweredLayer {
  std::vector<NodeSpec> nodes;
  std::vector<std::string> inputs, params;
};
bool lower_layer(const JsonAt& j, LoweredLayer& out);
// conv2d with a bias, [x, W, b]: lowered into conv2d(x, W) ("<id>.conv"), reshape(b, [F,1,1])
// ("<id>.bias") and their add (keeping the id), appended to `nodes`; false (nothing appended) otherwise.
bool lower_conv_bias(const NodeSpec& n, std::vector<NodeSpec>& nodes);
// One entry of "params" (or a block's "params"), named `name`.
ParamSpec read_param(const JsonAt& p, const std::string& name);
// Names travel into messages, file names and generated comments: printable, 1 to 256 characters.
bool printable_spec_name(const std::string& name);
// The "graph" (and "blocks") of the document `root` into s.graph, s.params (block params),
// s.instances and s.aliases; `names` holds every name defined so far and gains the graph's
// (spec_blocks.cpp).
void read_graph(const JsonAt& root, Spec& s, std::set<std::string>& names);
// The "data" object (spec_data.cpp); relative paths resolve against `dir`.
DataSpec read_data(const JsonAt& j, const std::string& dir);

}  // namespace gr
