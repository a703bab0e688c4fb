// spec_layers.cpp — the layer sugar other than dense (docs/spec.md, "Layers"): conv2d, max_pool2d,
// avg_pool2d, batch_norm and flatten nodes lowered into op nodes of the table, so every path (the
// tape, replay, fusion, the oracle, the exports) sees ops it already knows. A window op's node is
// written as the op's JSON and read by read_node, so its attributes are checked in one place.
#include <string>
#include <vector>

#include "spec/spec_graph.h"

namespace gr {

namespace {

const char* const kActivations[] = {"none", "relu", "tanh", "sigmoid", "gelu"};

// An op node read from JSON made here, errors located at the layer (`at`).
NodeSpec op_node(const JsonAt& at, const std::string& layer, nlohmann::ordered_json op) {
  const JsonAt j(op, at.pointer(), at.file());
  NodeSpec n = read_node(j);
  n.pointer = at.pointer();
  n.layer = layer;
  n.layer_id = at.at("id").str();
  return n;
}

NodeSpec simple(const JsonAt& at, const std::string& layer, const std::string& id, const std::string& op,
                std::vector<std::string> inputs) {
  return op_node(at, layer, {{"id", id}, {"op", op}, {"inputs", std::move(inputs)}});
}

// "kernel": k or [kh, kw] (≥ 1).
std::pair<int64_t, int64_t> kernel_of(const JsonAt& k) {
  if (k.is_number()) {
    const int64_t v = k.integer(1, 1 << 20);
    return {v, v};
  }
  const std::vector<int64_t> v = k.integers(1, 1 << 20);
  if (v.size() != 2) k.fail("expected an integer or [kh, kw]");
  return {v[0], v[1]};
}

}  // namespace

bool lower_layer(const JsonAt& j, LoweredLayer& out) {
  if (!j.is_object() || !j.has("layer") || !j.at("layer").is_string()) return false;
  const std::string layer = j.at("layer").str();
  if (layer != "conv2d" && layer != "max_pool2d" && layer != "avg_pool2d" && layer != "batch_norm" && layer != "flatten")
    return false;
  const std::string id = j.at("id").str();
  if (id.empty()) j.at("id").fail("an id cannot be empty");
  for (const JsonAt& in : j.at("inputs").array()) out.inputs.push_back(in.str());
  if (out.inputs.size() != 1) j.at("inputs").fail("a " + layer + " layer takes exactly 1 input");
  const std::string x = out.inputs[0];
  const JsonAt& at = j;

  if (layer == "flatten") {  // reshape to [N, -1]; program.cpp writes the shape [-1, C·H·W]
    j.only_keys({"id", "layer", "inputs"});
    out.nodes.push_back(op_node(at, layer, {{"id", id}, {"op", "reshape"}, {"inputs", {x}}, {"shape", {-1}}}));
    return true;
  }
  if (layer == "max_pool2d" || layer == "avg_pool2d") {
    j.only_keys({"id", "layer", "inputs", "kernel", "stride", "padding"});
    nlohmann::ordered_json op{{"id", id}, {"op", layer}, {"inputs", {x}}};
    for (const char* k : {"kernel", "stride", "padding"})
      if (j.has(k)) op[k] = j.at(k).json();
    if (!j.has("kernel")) j.at("kernel");  // required: reports the missing key at the layer
    out.nodes.push_back(op_node(at, layer, op));
    return true;
  }
  if (layer == "batch_norm") {  // batch_norm, then PyTorch's affine default: · scale + shift
    j.only_keys({"id", "layer", "inputs", "momentum", "eps", "trainable"});
    nlohmann::ordered_json op{{"id", id + ".norm"}, {"op", "batch_norm"}, {"inputs", {x}}};
    for (const char* k : {"momentum", "eps"})
      if (j.has(k)) op[k] = j.at(k).json();
    const bool trainable = j.has("trainable") ? j.at("trainable").boolean() : true;
    NodeSpec norm = op_node(at, layer, op);
    LayerParamSpec scale{LayerParamSpec::Role::ChannelScale, id + ".scale", id + ".weight", {InitSpec::Kind::Ones, 0.0, 0.0, {}}};
    LayerParamSpec shift{LayerParamSpec::Role::ChannelShift, id + ".shift", id + ".bias", {InitSpec::Kind::Zeros, 0.0, 0.0, {}}};
    scale.trainable = shift.trainable = trainable;
    norm.layer_params = {scale, shift};
    out.params = {scale.name, shift.name};
    out.nodes.push_back(std::move(norm));
    out.nodes.push_back(simple(at, layer, id + ".scaled", "mul", {id + ".norm", scale.name}));
    out.nodes.push_back(simple(at, layer, id, "add", {id + ".scaled", shift.name}));
    return true;
  }
  // conv2d: conv2d(x, W), + b ([F, 1, 1]), the activation
  j.only_keys({"id", "layer", "inputs", "filters", "kernel", "stride", "padding", "dilation", "groups", "activation", "init",
               "bias", "trainable"});
  LayerParamSpec w{LayerParamSpec::Role::ConvWeight, id + ".W", id + ".weight", {InitSpec::Kind::XavierUniform, 0.0, 0.0, {}}};
  w.filters = j.at("filters").integer(1, 1 << 24);
  std::tie(w.kh, w.kw) = kernel_of(j.at("kernel"));
  if (j.has("groups")) {
    w.groups = j.at("groups").integer(1, 1 << 24);
    if (w.filters % w.groups) j.at("groups").fail("filters (" + std::to_string(w.filters) + ") must be divisible by groups");
  }
  const bool bias = j.has("bias") ? j.at("bias").boolean() : true;
  std::string activation = "none";
  if (j.has("activation")) {
    activation = j.at("activation").str();
    bool known = false;
    for (const char* a : kActivations) known = known || activation == a;
    if (!known) j.at("activation").fail("unknown activation \"" + activation + "\" (known: none, relu, tanh, sigmoid, gelu)");
  }
  if (j.has("trainable")) w.trainable = j.at("trainable").boolean();
  LayerParamSpec b{LayerParamSpec::Role::ConvBias, id + ".b", id + ".bias", {InitSpec::Kind::Zeros, 0.0, 0.0, {}}};
  b.filters = w.filters, b.trainable = w.trainable;
  if (j.has("init")) {
    const JsonAt init = j.at("init");
    init.only_keys({"W", "b"});
    if (init.has("W")) w.init = read_init(init.at("W"));
    if (init.has("b")) {
      if (!bias) init.at("b").fail("the layer has no bias (\"bias\": false)");
      b.init = read_init(init.at("b"));
    }
  }
  const bool last_conv = !bias && activation == "none";
  nlohmann::ordered_json op{{"id", last_conv ? id : id + ".conv"}, {"op", "conv2d"}, {"inputs", {x, w.name}}};
  for (const char* k : {"stride", "padding", "dilation", "groups"})
    if (j.has(k)) op[k] = j.at(k).json();
  NodeSpec conv = op_node(at, layer, op);
  conv.layer_params.push_back(w);
  out.params.push_back(w.name);
  if (bias) conv.layer_params.push_back(b), out.params.push_back(b.name);
  std::string y = conv.id;
  out.nodes.push_back(std::move(conv));
  if (bias) {
    out.nodes.push_back(simple(at, layer, activation == "none" ? id : id + ".bias", "add", {y, b.name}));
    y = out.nodes.back().id;
  }
  if (activation != "none") out.nodes.push_back(simple(at, layer, id, activation, {y}));
  return true;
}

}  // namespace gr
