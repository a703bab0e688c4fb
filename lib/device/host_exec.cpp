// host_exec.cpp — block scheduling for the host backend: fibers for the threads of a block, a
// worker pool for the blocks of a launch. See host_exec.h for the contract.
#include "device/host_exec.h"

#include <sys/mman.h>
#include <ucontext.h>
#include <unistd.h>

#include <barrier>
#include <memory>
#include <thread>

#include "tensor/shape.h"

namespace gr::device::detail {
namespace {

constexpr size_t kFiberStack = 64 * 1024;  // kernels are flat loops; the guard page catches overflow

enum class FiberState { ready, running, at_barrier, done };

struct Fiber {
  ucontext_t uc;  // never moved or copied: glibc's ucontext points into itself
  char* map = nullptr;
  size_t map_bytes = 0;
  gr_host_ctx ctx{};
  FiberState state = FiberState::done;
};

// Per OS thread: the fibers (grown to the largest blockDim seen, then reused) and the scheduler's
// own context. A fiber always runs on the OS thread that created it, so thread_local is right.
struct FiberSet {
  std::vector<std::unique_ptr<Fiber>> fibers;
  ucontext_t sched;
  unsigned current = 0;
  gr_host_launch_fn entry = nullptr;
  void** args = nullptr;

  ~FiberSet() {
    for (auto& f : fibers) munmap(f->map, f->map_bytes);
  }

  void grow(unsigned n) {
    const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
    while (fibers.size() < n) {
      auto f = std::make_unique<Fiber>();
      f->map_bytes = kFiberStack + page;
      void* m = mmap(nullptr, f->map_bytes, PROT_READ | PROT_WRITE,
                     MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
      if (m == MAP_FAILED) throw gr::Error("host backend: cannot map a fiber stack");
      f->map = static_cast<char*>(m);
      mprotect(f->map, page, PROT_NONE);  // stacks grow down: the guard is the lowest page
      if (getcontext(&f->uc) != 0) throw gr::Error("host backend: getcontext failed");
      f->uc.uc_stack.ss_sp = f->map + page;
      f->uc.uc_stack.ss_size = kFiberStack;
      fibers.push_back(std::move(f));
    }
  }
};

thread_local FiberSet tl_fibers;

void fiber_main() {
  FiberSet& s = tl_fibers;
  Fiber& f = *s.fibers[s.current];
  s.entry(&f.ctx, s.args);
  f.state = FiberState::done;
}  // returning resumes uc_link, the scheduler

void fiber_barrier(void* sched) {
  FiberSet& s = *static_cast<FiberSet*>(sched);
  Fiber& f = *s.fibers[s.current];
  f.state = FiberState::at_barrier;
  swapcontext(&f.uc, &s.sched);
}

uint64_t splitmix64(uint64_t& x) {
  uint64_t z = (x += 0x9e3779b97f4a7c15ULL);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

void run_block_fibers(FiberSet& s, unsigned grid, unsigned block, unsigned b, const std::string& kernel,
                      uint64_t shuffle_seed) {
  for (unsigned t = 0; t < block; ++t) {
    Fiber& f = *s.fibers[t];
    f.ctx = gr_host_ctx{grid, block, b, b + 1, t, &fiber_barrier, &s};
    f.uc.uc_link = &s.sched;
    makecontext(&f.uc, &fiber_main, 0);
    f.state = FiberState::ready;
  }
  // Rounds: every live thread runs until its next barrier or its end, highest thread first (or, in
  // the adversarial schedule, in a fresh seeded order every round).
  std::vector<unsigned> order(block);
  for (unsigned t = 0; t < block; ++t) order[t] = block - 1 - t;
  for (unsigned round = 0;; ++round) {
    if (shuffle_seed != 0) order = shuffled_order(block, shuffle_seed ^ (uint64_t(b) << 32) ^ round);
    unsigned waiting = 0, finished = 0;
    for (unsigned t : order) {
      Fiber& f = *s.fibers[t];
      if (f.state == FiberState::done) continue;
      s.current = t;
      f.state = FiberState::running;
      swapcontext(&s.sched, &f.uc);
      if (f.state == FiberState::at_barrier) ++waiting;
      else ++finished;
    }
    if (waiting == 0) return;
    if (finished != 0)
      throw gr::Error("kernel " + kernel + ": __syncthreads() #" + std::to_string(round + 1) +
                      " was not reached by every thread of block " + std::to_string(b) + " (" +
                      std::to_string(finished) + " of " + std::to_string(block) +
                      " threads returned first); every barrier must be reached by all threads");
    for (unsigned t = 0; t < block; ++t) s.fibers[t]->state = FiberState::ready;
  }
}

#ifdef GR_TSAN_BUILD
// ThreadSanitizer build: each thread of a block is a real OS thread and __syncthreads a real barrier,
// so TSan reports a missing barrier or a racy += inside a block as the data race it is. (A thread that
// returns drops out of the barrier; the fiber mode of the normal build reports unmatched barriers.)
void os_barrier(void* bar) { static_cast<std::barrier<>*>(bar)->arrive_and_wait(); }

void run_block_threads(gr_host_launch_fn entry, void** args, unsigned grid, unsigned block, unsigned b) {
  std::barrier<> bar(block);
  std::vector<std::thread> threads;
  threads.reserve(block);
  for (unsigned t = 0; t < block; ++t)
    threads.emplace_back([&, t] {
      const gr_host_ctx ctx{grid, block, b, b + 1, t, &os_barrier, &bar};
      entry(&ctx, args);
      bar.arrive_and_drop();
    });
  for (std::thread& th : threads) th.join();
}
#endif

}  // namespace

std::vector<unsigned> shuffled_order(unsigned n, uint64_t seed) {
  std::vector<unsigned> p(n);
  for (unsigned i = 0; i < n; ++i) p[i] = i;
  uint64_t x = seed;
  for (unsigned i = n; i > 1; --i) std::swap(p[i - 1], p[splitmix64(x) % i]);
  return p;
}

void run_blocks(gr_host_launch_fn entry, void** args, unsigned grid, unsigned block, unsigned b0,
                unsigned b1, const std::string& kernel, uint64_t shuffle_seed) {
  if (b0 >= b1) return;
  if (block == 1) {
    const gr_host_ctx ctx{grid, 1, b0, b1, 0, nullptr, nullptr};
    entry(&ctx, args);
    return;
  }
#ifdef GR_TSAN_BUILD
  for (unsigned b = b0; b < b1; ++b) run_block_threads(entry, args, grid, block, b);
  (void)kernel;
  (void)shuffle_seed;
  return;
#endif
  FiberSet& s = tl_fibers;
  s.grow(block);
  s.entry = entry;
  s.args = args;
  for (unsigned b = b0; b < b1; ++b) run_block_fibers(s, grid, block, b, kernel, shuffle_seed);
}

WorkerPool::WorkerPool(unsigned workers) : workers_(workers < 1 ? 1 : workers), errors_(workers_) {
  for (unsigned w = 1; w < workers_; ++w) threads_.emplace_back([this, w] { loop(w); });
}

WorkerPool::~WorkerPool() {
  {
    std::lock_guard<std::mutex> lock(m_);
    stop_ = true;
  }
  wake_.notify_all();
  for (auto& t : threads_) t.join();
}

void WorkerPool::loop(unsigned w) {
  unsigned long seen = 0;
  for (;;) {
    const std::function<void(unsigned)>* job = nullptr;
    {
      std::unique_lock<std::mutex> lock(m_);
      wake_.wait(lock, [&] { return stop_ || generation_ != seen; });
      if (stop_) return;
      seen = generation_;
      job = job_;
    }
    try {
      (*job)(w);
    } catch (...) {
      errors_[w] = std::current_exception();
    }
    {
      std::lock_guard<std::mutex> lock(m_);
      if (--pending_ == 0) done_.notify_one();
    }
  }
}

void WorkerPool::run(const std::function<void(unsigned)>& job) {
  for (auto& e : errors_) e = nullptr;
  {
    std::lock_guard<std::mutex> lock(m_);
    job_ = &job;
    pending_ = workers_ - 1;
    ++generation_;
  }
  wake_.notify_all();
  try {
    job(0);
  } catch (...) {
    errors_[0] = std::current_exception();
  }
  {
    std::unique_lock<std::mutex> lock(m_);
    done_.wait(lock, [&] { return pending_ == 0; });
  }
  for (auto& e : errors_)
    if (e) std::rethrow_exception(e);
}

}  // namespace gr::device::detail
