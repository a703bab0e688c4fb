// onnx_decompose.h — ops without an opset-13 ONNX operator written as several (export_onnx.cpp).
// `B` is the exporter's builder: emit(op, inputs, wanted output name, attributes) appends a node and
// returns its output's name, scalar(v) makes a scalar initializer in the model's element type.
#pragma once
#include <string>
#include <vector>

#include "interchange/onnx_writer.h"

namespace gr {

// GELU's tanh form as the tape computes it (kernels/gr_ops_scalar.h gr_gelu_fwd; ONNX has Gelu only
// from opset 20): y = (0.5·x)·(1 + tanh(√(2/π)·(x + (0.044715·x²)·x))).
template <class B>
std::string onnx_gelu(B& b, const std::string& x, const std::string& out) {
  const std::string x2 = b.emit("Mul", {x, x}, out + "_x2");
  const std::string cube = b.emit("Mul", {b.emit("Mul", {b.scalar(0.044715), x2}, out + "_ax2"), x}, out + "_ax3");
  const std::string u = b.emit("Mul", {b.scalar(0.7978845608028654), b.emit("Add", {x, cube}, out + "_inner")}, out + "_u");
  const std::string one_plus = b.emit("Add", {b.scalar(1.0), b.emit("Tanh", {u}, out + "_tanh")}, out + "_1pt");
  return b.emit("Mul", {b.emit("Mul", {b.scalar(0.5), x}, out + "_half"), one_plus}, out);
}

// layer_norm over the last axis, no affine (kernels/gr_ops_lane.h; LayerNormalization is opset 17):
// (x − mean) / sqrt(var + eps), var the mean of the squared deviations.
template <class B>
std::string onnx_layer_norm(B& b, const std::string& x, double eps, const std::string& out) {
  const std::vector<onnx::AttributeProto> last{onnx::attr_ints("axes", {-1}), onnx::attr_int("keepdims", 1)};
  const std::string d = b.emit("Sub", {x, b.emit("ReduceMean", {x}, out + "_mean", last)}, out + "_centered");
  const std::string var = b.emit("ReduceMean", {b.emit("Mul", {d, d}, out + "_sq")}, out + "_var", last);
  return b.emit("Div", {d, b.emit("Sqrt", {b.emit("Add", {var, b.scalar(eps)}, out + "_var_eps")}, out + "_std")}, out);
}

}  // namespace gr
