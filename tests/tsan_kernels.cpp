// tsan_kernels.cpp — runs one kernel of support/broken_kernels.h on the host backend, for the
// ThreadSanitizer build (scripts/test-tsan): the broken kernels must make TSan report a data race
// (the ctest expects TSan's exit code), their fixed twins must run clean; each kernel is launched
// many times so that one launch whose blocks all ran on one thread cannot hide the race.
//   tsan_kernels KERNEL
// Blocks run concurrently (adversarial schedule, 4 workers); in a GR_TSAN build each thread of a block
// is an OS thread, so a missing barrier is a race between threads of one block.
#include <cstdio>
#include <string>
#include <vector>

#include "device/backend.h"
#include "support/broken_kernels.h"
#include "support/temp_dir.h"

using namespace gr::device;

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: tsan_kernels KERNEL\n");
    return 2;
  }
  const std::string kernel = argv[1];
  int rc = 0;
  try {
    const gr::test::TempDir dir("gr_tsan");
    HostOptions o;
    o.threads = 4;
    o.schedule = HostSchedule::adversarial;
    o.schedule_seed = 1;
    o.schedule_from_env = false;
    o.cache_dir = dir.path;
    auto be = make_host_backend(o);
    Module* m = be->compile(gr::test::kBrokenKernels, "broken_kernels.cu");
    const bool racy_add = kernel.rfind("b_racy_add", 0) == 0;
    // Enough work per block that the pool's other workers are awake before the caller's thread has
    // taken every block (else everything runs on one thread and there is nothing to race).
    const bool right = kernel.rfind("b_right", 0) == 0;
    const long long n = racy_add ? 200000 : right ? 128 : 65536;  // racy_add: increments per block
    const unsigned grid = right ? 1 : racy_add ? 8 : 64;
    const unsigned block = right ? 128 : 1;
    const size_t elems = racy_add ? 9 : size_t(n);
    std::vector<double> init(elems, 0.5);
    std::vector<Buffer> bufs;
    std::vector<void*> args;
    for (int i = 0; i < (racy_add ? 1 : 3); ++i) {
      bufs.push_back(be->alloc(elems * sizeof(double)));
      be->upload(bufs.back(), init.data(), elems * sizeof(double));
    }
    for (Buffer& b : bufs) args.push_back(&b.handle);
    args.push_back(const_cast<long long*>(&n));
    // Several launches: a race needs two worker threads to take blocks of one launch, and on a loaded
    // machine the caller's thread can take every block of a launch before the others wake (CI saw
    // b_racy_add run race-free once). Each launch is a fresh chance; halt_on_error ends a broken
    // kernel's run at its first report, a fixed twin must stay clean through all of them. Pinned to
    // one core (taskset -c 0), the worst case: one launch of 20 000 increments per block caught
    // b_racy_add 0 times in 10, 200 such launches 9 in 10, 30 launches of 200 000 20 in 20.
    const int launches = racy_add ? 30 : 20;
    for (int l = 0; l < launches; ++l) {
      be->launch(be->kernel(m, kernel), grid, block, args.data());
      be->synchronize();
    }
    for (Buffer& b : bufs) be->free(b);
    std::printf("%s ran\n", kernel.c_str());
  } catch (const std::exception& e) {
    std::fprintf(stderr, "tsan_kernels: %s\n", e.what());
    rc = 2;
  }
  return rc;
}
