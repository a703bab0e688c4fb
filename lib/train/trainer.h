// trainer.h — the minibatch training loop of `gradrun train` and its outputs.
//
// Per epoch e (0-based): the training rows in the order random_permutation(n, seed,
// kShuffleStream + e) (or ascending without shuffle), cut into batches of batch_size (the last
// partial batch dropped unless drop_last is false); per batch: fill the input slots, record,
// backward, optimizer step (logging the step's loss and gradient norm), reset_to(mark). After each
// epoch: the metrics.csv row (train accuracy, validation loss, accuracy and regression metrics);
// a checkpoint after the first epoch (or its first 100 steps), after the last, and at most every 2 s
// on the way (the two newest kept). At the end: loss.csv, metrics.csv, weights.safetensors, loss.svg, run.json.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "device/backend.h"
#include "dist/comm.h"
#include "io/errors.h"
#include "spec/spec.h"

#include "train/engine.h"
#include "train/evaluate.h"
#include "train/model.h"
#include "train/receipt.h"
#include "train/run_files.h"

namespace gr {

struct TrainOptions {
  std::string out_dir;
  int64_t epochs = 1;       // total epochs of the run (a resumed run continues up to this; 0: the checkpoint's target)
  std::string init_file;    // --init: start from these parameters
  std::string resume_dir;   // --resume: a previous run folder (or its checkpoint/)
  bool quiet = false;
  bool force = false;       // --force: replace a different run's files in out_dir
  // --expect: the golden loss.csv's rows after its header; the run stops (ExpectMismatch, status
  // failed, the logs written) at the first step whose row differs or that the golden log lacks.
  std::vector<std::string> expect;
  Tolerance expect_tolerance;  // bitwise by default; --rtol/--atol
  // The engine (train/engine.h): kind Cpu (the tape) | Host | Cuda (Auto is resolved by open_engine),
  // dtype (the Model's precision), fuse (device runs only).
  DeviceSpec engine;
  // --threads auto: the CPU tape's loop runs each step on 1 thread or on num_threads(), whichever
  // its timings say is faster right now (thread_tuner.h); the bytes are the same either way.
  bool auto_threads = false;
  // The process group of a data-parallel run (train.shards on `mpirun`; docs/distributed.md); null:
  // this process alone. Rank 0 alone writes the run folder and prints progress.
  dist::Comm* comm = nullptr;
};

struct TrainResult {
  RunLog log;
  int64_t steps = 0;        // all steps of the run, resumed ones included
  int64_t steps_run = 0;    // the steps this process ran (what `seconds` timed)
  double seconds = 0.0;
  int64_t target_epochs = 0;
  std::string status = "running";  // run.json: running | complete | interrupted | diverged | failed (docs/cli.md)
  std::string weights_sha256;
  bool fused = false;  // the device ran generated megakernels
  int threads = 1;     // num_threads() when the run started: the most threads a step used
  bool threads_auto = false;        // the thread count was chosen per step (TrainOptions::auto_threads)
  int64_t steps_on_one_thread = 0;  // with threads_auto: this process's steps that ran on 1 thread
  // Why the run ended: "epochs" (reached its target), "early_stopping" (train.early_stopping; the
  // reason in stop_detail), "interrupted", "diverged", "failed"; empty while running.
  std::string stop_reason, stop_detail;
  BestWeights best;  // under train.early_stopping: the best epoch's weights so far (epoch 0: none)
  // The newest checkpoint on disk (written by this run or resumed from): what a resume continues
  // from; a failed run's run.json reports these, not what was in memory.
  bool resumable = false;
  int64_t resumable_epoch = 0, resumable_step = 0, resumable_in_epoch = 0;
  std::string resumable_dir;
};

// Throws InputError / IoError for bad input and unwritable outputs; a diverged run (NaN/inf loss, or
// an epoch's mean train loss above train.diverge_factor × the first epoch's — for epoch 1, × the
// first step's) throws DivergedError after writing the logs, keeping the last good checkpoint. A
// SIGINT/SIGTERM (run_state.h) finishes the step, writes a checkpoint and the logs and throws
// InterruptedError. run.json's status says which (running while training; failed on other errors).
// backend: the device's backend (Engine::take_backend of the caller's open_engine, the one place a
// backend is opened, before the run folder is touched); null on the CPU tape.
TrainResult train(Model& model, const TrainOptions& options, std::unique_ptr<device::Backend> backend = nullptr);

// Validation, train accuracy and evaluate(): train/evaluate.h.

class DivergedError : public Error {
 public:
  using Error::Error;
};

class ExpectMismatch : public Error {
 public:
  ExpectMismatch(int64_t at, std::string want, std::string row)
      : Error("the loss log differs at step " + std::to_string(at)), step(at), expected(std::move(want)), got(std::move(row)) {}
  int64_t step;
  std::string expected, got;  // expected is empty when the golden log ends before this step
};

}  // namespace gr
