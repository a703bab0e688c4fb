// gradrun predict RUN_DIR|SPEC [--weights RUN_DIR|FILE] --data FILE — a trained model's outputs on new data
// (lib/train/predict.h), written atomically; nothing is written on an error.
#include <cstdio>
#include <memory>

#include "cli.h"
#include "io/atomic_file.h"
#include "train/device_runner.h"
#include "train/predict.h"

namespace gr::cli {

namespace {

struct PredictFlags {
  int threads = 1;
  std::string spec, weights, which = "best", data, out = "predictions.csv", device;
  int64_t batch = 0;
  bool quiet = false, logits = false;
};

void run_predict(const PredictFlags& f) {
  apply_threads(f.threads);
  const TrainedSource src = trained_source(f.spec, f.weights);
  const Spec& spec = src.spec;
  const TrainedWeights w = read_trained(spec, src.weights, f.which);
  // The spec's engine; the dtype is the weights' (what the run computed in), so predictions are its bytes.
  Engine engine = choose_engine(spec, f.device, to_string(w.real), false);
  if (!w.prep.vocab.empty()) return predict_text(spec, w, engine, f.data, f.out, f.logits, f.quiet);  // prompts → next token
  if (f.logits) throw UsageError("--logits applies to a model trained on text data");
  Model model(spec, shape_only_data(spec, w.prep), w.real);  // an f32 run predicts in f32
  model.load_params(w.file, w.path);
  const PredictTarget target = predict_target(model.program(), w.prep);
  const DataTable table = read_data_file(spec, w.prep, f.data, inputs_needed(model.program(), target.node));
  check_token_ids(model.program(), table, f.data);  // an embedding's ids: refused, located (file, row, column)
  Predictions p;
  if (!engine.on_device()) {
    p = predict_rows(model, target, table, f.batch > 0 ? f.batch : model.program().batch);
  } else {  // one static batch shape on a device: the spec's
    if (f.batch > 0 && f.batch != model.program().batch)
      throw UsageError("--batch " + std::to_string(f.batch) + " with --device " + f.device + ": a device program runs the spec's batch size (" +
                       std::to_string(model.program().batch) + ")");
    p = predict_rows_device(model, target, table, engine.take_backend(), engine.spec.fuse);
  }
  write_file_atomic(f.out, render_predictions(p, target, f.out));
  if (!f.quiet)
    std::printf("predicted %lld rows of %s (%s) into %s\n", static_cast<long long>(p.rows), target.name.c_str(),
                target.transform.c_str(), f.out.c_str());
}

}  // namespace

void add_predict(CLI::App& app) {
  auto f = std::make_shared<PredictFlags>();
  CLI::App* c = app.add_subcommand("predict", "Run a trained model's forward graph on a data file and write its predictions");
  c->add_option("model", f->spec, "A run folder (it holds its spec), or the spec file the weights were trained from")->required();
  c->add_option("--weights", f->weights, "A run folder or a weights file (needed with a spec file; default: the run folder)");
  c->add_option("--which", f->which, "A run folder's weights: best (weights.best.safetensors when early stopping wrote one, the "
                                     "default) | final (weights.safetensors)")
      ->check(CLI::IsMember({"best", "final"}));
  c->add_option("--data", f->data, "Data to predict on: .csv, .npy, .npz or .safetensors, bound like the spec's data (a text model: prompts, one per line, or a .json array of strings)")->required();
  c->add_option("--out", f->out, "Output file: .csv (default predictions.csv), .npy or .safetensors");
  c->add_option("--device", f->device, "cpu (the CPU tape) | host | cuda (the device replay engine: the same bytes) | auto "
                                       "(default: the spec's device.kind)")
      ->check(CLI::IsMember({"cpu", "host", "cuda", "auto"}));
  c->add_option("--batch", f->batch, "Rows per recorded batch (default: the spec's batch_size)")->check(CLI::Range(1, 100000000));
  c->add_flag("--logits", f->logits, "A text model: write the next token's logits instead of its probabilities");
  c->add_flag("--quiet,-q", f->quiet, "Print only errors");
  add_threads_option(c, f->threads);
  c->callback([f] { run_predict(*f); });
}

}  // namespace gr::cli
