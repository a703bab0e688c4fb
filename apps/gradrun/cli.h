// cli.h — what the subcommands share: loading a spec with command-line overrides, the device
// choice, and the exceptions that map to exit codes (0 ok, 1 check failed, 2 bad input, 3 runtime).
#pragma once
#include <CLI/CLI.hpp>
#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "device/backend.h"
#include "dist/comm.h"
#include "io/errors.h"
#include "spec/spec.h"
#include "train/engine.h"

namespace gr {
struct TrainedWeights;
}

namespace gr::cli {

// A check or --expect comparison failed: exit 1 (the message is already printed; `what` repeats it
// for --junit).
struct CheckFailed {
  std::string what;
};

// Runs a command's body and, when `junit_file` is not empty, writes a JUnit file with one test case
// (classname gradrun.COMMAND, name NAME): passed, a failure (CheckFailed, its what) or an error (any
// other exception, its message); the outcome is rethrown unchanged (lib/train/junit.h).
void with_junit(const std::string& junit_file, const std::string& command, const std::string& name, const std::function<void()>& body);

// A bad command line that CLI11 could not catch (conflicting flags ...): exit 2.
class UsageError : public Error {
 public:
  using Error::Error;
};

// The process group when gradrun runs under mpirun (set by `train`; null otherwise). It lives until
// the process exits: an error on one rank is reported with the rank and ends the whole job
// (dist::Comm::abort) instead of finalizing MPI while other ranks wait.
extern std::unique_ptr<dist::Comm> g_comm;

struct Overrides {
  std::optional<uint64_t> seed;
  std::optional<int64_t> epochs;
};

// Loads the spec with the command's `--set PATH=VALUE` items (every subcommand has the flag; see
// spec/overrides.h) applied to its text, then train's --seed/--epochs.
Spec load_with_overrides(const std::string& path, const Overrides& o);
// The same for a spec file or a run folder (its spec.json, the spec as trained: train/run_model.h).
Spec load_spec_or_run(const std::string& spec_or_run_dir, const Overrides& o);

// The trained model of predict, evaluate and export: `spec_or_run` is a run folder (its spec.json;
// weights from `weights_flag` or the folder) or a spec file (then `weights_flag` is required and the
// weights must hold the same model: compared by model identity, not bytes). `which`: best | final
// (train/run_model.h choose_weights); the file used is logged when a folder was given.
struct TrainedSource {
  Spec spec;
  std::string weights;  // a run folder or a weights file, for read_trained
};
TrainedSource trained_source(const std::string& spec_or_run, const std::string& weights_flag);

// Every command's engine (train, check, grad, predict): --device/--dtype/--fuse over the spec's
// "device" object (train/engine.h engine_request; the flags are words checked by CLI11), then
// open_engine: auto becomes Cuda when a CUDA backend opens and Cpu otherwise (logged at info
// level); Host and Cuda are opened here (exit 3 when unavailable). Fuse on without a device is a
// usage error.
Engine choose_engine(const Spec& spec, const std::string& device_flag, const std::string& dtype_flag, bool fuse_flag);

// --threads N|auto (default auto: every core). Work splits over output rows only, so results never
// change. `automatic` (train's): set when the count is auto, so the loop may pick 1 or all per step
// by timing (lib/train/thread_tuner.h).
void add_threads_option(CLI::App* command, int& threads, bool* automatic = nullptr);
void apply_threads(int threads);

void add_train(CLI::App& app);
void add_check(CLI::App& app);
void add_grad(CLI::App& app);
void add_inspect(CLI::App& app);
void add_export(CLI::App& app);
void add_emit(CLI::App& app);
void add_predict(CLI::App& app);
void add_evaluate(CLI::App& app);
void add_import(CLI::App& app);
void add_diff(CLI::App& app);
void add_regress(CLI::App& app);
void add_cv(CLI::App& app);
void add_sweep(CLI::App& app);
void add_generate(CLI::App& app);
// predict on a model trained on text data (cmd_generate.cpp): one CSV row per prompt of `data`.
void predict_text(const Spec& spec, const TrainedWeights& w, Engine& engine, const std::string& data, const std::string& out,
                  bool logits, bool quiet);

}  // namespace gr::cli
