#include "train/run_outputs.h"

#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <limits>
#include <nlohmann/json.hpp>

#include "io/atomic_file.h"
#include "io/safetensors.h"
#include "io/seal.h"
#include "train/evaluate.h"
#include "train/receipt.h"
#include "train/plot_svg.h"
#include "interchange/preprocess.h"
#include "train/run_model.h"

namespace gr {

namespace {
constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
}  // namespace

std::string render_run_json(Model& model, const TrainOptions& o, const TrainResult& r, const std::string& run_sha256) {
  // A failed run reports what is on disk: the newest checkpoint's epochs and steps, not the memory's.
  const bool failed = r.status == "failed";
  const size_t epochs_done = failed ? static_cast<size_t>(r.resumable ? r.resumable_epoch : 0) : r.log.epochs.size();
  const EpochRecord* last = epochs_done == 0 || epochs_done > r.log.epochs.size() ? nullptr : &r.log.epochs[epochs_done - 1];
  const int64_t episodes = failed ? (r.resumable ? r.resumable_step : 0) : r.steps;
  auto number = [](double v) { return std::isfinite(v) ? nlohmann::ordered_json(v) : nlohmann::ordered_json(nullptr); };
  const std::string prep = to_json(make_preprocessing(model.spec(), model.data()));
  nlohmann::ordered_json run = nlohmann::ordered_json::object();
  run = {
      {"gradrun", 1},
      {"status", r.status},
      {"spec", model.spec().source},
      {"spec_dir", std::filesystem::absolute(model.spec().dir.empty() ? "." : model.spec().dir).lexically_normal().string()},
      {"spec_sha256", model.spec().sha256},
      {"run_sha256", run_sha256},
      {"name", model.spec().name},
      {"seed", model.spec().seed},
      {"overrides", model.spec().overrides},  // --set PATH=VALUE items, applied to the spec's text
      {"device", to_string(o.engine.kind)},
      {"dtype", to_string(o.engine.dtype)},
      {"fused", r.fused},
      {"threads", r.threads},
      {"threads_auto", r.threads_auto},
      {"steps_on_one_thread", r.threads_auto ? nlohmann::ordered_json(r.steps_on_one_thread) : nlohmann::ordered_json(nullptr)},
      {"shards", model.spec().train.shards},
      {"processes", o.comm ? o.comm->size() : 1},
      {"mpi", o.comm && o.comm->size() > 1 ? nlohmann::ordered_json(o.comm->library()) : nlohmann::ordered_json(nullptr)},
      {"stop_reason", r.stop_reason.empty() ? nlohmann::ordered_json(nullptr) : nlohmann::ordered_json(r.stop_reason)},
      {"epochs", last ? last->epoch : 0},
      {"target_epochs", r.target_epochs},
      {"episodes", episodes},
      {"failed_at_step", failed ? nlohmann::ordered_json(r.steps) : nlohmann::ordered_json(nullptr)},  // in memory when it failed
      {"resumable", r.resumable ? nlohmann::ordered_json({{"epoch", r.resumable_epoch},
                                                          {"step", r.resumable_step},
                                                          {"step_in_epoch", r.resumable_in_epoch},
                                                          {"checkpoint", r.resumable_dir}})
                                : nlohmann::ordered_json(nullptr)},
      {"pid", static_cast<int64_t>(::getpid())},
      {"resumed_from", o.resume_dir.empty() ? nlohmann::ordered_json(nullptr) : nlohmann::ordered_json(o.resume_dir)},
      {"wall_seconds", r.seconds},
      {"seconds_per_episode", r.steps_run ? r.seconds / static_cast<double>(r.steps_run) : 0.0},
      {"final_loss", number(last ? last->train_loss : kNaN)},
      {"final_val_loss", number(last ? last->val_loss : kNaN)},
      {"final_val_accuracy", number(last ? last->val_accuracy : kNaN)},
      {"final_train_accuracy", number(last ? last->train_accuracy : kNaN)},
      {"final_grad_norm", number(last ? last->grad_norm : kNaN)},
      {"final_val_mae", number(last ? last->val_mae : kNaN)},
      {"final_val_rmse", number(last ? last->val_rmse : kNaN)},
      {"final_val_r2", number(last ? last->val_r2 : kNaN)},
      {"weights_sha256", r.weights_sha256},
      {"preprocessing", nlohmann::ordered_json::parse(prep)},
  };
  run["init_files"] = nlohmann::ordered_json::array();  // the tensor files of inits and consts (docs/spec.md)
  for (const TensorFileRecord& f : model.spec().tensor_files) run["init_files"].push_back({{"path", f.path}, {"sha256", f.sha256}});
  if (const auto& es = model.spec().train.early_stopping) {
    run["early_stopping"] = {{"monitor", es->monitor},
                             {"patience", es->patience},
                             {"min_delta", es->min_delta},
                             {"best_epoch", r.best.epoch > 0 ? nlohmann::ordered_json(r.best.epoch) : nlohmann::ordered_json(nullptr)},
                             {"best_value", r.best.epoch > 0 ? number(r.best.value) : nlohmann::ordered_json(nullptr)},
                             {"detail", r.stop_detail.empty() ? nlohmann::ordered_json(nullptr) : nlohmann::ordered_json(r.stop_detail)}};
  }
  return run.dump(2) + "\n";
}

void write_run_json(Model& model, const TrainOptions& o, const TrainResult& r, const std::string& run_sha256) {
  write_file_atomic(o.out_dir + "/run.json", render_run_json(model, o, r, run_sha256));
}

void write_outputs(Model& model, const TrainOptions& o, const TrainResult& r, const std::string& run_sha256) {
  write_file_atomic(o.out_dir + "/loss.csv", render_loss_csv(r.log));
  write_file_atomic(o.out_dir + "/metrics.csv", render_metrics_csv(r.log, classifier_classes(model.program())));
  LossPlot plot{model.spec().name, r.log.step_loss, {}, {}};
  for (const EpochRecord& e : r.log.epochs) {
    if (!std::isnan(e.val_loss)) plot.validation.emplace_back(static_cast<double>(e.last_step), e.val_loss);
    plot.epoch_train.emplace_back(static_cast<double>(e.last_step), e.train_loss);
  }
  write_file_atomic(o.out_dir + "/loss.svg", render_loss_svg(plot));
  if (r.status == "complete") {
    const std::string steps = std::to_string(r.steps);
    const std::string prep = to_json(make_preprocessing(model.spec(), model.data()));
    write_sealed_safetensors(o.out_dir + "/weights.safetensors", model.param_views(),
                      {{kPreprocessingKey, prep},
                       {"format", kWeightsFormat},
                       {kModelIdentityKey, model.identity()},
                       {"spec", model.spec().source},
                       {"spec_sha256", model.spec().sha256},
                       {"steps", steps},
                       {"device", to_string(o.engine.kind)},
                       {"dtype", to_string(o.engine.dtype)}});
  }
  // weights.best.safetensors: the best epoch under train.early_stopping (also of a stopped run).
  if (model.spec().train.early_stopping && r.best.epoch > 0) {
    std::vector<std::pair<std::string, ConstTensorView>> best;
    for (size_t i = 0; i < r.best.params.size(); ++i)
      best.emplace_back(model.program().params[i].name, ConstTensorView{model.program().params[i].shape, r.best.params[i].data()});
    write_sealed_safetensors(o.out_dir + "/weights.best.safetensors", best,
                      {{kPreprocessingKey, to_json(make_preprocessing(model.spec(), model.data()))},
                       {"format", kWeightsFormat},
                       {kModelIdentityKey, model.identity()},
                       {"spec", model.spec().source},
                       {"spec_sha256", model.spec().sha256},
                       {"dtype", to_string(o.engine.dtype)},
                       {"best_epoch", std::to_string(r.best.epoch)},
                       {"monitor", model.spec().train.early_stopping->monitor},
                       {"monitor_value", format_double(r.best.value)}});
  }
  // receipt.json pins the whole run as its files stand now (train/receipt.h); run.json comes last,
  // so its "complete" follows every other file.
  const EpochRecord* last = r.log.epochs.empty() ? nullptr : &r.log.epochs.back();
  const ReceiptInput in{&model, o.out_dir, r.status, run_sha256, to_string(o.engine.kind), to_string(o.engine.dtype), r.fused, r.threads,
                        r.steps, last ? last->epoch : 0};
  write_file_atomic(o.out_dir + "/receipt.json", render_receipt(in));
  write_run_json(model, o, r, run_sha256);
}

}  // namespace gr
