// export_onnx.h — a trained spec as an ONNX model (opset 13; float32, or float64 with `real` F64),
// written with the project's own protobuf writer (interchange/onnx_writer.h). docs/use-a-model.md, Export.
//
// export_onnx() translates the part of the forward graph that the prediction depends on:
//   - graph inputs: the spec's inputs that the prediction reads, in the spec's input order, RAW as
//     read from the data file (float32 or float64; one-hot inputs as class labels [batch, 1]; NaN
//     where a cell is missing; a categorical column [batch, 1] as its value, or its id when the
//     categories are strings: preprocess.h), followed by the saved preprocessing as nodes: the
//     missing indicator (IsNaN, Cast), the fill (Where(IsNaN(x), "<input>_fill", x)), the encoding —
//     categories (Equal against "<input>_categories", Cast; ArgMax for ids; a value in none is a
//     row of zeros), threshold (Greater, Cast), one-hot (Equal against the class indices, Cast) —,
//     the indicator columns appended (Concat), then Sub "<input>_mean" / Div "<input>_std"
//     initializers in the input's row shape;
//   - spec parameters and consts → float32 (float64) initializers named as in the spec;
//   - dense layers → MatMul(x, <id>.W [in, units]) + Add <id>.b, then the activation;
//   - elementwise rows of the op table → Add/Sub/Mul/Div/Neg/Relu/Sigmoid/Tanh/Exp/Log/Sqrt/Abs/Pow/
//     Sin/Cos (adds, muls, pow: Add/Mul/Pow with a scalar initializer); sum/mean/max → ReduceSum
//     (axes as an input) / ReduceMean / ReduceMax (axes attribute), a full reduction reshaped to [1];
//     dropout → Identity; matmul, bmm → MatMul; transpose →
//     Transpose swapping the last two axes; reshape → Reshape (the spec's literal shape); slice →
//     Slice; concat → Concat; softmax, log_softmax → Softmax / LogSoftmax (axis);
//   - the prediction's transform → Softmax(axis -1) / Sigmoid; the graph output is named after the
//     prediction node.
// The batch dimension is symbolic ("batch") unless a node of the graph mixes or reshapes rows
// (a reduction, softmax or concat over axis 0, a full sum/mean, a transpose of a 2-D tensor, a
// reshape or slice that changes the row count): then it is the spec's batch size, and data runs in
// batches of that size, as `predict --batch` does.
// A node the export cannot express (a loss inside the prediction's graph) is refused with an
// InputError at that node's pointer. With `real` F64 every real tensor (inputs, initializers, the
// one-hot Cast, the output) is tensor(double), which every operator above takes at opset 13; an
// operator that did not would be refused the same way, named.
#pragma once
#include <string>
#include <vector>

#include "grad/tape.h"
#include "io/safetensors.h"
#include "spec/program.h"
#include "interchange/preprocess.h"

namespace gr {

struct OnnxExport {
  std::string bytes;                     // the .onnx file
  std::vector<std::string> input_names;  // the graph's inputs, in order
  std::string output_name;
  bool symbolic_batch = true;  // false: every input's first dimension is fixed to `batch`
  DType real = DType::F32;       // the element type of the model's real tensors
  // F64: what onnxruntime (tools/onnxrt) cannot run as written — a float64 Cos (no CPU kernel), a
  // Transpose feeding a MatMul (its extended optimizations fuse them into a float-only FusedMatMul:
  // use graph optimization level basic). The model is valid ONNX either way.
  std::vector<std::string> warnings;
  int64_t batch = 0;
  size_t nodes = 0, initializers = 0;
};

// `output`: the prediction node (index into program.nodes); `transform`: "softmax" | "sigmoid" |
// "none". `weights` holds every parameter of the program by its gradrun name. `real`: F32 (the
// default) or F64 (`export --dtype f64`: float64 tensors, the weights' values exactly). `units`: a
// standardized regression target's statistics, applied last as Mul "y_std" and Add "y_mean", so the
// output is in the data's units as `gradrun predict` writes it.
OnnxExport export_onnx(const Program& program, const SafetensorsFile& weights, const Preprocessing& prep, int output,
                       const std::string& transform, DType real = DType::F32, const OutputUnits& units = {});

// Writes PATH atomically (creating its directory).
void write_onnx_export(const OnnxExport& e, const std::string& path);

}  // namespace gr
