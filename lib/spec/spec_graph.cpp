// spec_graph.cpp — graph nodes of a spec: an op row's attributes (checked against the row's
// kAttr bits), "mse", and the dense layer sugar (docs/spec.md, "Ops" and the layer node).
#include "spec/spec_graph.h"

#include <cmath>
#include <string>
#include <vector>

#include "grad/op_table.h"
#include "spec/suggest.h"
#include "tensor/shape.h"

namespace gr {

namespace {

// An int or [rows, cols], each in [lo, hi].
void read_pair(const JsonAt& j, int64_t lo, int64_t hi, int64_t& a, int64_t& b) {
  if (j.json().is_array()) {
    const std::vector<int64_t> v = j.integers(lo, hi);
    if (v.size() != 2) j.fail("expected an integer or [rows, columns], got " + std::to_string(v.size()) + " numbers");
    a = v[0], b = v[1];
    return;
  }
  a = b = j.integer(lo, hi);
}

// conv2d's and the pools' geometry (docs/spec.md): the tape checks it against the shapes.
void read_window(const JsonAt& j, NodeSpec& n, uint32_t attrs) {
  constexpr int64_t kMaxWindow = int64_t(1) << 20;
  WindowAttrs& w = n.window;
  if (attrs & kAttrPool) read_pair(j.at("kernel"), 1, kMaxWindow, w.kh, w.kw);  // required
  if (j.has("stride")) read_pair(j.at("stride"), 1, kMaxWindow, w.sh, w.sw);
  if (j.has("dilation")) read_pair(j.at("dilation"), 1, kMaxWindow, w.dh, w.dw);
  if (j.has("groups")) w.groups = j.at("groups").integer(1, kMaxWindow);
  if (j.has("padding")) {
    const JsonAt p = j.at("padding");
    if (p.is_string()) {
      if (p.str() == "same") w.pad = WindowAttrs::Pad::Same;
      else if (p.str() == "valid") w.pad = WindowAttrs::Pad::Valid;
      else p.fail("padding is an integer, [rows, columns], \"same\" or \"valid\", got \"" + p.str() + "\"");
    } else {
      read_pair(p, 0, kMaxWindow, w.ph, w.pw);
    }
  }
}

void read_attrs(const JsonAt& j, NodeSpec& n) {
  const uint32_t attrs = op_info(n.op).attrs;
  auto allowed = [&](const char* key, uint32_t bit) {
    if (j.has(key) && !(attrs & bit))
      j.at(key).fail("op \"" + std::string(op_name(n.op)) + "\" has no attribute \"" + key + "\"");
  };
  allowed("scalar", kAttrScalar);
  allowed("axis", kAttrAxis);
  allowed("keepdims", kAttrKeepdims);
  allowed("shape", kAttrShape);
  allowed("starts", kAttrWindow);
  allowed("stops", kAttrWindow);
  allowed("eps", kAttrEps);
  allowed("rate", kAttrRate);
  allowed("momentum", kAttrMomentum);
  allowed("causal", kAttrCausal);
  if ((attrs & kAttrCausal) && j.has("causal")) n.causal = j.at("causal").boolean();
  if (attrs & kAttrMomentum) {
    n.momentum = j.has("momentum") ? j.at("momentum").number() : 0.1;  // PyTorch's default
    if (!(n.momentum >= 0.0 && n.momentum <= 1.0)) j.at("momentum").fail("momentum must be in [0, 1]");
  }
  allowed("kernel", kAttrPool);
  allowed("stride", kAttrConv | kAttrPool);
  allowed("padding", kAttrConv | kAttrPool);
  allowed("dilation", kAttrConv);
  allowed("groups", kAttrConv);
  if (attrs & (kAttrConv | kAttrPool)) read_window(j, n, attrs);
  if (attrs & kAttrRate) {
    n.scalar = j.has("rate") ? j.at("rate").number() : 0.5;  // PyTorch's default
    if (!(n.scalar >= 0.0 && n.scalar < 1.0)) j.at("rate").fail("rate must be in [0, 1)");
  }
  if (attrs & kAttrScalar) n.scalar = j.at("scalar").number();
  if (attrs & kAttrEps) {
    n.scalar = j.has("eps") ? j.at("eps").number() : 1e-5;  // PyTorch's default
    if (!(n.scalar > 0.0) || !std::isfinite(n.scalar)) j.at("eps").fail("eps must be a finite number > 0");
  }
  if (j.has("axis")) n.axis = j.at("axis").integer(-kMaxDims, kMaxDims - 1);
  if (n.op == Op::Concat && !n.axis) j.at("axis");  // required: reports the missing key
  if (n.causal && n.axis && *n.axis >= 0)  // the tape checks -k against the shape (the last axis, rank >= 2)
    j.at("axis").fail("a causal softmax runs over the last axis (the keys): write axis -1 or leave it out");
  if (j.has("keepdims")) {
    n.keepdims = j.at("keepdims").boolean();
    if (!n.axis) j.at("keepdims").fail("keepdims needs an axis");
  }
  if (attrs & kAttrShape) {
    n.shape = j.at("shape").integers(-1, kMaxElems);
    if (n.shape.empty()) j.at("shape").fail("expected at least one dim");
  }
  if (attrs & kAttrWindow) {
    n.starts = j.at("starts").integers(-kMaxElems, kMaxElems);
    n.stops = j.at("stops").integers(-kMaxElems, kMaxElems);
    if (n.starts.size() != n.stops.size()) j.at("stops").fail("starts and stops need the same length");
  }
}

}  // namespace

NodeSpec read_node(const JsonAt& j) {
  NodeSpec n;
  n.pointer = j.pointer();
  if (!j.is_object()) j.fail("expected a node object, got " + j.type_name());
  n.id = j.at("id").str();
  if (n.id.empty()) j.at("id").fail("an id cannot be empty");
  for (const JsonAt& in : j.at("inputs").array()) n.inputs.push_back(in.str());
  if (j.has("layer")) {
    j.only_keys({"id", "layer", "inputs", "units", "activation", "init", "trainable", "dropout"});
    if (j.has("dropout")) {  // after the activation, as the op "dropout"
      n.scalar = j.at("dropout").number();
      if (!(n.scalar >= 0.0 && n.scalar < 1.0)) j.at("dropout").fail("dropout is a rate in [0, 1)");
    }
    if (j.has("trainable")) n.trainable = j.at("trainable").boolean();
    if (j.at("layer").str() != "dense")
      j.at("layer").fail("unknown layer \"" + j.at("layer").str() + "\" (known: dense, conv2d, max_pool2d, avg_pool2d, batch_norm, flatten)");
    n.kind = NodeSpec::Kind::Dense;
    n.units = j.at("units").integer(1, 1 << 24);
    if (j.has("activation")) {
      n.activation = j.at("activation").str();
      if (n.activation != "none" && n.activation != "relu" && n.activation != "tanh" && n.activation != "sigmoid" &&
          n.activation != "gelu")
        j.at("activation").fail("unknown activation \"" + n.activation + "\" (known: none, relu, tanh, sigmoid, gelu)");
    }
    if (j.has("init")) {
      const JsonAt init = j.at("init");
      init.only_keys({"W", "b"});
      if (init.has("W")) n.w_init = read_init(init.at("W"));
      if (init.has("b")) n.b_init = read_init(init.at("b"));
    }
    if (n.inputs.size() != 1) j.at("inputs").fail("a dense layer takes exactly 1 input");
    return n;
  }
  const JsonAt op = j.at("op");
  const std::string name = op.str();
  if (name == "mse") {
    j.only_keys({"id", "op", "inputs"});
    n.kind = NodeSpec::Kind::Mse;
    if (n.inputs.size() != 2) j.at("inputs").fail("op \"mse\" takes 2 inputs, got " + std::to_string(n.inputs.size()));
    return n;
  }
  const auto found = op_by_name(name);
  if (!found || op_info(*found).leaf()) {
    std::string known;
    std::vector<std::string> words{"mse"};
    for (const OpInfo& info : kOps)
      if (!info.leaf()) known += std::string(known.empty() ? "" : ", ") + std::string(info.name), words.emplace_back(info.name);
    op.fail("unknown op \"" + name + "\"" + did_you_mean(name, words) + " (known: " + known + ", mse; or a \"layer\")");
  }
  n.op = *found;
  j.only_keys({"id", "op", "inputs", "scalar", "axis", "keepdims", "shape", "starts", "stops", "eps", "rate", "momentum",
               "class_weight", "pos_weight", "causal", "kernel", "stride", "padding", "dilation", "groups"});  // class weights: spec/class_weight.h
  const int arity = op_info(n.op).arity;
  if (n.op == Op::Conv2d && n.inputs.size() != 2 && n.inputs.size() != 3)
    j.at("inputs").fail("op \"conv2d\" takes 2 inputs [x, W] or 3 [x, W, b], got " + std::to_string(n.inputs.size()));
  if (n.op != Op::Conv2d && static_cast<int>(n.inputs.size()) != arity)
    j.at("inputs").fail("op \"" + name + "\" takes " + std::to_string(arity) + " input" + (arity == 1 ? "" : "s") +
                        ", got " + std::to_string(n.inputs.size()));
  read_attrs(j, n);
  return n;
}

// The three are ordinary op nodes (not `generated`: the conv reads the data input x as the spec wrote it).
bool lower_conv_bias(const NodeSpec& n, std::vector<NodeSpec>& nodes) {
  if (n.kind != NodeSpec::Kind::Op || n.op != Op::Conv2d || n.inputs.size() != 3) return false;
  NodeSpec conv = n;
  conv.id = n.id + ".conv";
  conv.inputs.pop_back();
  NodeSpec bias;
  bias.id = n.id + ".bias";
  bias.pointer = n.pointer + "/inputs/2";
  bias.op = Op::Reshape;
  bias.inputs = {n.inputs[2]};
  bias.shape = {-1, 1, 1};
  bias.conv_bias = true;
  NodeSpec sum;
  sum.id = n.id;
  sum.pointer = n.pointer;
  sum.op = Op::Add;
  sum.inputs = {conv.id, bias.id};
  nodes.push_back(std::move(conv));
  nodes.push_back(std::move(bias));
  nodes.push_back(std::move(sum));
  return true;
}

}  // namespace gr
