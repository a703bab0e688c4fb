#include "tensor/parallel.h"

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <mutex>
#include <thread>
#include <vector>

namespace gr {

namespace {

class Pool {
 public:
  ~Pool() { resize(1); }

  void resize(int n) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
      ++generation_;
    }
    wake_.notify_all();
    for (std::thread& t : workers_) t.join();
    workers_.clear();
    stop_ = false;
    threads_ = std::max(1, n);
  }
  int threads() const { return threads_; }

  void run(int64_t tasks, void (*fn)(void*, int64_t), void* ctx) {
    if (threads_ <= 1 || tasks <= 1) {
      for (int64_t t = 0; t < tasks; ++t) fn(ctx, t);
      return;
    }
    if (workers_.empty())
      for (int i = 1; i < threads_; ++i) workers_.emplace_back([this] { work(); });
    {
      std::lock_guard<std::mutex> lock(mu_);
      fn_ = fn, ctx_ = ctx, tasks_ = tasks;
      next_.store(0);
      pending_ = static_cast<int>(workers_.size());
      ++generation_;
    }
    wake_.notify_all();
    drain();
    std::unique_lock<std::mutex> lock(mu_);
    done_.wait(lock, [this] { return pending_ == 0; });
  }

 private:
  void drain() {
    for (int64_t t; (t = next_.fetch_add(1)) < tasks_;) fn_(ctx_, t);
  }
  void work() {
    uint64_t seen = 0;
    for (;;) {
      {
        std::unique_lock<std::mutex> lock(mu_);
        wake_.wait(lock, [&] { return generation_ != seen; });
        seen = generation_;
        if (stop_) return;
      }
      drain();
      std::lock_guard<std::mutex> lock(mu_);
      if (--pending_ == 0) done_.notify_one();
    }
  }

  std::mutex mu_;
  std::condition_variable wake_, done_;
  std::vector<std::thread> workers_;
  uint64_t generation_ = 0;
  bool stop_ = false;
  int threads_ = 1, pending_ = 0;
  void (*fn_)(void*, int64_t) = nullptr;
  void* ctx_ = nullptr;
  int64_t tasks_ = 0;
  std::atomic<int64_t> next_{0};
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
