// early_stopping.h — train.early_stopping (issue 16 item 1): watch one epoch metric, keep the best
// epoch's parameters, stop once `patience` epochs in a row brought no improvement.
//
// An epoch improves when its monitored value beats the best so far by more than min_delta: lower
// for val_loss and train_loss, higher for val_accuracy, train_accuracy, val_f1 and val_auc; the first epoch with a
// finite value always improves, a NaN never does. The run stops after the epoch for which
// epoch − best_epoch reaches patience, so it always stops within `patience` epochs of its best.
// The state is a function of the epoch log alone, so a resumed run rebuilds it from the
// checkpoint's log; only the best weights themselves travel in the checkpoint (BestWeights).
#pragma once
#include <cstdint>
#include <string>

#include "spec/spec.h"
#include "train/model.h"
#include "train/run_files.h"

namespace gr {

class EarlyStopping {
 public:
  explicit EarlyStopping(const EarlyStoppingSpec& spec) : spec_(spec) {}

  // The monitored value of an epoch.
  double value(const EpochRecord& e) const;
  // Whether the epoch improves on the best so far.
  bool improves(const EpochRecord& e) const;
  // After each epoch: an improvement copies the model's parameters into best().
  void observe(const EpochRecord& e, const Model& model);
  // Resume: replays the state from the log's epochs; the best weights come from the checkpoint,
  // and must be those of the epoch the log names (InputError at /train/early_stopping otherwise).
  void restore(const RunLog& log, const BestWeights& saved, const Model& model, const std::string& checkpoint);
  // True once patience epochs have passed since the best one.
  bool should_stop(int64_t epoch) const { return best_.epoch > 0 && epoch - best_.epoch >= spec_.patience; }

  const BestWeights& best() const { return best_; }
  const EarlyStoppingSpec& spec() const { return spec_; }
  // "val_loss did not improve by more than 0 for 10 epochs (best: epoch 47, 0.0123)".
  std::string describe_stop(int64_t epoch) const;

 private:
  EarlyStoppingSpec spec_;
  BestWeights best_;
};

}  // namespace gr
