// gradrun export RUN_DIR|SPEC [--weights RUN_DIR|FILE] --format torch --out DIR — the trained model for another
// runtime: DIR/model.py (an nn.Module in the run's precision — float64, or float32 after `--dtype f32` —
// preprocessing included) and DIR/state_dict.safetensors.
// --format onnx --out FILE.onnx [--dtype f32|f64]: an ONNX model (opset 13, float32 by default or
// float64, preprocessing included).
#include <cstdio>
#include <memory>

#include <filesystem>

#include "io/atomic_file.h"
#include "spec/text_data.h"
#include "cli.h"
#include "io/safetensors.h"
#include "spec/program.h"
#include "tensor/diag.h"
#include "interchange/export_onnx.h"
#include "interchange/export_torch.h"
#include "train/predict.h"

namespace gr::cli {

namespace {

struct ExportFlags {
  std::string spec, weights, which = "best", format, out, dtype;
};

void run_export(const ExportFlags& f) {
  const TrainedSource src = trained_source(f.spec, f.weights);
  const Spec& spec = src.spec;
  // The same checks, program and prediction as `gradrun predict` (train/predict.h): the weights'
  // model identity, the saved preprocessing, the graph resolved on zero rows of the saved row shapes.
  const TrainedWeights w = read_trained(spec, src.weights, f.which);
  const Datasets shapes = shape_only_data(spec, w.prep);
  const Program program = resolve_program(spec, shapes.train);
  const PredictTarget target = predict_target(program, w.prep);
  if (f.format == "onnx") {
    DType real = DType::F32;  // --dtype checked by CLI11 (f32 | f64)
    parse_dtype(f.dtype, real);
    const OnnxExport e = export_onnx(program, w.file, w.prep, target.node, target.transform, real, target.units);
    write_onnx_export(e, f.out);
    if (!w.prep.vocab.empty()) {  // a text model: its vocabulary beside the file (token id i is tokens[i])
      const std::string vocab_file = (std::filesystem::path(f.out).replace_extension(".vocab.json")).string();
      write_file_atomic(vocab_file, vocab_json(w.prep.vocab));
      std::printf("wrote %s (the model's vocabulary)\n", vocab_file.c_str());
    }
    for (const std::string& note : e.warnings) diag::warn("export onnx --dtype f64: " + note);
    std::printf("wrote %s (ONNX opset 13, %s, %zu nodes, %zu initializers); inputs (", f.out.c_str(),
                real == DType::F64 ? "float64" : "float32", e.nodes, e.initializers);
    for (size_t i = 0; i < e.input_names.size(); ++i) std::printf("%s%s", i ? ", " : "", e.input_names[i].c_str());
    if (e.symbolic_batch) std::printf(") with a symbolic batch → %s\n", e.output_name.c_str());
    else std::printf(") with a fixed batch of %lld rows → %s\n", static_cast<long long>(e.batch), e.output_name.c_str());
    return;
  }
  if (!f.dtype.empty())
    throw UsageError("--dtype applies to --format onnx; --format torch exports in the run's precision (" +
                     std::string(w.real == DType::F32 ? "float32" : "float64") + ")");
  const TorchExport e = export_torch(program, w.file, w.prep, target.node, target.transform, w.real, target.units);
  write_torch_export(e, f.out, spec.sha256);
  if (!w.prep.vocab.empty()) write_file_atomic(f.out + "/vocab.json", vocab_json(w.prep.vocab));  // a text model's vocabulary
  std::printf("wrote %s/model.py and %s/state_dict.safetensors (%zu tensors, %s); forward(", f.out.c_str(), f.out.c_str(),
              e.state.size(), w.real == DType::F32 ? "float32" : "float64");
  for (size_t i = 0; i < e.input_names.size(); ++i) std::printf("%s%s", i ? ", " : "", e.input_names[i].c_str());
  std::printf(") → %s\n", target.name.c_str());
}

}  // namespace

void add_export(CLI::App& app) {
  auto f = std::make_shared<ExportFlags>();
  CLI::App* c = app.add_subcommand("export", "Export a trained model for another runtime (torch: model.py + state_dict; onnx: FILE.onnx)");
  c->add_option("model", f->spec, "A run folder (it holds its spec), or the spec file the weights were trained from")->required();
  c->add_option("--weights", f->weights, "A run folder or a weights file (needed with a spec file; default: the run folder)");
  c->add_option("--which", f->which, "A run folder's weights: best (weights.best.safetensors when early stopping wrote one, the "
                                     "default) | final (weights.safetensors)")
      ->check(CLI::IsMember({"best", "final"}));
  c->add_option("--format", f->format, "torch | onnx")->required()->check(CLI::IsMember({"torch", "onnx"}));
  c->add_option("--dtype", f->dtype, "onnx: f32 (default) | f64, the model's element type")
      ->check(CLI::IsMember({"f32", "f64"}));
  c->add_option("--out", f->out, "Output directory (torch: model.py, state_dict.safetensors) or file (onnx)")->required();
  c->callback([f] { run_export(*f); });
}

}  // namespace gr::cli
