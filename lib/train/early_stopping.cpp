// early_stopping.cpp — see early_stopping.h.
#include "train/early_stopping.h"

#include <cmath>

#include "io/errors.h"

namespace gr {

double EarlyStopping::value(const EpochRecord& e) const {
  if (spec_.monitor == "val_accuracy") return e.val_accuracy;
  if (spec_.monitor == "train_loss") return e.train_loss;
  if (spec_.monitor == "train_accuracy") return e.train_accuracy;
  if (spec_.monitor == "val_f1") return e.val_f1;
  if (spec_.monitor == "val_auc") return e.val_auc;
  return e.val_loss;
}

bool EarlyStopping::improves(const EpochRecord& e) const {
  const double v = value(e);
  if (!std::isfinite(v)) return false;
  if (best_.epoch == 0) return true;
  const bool higher = spec_.monitor == "val_accuracy" || spec_.monitor == "train_accuracy" || spec_.monitor == "val_f1" ||
                      spec_.monitor == "val_auc";
  return higher ? v > best_.value + spec_.min_delta : v < best_.value - spec_.min_delta;
}

void EarlyStopping::observe(const EpochRecord& e, const Model& model) {
  if (!improves(e)) return;
  best_.epoch = e.epoch;
  best_.value = value(e);
  best_.params.clear();
  for (const auto& [name, view] : model.param_views()) best_.params.emplace_back(view.values().begin(), view.values().end());
}

void EarlyStopping::restore(const RunLog& log, const BestWeights& saved, const Model& model, const std::string& checkpoint) {
  best_ = BestWeights{};
  for (const EpochRecord& e : log.epochs)
    if (improves(e)) best_.epoch = e.epoch, best_.value = value(e);
  if (best_.epoch == 0) return;
  if (saved.epoch != best_.epoch || saved.params.size() != model.program().params.size())
    throw InputError(model.spec().path, "/train/early_stopping",
                     "the checkpoint in " + checkpoint + " keeps " +
                         (saved.epoch ? "the weights of epoch " + std::to_string(saved.epoch) : std::string("no best weights")) +
                         ", but with this early_stopping setting the best epoch so far is " + std::to_string(best_.epoch) +
                         "; resume with the setting the run was trained with");
  best_.params = saved.params;
}

std::string EarlyStopping::describe_stop(int64_t epoch) const {
  return spec_.monitor + " did not improve by more than " + format_shortest(spec_.min_delta) + " for " +
         std::to_string(epoch - best_.epoch) + " epochs (best: epoch " + std::to_string(best_.epoch) + ", " +
         format_shortest(best_.value) + ")";
}

}  // namespace gr
