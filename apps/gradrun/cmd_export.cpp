// gradrun export SPEC --weights RUN_DIR|FILE --format torch --out DIR — the trained model for another
// runtime: DIR/model.py (an nn.Module, float64, preprocessing included) and DIR/state_dict.safetensors.
#include <cstdio>
#include <memory>

#include "cli.h"
#include "io/safetensors.h"
#include "spec/program.h"
#include "train/export_torch.h"
#include "train/predict.h"

namespace gr::cli {

namespace {

struct ExportFlags {
  std::string spec, weights, format, out;
};

void run_export(const ExportFlags& f) {
  const Spec spec = load_spec(f.spec);
  // The same checks, program and prediction as `gradrun predict` (train/predict.h): the weights'
  // spec hash, the saved preprocessing, the graph resolved on zero rows of the saved row shapes.
  const TrainedWeights w = read_trained(spec, f.weights);
  const Datasets shapes = shape_only_data(spec, w.prep);
  const Program program = resolve_program(spec, shapes.train);
  const PredictTarget target = predict_target(program);
  const TorchExport e = export_torch(program, w.file, w.prep, target.node, target.transform);
  write_torch_export(e, f.out, spec.sha256);
  std::printf("wrote %s/model.py and %s/state_dict.safetensors (%zu tensors); forward(", f.out.c_str(), f.out.c_str(),
              e.state.size());
  for (size_t i = 0; i < e.input_names.size(); ++i) std::printf("%s%s", i ? ", " : "", e.input_names[i].c_str());
  std::printf(") → %s\n", target.name.c_str());
}

}  // namespace

void add_export(CLI::App& app) {
  auto f = std::make_shared<ExportFlags>();
  CLI::App* c = app.add_subcommand("export", "Export a trained model for another runtime (torch: model.py + state_dict)");
  c->add_option("spec", f->spec, "The spec file")->required();
  c->add_option("--weights", f->weights, "A run folder or its weights.safetensors")->required();
  c->add_option("--format", f->format, "torch")->required()->check(CLI::IsMember({"torch"}));
  c->add_option("--out", f->out, "Output directory (model.py, state_dict.safetensors)")->required();
  c->callback([f] { run_export(*f); });
}

}  // namespace gr::cli
