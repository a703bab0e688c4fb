// receipt.h — receipt.json: what pins a whole run for CI regression runs (docs/cli.md, train
// --expect), and the comparison of a run with a golden receipt.
//
// receipt.json (written with every run.json update; lib/train/trainer.cpp):
//   {"gradrun_receipt": 1, "status", "steps", "epochs",
//    "spec_sha256" (the resolved spec's text, --set applied), "model_sha256" (the model identity,
//    train/run_model.h), "run_sha256" (the resume identity),
//    "data": {"train_rows", "train_sha256", "validation_rows", "validation_sha256"} (the rows as
//      read: values after one-hot and standardization, f64 little-endian, row-major),
//    "files": {"loss.csv", "metrics.csv" (without its seconds column), "weights.safetensors",
//      "weights.best.safetensors": the SHA-256 of the parameters' f64 bytes, as weights_sha256},
//      a file the run has not written is absent,
//    "provenance": {"gradrun", "compiler", "flags", "isa", "git_commit", "engine", "dtype", "fused",
//      "threads"}}  — provenance is reported when it differs, never a failure: the bits are the
//      same on every CPU and engine we check (docs/numerics.md).
#pragma once
#include <string>
#include <vector>

#include "train/model.h"

namespace gr {

// --expect's comparison of numbers: bitwise (the default: rtol and atol negative), or within
// |got − want| ≤ atol + rtol·|want| (--rtol/--atol; for comparisons that cannot be bitwise by
// design, such as an f32 run against an f64 golden). Text that is not a number compares exactly.
struct Tolerance {
  double rtol = -1.0, atol = -1.0;
  bool bitwise() const { return rtol < 0.0 && atol < 0.0; }
  bool close(double want, double got) const;
  // The same for two loss.csv rows "step,epoch,loss" (step and epoch exactly).
  bool same_row(const std::string& want, const std::string& got) const;
  std::string describe() const;  // "bitwise" or "within rtol R, atol A"
};

struct DataDigests {
  int64_t train_rows = 0, validation_rows = 0;
  std::string train_sha256, validation_sha256;
};
DataDigests data_digests(const Model& model);

// metrics.csv without its wall-clock column, so two runs of the same bits compare equal.
std::string metrics_without_seconds(const std::string& metrics_csv);

struct ReceiptInput {
  const Model* model = nullptr;
  std::string out_dir, status, run_sha256, engine, dtype;
  bool fused = false;
  int threads = 1;
  int64_t steps = 0, epochs = 0;
};
// Renders receipt.json from the files now in out_dir (loss.csv, metrics.csv, the weights files).
std::string render_receipt(const ReceiptInput& in);

// A golden for `train --expect`: a run folder (its receipt.json and loss.csv), a receipt.json
// (with the loss.csv beside it when there is one), or a bare loss.csv (the loss log alone).
struct Golden {
  std::string path;          // as given
  std::string folder;        // where its loss.csv, metrics.csv and weights files are ("" for none)
  std::string receipt_json;  // the receipt's text; empty: a bare loss log
  std::vector<std::string> loss_rows;  // loss.csv's rows after its header; empty when there is none
};
// InputError (located) for a missing or malformed golden.
Golden read_golden(const std::string& path);

// Before training: the data rows, the resolved spec and the model against the golden receipt.
// Empty when they agree (or the golden has no receipt), else one sentence naming the first
// difference and by how much.
std::string expect_inputs_difference(const Golden& golden, const Model& model);
// After training: metrics.csv (by epoch and column) and the weights (per parameter, max abs and rel
// difference) against the golden folder's files, else the receipt's digests. Empty when they
// agree. `notes` receives provenance differences (not failures).
std::string expect_outputs_difference(const Golden& golden, const std::string& out_dir, std::vector<std::string>& notes,
                                      const Tolerance& tol = {});

// The first differing loss row, described: "at step k (epoch e): expected X, got Y (abs d, rel r)".
std::string describe_loss_difference(int64_t step, const std::string& expected_row, const std::string& got_row);

}  // namespace gr
