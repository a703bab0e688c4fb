// test_cuda_driver.cpp — the CUDA backend's driver-level rules without a GPU, over the stand-in
// driver tests/support/fake_cuda.cpp (host memory, launches recorded, never run), with the real
// NVRTC making the modules:
//   • each kernel's own block limit (cuFuncGetAttribute MAX_THREADS_PER_BLOCK): launch refuses a
//     larger block naming the limit and the registers, fit_block clamps to it;
//   • a failed cuGraphInstantiateWithFlags keeps the previous episode (the Backend contract) and
//     frees the new graph;
//   • several threads' backends missing the module cache at once run NVRTC once for the module.
// The stand-in is loaded by path before any backend opens "libcuda.so.1", so the backends use it
// even on a machine with a real driver. Without NVRTC: Skipped [nvrtc].
#include <dlfcn.h>

#include <atomic>
#include <catch2/catch.hpp>
#include <string>
#include <thread>
#include <vector>

#include "device/backend.h"
#include "device/detail.h"
#include "device/nvrtc.h"
#include "support/skip.h"
#include "support/temp_dir.h"

using namespace gr::device;

namespace {

const char* kSource = R"(
extern "C" __global__ void t_fill(double* out, double v, long long n) {
  for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (long long)gridDim.x * blockDim.x)
    out[i] = v;
}
GR_EXPORT_KERNEL(t_fill)
extern "C" __global__ void t_fat(double* out, long long n) {
  for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (long long)gridDim.x * blockDim.x)
    out[i] = __dadd_rn(out[i], 1.0);
}
GR_EXPORT_KERNEL(t_fat)
)";

struct Fake {
  void (*set_kernel)(const char*, int, int) = nullptr;
  void (*fail_next_instantiate)() = nullptr;
  size_t (*take_log)(char*, size_t) = nullptr;
  int (*graphs_live)() = nullptr;
  int (*execs_live)() = nullptr;
  std::string log() const {
    std::string s(take_log(nullptr, 0) + 1, '\0');
    s.resize(take_log(s.data(), s.size()));
    return s;
  }
};

// Loads the stand-in driver (once per process) and returns its test controls.
const Fake& fake() {
  static const Fake f = [] {
    Fake x;
    void* lib = dlopen(GR_FAKE_CUDA, RTLD_NOW | RTLD_LOCAL);
    if (!lib) FAIL("cannot load the stand-in driver " << GR_FAKE_CUDA << ": " << dlerror());
    x.set_kernel = reinterpret_cast<void (*)(const char*, int, int)>(dlsym(lib, "fake_cuda_set_kernel"));
    x.fail_next_instantiate = reinterpret_cast<void (*)()>(dlsym(lib, "fake_cuda_fail_next_instantiate"));
    x.take_log = reinterpret_cast<size_t (*)(char*, size_t)>(dlsym(lib, "fake_cuda_take_log"));
    x.graphs_live = reinterpret_cast<int (*)()>(dlsym(lib, "fake_cuda_graphs_live"));
    x.execs_live = reinterpret_cast<int (*)()>(dlsym(lib, "fake_cuda_execs_live"));
    return x;
  }();
  return f;
}

const std::string& cache_dir() {
  static gr::test::TempDir dir("gr_test_cuda_driver");
  return dir.path;
}

// A CUDA backend over the stand-in, or null after GR_SKIP when NVRTC is missing.
std::unique_ptr<Backend> cuda(const std::string& cache = cache_dir()) {
  (void)fake();
  CudaOptions o;
  o.cache_dir = cache;
  auto be = make_cuda_backend(o);
  REQUIRE(be->describe().find("fake CUDA device") != std::string::npos);  // not a real driver
  return be;
}

bool have_nvrtc(std::string* why) {
  try {
    (void)detail::nvrtc_version();
    return true;
  } catch (const DeviceUnavailable& e) {
    *why = e.what();
    return false;
  }
}

}  // namespace

TEST_CASE("cuda backend (stand-in driver): a kernel's register-limited block size is queried, refused and fitted",
          "[cuda_driver][nvrtc]") {
  std::string why;
  if (!have_nvrtc(&why)) GR_SKIP("nvrtc", "the CUDA backend compiles with NVRTC: " << why);
  fake().set_kernel("t_fat", 672, 96);  // 96 registers per thread: 21 warps of 65536 registers
  auto be = cuda();
  Module* m = be->compile(kSource, "driver.cu");
  Kernel* fat = be->kernel(m, "t_fat");
  Kernel* thin = be->kernel(m, "t_fill");
  CHECK(be->max_block(fat) == 672);
  CHECK(be->max_block(thin) == 1024);
  Buffer out = be->alloc(1000 * sizeof(double));
  long long n = 1000;
  void* args[] = {&out.handle, &n};
  CHECK_THROWS_WITH(be->launch(fat, 2, 1024, args), Catch::Contains("t_fat") && Catch::Contains("block 1024 exceeds") &&
                                                        Catch::Contains("limit of 672") &&
                                                        Catch::Contains("96 registers"));
  CHECK(fit_block(*be, fat, 1024) == 672);
  CHECK(fit_block(*be, fat, 128) == 128);
  CHECK(fit_block(*be, thin, 1024) == 1024);
  (void)fake().log();
  be->launch(fat, 2, fit_block(*be, fat, 1024), args);
  CHECK(fake().log() == "t_fat 2 672\n");
  be->free(out);
}

TEST_CASE("cuda backend (stand-in driver): a failed graph instantiation keeps the previous episode",
          "[cuda_driver][nvrtc]") {
  std::string why;
  if (!have_nvrtc(&why)) GR_SKIP("nvrtc", "the CUDA backend compiles with NVRTC: " << why);
  auto be = cuda();
  Module* m = be->compile(kSource, "driver.cu");
  Kernel* k = be->kernel(m, "t_fill");
  Buffer out = be->alloc(64 * sizeof(double));
  double v = 1.0;
  long long n = 64;
  void* args[] = {&out.handle, &v, &n};
  be->begin_capture();
  be->launch(k, 1, 64, args);
  be->end_capture();
  const uint64_t first = be->capture_id();
  REQUIRE(first != 0);
  const int graphs = fake().graphs_live(), execs = fake().execs_live();

  be->begin_capture();
  be->launch(k, 3, 32, args);
  fake().fail_next_instantiate();
  CHECK_THROWS_WITH(be->end_capture(),
                    Catch::Contains("cuGraphInstantiateWithFlags") && Catch::Contains("CUDA_ERROR_UNKNOWN"));
  CHECK(be->has_capture());
  CHECK(be->capture_id() == first);       // the episode held before stays ...
  CHECK(fake().graphs_live() == graphs);  // ... and the new graph is gone
  CHECK(fake().execs_live() == execs);
  (void)fake().log();
  be->replay();
  CHECK(fake().log() == "t_fill 1 64\n");  // the first episode's launch, not the failed one's

  be->begin_capture();  // a later capture replaces it as usual
  be->launch(k, 2, 16, args);
  be->end_capture();
  CHECK(be->capture_id() != first);
  CHECK(fake().graphs_live() == graphs);
  be->replay();
  CHECK(fake().log() == "t_fill 2 16\n");
  be->clear_capture();
  CHECK(fake().graphs_live() == graphs - 1);
  be->free(out);
}

TEST_CASE("cuda backend (stand-in driver): threads' backends missing the cache at once run NVRTC once",
          "[cuda_driver][nvrtc]") {
  std::string why;
  if (!have_nvrtc(&why)) GR_SKIP("nvrtc", "the CUDA backend compiles with NVRTC: " << why);
  gr::test::TempDir dir;
  (void)fake();
  const std::string src = std::string(kSource) + "\n// in-flight\n";
  const unsigned long before = detail::nvrtc_stats().compiles;
  std::vector<std::thread> pool;
  std::atomic<int> found{0};
  for (int i = 0; i < 6; ++i)
    pool.emplace_back([&] {
      CudaOptions o;
      o.cache_dir = dir.path;
      auto be = make_cuda_backend(o);
      Module* m = be->compile(src, "inflight.cu");
      found += be->kernel(m, "t_fill") != nullptr;
    });
  for (std::thread& t : pool) t.join();
  CHECK(found == 6);
  CHECK(detail::nvrtc_stats().compiles == before + 1);
  // A new backend on the same cache: no compile at all.
  auto later = cuda(dir.path);
  later->compile(src, "inflight.cu");
  CHECK(detail::nvrtc_stats().compiles == before + 1);
}
