#include "train/run_files.h"

#include <charconv>
#include <cmath>
#include <cstdio>
#include <filesystem>

#include "io/atomic_file.h"
#include "io/errors.h"
#include "io/safetensors.h"
#include "tensor/sha256.h"
#include "train/run_model.h"
#include "train/run_state.h"

namespace gr {

namespace {
constexpr int64_t kEpochColumns = 11;  // epoch_metrics: the EpochRecord fields in declaration order
}  // namespace

std::string format_double(double v) {
  if (std::isnan(v)) return "nan";
  if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
  char buf[40];
  std::snprintf(buf, sizeof buf, "%.17g", v);
  return buf;
}

std::string render_loss_csv(const RunLog& log) {
  const bool lr = !log.step_lr.empty();  // a schedule: each step's rate too
  std::string s = lr ? "step,epoch,loss,lr\n" : "step,epoch,loss\n";
  for (size_t i = 0; i < log.step_loss.size(); ++i) {
    s += std::to_string(i + 1) + "," + std::to_string(log.step_epoch[i]) + "," + format_double(log.step_loss[i]);
    s += lr && i < log.step_lr.size() ? "," + format_double(log.step_lr[i]) + "\n" : "\n";
  }
  return s;
}

// The shortest text that reads back as the same double (std::to_chars), e.g. 0.99, not 0.98999999999999999.
std::string format_shortest(double v) {
  if (std::isnan(v)) return "nan";
  if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
  char buf[40];
  const auto res = std::to_chars(buf, buf + sizeof buf, v);
  return std::string(buf, res.ptr);
}

std::string render_metrics_csv(const RunLog& log) {
  const bool lr = !log.step_lr.empty();  // a schedule: the rate of the epoch's last step
  // The columns of before come first, in their order (scripts read them by position).
  std::string s = lr ? "epoch,train_loss,val_loss,val_accuracy,seconds,lr" : "epoch,train_loss,val_loss,val_accuracy,seconds";
  s += ",train_accuracy,grad_norm,val_mae,val_rmse,val_r2\n";
  char secs[32];
  for (const EpochRecord& e : log.epochs) {
    std::snprintf(secs, sizeof secs, "%.3f", e.seconds);
    s += std::to_string(e.epoch) + "," + format_shortest(e.train_loss) + "," + format_shortest(e.val_loss) + "," +
         format_shortest(e.val_accuracy) + "," + secs;
    const size_t last = static_cast<size_t>(e.last_step);
    if (lr) s += "," + (last >= 1 && last <= log.step_lr.size() ? format_shortest(log.step_lr[last - 1]) : std::string("nan"));
    for (double v : {e.train_accuracy, e.grad_norm, e.val_mae, e.val_rmse, e.val_r2}) s += "," + format_shortest(v);
    s += "\n";
  }
  return s;
}

std::string weights_digest(const Model& model) {
  Sha256 h;
  for (const auto& [name, view] : model.param_views()) h.update(view.data, static_cast<size_t>(view.shape.numel()) * sizeof(double));
  return h.hex();
}

void write_checkpoint(const std::string& dir, const Model& model, Optimizer& opt, const RunLog& log, int64_t epoch,
                      int64_t step_in_epoch, int64_t target_epochs, const std::string& identity, const BestWeights& best) {
  std::filesystem::create_directories(dir);
  std::vector<std::pair<std::string, ConstTensorView>> tensors;
  for (const auto& [name, view] : model.param_views()) tensors.emplace_back("param/" + name, view);
  if (best.epoch > 0)
    for (size_t i = 0; i < best.params.size(); ++i)
      tensors.emplace_back("best/" + model.program().params[i].name, ConstTensorView{model.program().params[i].shape, best.params[i].data()});
  const bool adam = opt.kind() == OptimizerKind::Adam;
  for (size_t i = 0; i < opt.count() && opt.has_moments(); ++i) {  // SGD momentum: its buffer, in m
    const ProgramParam& pp = model.program().params[model.param_index(opt.param(i))];  // frozen ones have none
    const Shape& s = pp.shape;
    tensors.emplace_back((adam ? "adam_m/" : "momentum/") + pp.name, ConstTensorView{s, opt.m(i).data()});
    if (adam) tensors.emplace_back("adam_v/" + pp.name, ConstTensorView{s, opt.v(i).data()});
  }
  std::vector<double> epochs(log.step_epoch.begin(), log.step_epoch.end());
  const int64_t steps = static_cast<int64_t>(log.step_loss.size());
  if (steps > 0) {
    tensors.emplace_back("loss_history", ConstTensorView{Shape{steps}, log.step_loss.data()});
    tensors.emplace_back("loss_epochs", ConstTensorView{Shape{steps}, epochs.data()});
    if (log.step_grad_norm.size() == static_cast<size_t>(steps))  // (a diverged step may lack its norm: no checkpoint then)
      tensors.emplace_back("grad_norm_history", ConstTensorView{Shape{steps}, log.step_grad_norm.data()});
  }
  std::vector<double> rows;  // the metrics.csv rows so far: [epochs, kEpochColumns]
  for (const EpochRecord& e : log.epochs)
    rows.insert(rows.end(), {static_cast<double>(e.epoch), e.train_loss, e.val_loss, e.val_accuracy, e.seconds,
                             static_cast<double>(e.last_step), e.train_accuracy, e.grad_norm, e.val_mae, e.val_rmse, e.val_r2});
  if (!log.epochs.empty())
    tensors.emplace_back("epoch_metrics", ConstTensorView{Shape{static_cast<int64_t>(log.epochs.size()), kEpochColumns}, rows.data()});
  std::map<std::string, std::string> meta = {{"format", "gradrun-checkpoint-1"},
                                                   {"spec_sha256", model.spec().sha256},
                                                   {"seed", std::to_string(model.spec().seed)},
                                                   {"epoch", std::to_string(epoch)},
                                                   {"step_in_epoch", std::to_string(step_in_epoch)},
                                                   {"target_epochs", std::to_string(target_epochs)},
                                                   {"run_identity", identity},
                                                   {"step", std::to_string(steps)},
                                                   {"adam_t", std::to_string(opt.t())}};
  if (best.epoch > 0) meta["best_epoch"] = std::to_string(best.epoch);
  meta["dtype"] = model.real() == Real::F32 ? "f32" : "f64";  // what the run computes in (a resume must match)
  write_safetensors(dir + "/state.safetensors", tensors, meta, StDtype::F64);
}

Checkpoint read_checkpoint(const std::string& dir, Model& model, Optimizer& opt, const std::string& identity) {
  const std::string path = dir + "/state.safetensors";
  if (!std::filesystem::exists(path)) throw IoError(path, "no checkpoint here (expected a run folder with checkpoint/)");
  const SafetensorsFile f = read_safetensors(path);
  auto meta = [&](const char* key) {
    auto it = f.metadata.find(key);
    if (it == f.metadata.end()) throw InputError(path, "__metadata__", std::string("missing \"") + key + "\"");
    return it->second;
  };
  auto integer = [&](const char* key) {
    try {
      return static_cast<int64_t>(std::stoll(meta(key)));
    } catch (const std::logic_error&) {
      throw InputError(path, "__metadata__", std::string("\"") + key + "\" is not an integer");
    }
  };
  if (meta("format") != "gradrun-checkpoint-1") throw InputError(path, "__metadata__", "not a gradrun checkpoint");
  if (meta("seed") != std::to_string(model.spec().seed))
    throw InputError(path, "__metadata__", "this checkpoint belongs to a different spec or --seed: it was made with seed " + meta("seed") + ", not " +
                                               std::to_string(model.spec().seed));
  const std::string run_dir = std::filesystem::path(dir).parent_path().string();
  // Hints name only files that exist: an interrupted run has a checkpoint but no weights file yet.
  std::error_code ec;
  const std::string weights = run_dir + "/weights.safetensors";
  const std::string start_from = std::filesystem::exists(weights, ec) ? "train with --init " + shell_quote(weights) + " and another --out"
                                                                      : "train it into another --out";
  if (f.metadata.count("run_identity")) {
    std::string pointer;
    const std::string why = identity_difference(meta("run_identity"), identity, &pointer);
    if (!why.empty())
      throw InputError(model.spec().path, pointer,
                       "differs from the run in " + run_dir + " (" + why +
                           "), which changes its finished steps, so it cannot be resumed; to start a new run, " + start_from +
                           " (or resume with no spec: gradrun train --resume " + shell_quote(run_dir) + ")");
  } else if (meta("spec_sha256") != model.spec().sha256) {  // a checkpoint from before run_identity: the spec text
    throw InputError(path, "__metadata__", "this checkpoint was made by a different spec text (sha256 " + meta("spec_sha256").substr(0, 12) +
                                               "…, this spec " + model.spec().sha256.substr(0, 12) +
                                               "…) and predates field-wise resume checks; resume with the exact spec file it was trained with, "
                                               "or " + start_from);
  }
  if (const auto it = f.metadata.find("dtype"); it != f.metadata.end()) {  // older checkpoints do not say
    const std::string& was = it->second;
    const std::string now = model.real() == Real::F32 ? "f32" : "f64";
    if (was != now)
      throw InputError(path, "__metadata__", "the run in " + run_dir + " computes in " + was + "; resume it with --dtype " + was +
                                                 " (this resume asked for " + now + ")");
  }
  Checkpoint c;
  c.epoch = integer("epoch");
  c.step = integer("step");
  c.adam_t = integer("adam_t");
  if (f.metadata.count("step_in_epoch")) c.step_in_epoch = integer("step_in_epoch");
  if (f.metadata.count("target_epochs")) c.target_epochs = integer("target_epochs");
  model.load_params(f, path, "param/");
  if (opt.has_moments()) {
    const std::vector<std::string> kinds = opt.kind() == OptimizerKind::Adam ? std::vector<std::string>{"adam_m/", "adam_v/"}
                                                                             : std::vector<std::string>{"momentum/"};
    for (size_t i = 0; i < opt.count(); ++i) {
      const std::string& name = model.program().params[model.param_index(opt.param(i))].name;
      for (const std::string& kind : kinds) {
        const Tensor* t = f.find(kind + name);
        if (!t || t->numel() != static_cast<int64_t>(opt.m(i).size()))
          throw InputError(path, kind + name, "missing or of the wrong size");
        std::span<double> dst = kind == "adam_v/" ? opt.v(i) : opt.m(i);
        std::copy(t->values().begin(), t->values().end(), dst.begin());
      }
    }
    opt.set_t(c.adam_t);
  }
  if (c.step > 0) {
    const Tensor* h = f.find("loss_history");
    const Tensor* e = f.find("loss_epochs");
    if (!h || !e || h->numel() != c.step || e->numel() != c.step)
      throw InputError(path, "loss_history", "missing or not " + std::to_string(c.step) + " steps long");
    c.loss_history.assign(h->values().begin(), h->values().end());
    for (double v : e->values()) c.loss_epochs.push_back(static_cast<int64_t>(v));
    const Tensor* g = f.find("grad_norm_history");
    if (g && g->numel() != c.step) throw InputError(path, "grad_norm_history", "not " + std::to_string(c.step) + " steps long");
    if (g) c.grad_norm_history.assign(g->values().begin(), g->values().end());
    else c.grad_norm_history.assign(static_cast<size_t>(c.step), kNaNMetric);  // a checkpoint from before grad_norm
  }
  if (f.metadata.count("best_epoch")) {
    c.best.epoch = integer("best_epoch");
    for (const ProgramParam& pp : model.program().params) {
      const Tensor* t = f.find("best/" + pp.name);
      if (!t || t->numel() != pp.shape.numel()) throw InputError(path, "best/" + pp.name, "missing or of the wrong size");
      c.best.params.emplace_back(t->values().begin(), t->values().end());
    }
  }
  if (const Tensor* m = f.find("epoch_metrics")) {
    const int64_t cols = m->shape().rank() == 2 ? m->shape()[1] : 0;
    if (cols != 6 && cols != kEpochColumns)  // 6: a checkpoint from before the newer metrics (they read as NaN)
      throw InputError(path, "epoch_metrics", "expected shape [epochs, " + std::to_string(kEpochColumns) + "] or [epochs, 6]");
    for (int64_t r = 0; r < m->shape()[0]; ++r) {
      const double* v = m->data() + r * cols;
      EpochRecord e{static_cast<int64_t>(v[0]), v[1], v[2], v[3], v[4], static_cast<int64_t>(v[5])};
      if (cols == kEpochColumns) e.train_accuracy = v[6], e.grad_norm = v[7], e.val_mae = v[8], e.val_rmse = v[9], e.val_r2 = v[10];
      c.epochs.push_back(e);
    }
  }
  return c;
}

}  // namespace gr
