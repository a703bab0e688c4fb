#include "train/trainer.h"

#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <exception>
#include <filesystem>
#include <limits>
#include <optional>
#include <span>
#include <nlohmann/json.hpp>

#include "interchange/preprocess.h"
#include "io/atomic_file.h"
#include "io/errors.h"
#include "io/limits.h"
#include "io/safetensors.h"
#include "io/seal.h"
#include "spec/text_data.h"
#include "spec/random.h"
#include "tensor/diag.h"
#include "tensor/parallel.h"
#include "tensor/sha256.h"
#include "train/early_stopping.h"
#include "train/evaluate.h"
#include "train/plot_svg.h"
#include "train/progress.h"
#include "train/receipt.h"
#include "train/run_model.h"
#include "train/run_outputs.h"
#include "train/run_state.h"
#include "train/schedule.h"
#include "train/step_engine.h"

namespace gr {

namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;
constexpr double kCheckpointSeconds = 2.0;
constexpr int64_t kFirstCheckpointSteps = 100;  // the first checkpoint: after epoch 1 or this many steps, whichever is sooner

double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

// The mean of the epoch's per-step values from `begin` (its first step), summed in step order.
double epoch_mean(const std::vector<double>& steps, size_t begin, int64_t count) {
  double sum = 0.0;
  for (size_t i = begin; i < steps.size(); ++i) sum = sum + steps[i];
  return steps.size() < begin + static_cast<size_t>(count) ? kNaNMetric : sum / static_cast<double>(count);
}

// What to try when a run diverges: the optimizer's settings, one line.
std::string divergence_advice(const Spec& spec) {
  const OptimizerSpec& opt = spec.optimizer;
  std::string s = "try a lower optimizer.lr than " + format_double(opt.lr) + " (e.g. " + format_double(opt.lr / 10) + ")";
  s += opt.clip > 0 ? ", a smaller optimizer.clip than " + format_double(opt.clip) : std::string(", or gradient clipping (optimizer.clip, e.g. 1)");
  return s;
}

// One train() call: its run folder, its counters and logs, its checkpoints and how it stops. train()
// itself is the loop over epochs and steps; everything around a step lives here.
class TrainRun {
 public:
  TrainRun(Model& m, const TrainOptions& opts, bool have_backend);
  ~TrainRun();  // an exception leaving train(): run.json says failed (fail_on_unwind)

  void start_or_resume();                                  // a checkpoint to continue from, or the init files
  void make_engine(std::unique_ptr<device::Backend> backend);  // the step engine (train/step_engine.h)
  void check_batches();                                    // the odd last batches fit, the checkpoint's counters agree
  void set_lr(int64_t t, int64_t e);                       // the step's scheduled learning rate (the Optimizer owns it)
  std::span<const int64_t> batch_rows(const std::vector<int64_t>& order, int64_t s);
  double resumed_sum(int64_t epoch, int64_t s0) const;     // an interrupted epoch's step losses so far, in order
  bool record_step(double loss, int64_t epoch);            // logs the step; false when the loss is not finite
  void finish_step(const StepEngine::Finish& f, int64_t epoch, int64_t s);
  bool end_epoch(int64_t epoch, size_t epoch_begin, double epoch_sum);  // true: stop early
  [[noreturn]] void diverged(int64_t epoch);
  TrainResult finish();

  Model& model;
  const TrainOptions& o;
  const Spec& spec;
  std::unique_ptr<dist::Comm> solo = dist::solo();
  dist::Comm& comm;
  const bool writer;  // rank 0 alone writes the run folder
  std::optional<RunFolderLock> folder_lock;  // one writer per folder, from the first check to the last write
  std::string identity, run_sha;
  Optimizer opt;  // the one owner of the optimizer state, whichever engine steps
  TrainResult r;
  std::unique_ptr<StepEngine> engine;
  std::optional<EarlyStopping> early;
  std::optional<Progress> progress;
  int64_t first_epoch = 0, first_step = 0, target = 0, n = 0, batch = 0, steps_per_epoch = 1;

 private:
  void say_running();
  void stop(const std::string& status);
  void checkpoint(int64_t epoch, int64_t step_in_epoch);
  [[noreturn]] void interrupted(int64_t epoch, int64_t step_in_epoch);
  std::string kept() const;
  void fail_on_unwind();

  std::string resumed_from;  // the checkpoint file resumed from
  bool resume_fell_back = false, said_running = false, outcome_written = false;
  int64_t resumed_in_epoch = 0, checkpoint_epoch = 0;
  int pending_exceptions = std::uncaught_exceptions();
  Clock::time_point t0 = Clock::now(), last_checkpoint = Clock::now();
  double resumed_seconds = 0.0;
  std::string ckpt_dir, checkpoint_where;
  bool wrote_checkpoint = false;
  std::vector<int64_t> rows_;
  int restore_threads_ = num_threads();  // the process keeps the count it was given, however the run ends
  std::optional<InterruptGuard> interrupts_;  // SIGINT/SIGTERM finish the step, from the first step on
};

TrainRun::TrainRun(Model& m, const TrainOptions& opts, bool have_backend)
    : model(m), o(opts), spec(m.spec()), comm(opts.comm ? *opts.comm : *solo), writer(comm.rank() == 0), opt(m.make_optimizer()),
      ckpt_dir(opts.out_dir + "/checkpoint") {
  if (o.engine.dtype != model.real())
    throw Error(std::string("train: --dtype ") + to_string(o.engine.dtype) + " needs a Model built with that precision (Model(spec, data, DType))");
  // The caller opened the engine first (open_engine): a device that cannot be had (no GPU, no
  // compiler) failed before the output folder was touched, so nothing is left behind.
  if (o.engine.kind != DeviceKind::Cpu && !have_backend)
    throw Error(std::string("train: a ") + to_string(o.engine.kind) + " engine needs its open backend (open_engine, train/engine.h)");
  std::error_code ec;
  if (writer) {
    fs::create_directories(o.out_dir, ec);
    if (ec || !fs::is_directory(o.out_dir))
      throw IoError(o.out_dir, "cannot create the output folder: " + (ec ? ec.message() : std::string("not a folder")));
    folder_lock.emplace(o.out_dir);
    if (const int stale = remove_stale_temporaries(o.out_dir))
      diag::info(std::to_string(stale) + " temporary file(s) of an earlier, killed run removed from " + o.out_dir);
    const std::string probe = o.out_dir + "/.gradrun-write-test";
    write_file_atomic(probe, "");  // fail now, not after training, when the folder is not writable
    fs::remove(probe, ec);
  }
  identity = run_identity(model);
  run_sha = sha256_hex(identity);
  if (comm.size() > 1) {  // every rank must train the same spec on the same data
    const std::vector<std::string> shas = comm.allgather_text(run_sha);
    for (size_t q = 1; q < shas.size(); ++q)
      if (shas[q] != shas[0])
        throw InputError(spec.path, "", "rank " + std::to_string(q) + " read a different spec, data or init than rank 0 (run identity " +
                                            shas[q].substr(0, 12) + " vs " + shas[0].substr(0, 12) + ")");
  }
  r.target_epochs = o.epochs > 0 ? o.epochs : spec.train.epochs;
  if (const auto& es = spec.train.early_stopping) {
    early.emplace(*es);
    if (es->monitor.rfind("val_", 0) == 0 && (!spec.data || model.data().validation.rows == 0))
      throw InputError(spec.path, "/train/early_stopping/monitor",
                       es->monitor + " needs validation rows (data.validation); monitor train_loss, or add a validation split");
    if (es->monitor == "val_auc" && classifier_classes(model.program()) != 2)
      throw InputError(spec.path, "/train/early_stopping/monitor", "val_auc needs a binary classifier (metrics.accuracy with one logit or two classes)");
  }
  regression_of(model);  // a declared metrics.regression that does not fit the graph: refused before training
}

// Once this process has written "running", run.json says how the run ended on every exit path it
// survives: an exception before the outcome's files are written (a setup error, a full disk while
// writing the logs, weights or a checkpoint) leaves status failed with the counters of the
// checkpoint on disk (render_run_json); on a full disk written in place. When even that fails it
// keeps "running", which a reader takes for killed-or-unknown.
TrainRun::~TrainRun() {
  set_num_threads(restore_threads_);
  if (std::uncaught_exceptions() > pending_exceptions) fail_on_unwind();
}

void TrainRun::fail_on_unwind() {
  if (!writer || !said_running || outcome_written) return;
  r.status = "failed";
  r.stop_reason = "failed";
  try {
    const std::string text = render_run_json(model, o, r, run_sha);
    try {
      write_file_atomic(o.out_dir + "/run.json", text);
    } catch (const IoError&) {  // no room for a second copy (disk full): the old one's room, in place
      overwrite_file_in_place(o.out_dir + "/run.json", text);
    }
  } catch (...) {  // the original error is the one to report
  }
}

void TrainRun::say_running() {
  if (!writer) return;
  write_run_json(model, o, r, run_sha);
  said_running = true;
}

void TrainRun::start_or_resume() {
  std::error_code ec;
  if (o.resume_dir.empty()) {
    if (!o.init_file.empty()) model.load_params(read_sealed_weights(o.init_file), o.init_file);  // bad input: the folder stays
    if (writer) {
      claim_run_folder(o.out_dir, run_sha, spec, o.force);
      // run.json first: a run killed before its first checkpoint leaves a folder that says whose it
      // is (status running: killed-or-unknown), so the same run may start there again.
      say_running();
      write_run_spec(o.out_dir, spec);  // the spec as trained: the run folder alone is the model
      if (!model.data().vocab.empty()) write_file_atomic(o.out_dir + "/vocab.json", vocab_json(model.data().vocab));
      write_sealed_safetensors(o.out_dir + "/init.safetensors", model.param_views(),
                               {{"spec", spec.source}, {"spec_sha256", spec.sha256}, {"steps", "0"}, {"format", kWeightsFormat}});
    }
    target = r.target_epochs;
    checkpoint_where = ckpt_dir;
    return;
  }
  std::string dir = o.resume_dir;
  while (dir.size() > 1 && dir.back() == '/') dir.pop_back();
  if (fs::path(dir).filename() != "checkpoint") dir += "/checkpoint";  // a run folder (or its checkpoint/)
  const std::string run_dir = fs::path(dir).parent_path().string();
  const Checkpoint c = read_checkpoint(dir, model, opt, identity);
  resumed_from = c.path;
  resume_fell_back = c.fell_back;
  resumed_in_epoch = c.step_in_epoch;
  first_epoch = checkpoint_epoch = c.epoch;
  first_step = c.step_in_epoch;
  if (o.epochs <= 0) r.target_epochs = c.target_epochs > 0 ? c.target_epochs : spec.train.epochs;
  if (r.target_epochs < c.epoch + (c.step_in_epoch > 0 ? 1 : 0))
    throw InputError(run_dir, "",
                     "the run here has done " + std::to_string(c.epoch) + " epochs" +
                         (c.step_in_epoch > 0 ? " and " + std::to_string(c.step_in_epoch) + " steps of the next" : "") +
                         "; --epochs " + std::to_string(r.target_epochs) + " is fewer (give --epochs " +
                         std::to_string(c.epoch + (c.step_in_epoch > 0 ? 1 : 0)) + " or more)");
  if (first_step > 0 && o.engine.kind != DeviceKind::Cpu)
    throw InputError(dir, "__metadata__",
                     "this checkpoint stopped inside an epoch (step " + std::to_string(first_step) +
                         "); resume it on the CPU tape (--device cpu), which continues from that step");
  r.log.step_loss = c.loss_history;
  r.log.step_epoch = c.loss_epochs;
  r.log.step_grad_norm = c.grad_norm_history;
  r.log.epochs = c.epochs;
  r.steps = c.step;
  r.resumable = true;  // the checkpoint on disk, until this run writes its own
  r.resumable_epoch = c.epoch, r.resumable_step = c.step, r.resumable_in_epoch = c.step_in_epoch;
  r.resumable_dir = fs::path(c.path).parent_path().string();
  if (early) early->restore(r.log, c.best, model, dir);
  if (writer && !fs::equivalent(run_dir, o.out_dir, ec)) {  // in place, the folder is this run's (its weights stay until replaced)
    claim_run_folder(o.out_dir, run_sha, spec, o.force);
    const std::string init = run_dir + "/init.safetensors";
    if (fs::exists(init)) write_file_atomic(o.out_dir + "/init.safetensors", read_file(init));
  }
  if (writer) write_run_spec(o.out_dir, spec);  // also in place: a folder from before spec.json gains one
  if (writer && !model.data().vocab.empty()) write_file_atomic(o.out_dir + "/vocab.json", vocab_json(model.data().vocab));
  target = r.target_epochs;
  wrote_checkpoint = first_epoch > 0 || first_step > 0;  // a resumed run has its checkpoint on disk already
  checkpoint_where = wrote_checkpoint ? fs::path(resumed_from).parent_path().string() : ckpt_dir;
  resumed_seconds = r.log.epochs.empty() ? 0.0 : r.log.epochs.back().seconds;
}

void TrainRun::make_engine(std::unique_ptr<device::Backend> backend) {
  r.threads = num_threads();
  engine = make_step_engine(model, opt, comm, o.engine, std::move(backend), o.auto_threads);
  r.fused = engine->fused();
  r.threads_auto = engine->tunes_threads();  // --threads auto: the CPU tape's steps on 1 thread or all
  if (o.engine.kind != DeviceKind::Cpu || spec.train.shards > 1 || comm.size() > 1) {
    if (writer) diag::info(engine->describe());
    else diag::debug(engine->describe());
  }
}

void TrainRun::check_batches() {
  const Program& p = model.program();
  const DataTable& train_rows = model.data().train;
  n = spec.data ? train_rows.rows : 0;
  batch = spec.data ? p.batch * p.shards : 0;  // the step's rows: shards × the graph's batch
  steps_per_epoch = spec.data ? (spec.train.drop_last ? n / batch : (n + batch - 1) / batch) : 1;
  if (spec.data && !spec.train.drop_last && n % batch != 0) {  // check the odd last batch fits before training
    if ((n % batch) % p.shards != 0)
      throw InputError(spec.path, "/train/drop_last",
                       "the last batch of " + std::to_string(n % batch) + " rows does not split into " + std::to_string(p.shards) +
                           " equal shards; set drop_last to true");
    std::vector<int64_t> rows(static_cast<size_t>(n % batch / p.shards));
    for (size_t i = 0; i < rows.size(); ++i) rows[i] = static_cast<int64_t>(i);
    // With a training key: the batch is a training step's (batch_norm needs two values per channel there).
    if (model.record(train_rows, rows, model.dropout_key(1)).empty())
      throw InputError(spec.path, "/train/drop_last",
                       "the last batch of " + std::to_string(rows.size()) + " rows does not fit the graph; set drop_last to true");
    model.reset();
  }
  // The counters of a resumed checkpoint against this run's epochs (its seal and its own counters
  // were checked when it was read).
  if (!resumed_from.empty() && r.steps != first_epoch * steps_per_epoch + resumed_in_epoch)
    throw DamagedCheckpoint(resumed_from, "__metadata__",
                            "step " + std::to_string(r.steps) + " but epoch " + std::to_string(first_epoch) + " x " +
                                std::to_string(steps_per_epoch) + " steps per epoch + step_in_epoch " + std::to_string(resumed_in_epoch) +
                                ": the checkpoint is damaged");
  // Every validation row counts: a last partial validation batch the graph's fixed shapes cannot
  // take is refused now, rather than silently left out of val_loss and val_accuracy.
  if (spec.data && unfit_last_batch(model, model.data().validation) > 0)
    throw unfit_batch_error(model, model.data().validation.rows, "the validation split");
  // The device holds the consts and frozen parameters now; the host needs them per epoch only.
  const size_t freed = engine->release_host_copies();
  if (freed > 0 && writer)
    diag::info("device: host copies of consts and frozen parameters dropped until needed (" + human_bytes(static_cast<double>(freed)) + ")");
  interrupts_.emplace();
  say_running();  // status running (again: the threads and engine are known now)
  progress.emplace(o.quiet || !writer, target, steps_per_epoch);
  t0 = last_checkpoint = Clock::now();
  r.log.step_lr.clear();  // a resumed log: the rates of its steps, recomputed
  if (spec.optimizer.schedule)
    for (size_t i = 0; i < r.log.step_loss.size(); ++i)
      r.log.step_lr.push_back(scheduled_lr(spec.optimizer, static_cast<int64_t>(i + 1), r.log.step_epoch[i] - 1, steps_per_epoch));
}

void TrainRun::set_lr(int64_t t, int64_t e) {
  if (spec.optimizer.schedule) opt.set_lr(scheduled_lr(spec.optimizer, t, e, steps_per_epoch));
}

std::span<const int64_t> TrainRun::batch_rows(const std::vector<int64_t>& order, int64_t s) {
  rows_.clear();
  for (int64_t i = s * batch; i < std::min(n, (s + 1) * batch); ++i) rows_.push_back(order[static_cast<size_t>(i)]);
  return rows_;
}

double TrainRun::resumed_sum(int64_t epoch, int64_t s0) const {
  double sum = 0.0;
  for (size_t i = 0; s0 > 0 && i < r.log.step_loss.size(); ++i)
    if (r.log.step_epoch[i] == epoch + 1) sum = sum + r.log.step_loss[i];
  return sum;
}

void TrainRun::stop(const std::string& status) {
  engine->restore_host_copies();  // the weight files need every parameter
  r.seconds = seconds_since(t0);
  r.status = status;
  r.stop_reason = status;
  if (early) r.best = early->best();
  if (writer) write_outputs(model, o, r, run_sha);
  outcome_written = true;  // interrupted, diverged, or failed (--expect) with the logs
}

// A checkpoint: the owners' optimizer moments to rank 0 first (every rank calls this), which writes.
void TrainRun::checkpoint(int64_t epoch, int64_t step_in_epoch) {
  engine->restore_host_copies();  // released again at the next epoch's start
  engine->gather_optimizer_state();
  // After a fallback the damaged newest is overwritten, so the intact previous one stays.
  if (writer)
    write_checkpoint(ckpt_dir, model, opt, r.log, epoch, step_in_epoch, target, identity, early ? early->best() : BestWeights{},
                     !std::exchange(resume_fell_back, false));
  checkpoint_epoch = epoch;
  checkpoint_where = ckpt_dir;
  r.resumable = true;
  r.resumable_epoch = epoch, r.resumable_step = r.steps, r.resumable_in_epoch = step_in_epoch;
  r.resumable_dir = ckpt_dir;
  wrote_checkpoint = true;
  last_checkpoint = Clock::now();
}

bool TrainRun::record_step(double value, int64_t epoch) {
  r.log.step_loss.push_back(value);
  r.log.step_epoch.push_back(epoch + 1);
  if (spec.optimizer.schedule)
    r.log.step_lr.push_back(scheduled_lr(spec.optimizer, static_cast<int64_t>(r.log.step_loss.size()), epoch, steps_per_epoch));
  ++r.steps;
  ++r.steps_run;
  if (!o.expect.empty()) {
    const size_t k = r.log.step_loss.size();
    const std::string row = std::to_string(k) + "," + std::to_string(epoch + 1) + "," + format_double(value);
    if (k > o.expect.size() || !o.expect_tolerance.same_row(o.expect[k - 1], row)) {
      stop("failed");
      throw ExpectMismatch(static_cast<int64_t>(k), k > o.expect.size() ? std::string() : o.expect[k - 1], row);
    }
  }
  return std::isfinite(value);
}

// After a step's loss is logged: its gradient norm; an interrupt or the first checkpoint of a long first epoch.
void TrainRun::finish_step(const StepEngine::Finish& f, int64_t epoch, int64_t s) {
  r.log.step_grad_norm.push_back(f.grad_norm);
  if (r.threads_auto) r.steps_on_one_thread = f.steps_on_one_thread;
  if (!engine->stops_mid_epoch() || s + 1 >= steps_per_epoch) return;
  if (f.interrupt) interrupted(epoch, s + 1);
  if (engine->early_checkpoint() && !wrote_checkpoint && r.steps_run == kFirstCheckpointSteps) {
    checkpoint(epoch, s + 1);
    diag::debug("checkpoint at step " + std::to_string(r.steps) + " (epoch " + std::to_string(epoch + 1) + ") written to " + ckpt_dir);
  }
}

std::string TrainRun::kept() const {
  return checkpoint_epoch > 0 ? "the last good checkpoint (epoch " + std::to_string(checkpoint_epoch) + ") is in " + checkpoint_where
                              : std::string("no checkpoint was written yet");
}

void TrainRun::diverged(int64_t epoch) {
  stop("diverged");
  throw DivergedError(spec.path + ": training diverged: the loss is " + format_double(r.log.step_loss.back()) + " at step " +
                      std::to_string(r.steps) + " (epoch " + std::to_string(epoch + 1) + "); " + divergence_advice(spec) + "; " + kept());
}

void TrainRun::interrupted(int64_t epoch, int64_t step_in_epoch) {
  checkpoint(epoch, step_in_epoch);
  stop("interrupted");
  throw InterruptedError("interrupted at step " + std::to_string(r.steps) + " (epoch " + std::to_string(epoch + (step_in_epoch > 0 ? 1 : 0)) +
                         " of " + std::to_string(target) + "), checkpoint written; continue with: gradrun train --resume " +
                         shell_quote(o.out_dir));
}

bool TrainRun::end_epoch(int64_t epoch, size_t epoch_begin, double epoch_sum) {
  const double mean = epoch_sum / static_cast<double>(steps_per_epoch);
  engine->sync();  // parameters to the tape (validation, files), optimizer state to opt
  // Divergence: the epoch's mean train loss against the first epoch's (in epoch 1, the first step's).
  const double ref = r.log.epochs.empty() ? (r.log.step_loss.empty() ? kNaNMetric : r.log.step_loss.front()) : r.log.epochs.front().train_loss;
  if (!r.log.step_loss.empty() && std::isfinite(ref) && ref > 0 && mean > spec.train.diverge_factor * ref) {
    size_t worst = epoch_begin;
    while (worst + 1 < r.log.step_loss.size() && !(r.log.step_loss[worst] > spec.train.diverge_factor * ref)) ++worst;
    stop("diverged");
    throw DivergedError(spec.path + ": training diverged: epoch " + std::to_string(epoch + 1) + "'s mean train loss " +
                        format_double(mean) + " is above train.diverge_factor " + format_double(spec.train.diverge_factor) + " x " +
                        (r.log.epochs.empty() ? "the first step's loss " : "epoch 1's ") + format_double(ref) + " (first at step " +
                        std::to_string(worst + 1) + ", loss " + format_double(r.log.step_loss[worst]) + "); " + divergence_advice(spec) +
                        "; " + kept());
  }
  const Evaluation val = evaluate_metrics(model, model.data().validation);
  EpochRecord e{epoch + 1, mean, val.loss, val.accuracy, resumed_seconds + seconds_since(t0), r.steps};
  e.train_accuracy = train_accuracy(model);
  e.grad_norm = epoch_mean(r.log.step_grad_norm, epoch_begin, steps_per_epoch);
  e.val_mae = val.mae, e.val_rmse = val.rmse, e.val_r2 = val.r2;
  e.val_f1 = val.classes.macro_f1, e.val_auc = val.classes.roc_auc;
  r.log.epochs.push_back(e);
  if (early) early->observe(e, model);
  const bool stop_early = early && early->should_stop(epoch + 1) && epoch + 1 < target;
  if (diag::enabled(diag::Level::Debug))
    diag::debug("epoch " + std::to_string(epoch + 1) + ": mean train loss " + format_double(mean) + ", val loss " + format_double(val.loss) +
                ", " + std::to_string(static_cast<int64_t>(1e3 * e.seconds)) + " ms since the run began");
  // A checkpoint after the first and the last epoch, and on the way at most every
  // kCheckpointSeconds (tiny epochs would otherwise spend their time writing checkpoints).
  double due = epoch + 1 == target || stop_early || !wrote_checkpoint || seconds_since(last_checkpoint) >= kCheckpointSeconds ? 1.0 : 0.0;
  if (comm.size() > 1) comm.broadcast(&due, 1, 0);  // rank 0's clock decides for every rank
  if (due != 0.0) {
    const auto c0 = Clock::now();
    checkpoint(epoch + 1, 0);
    diag::debug("checkpoint of epoch " + std::to_string(epoch + 1) + " written to " + ckpt_dir + " in " +
                std::to_string(static_cast<int64_t>(1e3 * seconds_since(c0))) + " ms");
  }
  progress->epoch(e);
  if (stop_early) {
    r.stop_reason = "early_stopping";
    r.stop_detail = "stopped after epoch " + std::to_string(epoch + 1) + ": " + early->describe_stop(epoch + 1);
    return true;
  }
  double stop_now = InterruptGuard::requested() ? 1.0 : 0.0;
  if (comm.size() > 1) comm.broadcast(&stop_now, 1, 0);  // mpirun signals every rank; rank 0's view decides
  if (stop_now != 0.0 && epoch + 1 < target) interrupted(epoch + 1, 0);
  return false;
}

TrainResult TrainRun::finish() {
  r.seconds = seconds_since(t0);
  r.weights_sha256 = weights_digest(model);
  r.status = "complete";
  if (r.stop_reason.empty()) r.stop_reason = "epochs";
  if (early) r.best = early->best();
  if (writer) write_outputs(model, o, r, run_sha);
  outcome_written = true;
  return r;
}

}  // namespace

// The loop: every engine (the CPU tape, a device, the shards: train/step_engine.h) runs a step and
// reports its loss and gradient norm the same way, after every step.
TrainResult train(Model& model, const TrainOptions& o, std::unique_ptr<device::Backend> backend) {
  TrainRun run(model, o, backend != nullptr);  // the run folder claimed, the run identity agreed by every rank
  run.start_or_resume();                        // from a checkpoint (its logs and optimizer state), or the init
  run.make_engine(std::move(backend));
  run.check_batches();                          // the last batches fit; host copies released; status running
  StepEngine& engine = *run.engine;
  const DataTable& train_rows = model.data().train;
  for (int64_t epoch = run.first_epoch; epoch < run.target; ++epoch) {
    const std::vector<int64_t> order = epoch_order(run.spec, run.n, epoch);
    const int64_t s0 = epoch == run.first_epoch ? run.first_step : 0;  // a resumed epoch continues at its step
    double epoch_sum = run.resumed_sum(epoch, s0);
    const size_t epoch_begin = run.r.log.step_loss.size() - static_cast<size_t>(s0);
    engine.release_host_copies();  // restored before the epoch's evaluation
    for (int64_t s = s0; s < run.steps_per_epoch; ++s) {
      const int64_t t = static_cast<int64_t>(epoch_begin) + s + 1;  // the run's step, 1-based
      run.set_lr(t, epoch);
      const double loss = engine.run(train_rows, run.batch_rows(order, s), t);
      if (!run.record_step(loss, epoch)) run.diverged(epoch);  // (the CPU tape has not updated yet)
      const StepEngine::Finish f = engine.finish();
      epoch_sum = epoch_sum + loss;
      run.progress->step(epoch + 1, s + 1, loss);
      run.finish_step(f, epoch, s);  // its gradient norm; an interrupt, an early checkpoint
    }
    if (run.end_epoch(epoch, epoch_begin, epoch_sum)) break;  // early stopping
  }
  return run.finish();
}

}  // namespace gr
