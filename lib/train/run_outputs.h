// run_outputs.h — the run folder's result files as `gradrun train` writes them: run.json, the
// logs (loss.csv, metrics.csv, loss.svg) and the weights (docs/cli.md, train).
#pragma once
#include <string>

#include "train/trainer.h"

namespace gr {

// The format of weights files (weights.safetensors, weights.best.safetensors): sealed (io/seal.h).
inline constexpr const char* kWeightsFormat = "gradrun-weights-2";

// run.json: the run's receipt, its status that of `r` (failed: the counters of the checkpoint on
// disk, r.resumable_*). render_run_json: its text.
std::string render_run_json(Model& model, const TrainOptions& o, const TrainResult& r, const std::string& run_sha256);
void write_run_json(Model& model, const TrainOptions& o, const TrainResult& r, const std::string& run_sha256);
// The logs so far and run.json (last); the weights too when the run finished.
void write_outputs(Model& model, const TrainOptions& o, const TrainResult& r, const std::string& run_sha256);

}  // namespace gr
