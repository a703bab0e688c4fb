#include "train/run_files.h"

#include <deque>
#include <charconv>
#include <cmath>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>

#include "io/atomic_file.h"
#include "io/errors.h"
#include "io/safetensors.h"
#include "io/seal.h"
#include "tensor/sha256.h"
#include "train/run_model.h"
#include "train/run_state.h"
#include "tensor/same_bits.h"

namespace gr {

namespace {
constexpr const char* kFormat = "gradrun-checkpoint-2";  // sealed (io/seal.h); -1: unsealed, from before
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

std::string render_metrics_csv(const RunLog& log, int64_t classes) {
  const bool lr = !log.step_lr.empty();  // a schedule: the rate of the epoch's last step
  // The columns of before come first, in their order (scripts read them by position).
  std::string s = lr ? "epoch,train_loss,val_loss,val_accuracy,seconds,lr" : "epoch,train_loss,val_loss,val_accuracy,seconds";
  s += ",train_accuracy,grad_norm,val_mae,val_rmse,val_r2";
  s += classes == 2 ? ",val_f1,val_auc\n" : classes > 0 ? ",val_f1\n" : "\n";
  char secs[32];
  for (const EpochRecord& e : log.epochs) {
    std::snprintf(secs, sizeof secs, "%.3f", e.seconds);
    s += std::to_string(e.epoch) + "," + format_shortest(e.train_loss) + "," + format_shortest(e.val_loss) + "," +
         format_shortest(e.val_accuracy) + "," + secs;
    const size_t last = static_cast<size_t>(e.last_step);
    if (lr) s += "," + (last >= 1 && last <= log.step_lr.size() ? format_shortest(log.step_lr[last - 1]) : std::string("nan"));
    for (double v : {e.train_accuracy, e.grad_norm, e.val_mae, e.val_rmse, e.val_r2}) s += "," + format_shortest(v);
    if (classes > 0) s += "," + format_shortest(e.val_f1);
    if (classes == 2) s += "," + format_shortest(e.val_auc);
    s += "\n";
  }
  return s;
}

std::string weights_digest(const Model& model) {
  Sha256 h;
  for (const auto& [name, view] : model.param_views()) hash_doubles(h, view.data, static_cast<size_t>(view.shape.numel()));
  return h.hex();
}

void write_checkpoint(const std::string& dir, const Model& model, Optimizer& opt, const RunLog& log, int64_t epoch,
                      int64_t step_in_epoch, int64_t target_epochs, const std::string& identity, const BestWeights& best,
                      bool rotate) {
  std::filesystem::create_directories(dir);
  std::vector<std::pair<std::string, ConstTensorView>> tensors;
  for (const auto& [name, view] : model.param_views()) tensors.emplace_back("param/" + name, view);
  if (best.epoch > 0)
    for (size_t i = 0; i < best.params.size(); ++i)
      tensors.emplace_back("best/" + model.program().params[i].name, ConstTensorView{model.program().params[i].shape, best.params[i].data()});
  const bool adam = opt.kind() == OptimizerKind::Adam;
  std::deque<std::vector<double>> moments;  // copies (an f32 tape's are floats), alive until written
  for (size_t i = 0; i < opt.count() && opt.has_moments(); ++i) {  // SGD momentum: its buffer, in m
    const ProgramParam& pp = model.program().params[model.param_index(opt.param(i))];  // frozen ones have none
    const Shape& s = pp.shape;
    tensors.emplace_back((adam ? "adam_m/" : "momentum/") + pp.name, ConstTensorView{s, moments.emplace_back(opt.m(i)).data()});
    if (adam) tensors.emplace_back("adam_v/" + pp.name, ConstTensorView{s, moments.emplace_back(opt.v(i)).data()});
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
                             static_cast<double>(e.last_step), e.train_accuracy, e.grad_norm, e.val_mae, e.val_rmse, e.val_r2, e.val_f1, e.val_auc});
  if (!log.epochs.empty())
    tensors.emplace_back("epoch_metrics", ConstTensorView{Shape{static_cast<int64_t>(log.epochs.size()), kEpochColumns}, rows.data()});
  std::map<std::string, std::string> meta = {{"format", kFormat},
                                                   {"spec_sha256", model.spec().sha256},
                                                   {"seed", std::to_string(model.spec().seed)},
                                                   {"epoch", std::to_string(epoch)},
                                                   {"step_in_epoch", std::to_string(step_in_epoch)},
                                                   {"target_epochs", std::to_string(target_epochs)},
                                                   {"run_identity", identity},
                                                   {"step", std::to_string(steps)},
                                                   {"adam_t", std::to_string(opt.t())}};
  if (best.epoch > 0) meta["best_epoch"] = std::to_string(best.epoch);
  meta["dtype"] = to_string(model.real());  // what the run computes in (a resume must match)
  // The newest becomes the previous (one rename), then the new one is written whole: at every
  // moment at least one complete checkpoint is on disk.
  const std::string newest = dir + "/" + kNewest, previous = dir + "/" + kPrevious;
  std::error_code ec;
  if (rotate && std::filesystem::exists(newest, ec) && std::rename(newest.c_str(), previous.c_str()) != 0)
    throw IoError(previous, std::string("cannot keep the previous checkpoint: ") + std::strerror(errno));
  write_sealed_safetensors(newest, tensors, meta);
}

}  // namespace gr
