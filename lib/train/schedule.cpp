// schedule.cpp — see schedule.h.
#include "train/schedule.h"

#include <algorithm>

#include "gr_math.h"

namespace gr {

double scheduled_lr(const OptimizerSpec& opt, int64_t step, int64_t epoch, int64_t steps_per_epoch) {
  if (!opt.schedule) return opt.lr;
  const ScheduleSpec& s = *opt.schedule;
  double lr = opt.lr;
  if (s.kind == "step") {
    double factor = 1.0;
    for (int64_t k = epoch / s.every; k > 0; --k) factor = factor * s.gamma;
    lr = opt.lr * factor;
  } else if (s.kind == "cosine") {
    const int64_t total = std::max<int64_t>(1, s.epochs * std::max<int64_t>(1, steps_per_epoch));
    const double p = total == 1 ? 0.0 : std::min(1.0, static_cast<double>(step - 1) / static_cast<double>(total - 1));
    const double pi = 3.141592653589793;
    lr = s.min_lr + (opt.lr - s.min_lr) * ((1.0 + gr_cos(pi * p)) / 2.0);
  }
  if (s.warmup_steps > 0 && step <= s.warmup_steps) lr = lr * (static_cast<double>(step) / static_cast<double>(s.warmup_steps));
  return lr;
}

}  // namespace gr
