// host_exec.h — how the host backend runs a launch on the CPU: blocks on a small thread pool,
// a block's threads as cooperative fibers (private to lib/device).
#pragma once
#include <condition_variable>
#include <cstdint>
#include <exception>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "device/host_abi.h"

namespace gr::device::detail {

// Runs blocks [b0, b1) of a launch on the calling OS thread. blockDim 1 is one trampoline call.
// blockDim > 1 runs each block's threads as fibers (ucontext, 64 KiB stacks with a guard page,
// allocated once per OS thread and reused); at every __syncthreads the scheduler resumes the
// waiting threads in REVERSE order (thread blockDim-1 first), so a kernel that reads a
// neighbour's write without a barrier sees stale data here instead of passing by luck. A block
// whose threads do not all reach the same barriers is reported as gr::Error naming `kernel`.
// `shuffle_seed` != 0 selects the adversarial order instead (HostSchedule::adversarial): each block's
// fibers start, and resume after every barrier, in an order drawn from (seed, block, round).
void run_blocks(gr_host_launch_fn entry, void** args, unsigned grid, unsigned block, unsigned b0,
                unsigned b1, const std::string& kernel, uint64_t shuffle_seed = 0);

// A seeded permutation of [0, n) (splitmix64 + Fisher-Yates): the adversarial schedule's block and
// fiber orders.
std::vector<unsigned> shuffled_order(unsigned n, uint64_t seed);

// A fixed set of worker threads; run(job) calls job(w) for every worker w in [0, size()), w = 0 on
// the calling thread, and returns when all are done, rethrowing the first (lowest w) exception.
class WorkerPool {
 public:
  explicit WorkerPool(unsigned workers);
  ~WorkerPool();
  WorkerPool(const WorkerPool&) = delete;
  WorkerPool& operator=(const WorkerPool&) = delete;
  unsigned size() const { return workers_; }
  void run(const std::function<void(unsigned)>& job);

 private:
  void loop(unsigned w);
  unsigned workers_;
  std::vector<std::thread> threads_;
  std::mutex m_;
  std::condition_variable wake_, done_;
  const std::function<void(unsigned)>* job_ = nullptr;
  unsigned long generation_ = 0;
  unsigned pending_ = 0;
  bool stop_ = false;
  std::vector<std::exception_ptr> errors_;
};

}  // namespace gr::device::detail
