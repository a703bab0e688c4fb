// test_adversarial.cpp — the host backend's adversarial schedule (HostSchedule::adversarial,
// docs/device.md) proves it can catch the three classic kernel bugs that the in-order schedule lets
// pass by luck: a missing __syncthreads, a read of another block's write, and a non-atomic += shared
// by blocks. Each broken kernel gives the right answer in order and a wrong one under some seed of
// the adversarial schedule; each fixed twin gives the right answer under every seed.
#include <stdlib.h>

#include <catch2/catch.hpp>
#include <cstring>
#include <filesystem>
#include <vector>

#include "device/backend.h"
#include "support/broken_kernels.h"
#include "support/temp_dir.h"

using namespace gr::device;

namespace {


using TempDir = gr::test::TempDir;

const std::string& cache_dir() {
  static TempDir dir("gr_test_adv");
  return dir.path;
}

std::unique_ptr<Backend> backend(bool adversarial, uint64_t seed, unsigned threads) {
  HostOptions o;
  o.threads = threads;
  o.schedule = adversarial ? HostSchedule::adversarial : HostSchedule::in_order;
  o.schedule_seed = seed;
  o.schedule_from_env = false;
  o.cache_dir = cache_dir();
  return make_host_backend(o);
}

// Runs `kernel` over buffers initialised from `init` and returns the buffer `result` afterwards.
std::vector<double> run(Backend& be, const std::string& kernel, unsigned grid, unsigned block,
                        std::vector<std::vector<double>> init, size_t result, long long n) {
  Module* m = be.compile(gr::test::kBrokenKernels, "test_adversarial.cu");
  std::vector<Buffer> bufs;
  std::vector<void*> args;
  for (auto& v : init) {
    bufs.push_back(be.alloc(v.size() * sizeof(double)));
    be.upload(bufs.back(), v.data(), v.size() * sizeof(double));
  }
  for (Buffer& b : bufs) args.push_back(&b.handle);
  args.push_back(&n);
  be.launch(be.kernel(m, kernel), grid, block, args.data());
  be.synchronize();
  std::vector<double> out(init[result].size());
  be.download(out.data(), bufs[result], out.size() * sizeof(double));
  for (Buffer& b : bufs) be.free(b);
  return out;
}

bool same(const std::vector<double>& a, const std::vector<double>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(double)) == 0;
}

std::vector<double> ramp(size_t n) {
  std::vector<double> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = 0.25 * double(i) - 1.5;
  return v;
}

constexpr int kSeeds = 16;

}  // namespace

TEST_CASE("adversarial schedule catches a missing __syncthreads that in-order fibers miss", "[device][adversarial]") {
  const long long n = 128;  // the CUDA backend's block size
  const std::vector<double> x = ramp(n), zero(n, 0.0);
  std::vector<double> want(n);
  for (long long t = 0; t < n; ++t) want[size_t(t)] = x[size_t(t + 1 < n ? t + 1 : t)] * 3.0 + x[size_t(t)];
  auto in_order = backend(false, 0, 1);
  CHECK(same(run(*in_order, "b_right_nobarrier", 1, n, {x, zero, zero}, 2, n), want));  // fooled
  int caught = 0;
  for (int seed = 1; seed <= kSeeds; ++seed) {
    auto adv = backend(true, uint64_t(seed), 1);
    CHECK(same(run(*adv, "b_right_barrier", 1, n, {x, zero, zero}, 2, n), want));
    caught += !same(run(*adv, "b_right_nobarrier", 1, n, {x, zero, zero}, 2, n), want);
  }
  INFO("caught under " << caught << " of " << kSeeds << " seeds");
  CHECK(caught > 0);
}

TEST_CASE("adversarial schedule catches a read of another block's write", "[device][adversarial]") {
  const long long n = 64;
  const std::vector<double> x = ramp(n), zero(n, 0.0);
  std::vector<double> want(n);
  for (long long b = 0; b < n; ++b) want[size_t(b)] = (b > 0 ? x[size_t(b - 1)] * 3.0 : 0.0) + x[size_t(b)];
  for (unsigned block : {1u, 3u}) {
    INFO("blockDim " << block);
    auto in_order = backend(false, 0, 1);
    CHECK(same(run(*in_order, "b_cross_block", unsigned(n), block, {x, zero, zero}, 2, n), want));  // fooled
    int caught = 0;
    for (int seed = 1; seed <= kSeeds; ++seed) {
      auto adv = backend(true, uint64_t(seed), 2);
      CHECK(same(run(*adv, "b_cross_block_fixed", unsigned(n), block, {x, zero, zero}, 2, n), want));
      caught += !same(run(*adv, "b_cross_block", unsigned(n), block, {x, zero, zero}, 2, n), want);
    }
    INFO("caught under " << caught << " of " << kSeeds << " seeds");
    CHECK(caught > 0);
  }
}

TEST_CASE("adversarial schedule catches a non-atomic += shared by blocks", "[device][adversarial]") {
  // Blocks run concurrently on worker threads; the racing read-modify-writes lose updates. The race
  // window is made wide (many increments per block) so concurrency shows on any multi-core machine.
  const unsigned grid = 8;
  const long long reps = 200000;
  const double want = double(grid) * double(reps);
  std::vector<double> init(1 + grid, 0.0);
  auto serial = backend(false, 0, 1);
  CHECK(run(*serial, "b_racy_add", grid, 1, {init}, 0, reps)[0] == want);  // fooled
  int caught = 0;
  for (int seed = 1; seed <= kSeeds && caught == 0; ++seed) {
    auto adv = backend(true, uint64_t(seed), 4);
    const std::vector<double> fixed = run(*adv, "b_racy_add_fixed", grid, 1, {init}, 0, reps);
    double total = 0;
    for (unsigned b = 0; b < grid; ++b) total += fixed[1 + b];
    CHECK(total == want);
    caught += run(*adv, "b_racy_add", grid, 1, {init}, 0, reps)[0] != want;
  }
  CHECK(caught > 0);
}
