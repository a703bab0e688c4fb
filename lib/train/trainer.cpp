#include "train/trainer.h"

#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <limits>
#include <nlohmann/json.hpp>

#include "io/atomic_file.h"
#include "io/errors.h"
#include "train/plot_svg.h"
#include "spec/random.h"
#include "io/safetensors.h"
#include "tensor/parallel.h"
#include "train/device_runner.h"
#include "train/preprocess.h"

namespace gr {

namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
using Clock = std::chrono::steady_clock;
constexpr double kCheckpointSeconds = 2.0;

double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

// A progress bar on a terminal (stderr), one line per epoch otherwise (stdout), nothing when quiet.
class Progress {
 public:
  Progress(bool quiet, int64_t epochs, int64_t steps_per_epoch)
      : quiet_(quiet), tty_(::isatty(2) == 1), epochs_(epochs), steps_(steps_per_epoch) {}
  void step(int64_t epoch, int64_t step_in_epoch, double loss) {
    if (quiet_ || !tty_) return;
    const auto now = Clock::now();
    if (now - last_ < std::chrono::milliseconds(100) && step_in_epoch != steps_) return;
    last_ = now;
    const int width = 30;
    const int64_t done = steps_ ? step_in_epoch * width / steps_ : width;
    std::string bar(static_cast<size_t>(done), '#');
    bar.resize(width, '.');
    std::fprintf(stderr, "\r\033[Kepoch %lld/%lld [%s] step %lld/%lld", static_cast<long long>(epoch),
                 static_cast<long long>(epochs_), bar.c_str(), static_cast<long long>(step_in_epoch),
                 static_cast<long long>(steps_));
    if (!std::isnan(loss)) std::fprintf(stderr, " loss %.6g", loss);  // a device keeps losses until the epoch ends
  }
  void epoch(const EpochRecord& e) {
    if (quiet_) return;
    char line[256];
    int n = std::snprintf(line, sizeof line, "epoch %lld/%lld  train_loss %.6g", static_cast<long long>(e.epoch),
                          static_cast<long long>(epochs_), e.train_loss);
    if (!std::isnan(e.val_loss)) n += std::snprintf(line + n, sizeof line - static_cast<size_t>(n), "  val_loss %.6g", e.val_loss);
    if (!std::isnan(e.val_accuracy))
      n += std::snprintf(line + n, sizeof line - static_cast<size_t>(n), "  val_accuracy %.4f", e.val_accuracy);
    std::snprintf(line + n, sizeof line - static_cast<size_t>(n), "  %.2fs", e.seconds);
    if (tty_) std::fprintf(stderr, "\r\033[K%s\n", line);
    else std::printf("%s\n", line), std::fflush(stdout);
  }

 private:
  bool quiet_, tty_;
  int64_t epochs_, steps_;
  Clock::time_point last_{};
};

}  // namespace

// Index of the largest element (the first on ties), of row r of a [rows, cols] block.
int64_t argmax_row(const double* x, int64_t cols) {
  int64_t best = 0;
  for (int64_t c = 1; c < cols; ++c)
    if (x[c] > x[best]) best = c;
  return best;
}

// Validation: mean loss over full batches (and the remainder when the graph accepts its size),
// weighted by rows; accuracy over the same rows.
std::pair<double, double> evaluate(Model& model, const DataTable& table) {
  const Program& p = model.program();
  if (table.rows == 0) return {kNaN, kNaN};
  double loss_sum = 0.0, rows_seen = 0.0, correct = 0.0;
  std::vector<int64_t> rows;
  for (int64_t start = 0; start < table.rows; start += p.batch) {
    const int64_t end = std::min(table.rows, start + p.batch);
    rows.clear();
    for (int64_t r = start; r < end; ++r) rows.push_back(r);
    const std::vector<Var>& nodes = model.record(table, rows);
    if (nodes.empty()) continue;  // a remainder the graph cannot take
    const double n = static_cast<double>(rows.size());
    loss_sum = loss_sum + model.tape().scalar(nodes[static_cast<size_t>(p.loss)]) * n;
    rows_seen = rows_seen + n;
    if (p.metric_logits >= 0) {
      const ConstTensorView logits = model.tape().value(nodes[static_cast<size_t>(p.metric_logits)]);
      const Tensor& labels = table.tensors[static_cast<size_t>(p.metric_labels)];
      const int64_t cols = logits.shape[1];
      for (size_t i = 0; i < rows.size(); ++i)
        if (argmax_row(logits.data + static_cast<int64_t>(i) * cols, cols) == argmax_row(labels.data() + rows[i] * cols, cols))
          correct = correct + 1.0;
    }
    model.reset();
  }
  if (rows_seen == 0) return {kNaN, kNaN};
  return {loss_sum / rows_seen, p.metric_logits >= 0 ? correct / rows_seen : kNaN};
}

namespace {

void write_outputs(Model& model, const TrainOptions& o, const TrainResult& r, bool finished) {
  write_file_atomic(o.out_dir + "/loss.csv", render_loss_csv(r.log));
  write_file_atomic(o.out_dir + "/metrics.csv", render_metrics_csv(r.log));
  LossPlot plot{model.spec().name, r.log.step_loss, {}};
  for (const EpochRecord& e : r.log.epochs)
    if (!std::isnan(e.val_loss)) plot.validation.emplace_back(static_cast<double>(e.last_step), e.val_loss);
  write_file_atomic(o.out_dir + "/loss.svg", render_loss_svg(plot));
  if (!finished) return;
  const std::string steps = std::to_string(r.steps);
  const std::string prep = to_json(make_preprocessing(model.spec(), model.data()));
  write_safetensors(o.out_dir + "/weights.safetensors", model.param_views(),
                    {{kPreprocessingKey, prep},
                     {"spec", model.spec().path},
                     {"spec_sha256", model.spec().sha256},
                     {"steps", steps},
                     {"device", to_string(o.device)},
                     {"dtype", to_string(o.dtype)}},
                    StDtype::F64);
  const EpochRecord* last = r.log.epochs.empty() ? nullptr : &r.log.epochs.back();
  auto number = [](double v) { return std::isfinite(v) ? nlohmann::ordered_json(v) : nlohmann::ordered_json(nullptr); };
  nlohmann::ordered_json run = nlohmann::ordered_json::object();
  run = {
      {"gradrun", 1},
      {"spec", model.spec().path},
      {"spec_sha256", model.spec().sha256},
      {"name", model.spec().name},
      {"seed", model.spec().seed},
      {"device", to_string(o.device)},
      {"dtype", to_string(o.dtype)},
      {"fused", r.fused},
      {"threads", num_threads()},
      {"epochs", last ? last->epoch : 0},
      {"episodes", r.steps},
      {"resumed_from", o.resume_dir.empty() ? nlohmann::ordered_json(nullptr) : nlohmann::ordered_json(o.resume_dir)},
      {"wall_seconds", r.seconds},
      {"seconds_per_episode", r.steps ? r.seconds / static_cast<double>(r.steps) : 0.0},
      {"final_loss", number(r.log.step_loss.empty() ? kNaN : r.log.step_loss.back())},
      {"final_val_loss", number(last ? last->val_loss : kNaN)},
      {"final_val_accuracy", number(last ? last->val_accuracy : kNaN)},
      {"weights_sha256", r.weights_sha256},
      {"preprocessing", nlohmann::ordered_json::parse(prep)},
  };
  write_file_atomic(o.out_dir + "/run.json", run.dump(2) + "\n");
}

}  // namespace

TrainResult train(Model& model, const TrainOptions& o, std::unique_ptr<device::Backend> backend) {
  const Spec& spec = model.spec();
  const Program& p = model.program();
  const DataTable& train_rows = model.data().train;
  std::error_code ec;
  std::filesystem::create_directories(o.out_dir, ec);
  if (ec || !std::filesystem::is_directory(o.out_dir))
    throw IoError(o.out_dir, "cannot create the output folder: " + (ec ? ec.message() : std::string("not a folder")));
  const std::string probe = o.out_dir + "/.gradrun-write-test";
  write_file_atomic(probe, "");  // fail now, not after training, when the folder is not writable
  std::filesystem::remove(probe, ec);

  Optimizer opt = model.make_optimizer();
  TrainResult r;
  int64_t first_epoch = 0;
  std::string resumed_from;
  if (!o.resume_dir.empty()) {
    std::string dir = o.resume_dir;
    if (std::filesystem::exists(dir + "/checkpoint/state.safetensors")) dir += "/checkpoint";
    resumed_from = dir;
    const Checkpoint c = read_checkpoint(dir, model, opt);
    first_epoch = c.epoch;
    r.log.step_loss = c.loss_history;
    r.log.step_epoch = c.loss_epochs;
    r.log.epochs = c.epochs;
    r.steps = c.step;
    const std::string init = std::filesystem::path(dir).parent_path().string() + "/init.safetensors";
    if (std::filesystem::exists(init) && !std::filesystem::equivalent(init, o.out_dir + "/init.safetensors", ec))
      write_file_atomic(o.out_dir + "/init.safetensors", read_file(init));
  } else {
    if (!o.init_file.empty()) model.load_params(read_safetensors(o.init_file), o.init_file);
    write_safetensors(o.out_dir + "/init.safetensors", model.param_views(),
                      {{"spec", spec.path}, {"spec_sha256", spec.sha256}, {"steps", "0"}}, StDtype::F64);
  }

  std::unique_ptr<DeviceRunner> device;  // null: the CPU tape
  if (o.device != DeviceKind::Cpu) {
    std::string why;
    if (!backend) backend = open_backend(o.device, &why);
    if (!backend) throw Error("device " + std::string(to_string(o.device)) + ": " + why);  // auto found no CUDA
    device = std::make_unique<DeviceRunner>(model, opt, std::move(backend), o.dtype, o.fuse);
    r.fused = device->fused();
    if (!o.quiet) std::printf("device: %s\n", device->describe().c_str());
  }

  const int64_t n = spec.data ? train_rows.rows : 0;
  const int64_t batch = spec.data ? p.batch : 0;
  const int64_t steps_per_epoch = spec.data ? (spec.train.drop_last ? n / batch : (n + batch - 1) / batch) : 1;
  if (spec.data && !spec.train.drop_last && n % batch != 0) {  // check the odd last batch fits before training
    std::vector<int64_t> rows(static_cast<size_t>(n % batch));
    for (size_t i = 0; i < rows.size(); ++i) rows[i] = static_cast<int64_t>(i);
    if (model.record(train_rows, rows).empty())
      throw InputError(spec.path, "/train/drop_last",
                       "the last batch of " + std::to_string(rows.size()) + " rows does not fit the graph; set drop_last to true");
    model.reset();
  }

  Progress progress(o.quiet, o.epochs, steps_per_epoch);
  const auto t0 = Clock::now();
  const double resumed_seconds = r.log.epochs.empty() ? 0.0 : r.log.epochs.back().seconds;
  std::vector<int64_t> order, rows;
  const std::string ckpt_dir = o.out_dir + "/checkpoint";
  auto last_checkpoint = Clock::now();
  int64_t checkpoint_epoch = first_epoch;  // the last good checkpoint: the resumed one until we write ours
  std::string checkpoint_where = first_epoch > 0 ? resumed_from : ckpt_dir;
  // Logs a step's loss; false when it is not finite (the run stops there).
  auto record_step = [&](double value, int64_t epoch) {
    r.log.step_loss.push_back(value);
    r.log.step_epoch.push_back(epoch + 1);
    ++r.steps;
    return std::isfinite(value);
  };
  auto diverged = [&](int64_t epoch) {
    r.seconds = seconds_since(t0);
    write_outputs(model, o, r, false);
    throw DivergedError(spec.path + ": training diverged: the loss is " + format_double(r.log.step_loss.back()) +
                        " at step " + std::to_string(r.steps) + " (epoch " + std::to_string(epoch + 1) + "); " +
                        (checkpoint_epoch > 0 ? "the last good checkpoint (epoch " + std::to_string(checkpoint_epoch) +
                                                    ") is in " + checkpoint_where
                                              : std::string("no checkpoint was written yet")));
  };
  for (int64_t epoch = first_epoch; epoch < o.epochs; ++epoch) {
    order = epoch_order(spec, n, epoch);
    double epoch_sum = 0.0;
    for (int64_t s = 0; s < steps_per_epoch; ++s) {
      rows.clear();
      for (int64_t i = s * batch; i < std::min(n, (s + 1) * batch); ++i) rows.push_back(order[static_cast<size_t>(i)]);
      if (device) {  // forward, backward and the optimizer step replayed as one episode; the loss stays there
        device->step(rows, s);
        progress.step(epoch + 1, s + 1, kNaN);
        continue;
      }
      const std::vector<Var>& nodes = model.record(train_rows, rows);
      const Var loss = nodes[static_cast<size_t>(p.loss)];
      const double value = model.tape().scalar(loss);
      if (!model.tape().backward(loss)) throw Error("backward failed: " + model.tape().error());
      if (!record_step(value, epoch)) {
        model.reset();
        diverged(epoch);
      }
      opt.step(model.tape());
      model.reset();
      epoch_sum = epoch_sum + value;
      progress.step(epoch + 1, s + 1, value);
    }
    if (device) {  // one download per epoch
      for (double value : device->epoch_losses(steps_per_epoch)) {
        if (!record_step(value, epoch)) diverged(epoch);
        epoch_sum = epoch_sum + value;
      }
    }
    if (device) device->sync(opt);  // parameters to the tape (validation, files), optimizer state to opt
    const auto [val_loss, val_acc] = evaluate(model, model.data().validation);
    EpochRecord e{epoch + 1, epoch_sum / static_cast<double>(steps_per_epoch), val_loss, val_acc,
                  resumed_seconds + seconds_since(t0), r.steps};
    r.log.epochs.push_back(e);
    // A checkpoint after the last epoch, and on the way at most every kCheckpointSeconds (tiny
    // epochs would otherwise spend their time writing checkpoints).
    if (epoch + 1 == o.epochs || seconds_since(last_checkpoint) >= kCheckpointSeconds) {
      write_checkpoint(ckpt_dir, model, opt, r.log, epoch + 1);
      last_checkpoint = Clock::now();
      checkpoint_epoch = epoch + 1;
      checkpoint_where = ckpt_dir;
    }
    progress.epoch(e);
  }
  r.seconds = seconds_since(t0);
  r.weights_sha256 = weights_digest(model);
  write_outputs(model, o, r, true);
  return r;
}

}  // namespace gr
