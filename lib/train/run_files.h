// run_files.h — everything `gradrun train` writes into its output folder (docs/cli.md), each
// file rendered whole and written under a temporary name, then renamed (write_file_atomic).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "grad/optimizer.h"
#include "train/model.h"

namespace gr {

struct EpochRecord {
  int64_t epoch;  // 1-based
  double train_loss, val_loss, val_accuracy, seconds;  // NaN where not applicable
  int64_t last_step;
};

struct RunLog {
  std::vector<double> step_loss;      // one per optimizer step, step k at index k-1
  std::vector<int64_t> step_epoch;    // 1-based epoch of each step
  std::vector<EpochRecord> epochs;
};

// "%.17g": 17 significant digits round-trip every double exactly.
std::string format_double(double v);

std::string render_loss_csv(const RunLog& log);
std::string render_metrics_csv(const RunLog& log);
// SHA-256 over every parameter's f64 little-endian bytes, in registration order.
std::string weights_digest(const Model& model);

struct Checkpoint {
  int64_t epoch = 0, step = 0, adam_t = 0;
  std::vector<double> loss_history;
  std::vector<int64_t> loss_epochs;
  std::vector<EpochRecord> epochs;
};

// checkpoint/state.safetensors: param/<name>, adam_m/<name>, adam_v/<name>, loss_history,
// loss_epochs, epoch_metrics; metadata: format, spec_sha256, seed, epoch, step, adam_t. One file, one rename.
void write_checkpoint(const std::string& dir, const Model& model, Optimizer& opt, const RunLog& log, int64_t epoch);
// Restores parameters, Adam state and the loss log; checks the checkpoint belongs to this spec and seed.
Checkpoint read_checkpoint(const std::string& dir, Model& model, Optimizer& opt);

}  // namespace gr
