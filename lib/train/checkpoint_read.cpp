// checkpoint_read.cpp — read_checkpoint (run_files.h): the newest intact checkpoint of a run folder,
// its seal and counters checked before anything of it is trusted.
#include <filesystem>

#include "io/errors.h"
#include "io/safetensors.h"
#include "io/seal.h"
#include "tensor/diag.h"
#include "train/run_files.h"
#include "train/run_model.h"
#include "train/run_state.h"

namespace gr {

namespace {

int64_t meta_integer(const SafetensorsFile& f, const std::string& path, const char* key, bool required = true) {
  const auto it = f.metadata.find(key);
  if (it == f.metadata.end()) {
    if (!required) return 0;
    throw DamagedCheckpoint(path, "__metadata__", std::string("missing \"") + key + "\"");
  }
  size_t used = 0;
  int64_t v = 0;
  try {
    v = static_cast<int64_t>(std::stoll(it->second, &used));
  } catch (const std::logic_error&) {
    used = 0;
  }
  if (used == 0 || used != it->second.size() || v < 0)
    throw DamagedCheckpoint(path, "__metadata__", std::string("\"") + key + "\" is not a count: \"" + it->second + "\"");
  return v;
}

// One checkpoint file, read and checked for damage: its seal (format 2; format 1 predates seals)
// and its counters against each other and its tensors. Nothing is loaded into the model yet.
SafetensorsFile read_intact(const std::string& path, const Optimizer& opt) {
  SafetensorsFile f;
  try {
    f = read_safetensors(path);
  } catch (const InputError& e) {  // a torn or altered header: damage, as a seal mismatch is
    throw DamagedCheckpoint("", "", e.what());
  }
  const auto format = f.metadata.find("format");
  const std::string fmt = format == f.metadata.end() ? "" : format->second;
  if (fmt != "gradrun-checkpoint-2" && fmt != "gradrun-checkpoint-1")
    throw DamagedCheckpoint(path, "__metadata__", "not a gradrun checkpoint (format \"" + fmt + "\")");
  try {
    check_seal(f, path, fmt == "gradrun-checkpoint-2");
  } catch (const InputError& e) {
    throw DamagedCheckpoint("", "", e.what());
  }
  auto disagree = [&](const std::string& what) { throw DamagedCheckpoint(path, "__metadata__", what + ": the checkpoint is damaged"); };
  const int64_t epoch = meta_integer(f, path, "epoch"), step = meta_integer(f, path, "step"), adam_t = meta_integer(f, path, "adam_t");
  const int64_t in_epoch = meta_integer(f, path, "step_in_epoch", false), target = meta_integer(f, path, "target_epochs", false);
  const int64_t started = epoch + (in_epoch > 0 ? 1 : 0);  // the epochs with steps in the log
  const Tensor* h = f.find("loss_history");
  const int64_t logged = h ? h->numel() : 0;
  if (logged != step) disagree("step " + std::to_string(step) + " but loss_history holds " + std::to_string(logged) + " steps");
  if (fmt == "gradrun-checkpoint-2" && adam_t != (opt.kind() == OptimizerKind::Adam ? step : 0))
    disagree("adam_t " + std::to_string(adam_t) + " but step " + std::to_string(step));
  if (target > 0 && target < started) disagree("target_epochs " + std::to_string(target) + " but " + std::to_string(started) + " epochs begun");
  if (in_epoch > 0 && step < in_epoch) disagree("step_in_epoch " + std::to_string(in_epoch) + " but step " + std::to_string(step));
  if (const Tensor* e = f.find("loss_epochs"); e && step > 0) {
    const double last = e->data()[e->numel() - 1];
    if (last != static_cast<double>(started))
      disagree("epoch " + std::to_string(epoch) + ", step_in_epoch " + std::to_string(in_epoch) + " but the last step's epoch in loss_epochs is " +
               format_shortest(last));
  }
  const Tensor* m = f.find("epoch_metrics");
  const int64_t rows = m && m->shape().rank() == 2 ? m->shape()[0] : 0;
  if (rows != epoch) disagree("epoch " + std::to_string(epoch) + " but epoch_metrics holds " + std::to_string(rows) + " rows");
  if (rows > 0) {
    const int64_t cols = m->shape()[1];
    const double* last = m->data() + (rows - 1) * cols;
    if (last[0] != static_cast<double>(epoch) || (cols >= 6 && last[5] != static_cast<double>(step - in_epoch)))
      disagree("epoch " + std::to_string(epoch) + ", step " + std::to_string(step) + " but epoch_metrics' last row is epoch " +
               format_shortest(last[0]) + " ending at step " + format_shortest(cols >= 6 ? last[5] : 0.0));
  }
  if (f.metadata.count("best_epoch")) {
    const int64_t best = meta_integer(f, path, "best_epoch");
    if (best < 1 || best > epoch) disagree("best_epoch " + std::to_string(best) + " but epoch " + std::to_string(epoch));
  }
  return f;
}

}  // namespace

Checkpoint read_checkpoint(const std::string& dir, Model& model, Optimizer& opt, const std::string& identity) {
  namespace fs = std::filesystem;
  std::error_code ec;
  const std::string newest = dir + "/" + kNewest, previous = dir + "/" + kPrevious;
  const std::string run_dir = fs::path(dir).parent_path().string();
  if (!fs::exists(newest, ec) && !fs::exists(previous, ec))
    throw IoError(run_dir, "no checkpoint here (no " + newest + "; a run folder keeps its checkpoints in checkpoint/)");
  std::string path = newest;
  SafetensorsFile f;
  bool fell_back = false;
  try {
    if (!fs::exists(newest, ec)) throw DamagedCheckpoint(newest, "", "missing (the run stopped while replacing it)");
    f = read_intact(newest, opt);
  } catch (const DamagedCheckpoint& bad) {
    if (!fs::exists(previous, ec)) throw;
    try {
      f = read_intact(previous, opt);
    } catch (const DamagedCheckpoint& also) {
      throw DamagedCheckpoint("", "", std::string(bad.what()) + "; the previous one too: " + also.what());
    }
    path = previous;
    fell_back = true;
    diag::warn(std::string(bad.what()) + "; resuming from the previous checkpoint, " + previous + " (step " + f.metadata["step"] + ")");
  }
  auto meta = [&](const char* key) {
    auto it = f.metadata.find(key);
    if (it == f.metadata.end()) throw DamagedCheckpoint(path, "__metadata__", std::string("missing \"") + key + "\"");
    return it->second;
  };
  if (meta("seed") != std::to_string(model.spec().seed))
    throw InputError(path, "__metadata__", "this checkpoint belongs to a different spec or --seed: it was made with seed " + meta("seed") + ", not " +
                                               std::to_string(model.spec().seed));
  // Hints name only files that exist: an interrupted run has a checkpoint but no weights file yet.
  const std::string weights = run_dir + "/weights.safetensors";
  const std::string start_from = fs::exists(weights, ec) ? "train with --init " + shell_quote(weights) + " and another --out"
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
    const std::string now = model.real() == DType::F32 ? "f32" : "f64";
    if (was != now)
      throw InputError(path, "__metadata__", "the run in " + run_dir + " computes in " + was + "; resume it with --dtype " + was +
                                                 " (this resume asked for " + now + ")");
  }
  Checkpoint c;
  c.path = path;
  c.fell_back = fell_back;
  c.epoch = meta_integer(f, path, "epoch");
  c.step = meta_integer(f, path, "step");
  c.adam_t = meta_integer(f, path, "adam_t");
  c.step_in_epoch = meta_integer(f, path, "step_in_epoch", false);
  c.target_epochs = meta_integer(f, path, "target_epochs", false);
  model.load_params(f, path, "param/");
  if (opt.has_moments()) {
    const std::vector<std::string> kinds = opt.kind() == OptimizerKind::Adam ? std::vector<std::string>{"adam_m/", "adam_v/"}
                                                                             : std::vector<std::string>{"momentum/"};
    for (size_t i = 0; i < opt.count(); ++i) {
      const std::string& name = model.program().params[model.param_index(opt.param(i))].name;
      for (const std::string& kind : kinds) {
        const Tensor* t = f.find(kind + name);
        if (!t || t->numel() != opt.len(i)) throw InputError(path, kind + name, "missing or of the wrong size");
        if (kind == "adam_v/") opt.set_v(i, t->values());
        else opt.set_m(i, t->values());
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
    c.best.epoch = meta_integer(f, path, "best_epoch");
    for (const ProgramParam& pp : model.program().params) {
      const Tensor* t = f.find("best/" + pp.name);
      if (!t || t->numel() != pp.shape.numel()) throw InputError(path, "best/" + pp.name, "missing or of the wrong size");
      c.best.params.emplace_back(t->values().begin(), t->values().end());
    }
  }
  if (const Tensor* m = f.find("epoch_metrics")) {
    const int64_t cols = m->shape().rank() == 2 ? m->shape()[1] : 0;
    if (cols != 6 && cols != 11 && cols != kEpochColumns)  // 6, 11: a checkpoint from before the newer metrics (they read as NaN)
      throw InputError(path, "epoch_metrics", "expected shape [epochs, " + std::to_string(kEpochColumns) + "], [epochs, 11] or [epochs, 6]");
    for (int64_t r = 0; r < m->shape()[0]; ++r) {
      const double* v = m->data() + r * cols;
      EpochRecord e{static_cast<int64_t>(v[0]), v[1], v[2], v[3], v[4], static_cast<int64_t>(v[5])};
      if (cols >= 11) e.train_accuracy = v[6], e.grad_norm = v[7], e.val_mae = v[8], e.val_rmse = v[9], e.val_r2 = v[10];
      if (cols >= 13) e.val_f1 = v[11], e.val_auc = v[12];
      c.epochs.push_back(e);
    }
  }
  return c;
}

}  // namespace gr
