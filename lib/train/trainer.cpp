#include "train/trainer.h"

#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <limits>
#include <exception>
#include <functional>
#include <optional>
#include <nlohmann/json.hpp>

#include "io/atomic_file.h"
#include "io/errors.h"
#include "train/plot_svg.h"
#include "spec/random.h"
#include "io/safetensors.h"
#include "io/seal.h"
#include "tensor/diag.h"
#include "tensor/parallel.h"
#include "io/limits.h"
#include "train/device_runner.h"
#include "train/early_stopping.h"
#include "train/evaluate.h"
#include "train/schedule.h"
#include "interchange/preprocess.h"
#include "train/progress.h"
#include "train/receipt.h"
#include "train/run_model.h"
#include "train/run_outputs.h"
#include "train/run_state.h"
#include "train/sharded_step.h"
#include "train/thread_tuner.h"
#include "tensor/sha256.h"

namespace gr {

namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
using Clock = std::chrono::steady_clock;
constexpr double kCheckpointSeconds = 2.0;
constexpr int64_t kFirstCheckpointSteps = 100;  // the first checkpoint: after epoch 1 or this many steps, whichever is sooner

double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

}  // namespace

namespace {

// The mean of the epoch's per-step values from `begin` (its first step), summed in step order.
double epoch_mean(const std::vector<double>& steps, size_t begin, int64_t count) {
  double sum = 0.0;
  for (size_t i = begin; i < steps.size(); ++i) sum = sum + steps[i];
  return steps.size() < begin + static_cast<size_t>(count) ? kNaN : sum / static_cast<double>(count);
}

// What to try when a run diverges: the optimizer's settings, one line.
std::string divergence_advice(const Spec& spec) {
  const OptimizerSpec& opt = spec.optimizer;
  std::string s = "try a lower optimizer.lr than " + format_double(opt.lr) + " (e.g. " + format_double(opt.lr / 10) + ")";
  s += opt.clip > 0 ? ", a smaller optimizer.clip than " + format_double(opt.clip) : std::string(", or gradient clipping (optimizer.clip, e.g. 1)");
  return s;
}

}  // namespace

TrainResult train(Model& model, const TrainOptions& o, std::unique_ptr<device::Backend> backend) {
  const Spec& spec = model.spec();
  if (o.engine.dtype != model.real())
    throw Error(std::string("train: --dtype ") + to_string(o.engine.dtype) + " needs a Model built with that precision (Model(spec, data, DType))");
  const Program& p = model.program();
  const DataTable& train_rows = model.data().train;
  namespace fs = std::filesystem;
  std::error_code ec;
  const std::unique_ptr<dist::Comm> solo = dist::solo();
  dist::Comm& comm = o.comm ? *o.comm : *solo;
  const bool writer = comm.rank() == 0;  // rank 0 alone writes the run folder
  const bool sharded = spec.train.shards > 1 || comm.size() > 1;
  // The caller opened the engine first (open_engine): a device that cannot be had (no GPU, no
  // compiler) failed before the output folder was touched, so nothing is left behind.
  if (o.engine.kind != DeviceKind::Cpu && !backend)
    throw Error(std::string("train: a ") + to_string(o.engine.kind) + " engine needs its open backend (open_engine, train/engine.h)");
  std::optional<RunFolderLock> folder_lock;  // one writer per folder, from the first check to the last write
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
  const std::string identity = run_identity(model);
  const std::string run_sha = sha256_hex(identity);
  if (comm.size() > 1) {  // every rank must train the same spec on the same data
    const std::vector<std::string> shas = comm.allgather_text(run_sha);
    for (size_t q = 1; q < shas.size(); ++q)
      if (shas[q] != shas[0])
        throw InputError(spec.path, "", "rank " + std::to_string(q) + " read a different spec, data or init than rank 0 (run identity " +
                                            shas[q].substr(0, 12) + " vs " + shas[0].substr(0, 12) + ")");
  }

  Optimizer opt = model.make_optimizer();
  TrainResult r;
  // Once this process has written "running", run.json says how the run ended on every exit path it
  // survives: an exception before the outcome's files are written (a setup error, a full disk while
  // writing the logs, weights or a checkpoint) leaves status failed with the counters of the
  // checkpoint on disk (render_run_json); on a full disk written in place. When even that fails it
  // keeps "running", which a reader takes for killed-or-unknown.
  bool said_running = false, outcome_written = false;
  auto say_running = [&] {
    if (!writer) return;
    write_run_json(model, o, r, run_sha);
    said_running = true;
  };
  struct FailedOnUnwind {
    std::function<void()> mark;
    int pending = std::uncaught_exceptions();
    ~FailedOnUnwind() {
      if (std::uncaught_exceptions() > pending) mark();
    }
  } failed_on_unwind{[&] {
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
  }};
  r.target_epochs = o.epochs > 0 ? o.epochs : spec.train.epochs;
  int64_t first_epoch = 0, first_step = 0;
  std::string resumed_from;  // the checkpoint file resumed from
  bool resume_fell_back = false;
  int64_t resumed_in_epoch = 0;
  std::optional<EarlyStopping> early;
  if (const auto& es = spec.train.early_stopping) {
    early.emplace(*es);
    if (es->monitor.rfind("val_", 0) == 0 && (!spec.data || model.data().validation.rows == 0))
      throw InputError(spec.path, "/train/early_stopping/monitor",
                       es->monitor + " needs validation rows (data.validation); monitor train_loss, or add a validation split");
  }
  regression_of(model);  // a declared metrics.regression that does not fit the graph: refused before training
  if (!o.resume_dir.empty()) {
    std::string dir = o.resume_dir;
    while (dir.size() > 1 && dir.back() == '/') dir.pop_back();
    if (fs::path(dir).filename() != "checkpoint") dir += "/checkpoint";  // a run folder (or its checkpoint/)
    const std::string run_dir = fs::path(dir).parent_path().string();
    const Checkpoint c = read_checkpoint(dir, model, opt, identity);
    resumed_from = c.path;
    resume_fell_back = c.fell_back;
    resumed_in_epoch = c.step_in_epoch;
    first_epoch = c.epoch;
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
  } else {
    if (!o.init_file.empty()) model.load_params(read_sealed_weights(o.init_file), o.init_file);  // bad input: the folder stays
    if (writer) {
      claim_run_folder(o.out_dir, run_sha, spec, o.force);
      // run.json first: a run killed before its first checkpoint leaves a folder that says whose it
      // is (status running: killed-or-unknown), so the same run may start there again.
      say_running();
      write_run_spec(o.out_dir, spec);  // the spec as trained: the run folder alone is the model
      write_sealed_safetensors(o.out_dir + "/init.safetensors", model.param_views(),
                               {{"spec", spec.source}, {"spec_sha256", spec.sha256}, {"steps", "0"}, {"format", kWeightsFormat}});
    }
  }
  const int64_t target = r.target_epochs;

  std::unique_ptr<DeviceRunner> device;  // null: the CPU tape (or the sharded step)
  std::unique_ptr<ShardedStep> shards;   // train.shards > 1 or several processes
  if (sharded) {
    if (o.engine.dtype != DType::F64)
      throw InputError(spec.path, "/train/shards", "sharded training runs in f64 (its all-reduce and optimizer are f64); drop --dtype f32");
    shards = std::make_unique<ShardedStep>(model, opt, comm, std::move(backend), o.engine.fuse);
    if (writer) diag::info("shards: " + shards->describe());
    else diag::debug("shards: " + shards->describe());
  } else if (o.engine.kind != DeviceKind::Cpu) {
    device = std::make_unique<DeviceRunner>(model, opt, std::move(backend), o.engine.dtype, o.engine.fuse);
    r.fused = device->fused();
    diag::info("device: " + device->describe());
  }

  const int64_t n = spec.data ? train_rows.rows : 0;
  const int64_t batch = spec.data ? p.batch * p.shards : 0;  // the step's rows: shards × the graph's batch
  const int64_t steps_per_epoch = spec.data ? (spec.train.drop_last ? n / batch : (n + batch - 1) / batch) : 1;
  if (spec.data && !spec.train.drop_last && n % batch != 0) {  // check the odd last batch fits before training
    if ((n % batch) % p.shards != 0)
      throw InputError(spec.path, "/train/drop_last",
                       "the last batch of " + std::to_string(n % batch) + " rows does not split into " + std::to_string(p.shards) +
                           " equal shards; set drop_last to true");
    std::vector<int64_t> rows(static_cast<size_t>(n % batch / p.shards));
    for (size_t i = 0; i < rows.size(); ++i) rows[i] = static_cast<int64_t>(i);
    if (model.record(train_rows, rows).empty())
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
  auto release_host_copies = [&] {
    return device ? device->release_host_copies() : shards ? shards->release_host_copies() : size_t{0};
  };
  auto restore_host_copies = [&] {
    if (device) device->restore_host_copies();
    if (shards) shards->restore_host_copies();
  };
  {
    const size_t freed = release_host_copies();
    if (freed > 0 && writer)
      diag::info("device: host copies of consts and frozen parameters dropped until needed (" +
                 human_bytes(static_cast<double>(freed)) + ")");
  }
  // --threads auto on the CPU tape: each step on 1 thread or on all, by timing (thread_tuner.h).
  // The device and sharded steps keep the count they were given.
  r.threads = num_threads();
  std::optional<ThreadTuner> tuner;
  if (o.auto_threads && !device && !shards && r.threads > 1) tuner.emplace(r.threads);
  r.threads_auto = tuner.has_value();
  struct RestoreThreads {  // the process keeps the count it was given, however the run ends
    int n;
    ~RestoreThreads() { set_num_threads(n); }
  } restore_threads{r.threads};
  InterruptGuard interrupts;
  say_running();  // status running (again: the threads and engine are known now)
  Progress progress(o.quiet || !writer, target, steps_per_epoch);
  const auto t0 = Clock::now();
  const double resumed_seconds = r.log.epochs.empty() ? 0.0 : r.log.epochs.back().seconds;
  std::vector<int64_t> order, rows;
  const std::string ckpt_dir = o.out_dir + "/checkpoint";
  auto last_checkpoint = Clock::now();
  int64_t checkpoint_epoch = first_epoch;  // the last good checkpoint: the resumed one until we write ours
  std::string checkpoint_where = first_epoch > 0 || first_step > 0 ? fs::path(resumed_from).parent_path().string() : ckpt_dir;
  bool wrote_checkpoint = first_epoch > 0 || first_step > 0;  // a resumed run has its checkpoint on disk already
  auto stop = [&](const std::string& status) {
    restore_host_copies();  // the weight files need every parameter
    r.seconds = seconds_since(t0);
    r.status = status;
    r.stop_reason = status;
    if (early) r.best = early->best();
    if (writer) write_outputs(model, o, r, run_sha);
    outcome_written = true;  // interrupted, diverged, or failed (--expect) with the logs
  };
  // A checkpoint: the owners' optimizer moments to rank 0 first (every rank calls this), which writes.
  auto checkpoint = [&](int64_t epoch, int64_t step_in_epoch) {
    restore_host_copies();  // released again at the next epoch's start
    if (shards) shards->gather_optimizer_state();
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
  };
  // Logs a step's loss; false when it is not finite (the run stops there).
  auto record_step = [&](double value, int64_t epoch) {
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
  };
  auto kept = [&] {
    return checkpoint_epoch > 0 ? "the last good checkpoint (epoch " + std::to_string(checkpoint_epoch) + ") is in " + checkpoint_where
                                : std::string("no checkpoint was written yet");
  };
  auto diverged = [&](int64_t epoch) {
    stop("diverged");
    throw DivergedError(spec.path + ": training diverged: the loss is " + format_double(r.log.step_loss.back()) +
                        " at step " + std::to_string(r.steps) + " (epoch " + std::to_string(epoch + 1) + "); " +
                        divergence_advice(spec) + "; " + kept());
  };
  auto interrupted = [&](int64_t epoch, int64_t step_in_epoch) {
    checkpoint(epoch, step_in_epoch);
    stop("interrupted");
    throw InterruptedError("interrupted at step " + std::to_string(r.steps) + " (epoch " +
                           std::to_string(epoch + (step_in_epoch > 0 ? 1 : 0)) + " of " + std::to_string(target) +
                           "), checkpoint written; continue with: gradrun train --resume " + shell_quote(o.out_dir));
  };
  // The learning rate of step t (1-based) in epoch e (0-based), handed to the optimizer before it.
  auto set_lr = [&](int64_t t, int64_t e) {
    if (!spec.optimizer.schedule) return;
    const double lr = scheduled_lr(spec.optimizer, t, e, steps_per_epoch);
    opt.set_lr(lr);  // the one owner: the device optimizer reads it at its next step
  };
  r.log.step_lr.clear();  // a resumed log: the rates of its steps, recomputed
  if (spec.optimizer.schedule)
    for (size_t i = 0; i < r.log.step_loss.size(); ++i)
      r.log.step_lr.push_back(scheduled_lr(spec.optimizer, static_cast<int64_t>(i + 1), r.log.step_epoch[i] - 1, steps_per_epoch));
  for (int64_t epoch = first_epoch; epoch < target; ++epoch) {
    order = epoch_order(spec, n, epoch);
    double epoch_sum = 0.0;
    const int64_t s0 = epoch == first_epoch ? first_step : 0;
    for (size_t i = 0; s0 > 0 && i < r.log.step_loss.size(); ++i)  // the interrupted epoch's steps so far, in order
      if (r.log.step_epoch[i] == epoch + 1) epoch_sum = epoch_sum + r.log.step_loss[i];
    const size_t epoch_begin = r.log.step_loss.size() - static_cast<size_t>(s0);
    release_host_copies();  // restored before the epoch's evaluation
    for (int64_t s = s0; s < steps_per_epoch; ++s) {
      rows.clear();
      for (int64_t i = s * batch; i < std::min(n, (s + 1) * batch); ++i) rows.push_back(order[static_cast<size_t>(i)]);
      set_lr(static_cast<int64_t>(epoch_begin) + s + 1, epoch);
      if (shards) {  // the shards' gradients summed in shard order, the optimizer sharded over the ranks
        const ShardedStep::Outcome so = shards->step(train_rows, rows, static_cast<int64_t>(epoch_begin) + s + 1, InterruptGuard::requested());
        if (!record_step(so.loss, epoch)) diverged(epoch);
        r.log.step_grad_norm.push_back(so.grad_norm);
        epoch_sum = epoch_sum + so.loss;
        progress.step(epoch + 1, s + 1, so.loss);
        if (so.interrupt && s + 1 < steps_per_epoch) interrupted(epoch, s + 1);
        continue;
      }
      if (device) {  // forward, backward and the optimizer step replayed as one episode; the loss stays there
        device->step(rows, s, static_cast<int64_t>(epoch_begin) + s + 1);
        progress.step(epoch + 1, s + 1, kNaN);
        continue;
      }
      const Clock::time_point step_start = tuner ? Clock::now() : Clock::time_point{};  // only auto times steps
      if (tuner && tuner->next() != num_threads()) set_num_threads(tuner->next());
      const std::vector<Var>& nodes = model.record(train_rows, rows, model.dropout_key(static_cast<int64_t>(epoch_begin) + s + 1));
      const Var loss = nodes[static_cast<size_t>(p.loss)];
      const double value = model.tape().scalar(loss);
      if (!model.tape().backward(loss)) throw Error("backward failed: " + model.tape().error());
      if (!record_step(value, epoch)) {
        model.reset();
        diverged(epoch);
      }
      opt.step(model.tape());
      r.log.step_grad_norm.push_back(opt.last_grad_norm());
      model.reset();
      if (tuner) {
        if (tuner->record(seconds_since(step_start))) diag::debug(tuner->describe());
        r.steps_on_one_thread = tuner->steps_on(1);
      }
      epoch_sum = epoch_sum + value;
      progress.step(epoch + 1, s + 1, value);
      if (InterruptGuard::requested() && s + 1 < steps_per_epoch) interrupted(epoch, s + 1);
      if (!wrote_checkpoint && r.steps_run == kFirstCheckpointSteps && s + 1 < steps_per_epoch) {  // a long first epoch
        checkpoint(epoch, s + 1);
        diag::debug("checkpoint at step " + std::to_string(r.steps) + " (epoch " + std::to_string(epoch + 1) + ") written to " + ckpt_dir);
      }
    }
    if (device) {  // one download per epoch (two: the gradient norms too)
      const std::vector<double> norms = device->epoch_grad_norms(steps_per_epoch);
      r.log.step_grad_norm.insert(r.log.step_grad_norm.end(), norms.begin(), norms.end());
      for (double value : device->epoch_losses(steps_per_epoch)) {
        if (!record_step(value, epoch)) diverged(epoch);
        epoch_sum = epoch_sum + value;
      }
    }
    const double mean = epoch_sum / static_cast<double>(steps_per_epoch);
    // Divergence: the epoch's mean train loss against the first epoch's (in epoch 1, the first step's).
    const double ref = r.log.epochs.empty() ? (r.log.step_loss.empty() ? kNaN : r.log.step_loss.front()) : r.log.epochs.front().train_loss;
    if (!r.log.step_loss.empty() && std::isfinite(ref) && ref > 0 && mean > spec.train.diverge_factor * ref) {
      size_t worst = epoch_begin;
      while (worst + 1 < r.log.step_loss.size() && !(r.log.step_loss[worst] > spec.train.diverge_factor * ref)) ++worst;
      if (device) device->sync();
      stop("diverged");
      throw DivergedError(spec.path + ": training diverged: epoch " + std::to_string(epoch + 1) + "'s mean train loss " +
                          format_double(mean) + " is above train.diverge_factor " + format_double(spec.train.diverge_factor) +
                          " x " + (r.log.epochs.empty() ? "the first step's loss " : "epoch 1's ") + format_double(ref) +
                          " (first at step " + std::to_string(worst + 1) + ", loss " + format_double(r.log.step_loss[worst]) +
                          "); " + divergence_advice(spec) + "; " + kept());
    }
    if (device) device->sync();  // parameters to the tape (validation, files), optimizer state to opt
    if (shards) shards->restore_host_copies();  // a device's sync restored its own
    const Evaluation val = evaluate_metrics(model, model.data().validation);
    const double val_loss = val.loss;
    EpochRecord e{epoch + 1, mean, val.loss, val.accuracy, resumed_seconds + seconds_since(t0), r.steps};
    e.train_accuracy = train_accuracy(model);
    e.grad_norm = epoch_mean(r.log.step_grad_norm, epoch_begin, steps_per_epoch);
    e.val_mae = val.mae, e.val_rmse = val.rmse, e.val_r2 = val.r2;
    r.log.epochs.push_back(e);
    if (early) early->observe(e, model);
    const bool stop_early = early && early->should_stop(epoch + 1) && epoch + 1 < target;
    // A checkpoint after the first and the last epoch, and on the way at most every
    // kCheckpointSeconds (tiny epochs would otherwise spend their time writing checkpoints).
    if (diag::enabled(diag::Level::Debug))
      diag::debug("epoch " + std::to_string(epoch + 1) + ": mean train loss " + format_double(mean) + ", val loss " +
                  format_double(val_loss) + ", " + std::to_string(static_cast<int64_t>(1e3 * e.seconds)) + " ms since the run began");
    double due = epoch + 1 == target || stop_early || !wrote_checkpoint || seconds_since(last_checkpoint) >= kCheckpointSeconds ? 1.0 : 0.0;
    if (comm.size() > 1) comm.broadcast(&due, 1, 0);  // rank 0's clock decides for every rank
    if (due != 0.0) {
      const auto c0 = Clock::now();
      checkpoint(epoch + 1, 0);
      diag::debug("checkpoint of epoch " + std::to_string(epoch + 1) + " written to " + ckpt_dir + " in " +
                  std::to_string(static_cast<int64_t>(1e3 * seconds_since(c0))) + " ms");
    }
    progress.epoch(e);
    if (stop_early) {
      r.stop_reason = "early_stopping";
      r.stop_detail = "stopped after epoch " + std::to_string(epoch + 1) + ": " + early->describe_stop(epoch + 1);
      break;
    }
    double stop_now = InterruptGuard::requested() ? 1.0 : 0.0;
    if (comm.size() > 1) comm.broadcast(&stop_now, 1, 0);  // mpirun signals every rank; rank 0's view decides
    if (stop_now != 0.0 && epoch + 1 < target) interrupted(epoch + 1, 0);
  }
  r.seconds = seconds_since(t0);
  r.weights_sha256 = weights_digest(model);
  r.status = "complete";
  if (r.stop_reason.empty()) r.stop_reason = "epochs";
  if (early) r.best = early->best();
  if (writer) write_outputs(model, o, r, run_sha);
  outcome_written = true;
  return r;
}

}  // namespace gr
