// gradrun evaluate RUN_DIR|SPEC [--weights RUN_DIR|FILE] [--data FILE] [--json FILE] — loss and metrics of
// trained weights, computed by the trainer's own validation function (train/evaluate.h),
// so on the run's validation rows they equal the last line of its metrics.csv bit for bit.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <memory>
#include <nlohmann/json.hpp>

#include "cli.h"
#include "io/atomic_file.h"
#include "train/predict.h"
#include "train/run_files.h"
#include "train/trainer.h"

namespace gr::cli {

namespace {

struct EvaluateFlags {
  int threads = 1;
  std::string spec, weights, which = "best", data, json;
  bool quiet = false;
};

// The confusion matrix (rows: true class, columns: predicted) and the per-class table.
void print_class_metrics(const ClassMetrics& cm, const std::vector<std::string>& names) {
  std::printf("%-10s %s\n", "macro_f1", format_double(cm.macro_f1).c_str());
  std::printf("%-10s %s\n", "balanced_accuracy", format_double(cm.balanced_accuracy).c_str());
  if (cm.binary)
    for (const auto& [name, v] : {std::pair<const char*, double>{"roc_auc", cm.roc_auc}, {"pr_auc", cm.pr_auc}, {"log_loss", cm.log_loss}})
      std::printf("%-10s %s\n", name, format_double(v).c_str());
  int w = 9;
  for (const std::string& n : names) w = std::max(w, static_cast<int>(n.size()) + 1);
  std::printf("confusion matrix (rows: true class, columns: predicted)\n%*s", w, "");
  for (const std::string& n : names) std::printf(" %*s", w, n.c_str());
  std::printf("\n");
  for (int64_t t = 0; t < cm.classes; ++t) {
    std::printf("%*s", w, names[static_cast<size_t>(t)].c_str());
    for (int64_t q = 0; q < cm.classes; ++q) std::printf(" %*lld", w, static_cast<long long>(cm.confusion[static_cast<size_t>(t * cm.classes + q)]));
    std::printf("\n");
  }
  std::printf("%*s %10s %10s %10s %10s\n", w, "class", "precision", "recall", "f1", "support");
  for (size_t c = 0; c < static_cast<size_t>(cm.classes); ++c)
    std::printf("%*s %10.4f %10.4f %10.4f %10lld\n", w, names[c].c_str(), cm.precision[c], cm.recall[c], cm.f1[c],
                static_cast<long long>(cm.support[c]));
}

void run_evaluate(const EvaluateFlags& f) {
  apply_threads(f.threads);
  const TrainedSource src = trained_source(f.spec, f.weights);
  const Spec& spec = src.spec;
  const TrainedWeights w = read_trained(spec, src.weights, f.which);
  std::unique_ptr<Model> model;
  DataTable table;
  const DataTable* rows = &table;
  if (f.data.empty()) {  // the run's validation rows, split and standardized exactly as training did
    model = std::make_unique<Model>(spec, load_datasets(spec), w.real);  // an f32 run evaluates in f32
    const Datasets& d = model->data();
    if (d.vocab != w.prep.vocab)  // text data: the ids must mean what they meant in training
      throw InputError(spec.path, "/data/text", "the text's vocabulary differs from the one saved in " + w.path + " (the file changed since training); pass --data");
    for (size_t i = 0; i < spec.data->inputs.size(); ++i) {
      const InputPrep& ip = *w.prep.find(spec.data->inputs[i].name);
      if (d.mean[i] != ip.mean || d.std[i] != ip.std || d.fit[i] != ip.fit)
        throw InputError(spec.path, spec.data->inputs[i].pointer,
                         "the data's training-row statistics (standardization, fill values or categories) differ from those saved in " + w.path +
                             " (the data file changed since training); pass --data");
    }
    if (d.validation.rows == 0) throw InputError(spec.path, "/data/validation", "the spec has no validation rows; pass --data FILE");
    rows = &d.validation;
  } else {
    model = std::make_unique<Model>(spec, shape_only_data(spec, w.prep), w.real);
    table = read_data_file(spec, w.prep, f.data, std::vector<bool>(spec.data->inputs.size(), true));
    check_class_ids(model->program(), table, f.data);  // labels the metrics cannot count: refused, located
  }
  model->load_params(w.file, w.path);
  const Evaluation ev = evaluate_metrics(*model, *rows, f.data.empty() ? "the validation split" : f.data);
  const double loss = ev.loss, accuracy = ev.accuracy;
  const bool regression = regression_of(*model).output >= 0;
  // A classifier whose label has categories: its class names, in id order (the class ids' meaning).
  std::vector<std::string> classes;
  if (const Classifier c = classifier_of(model->program()); c.logits >= 0) {  // metrics.accuracy's, or the loss's
    const Shape& shape = model->program().nodes[static_cast<size_t>(c.logits)].shape;
    classes = class_names(model->program(), w.prep, shape.numel() / std::max<int64_t>(shape[0], 1));
  }
  auto number = [](double v) { return std::isfinite(v) ? nlohmann::ordered_json(v) : nlohmann::ordered_json(nullptr); };
  const std::string source = f.data.empty() ? "validation" : f.data;
  const ClassMetrics& cm = ev.classes;
  // The class names of the per-class numbers: the label's categories, else the ids.
  std::vector<std::string> names = classes;
  for (int64_t c = static_cast<int64_t>(names.size()); c < cm.classes; ++c) names.push_back(std::to_string(c));
  if (!f.json.empty()) {
    nlohmann::ordered_json j = {{"spec", spec.path}, {"weights", w.path}, {"data", source}, {"rows", rows->rows},
                                {"loss", number(loss)}};
    if (spec.metrics.accuracy) j["accuracy"] = number(accuracy);
    if (!classes.empty()) j["classes"] = classes;
    if (regression) j["mae"] = number(ev.mae), j["rmse"] = number(ev.rmse), j["r2"] = number(ev.r2);
    if (cm.classes > 0) {
      j["macro_f1"] = number(cm.macro_f1);
      j["balanced_accuracy"] = number(cm.balanced_accuracy);
      if (cm.binary) j["roc_auc"] = number(cm.roc_auc), j["pr_auc"] = number(cm.pr_auc), j["log_loss"] = number(cm.log_loss);
      nlohmann::ordered_json matrix = nlohmann::ordered_json::array(), per = nlohmann::ordered_json::array();
      for (int64_t t = 0; t < cm.classes; ++t) {
        nlohmann::ordered_json row = nlohmann::ordered_json::array();
        for (int64_t q = 0; q < cm.classes; ++q) row.push_back(cm.confusion[static_cast<size_t>(t * cm.classes + q)]);
        matrix.push_back(row);
        const size_t c = static_cast<size_t>(t);
        per.push_back({{"class", names[c]}, {"precision", number(cm.precision[c])}, {"recall", number(cm.recall[c])},
                       {"f1", number(cm.f1[c])}, {"support", cm.support[c]}});
      }
      j["class_names"] = names;       // the rows and columns of the confusion matrix, in id order
      j["confusion_matrix"] = matrix;  // [true class][predicted class]
      j["per_class"] = per;
    }
    write_file_atomic(f.json, j.dump(2) + "\n");
  }
  if (!f.quiet) {
    std::printf("%-10s %s (%lld rows)\n", "data", source.c_str(), static_cast<long long>(rows->rows));
    std::printf("%-10s %s\n", "loss", format_double(loss).c_str());
    if (spec.metrics.accuracy) std::printf("%-10s %s\n", "accuracy", format_double(accuracy).c_str());
    if (!classes.empty()) {
      std::string list;
      for (const std::string& c : classes) list += (list.empty() ? "" : ", ") + c;
      std::printf("%-10s %s\n", "classes", list.c_str());
    }
    if (regression)
      for (const auto& [name, v] : {std::pair<const char*, double>{"mae", ev.mae}, {"rmse", ev.rmse}, {"r2", ev.r2}})
        std::printf("%-10s %s\n", name, format_double(v).c_str());
    if (cm.classes > 0) print_class_metrics(cm, names);
  }
}

}  // namespace

void add_evaluate(CLI::App& app) {
  auto f = std::make_shared<EvaluateFlags>();
  CLI::App* c = app.add_subcommand("evaluate", "Loss and metrics of trained weights on the validation rows or a data file");
  c->add_option("model", f->spec, "A run folder (it holds its spec), or the spec file the weights were trained from")->required();
  c->add_option("--weights", f->weights, "A run folder or a weights file (needed with a spec file; default: the run folder)");
  c->add_option("--which", f->which, "A run folder's weights: best (weights.best.safetensors when early stopping wrote one, the "
                                     "default) | final (weights.safetensors)")
      ->check(CLI::IsMember({"best", "final"}));
  c->add_option("--data", f->data, "Data with labels (.csv, .npy, .npz, .safetensors); default: the run's validation rows");
  c->add_option("--json", f->json, "Also write the numbers to this JSON file");
  c->add_flag("--quiet,-q", f->quiet, "Print only errors");
  add_threads_option(c, f->threads);
  c->callback([f] { run_evaluate(*f); });
}

}  // namespace gr::cli
