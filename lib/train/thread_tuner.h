// thread_tuner.h — `gradrun train --threads auto` (the default): the training loop's thread count
// chosen by measurement, between 1 thread and all of them.
//
// Why: every thread count gives the same bytes (tensor/parallel.h), so the loop may change it at
// any step; but more threads are not always faster. On this project's 2-vCPU VM, two threads run
// MLP-784 1.7x faster than one in some minutes and only 1.0-1.3x in others (f32: slower than one),
// and a small model's hand-offs can cost more than its work (docs/performance.md, "Threads"). So
// the loop times a few steps on each count, keeps the faster, and measures again later.
//
// The schedule, in steps of the training loop (each timed by the caller):
//   probe: a leg on the current count, then a leg on the other; a leg is a warm-up when the count
//          just changed (the first steps after a switch start threads and warm caches: at least
//          kWarm steps and kMinWarmSeconds) and then at least kSamples timed steps and
//          kMinLegSeconds of them (short steps are noisy: a 60 µs step gets ~80 samples), at most
//          kMaxSamples; the faster median wins, the all-threads count on a tie (within kTie);
//   hold:  the winner until the held steps add up to kHoldFactor times the probe's time, and at
//          least kMinHoldSeconds; then probe again, starting with the winner.
// The slower count runs one leg per probe, and a hold lasts at least kHoldFactor times the whole
// probe, so probing costs under 1% of the run.
#pragma once
#include <array>
#include <cstdint>
#include <string>

namespace gr {

class ThreadTuner {
 public:
  static constexpr int kWarm = 2;
  static constexpr double kMinWarmSeconds = 0.001;
  static constexpr int kSamples = 5;
  static constexpr double kMinLegSeconds = 0.005;
  static constexpr int kMaxSamples = 255;
  static constexpr double kTie = 0.97;          // one thread must be 3% faster to win
  static constexpr double kHoldFactor = 100.0;  // hold time : probe time
  static constexpr double kMinHoldSeconds = 2.0;

  // max_threads: the all-threads count (>= 1; with 1 there is nothing to choose and next() is 1).
  explicit ThreadTuner(int max_threads);

  int next() const { return current_; }  // the thread count for the next step
  // The wall time of the step just run on next() threads. May change next(); true when this step
  // ended a probe (describe() then says what it found).
  bool record(double seconds);
  std::string describe() const;

  int max_threads() const { return max_; }
  int64_t steps_on(int threads) const { return threads == 1 ? steps_[0] : threads == max_ ? steps_[1] : 0; }
  int64_t probes() const { return probes_; }  // finished probes (decisions taken)
  // The last probe's median step time on 1 thread and on max threads (seconds; 0 before one).
  double median_one() const { return last_one_; }
  double median_all() const { return last_all_; }

 private:
  enum class Phase { Warm, Measure, Hold };
  int other(int threads) const { return threads == 1 ? max_ : 1; }
  void start_measure(int threads, bool switched);
  // The warm-up or timed part of a leg has its steps and its time, or is at the cap.
  bool phase_done(int min_steps, double min_seconds) const {
    return (taken_ >= min_steps && phase_s_ >= min_seconds) || taken_ == kMaxSamples;
  }
  bool decide();

  int max_;
  int current_;
  Phase phase_;
  int leg_ = 0;         // 0: measuring the first count of a probe, 1: the second
  int taken_ = 0;       // steps taken in this Warm or Measure phase
  double phase_s_ = 0;  // and their time
  std::array<double, kMaxSamples> samples_{};
  std::array<double, 2> median_{};  // per leg
  std::array<int, 2> leg_threads_{};
  double probe_seconds_ = 0.0;      // wall time of the probe's steps, warm ones included
  double hold_left_ = 0.0;          // seconds of steps left to hold the winner
  std::array<int64_t, 2> steps_{};  // steps run on 1 thread, on max threads
  int64_t probes_ = 0;
  double last_one_ = 0.0, last_all_ = 0.0;
};

}  // namespace gr
