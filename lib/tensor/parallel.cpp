#include "tensor/parallel.h"

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <mutex>
#include <thread>
#include <vector>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#endif

namespace gr {

namespace {

inline void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  _mm_pause();
#else
  std::this_thread::yield();
#endif
}

// An idle thread polls this many rounds (a pause is ~20 ns here: ~50 µs in all, a yield every
// kYieldEvery rounds) before it blocks. A training step runs a dozen parallel regions a few µs
// to a few hundred µs apart, and waking a blocked thread is a futex round trip of tens of µs in
// a VM, which would eat a small region's gain. Bounded and yielding, so a loaded machine loses
// little: an always-spinning pool cost 1.5–3× under load (docs/performance.md, "Threads").
constexpr int kSpinRounds = 2560;
constexpr int kYieldEvery = 256;

template <class Done>
bool poll(Done done) {
  for (int i = 0; i < kSpinRounds; ++i) {
    if (done()) return true;
    if (i % kYieldEvery == kYieldEvery - 1) std::this_thread::yield();
    else cpu_relax();
  }
  return done();
}

// Task affinity: thread i (0 = the caller) runs tasks i, i + T, i + 2T, ... first, so a task index
// names the core that touches its data, and code that splits a buffer the same way in consecutive
// regions (a matmul's output blocks, then the activation over them, then their gradients) keeps
// it in one core's cache. A thread with nothing of its own left takes the others' unclaimed tasks,
// so a late or descheduled thread delays nothing. Which thread runs a task never changes what the
// task computes, so the bytes do not depend on it.
//
// Claims are one atomic word: the region's generation (low 32 bits) in the high half, and in the
// low half a bitmap of claimed tasks (up to 32 tasks) or, for more tasks, the next unclaimed index.
// A thread that wakes late for a finished region fails every claim (the generation differs), and
// the caller starts the next region only when every task has finished, so a region's fn and ctx
// are stable while any of its tasks runs.
class Pool {
 public:
  ~Pool() { resize(1); }

  void resize(int n) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_.store(true, std::memory_order_relaxed);
      generation_.fetch_add(1, std::memory_order_release);
    }
    wake_.notify_all();
    for (std::thread& t : workers_) t.join();
    workers_.clear();
    stop_.store(false, std::memory_order_relaxed);
    threads_ = std::max(1, n);
  }
  int threads() const { return threads_; }

  void run(int64_t tasks, void (*fn)(void*, int64_t), void* ctx) {
    if (threads_ <= 1 || tasks <= 1) {
      for (int64_t t = 0; t < tasks; ++t) fn(ctx, t);
      return;
    }
    if (workers_.empty()) {  // they start from the current generation, however late they run
      const uint64_t now = generation_.load(std::memory_order_relaxed);
      for (int i = 1; i < threads_; ++i) workers_.emplace_back([this, i, now] { work(i, now); });
    }
    uint64_t g;
    bool notify;
    {
      std::lock_guard<std::mutex> lock(mu_);
      fn_.store(fn, std::memory_order_relaxed);
      ctx_.store(ctx, std::memory_order_relaxed);
      tasks_.store(tasks, std::memory_order_relaxed);
      done_.store(0, std::memory_order_relaxed);
      g = generation_.load(std::memory_order_relaxed) + 1;
      claims_.store(g << 32, std::memory_order_release);
      generation_.store(g, std::memory_order_release);
      notify = sleeping_ > 0;
    }
    if (notify) wake_.notify_all();
    drain(0, g);
    const auto finished = [&] { return done_.load(std::memory_order_acquire) == tasks; };
    if (poll(finished)) return;  // the others' last tasks usually end within µs of ours
    std::unique_lock<std::mutex> lock(mu_);
    done_cv_.wait(lock, finished);
  }

 private:
  static constexpr int64_t kBitmapTasks = 32;

  // Claims task t (bitmap form) of region g; false if it is taken or the region is not current.
  bool claim(uint64_t g, int64_t t) {
    const uint64_t bit = uint64_t(1) << t;
    uint64_t w = claims_.load(std::memory_order_acquire);
    for (;;) {
      if ((w >> 32) != (g & 0xffffffffu) || (w & bit)) return false;
      if (claims_.compare_exchange_weak(w, w | bit, std::memory_order_acq_rel, std::memory_order_acquire)) return true;
    }
  }
  // Claims the next task (counter form); -1 when none is left or the region is not current.
  int64_t claim_next(uint64_t g, int64_t tasks) {
    uint64_t w = claims_.load(std::memory_order_acquire);
    for (;;) {
      const int64_t t = static_cast<int64_t>(w & 0xffffffffu);
      if ((w >> 32) != (g & 0xffffffffu) || t >= tasks) return -1;
      if (claims_.compare_exchange_weak(w, w + 1, std::memory_order_acq_rel, std::memory_order_acquire)) return t;
    }
  }
  void run_task(int64_t t) {  // after a successful claim: fn_, ctx_, tasks_ are this region's
    fn_.load(std::memory_order_relaxed)(ctx_.load(std::memory_order_relaxed), t);
    if (done_.fetch_add(1, std::memory_order_acq_rel) + 1 == tasks_.load(std::memory_order_relaxed)) {
      std::lock_guard<std::mutex> lock(mu_);  // the caller may be between its check and its wait
      done_cv_.notify_one();
    }
  }
  void drain(int self, uint64_t g) {
    const int64_t tasks = tasks_.load(std::memory_order_relaxed);  // stale for a late thread: claims fail
    if (tasks > kBitmapTasks) {
      for (int64_t t; (t = claim_next(g, tasks)) >= 0;) run_task(t);
      return;
    }
    for (int64_t t = self; t < tasks; t += threads_)
      if (claim(g, t)) run_task(t);
    for (int64_t t = 0; t < tasks; ++t)
      if (t % threads_ != self && claim(g, t)) run_task(t);
  }
  void work(int self, uint64_t seen) {
    for (;;) {
      uint64_t g = seen;
      if (!poll([&] { return (g = generation_.load(std::memory_order_acquire)) != seen; })) {
        std::unique_lock<std::mutex> lock(mu_);
        ++sleeping_;
        wake_.wait(lock, [&] { return (g = generation_.load(std::memory_order_acquire)) != seen; });
        --sleeping_;
      }
      if (stop_.load(std::memory_order_acquire)) return;
      seen = g;
      drain(self, g);
    }
  }

  std::mutex mu_;
  std::condition_variable wake_, done_cv_;
  std::vector<std::thread> workers_;
  int threads_ = 1, sleeping_ = 0;  // sleeping_: guarded by mu_
  std::atomic<bool> stop_{false};
  std::atomic<uint64_t> generation_{0}, claims_{0};
  std::atomic<void (*)(void*, int64_t)> fn_{nullptr};
  std::atomic<void*> ctx_{nullptr};
  std::atomic<int64_t> tasks_{0}, done_{0};
};

Pool& pool() {
  static Pool p;
  return p;
}

}  // namespace

void set_num_threads(int n) {
  if (n != pool().threads()) pool().resize(n);
}
int num_threads() { return pool().threads(); }
int hardware_threads() { return std::max(1u, std::thread::hardware_concurrency()); }
void parallel_for(int64_t tasks, void (*fn)(void*, int64_t), void* ctx) { pool().run(tasks, fn, ctx); }

}  // namespace gr
