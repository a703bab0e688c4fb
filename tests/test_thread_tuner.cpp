// ThreadTuner (lib/train/thread_tuner.h), `gradrun train --threads auto`: the thread count it asks
// for, step by step, given made-up step times. The bytes a run produces do not depend on it (that
// is tests/test_threads_cli.py's job); this checks that it picks the faster count, measures again,
// follows a change, and keeps probing cheap.
#include <catch2/catch.hpp>
#include <functional>
#include <vector>

#include "train/thread_tuner.h"

using gr::ThreadTuner;

namespace {

// Runs `steps` steps; time_of(threads) is the step time on that many threads. Returns the thread
// count of every step.
std::vector<int> run(ThreadTuner& t, int steps, const std::function<double(int)>& time_of) {
  std::vector<int> used;
  for (int i = 0; i < steps; ++i) {
    used.push_back(t.next());
    t.record(time_of(t.next()));
  }
  return used;
}

int count(const std::vector<int>& v, int x, size_t from = 0, size_t to = SIZE_MAX) {
  int n = 0;
  for (size_t i = from; i < v.size() && i < to; ++i) n += v[i] == x;
  return n;
}

// With steps of at least 2 ms a warm-up is kWarm steps and a leg kSamples steps (their minimum
// times, 1 and 5 ms, are then met), so the first probe is this many steps.
constexpr int kProbe = 2 * ThreadTuner::kWarm + 2 * ThreadTuner::kSamples;
constexpr int kLeg = ThreadTuner::kWarm + ThreadTuner::kSamples;

}  // namespace

TEST_CASE("thread tuner: one core has nothing to choose") {
  ThreadTuner t(1);
  const std::vector<int> used = run(t, 100, [](int) { return 1e-3; });
  CHECK(count(used, 1) == 100);
  CHECK(t.steps_on(1) == 100);
  CHECK(t.probes() == 0);
}

TEST_CASE("thread tuner: the first probe runs all threads, then 1, and keeps the faster") {
  SECTION("all threads faster") {
    ThreadTuner t(2);
    const std::vector<int> used = run(t, 200, [](int n) { return n == 2 ? 2.0e-3 : 3.0e-3; });
    // Probe: warm + samples on 2, then warm + samples on 1.
    CHECK(count(used, 2, 0, kLeg) == kLeg);
    CHECK(count(used, 1, kLeg, kProbe) == kLeg);
    CHECK(count(used, 2, kProbe) == 200 - kProbe);  // then 2 for the hold
    CHECK(t.probes() == 1);
    CHECK(t.median_all() == 2.0e-3);
    CHECK(t.median_one() == 3.0e-3);
    CHECK(t.steps_on(1) == kLeg);
    CHECK(t.steps_on(2) == 200 - t.steps_on(1));
  }
  SECTION("one thread faster") {
    ThreadTuner t(4);
    const std::vector<int> used = run(t, 200, [](int n) { return n == 4 ? 2.4e-3 : 2.0e-3; });
    CHECK(count(used, 1, kProbe) == 200 - kProbe);
    CHECK(t.next() == 1);
    CHECK(t.describe().find("threads auto: 1") == 0);
  }
  SECTION("a tie goes to all threads") {
    ThreadTuner t(2);
    run(t, kProbe, [](int n) { return n == 2 ? 2.0e-3 : 1.96e-3; });  // 1 thread only 2% faster
    CHECK(t.probes() == 1);
    CHECK(t.next() == 2);
  }
}

TEST_CASE("thread tuner: the median, not one slow step, decides") {
  ThreadTuner t(2);
  int step = 0;
  // On 2 threads one step in five is very slow (a descheduled core), the rest fast.
  run(t, kProbe, [&](int n) { return n == 2 ? (++step % 5 == 0 ? 50e-3 : 2.0e-3) : 3.0e-3; });
  CHECK(t.next() == 2);
}

TEST_CASE("thread tuner: measures again after the hold and follows a change") {
  ThreadTuner t(2);
  bool costly = false;  // the machine's state: in the costly one, 2 threads lose
  const auto time_of = [&](int n) { return n == 1 ? 2.0e-3 : costly ? 3.0e-3 : 1.2e-3; };
  run(t, kProbe, time_of);
  REQUIRE(t.next() == 2);
  costly = true;
  // The hold lasts at least kMinHoldSeconds of steps: 2 threads are kept until then.
  const int hold_steps = static_cast<int>(ThreadTuner::kMinHoldSeconds / 3.0e-3);
  std::vector<int> used = run(t, hold_steps - 5, time_of);
  CHECK(count(used, 2) == hold_steps - 5);
  used = run(t, 200, time_of);  // the hold ends, the probe runs, 1 thread wins
  CHECK(t.probes() == 2);
  CHECK(t.next() == 1);
  CHECK(t.median_all() == 3.0e-3);
  costly = false;
  used = run(t, static_cast<int>(2 * ThreadTuner::kMinHoldSeconds / 2.0e-3) + 100, time_of);
  CHECK(t.probes() >= 3);
  CHECK(t.next() == 2);
}

TEST_CASE("thread tuner: short steps are sampled for a minimum time, long ones for a minimum count") {
  for (const double step : {60e-6, 1e-6}) {
    ThreadTuner t(2);
    const std::vector<int> used = run(t, 2000, [&](int n) { return n == 2 ? step : 2 * step; });
    REQUIRE(t.probes() == 1);
    // The 1-thread leg: enough steps for kMinWarmSeconds and kMinLegSeconds, or the caps.
    const int warm = std::min(ThreadTuner::kMaxSamples, static_cast<int>(ThreadTuner::kMinWarmSeconds / (2 * step)));
    const int leg = std::min(ThreadTuner::kMaxSamples, static_cast<int>(ThreadTuner::kMinLegSeconds / (2 * step)));
    CHECK(t.steps_on(1) >= warm + leg);
    CHECK(t.steps_on(1) <= warm + leg + 2);
    CHECK(t.next() == 2);
  }
}

TEST_CASE("thread tuner: probing the slower count costs under 1% of a long run") {
  for (const bool two_faster : {true, false}) {
    ThreadTuner t(2);
    const double fast = 1.0e-3, slow = 2.0e-3;
    const auto time_of = [&](int n) { return (n == 2) == two_faster ? fast : slow; };
    const int steps = 200000;  // ~200 s of steps: many holds and probes
    double spent = 0.0;
    for (int i = 0; i < steps; ++i) {
      const double s = time_of(t.next());
      spent += s;
      t.record(s);
    }
    CHECK(t.probes() > 10);
    CHECK(spent < 1.01 * steps * fast);
  }
}
