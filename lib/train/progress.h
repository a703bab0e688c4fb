// progress.h — what `gradrun train` shows while it runs: a progress bar on a terminal (stderr),
// one line per epoch otherwise (stdout), nothing when quiet.
#pragma once
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <string>

#include "train/run_files.h"

namespace gr {

// A progress bar on a terminal (stderr), one line per epoch otherwise (stdout), nothing when quiet.
class Progress {
 public:
  Progress(bool quiet, int64_t epochs, int64_t steps_per_epoch)
      : quiet_(quiet), tty_(::isatty(2) == 1), epochs_(epochs), steps_(steps_per_epoch) {}
  void step(int64_t epoch, int64_t step_in_epoch, double loss) {
    if (quiet_ || !tty_) return;
    const auto now = std::chrono::steady_clock::now();
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
    char line[384];
    int n = std::snprintf(line, sizeof line, "epoch %lld/%lld  train_loss %.6g", static_cast<long long>(e.epoch),
                          static_cast<long long>(epochs_), e.train_loss);
    if (!std::isnan(e.val_loss)) n += std::snprintf(line + n, sizeof line - static_cast<size_t>(n), "  val_loss %.6g", e.val_loss);
    if (!std::isnan(e.val_accuracy))
      n += std::snprintf(line + n, sizeof line - static_cast<size_t>(n), "  val_accuracy %.4f", e.val_accuracy);
    if (!std::isnan(e.val_f1)) n += std::snprintf(line + n, sizeof line - static_cast<size_t>(n), "  val_f1 %.4f", e.val_f1);
    if (!std::isnan(e.val_auc)) n += std::snprintf(line + n, sizeof line - static_cast<size_t>(n), "  val_auc %.4f", e.val_auc);
    if (!std::isnan(e.train_accuracy))
      n += std::snprintf(line + n, sizeof line - static_cast<size_t>(n), "  train_accuracy %.4f", e.train_accuracy);
    if (!std::isnan(e.val_rmse))  // a regression model: its error in the target's units
      n += std::snprintf(line + n, sizeof line - static_cast<size_t>(n), "  val_mae %.6g  val_rmse %.6g  val_r2 %.4f", e.val_mae,
                         e.val_rmse, e.val_r2);
    if (!std::isnan(e.grad_norm)) n += std::snprintf(line + n, sizeof line - static_cast<size_t>(n), "  grad_norm %.4g", e.grad_norm);
    std::snprintf(line + n, sizeof line - static_cast<size_t>(n), "  %.2fs", e.seconds);
    if (tty_) std::fprintf(stderr, "\r\033[K%s\n", line);
    else std::printf("%s\n", line), std::fflush(stdout);
  }

 private:
  bool quiet_, tty_;
  int64_t epochs_, steps_;
  std::chrono::steady_clock::time_point last_{};
};

}  // namespace gr
