// run_files.h — everything `gradrun train` writes into its output folder (docs/cli.md), each
// file rendered whole and written under a temporary name, then renamed (write_file_atomic).
#pragma once
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "grad/optimizer.h"
#include "io/errors.h"
#include "io/number_text.h"  // format_shortest, which the run files use for every number
#include "train/model.h"

namespace gr {

inline constexpr double kNaNMetric = std::numeric_limits<double>::quiet_NaN();

// One metrics.csv row (docs/cli.md defines each number).
struct EpochRecord {
  int64_t epoch;  // 1-based
  double train_loss, val_loss, val_accuracy, seconds;  // NaN where not applicable
  int64_t last_step;
  double train_accuracy = kNaNMetric;  // classifiers: after the epoch, over the training rows
  double grad_norm = kNaNMetric;       // the mean over the epoch's steps of Optimizer::grad_norm
  double val_mae = kNaNMetric, val_rmse = kNaNMetric, val_r2 = kNaNMetric;  // regression models
  double val_f1 = kNaNMetric, val_auc = kNaNMetric;  // classifiers: macro-F1; binary tasks: ROC-AUC (class_metrics.h)
};

// A checkpoint's epoch_metrics columns: the EpochRecord fields in declaration order (older
// checkpoints hold the first 6 or 11; the rest read as NaN).
inline constexpr int64_t kEpochColumns = 13;

struct RunLog {
  std::vector<double> step_loss;      // one per optimizer step, step k at index k-1
  std::vector<int64_t> step_epoch;    // 1-based epoch of each step
  std::vector<double> step_lr;        // with optimizer.schedule: each step's learning rate; else empty
  std::vector<double> step_grad_norm;  // each step's Optimizer::grad_norm (NaN for steps of an older checkpoint)
  std::vector<EpochRecord> epochs;
};

// "%.17g": 17 significant digits round-trip every double exactly.
// loss.csv keeps it: the golden loss logs (tests/golden, compared as text by --expect) are in it.
std::string format_double(double v);

std::string render_loss_csv(const RunLog& log);
// metrics.csv; `classes`: the classifier's class count (0: not a classifier), which adds the
// column val_f1 (and val_auc for 2 classes) at the end.
std::string render_metrics_csv(const RunLog& log, int64_t classes = 0);
// SHA-256 over every parameter's f64 little-endian bytes, in registration order.
std::string weights_digest(const Model& model);

// The best epoch's parameters under train.early_stopping, in parameter registration order; kept
// in memory by the trainer and in checkpoints, written as weights.best.safetensors.
struct BestWeights {
  int64_t epoch = 0;  // 1-based; 0: none
  double value = 0.0;  // the monitored value at that epoch
  std::vector<std::vector<double>> params;
};

struct Checkpoint {
  int64_t epoch = 0, step = 0, adam_t = 0;
  int64_t step_in_epoch = 0;  // > 0: interrupted inside epoch `epoch` + 1 after this many steps
  int64_t target_epochs = 0;  // the run's total epochs (0: a checkpoint from before it was stored)
  std::vector<double> loss_history;
  std::vector<int64_t> loss_epochs;
  std::vector<double> grad_norm_history;  // NaN where the checkpoint predates it
  std::vector<EpochRecord> epochs;
  BestWeights best;  // epoch 0 when the checkpoint holds none
  std::string path;  // the file read (checkpoint/state.safetensors, or previous.safetensors after a fallback)
  bool fell_back = false;  // the newest was damaged
};

// checkpoint/: the two newest checkpoints, state.safetensors (the newest) and previous.safetensors
// (the one before; each write renames the newest to it first). Each holds param/<name>,
// adam_m/<name>, adam_v/<name>, loss_history, loss_epochs, grad_norm_history, epoch_metrics
// ([epochs, 13]: the EpochRecord fields in declaration order; [epochs, 6] or [epochs, 11] from older
// checkpoints is read with the new ones NaN); metadata: format (gradrun-checkpoint-2), spec_sha256 (the spec
// file's text), run_identity (train/run_state.h), seed, epoch (complete epochs), step_in_epoch,
// target_epochs, step, adam_t, dtype, the seal (io/seal.h); with best weights (epoch > 0) also
// best/<name> and best_epoch. One file, one rename. rotate false: the newest is overwritten (a
// resume that fell back to the previous one keeps it rather than a damaged newest).
inline constexpr const char* kNewest = "state.safetensors";
inline constexpr const char* kPrevious = "previous.safetensors";
void write_checkpoint(const std::string& dir, const Model& model, Optimizer& opt, const RunLog& log, int64_t epoch,
                      int64_t step_in_epoch, int64_t target_epochs, const std::string& identity,
                      const BestWeights& best = BestWeights{}, bool rotate = true);

// A checkpoint file that cannot be trusted: unreadable, its seal disagrees with its content, or its
// counters disagree with each other (step, epoch, adam_t, target_epochs, the loss history's length,
// the epoch_metrics rows). Exit 2.
class DamagedCheckpoint : public InputError {
 public:
  using InputError::InputError;
};

// Restores parameters, optimizer state and the loss log from the newest checkpoint in `dir` that
// is intact (a damaged newest falls back to the previous one, with a warning naming both; both
// damaged: DamagedCheckpoint naming both). Checks first the checkpoint belongs to this run: the
// same identity (a changed field is named, InputError at its pointer in the spec), or for a
// checkpoint without one the same spec text, and the same seed. `path` in the result: the file used.
Checkpoint read_checkpoint(const std::string& dir, Model& model, Optimizer& opt, const std::string& identity);

}  // namespace gr
