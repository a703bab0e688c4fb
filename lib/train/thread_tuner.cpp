#include "train/thread_tuner.h"

#include <algorithm>
#include <cstdio>

namespace gr {

ThreadTuner::ThreadTuner(int max_threads) : max_(std::max(1, max_threads)), current_(max_), phase_(Phase::Hold) {
  if (max_ > 1) start_measure(max_, /*switched=*/true);  // the first steps are cold: warm up first
}

void ThreadTuner::start_measure(int threads, bool switched) {
  current_ = threads;
  leg_threads_[static_cast<size_t>(leg_)] = threads;
  phase_ = switched ? Phase::Warm : Phase::Measure;
  taken_ = 0, phase_s_ = 0.0;
}

bool ThreadTuner::record(double seconds) {
  ++steps_[current_ == 1 ? 0 : 1];
  if (max_ == 1) return false;
  switch (phase_) {
    case Phase::Hold:
      hold_left_ -= seconds;
      if (hold_left_ <= 0.0) {  // probe again, the winner first (no switch, so no warm-up)
        leg_ = 0;
        probe_seconds_ = 0.0;
        start_measure(current_, /*switched=*/false);
      }
      return false;
    case Phase::Warm:
      probe_seconds_ += seconds;
      ++taken_, phase_s_ += seconds;
      if (phase_done(kWarm, kMinWarmSeconds)) phase_ = Phase::Measure, taken_ = 0, phase_s_ = 0.0;
      return false;
    case Phase::Measure: {
      probe_seconds_ += seconds;
      samples_[static_cast<size_t>(taken_++)] = seconds;
      phase_s_ += seconds;
      if (!phase_done(kSamples, kMinLegSeconds)) return false;
      const auto mid = samples_.begin() + taken_ / 2;
      std::nth_element(samples_.begin(), mid, samples_.begin() + taken_);
      median_[static_cast<size_t>(leg_)] = *mid;
      if (leg_ == 0) {
        leg_ = 1;
        start_measure(other(current_), /*switched=*/true);
        return false;
      }
      return decide();
    }
  }
  return false;
}

bool ThreadTuner::decide() {
  // Per leg: which count it measured and its median step time.
  const bool first_is_one = leg_threads_[0] == 1;
  const double one = median_[first_is_one ? 0 : 1], all = median_[first_is_one ? 1 : 0];
  current_ = one < kTie * all ? 1 : max_;
  last_one_ = one, last_all_ = all;
  phase_ = Phase::Hold;
  hold_left_ = std::max(kMinHoldSeconds, kHoldFactor * probe_seconds_);
  ++probes_;
  return true;
}

std::string ThreadTuner::describe() const {
  char line[160];
  std::snprintf(line, sizeof line, "threads auto: %d (median step %.1f us on 1 thread, %.1f us on %d)", current_,
                last_one_ * 1e6, last_all_ * 1e6, max_);
  return line;
}

}  // namespace gr
