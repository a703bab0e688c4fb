// test_device.cpp — lib/device: the host backend end to end (compile, cache, launch, fibers,
// threads, capture/replay, errors), the CUDA backend's unavailability report (or, where a GPU is
// present, bit-parity with the host backend), and NVRTC compiling the same kernel text.
#include <dlfcn.h>
#include <stdlib.h>

#include <atomic>
#include <catch2/catch.hpp>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>
#include <vector>
#if defined(__x86_64__)
#include <xmmintrin.h>
#endif

#include "device/backend.h"
#include "device/detail.h"
#include "device/nvrtc.h"
#include "gr_ops_scalar.h"
#include "support/skip.h"
#include "support/temp_dir.h"

using namespace gr::device;

namespace {

// One module exercising the kernel conventions; the same text goes to the host compiler and NVRTC.
const char* kSource = R"(
#include "gr_ops_scalar.h"

// Elementwise, grid-stride: correct for any grid and blockDim.
extern "C" __global__ void t_axpy(const double* x, const double* y, double* out, double a, long long n) {
  const long long stride = (long long)gridDim.x * blockDim.x;
  for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride)
    out[i] = __dadd_rn(__dmul_rn(a, x[i]), y[i]);
}
GR_EXPORT_KERNEL(t_axpy)

extern "C" __global__ void t_unary(const double* x, double* out, long long n) {
  const long long stride = (long long)gridDim.x * blockDim.x;
  for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride)
    out[i] = gr_add_fwd(gr_tanh_fwd(x[i]), gr_sigmoid_fwd(x[i]));
}
GR_EXPORT_KERNEL(t_unary)

// Block per row, threads stride columns; phase 2 reads the LEFT neighbour's phase-1 write, so it
// needs the barrier whenever a row is shared by several threads.
extern "C" __global__ void t_shift(const double* x, double* scratch, double* out, long long rows, long long cols) {
  for (long long r = blockIdx.x; r < rows; r += gridDim.x) {
    for (long long c = threadIdx.x; c < cols; c += blockDim.x) scratch[r * cols + c] = __dmul_rn(x[r * cols + c], 3.0);
    __syncthreads();
    for (long long c = threadIdx.x; c < cols; c += blockDim.x)
      out[r * cols + c] = __dadd_rn(scratch[r * cols + (c == 0 ? cols - 1 : c - 1)], x[r * cols + c]);
  }
}
GR_EXPORT_KERNEL(t_shift)

extern "C" __global__ void t_shift_nobarrier(const double* x, double* scratch, double* out, long long rows,
                                             long long cols) {
  for (long long r = blockIdx.x; r < rows; r += gridDim.x) {
    for (long long c = threadIdx.x; c < cols; c += blockDim.x) scratch[r * cols + c] = __dmul_rn(x[r * cols + c], 3.0);
    for (long long c = threadIdx.x; c < cols; c += blockDim.x)
      out[r * cols + c] = __dadd_rn(scratch[r * cols + (c == 0 ? cols - 1 : c - 1)], x[r * cols + c]);
  }
}
GR_EXPORT_KERNEL(t_shift_nobarrier)

// Breaks the barrier rule: thread 0 leaves before the others reach __syncthreads.
extern "C" __global__ void t_divergent(double* out) {
  if (threadIdx.x == 0) return;
  __syncthreads();
  out[threadIdx.x] = 1.0;
}
GR_EXPORT_KERNEL(t_divergent)
)";

// A fresh cache directory per test process, removed at exit ($GR_TEST_CACHE instead when set).
using TempDir = gr::test::TempDir;

const std::string& cache_dir() {
  static gr::test::CacheDir dir("gr_test_device");  // $GR_TEST_CACHE when set (support/temp_dir.h)
  return dir.path;
}

std::unique_ptr<Backend> host(unsigned threads = 1, bool fibers = true) {
  HostOptions o;
  o.threads = threads;
  o.fiber_block = fibers;
  o.cache_dir = cache_dir();
  return make_host_backend(o);
}

std::vector<double> inputs(size_t n, double scale) {
  std::vector<double> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = scale * (double(i % 37) - 18.25) / 7.0 + 1e-3 * double(i);
  return v;
}

bool same_bits(const std::vector<double>& a, const std::vector<double>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(double)) == 0;
}

// The reference results, computed with the same scalar definitions the kernels inline.
std::vector<double> ref_axpy(const std::vector<double>& x, const std::vector<double>& y, double a) {
  std::vector<double> o(x.size());
  for (size_t i = 0; i < x.size(); ++i) o[i] = __dadd_rn(__dmul_rn(a, x[i]), y[i]);
  return o;
}
std::vector<double> ref_unary(const std::vector<double>& x) {
  std::vector<double> o(x.size());
  for (size_t i = 0; i < x.size(); ++i) o[i] = gr_add_fwd(gr_tanh_fwd(x[i]), gr_sigmoid_fwd(x[i]));
  return o;
}
std::vector<double> ref_shift(const std::vector<double>& x, long long rows, long long cols) {
  std::vector<double> o(x.size());
  for (long long r = 0; r < rows; ++r)
    for (long long c = 0; c < cols; ++c)
      o[r * cols + c] = __dadd_rn(__dmul_rn(x[r * cols + (c == 0 ? cols - 1 : c - 1)], 3.0), x[r * cols + c]);
  return o;
}

struct Buffers {
  Backend& be;
  std::vector<Buffer> all;
  Buffer make(const std::vector<double>& v) {
    Buffer b = be.alloc(v.size() * sizeof(double));
    be.upload(b, v.data(), b.bytes);
    all.push_back(b);
    return b;
  }
  Buffer zeros(size_t n) { return make(std::vector<double>(n, 0.0)); }
  std::vector<double> get(Buffer b) {
    std::vector<double> v(b.bytes / sizeof(double));
    be.download(v.data(), b, b.bytes);
    return v;
  }
  ~Buffers() {
    for (Buffer b : all) be.free(b);
  }
};

// Runs t_shift (or the barrier-less variant) with the given launch shape; returns out.
std::vector<double> run_shift(Backend& be, Module* m, const char* kernel, unsigned grid, unsigned block) {
  const long long rows = 5, cols = 13;
  Buffers bufs{be, {}};
  const std::vector<double> x = inputs(size_t(rows * cols), 1.0);
  Buffer bx = bufs.make(x), bs = bufs.zeros(x.size()), bo = bufs.zeros(x.size());
  long long r = rows, c = cols;
  void* args[] = {&bx.handle, &bs.handle, &bo.handle, &r, &c};
  be.launch(be.kernel(m, kernel), grid, block, args);
  be.synchronize();
  return bufs.get(bo);
}

// Exercises one backend on the test module and returns every output, for cross-backend parity.
std::vector<double> workload(Backend& be) {
  Module* m = be.compile(kSource, "test_device.cu");
  const size_t n = 1000;
  Buffers bufs{be, {}};
  const std::vector<double> x = inputs(n, 1.0), y = inputs(n, -2.5);
  Buffer bx = bufs.make(x), by = bufs.make(y), bo = bufs.zeros(n), bu = bufs.zeros(n);
  double a = 0.375;
  long long nn = n;
  void* axpy_args[] = {&bx.handle, &by.handle, &bo.handle, &a, &nn};
  void* unary_args[] = {&bo.handle, &bu.handle, &nn};
  be.launch(be.kernel(m, "t_axpy"), 7, 32, axpy_args);
  be.launch(be.kernel(m, "t_unary"), 3, 64, unary_args);
  std::vector<double> all = bufs.get(bu);
  for (unsigned block : {1u, 4u, 32u}) {
    const std::vector<double> s = run_shift(be, m, "t_shift", 2, block);
    all.insert(all.end(), s.begin(), s.end());
  }
  return all;
}

}  // namespace

TEST_CASE("host backend: elementwise kernels reproduce the scalar definitions bit for bit", "[device]") {
  auto be = host();
  CHECK(be->name() == "host");
  CHECK(be->describe().rfind("host: ", 0) == 0);
  CHECK_FALSE(be->capabilities().real_gpu);  // fuse: auto keeps per-node launches here
  CHECK(be->capabilities().default_block == 1);
  Module* m = be->compile(kSource, "test_device.cu");
  const size_t n = 1000;
  const std::vector<double> x = inputs(n, 1.0), y = inputs(n, -2.5);
  const double a = 0.375;
  for (auto [grid, block] : {std::pair{1u, 1u}, {7u, 1u}, {3u, 3u}, {2u, 32u}, {2000u, 1u}}) {
    INFO("grid " << grid << " block " << block);
    Buffers bufs{*be, {}};
    Buffer bx = bufs.make(x), by = bufs.make(y), bo = bufs.zeros(n), bu = bufs.zeros(n);
    double av = a;
    long long nn = n;
    void* axpy_args[] = {&bx.handle, &by.handle, &bo.handle, &av, &nn};
    be->launch(be->kernel(m, "t_axpy"), grid, block, axpy_args);
    void* unary_args[] = {&bo.handle, &bu.handle, &nn};
    be->launch(be->kernel(m, "t_unary"), grid, block, unary_args);
    be->synchronize();
    CHECK(same_bits(bufs.get(bo), ref_axpy(x, y, a)));
    CHECK(same_bits(bufs.get(bu), ref_unary(ref_axpy(x, y, a))));
  }
}

TEST_CASE("host backend: __syncthreads orders phases and reverse-order fibers expose a missing one", "[device]") {
  auto be = host();
  Module* m = be->compile(kSource, "test_device.cu");
  const std::vector<double> want = ref_shift(inputs(5 * 13, 1.0), 5, 13);
  for (unsigned block : {1u, 2u, 4u, 5u, 13u, 32u})
    for (unsigned grid : {1u, 2u, 5u, 9u}) {
      INFO("grid " << grid << " block " << block);
      CHECK(same_bits(run_shift(*be, m, "t_shift", grid, block), want));
    }
  // Without the barrier: right by luck with one thread per block, wrong once threads interleave.
  CHECK(same_bits(run_shift(*be, m, "t_shift_nobarrier", 3, 1), want));
  CHECK_FALSE(same_bits(run_shift(*be, m, "t_shift_nobarrier", 3, 4), want));
  // fiber_block = false runs every launch with blockDim 1: same bits as any correct blockDim.
  auto serial = host(1, false);
  Module* ms = serial->compile(kSource, "test_device.cu");
  CHECK(serial->describe().find("forced to 1") != std::string::npos);
  CHECK(same_bits(run_shift(*serial, ms, "t_shift", 3, 32), want));
  CHECK(same_bits(run_shift(*serial, ms, "t_shift_nobarrier", 3, 4), want));
}

TEST_CASE("host backend: a barrier not reached by every thread is an error naming the kernel", "[device]") {
  auto be = host();
  Module* m = be->compile(kSource, "test_device.cu");
  Buffers bufs{*be, {}};
  Buffer out = bufs.zeros(8);
  void* args[] = {&out.handle};
  Kernel* k = be->kernel(m, "t_divergent");
  REQUIRE_NOTHROW(be->launch(k, 2, 1, args));  // one thread: no barrier to miss
  try {
    be->launch(k, 2, 4, args);
    FAIL("divergent barrier not reported");
  } catch (const gr::Error& e) {
    const std::string what = e.what();
    CHECK(what.find("t_divergent") != std::string::npos);
    CHECK(what.find("__syncthreads") != std::string::npos);
  }
  // The fiber machinery recovers: the next launch on this thread is fine.
  CHECK(same_bits(run_shift(*be, m, "t_shift", 2, 4), ref_shift(inputs(5 * 13, 1.0), 5, 13)));
}

TEST_CASE("host backend: threads share blocks and give identical bytes", "[device]") {
  auto one = host(1), three = host(3);
  CHECK(three->describe().find("3 threads") != std::string::npos);
  CHECK(same_bits(workload(*one), workload(*three)));
  auto all = host(0);  // one per hardware thread
  CHECK(same_bits(workload(*one), workload(*all)));
}

TEST_CASE("host backend: capture records launches only and replay sees refreshed inputs", "[device]") {
  auto be = host(2);
  Module* m = be->compile(kSource, "test_device.cu");
  const size_t n = 300;
  Buffers bufs{*be, {}};
  const std::vector<double> x1 = inputs(n, 1.0), x2 = inputs(n, -0.75), y = inputs(n, 2.0);
  Buffer bx = bufs.make(x1), by = bufs.make(y), bo = bufs.zeros(n), bu = bufs.zeros(n);
  double a = 1.5;
  long long nn = n;
  void* axpy_args[] = {&bx.handle, &by.handle, &bo.handle, &a, &nn};
  void* unary_args[] = {&bo.handle, &bu.handle, &nn};
  CHECK_FALSE(be->has_capture());
  CHECK_THROWS_AS(be->replay(), gr::Error);
  be->begin_capture();
  be->launch(be->kernel(m, "t_axpy"), 4, 8, axpy_args);
  be->launch(be->kernel(m, "t_unary"), 4, 8, unary_args);
  CHECK_THROWS_AS(be->alloc(64), gr::Error);  // allocate before capturing
  be->end_capture();
  REQUIRE(be->has_capture());
  CHECK(same_bits(bufs.get(bu), std::vector<double>(n, 0.0)));  // recorded, not run
  a = -100.0;                                                     // argument values were copied
  be->replay();
  CHECK(same_bits(bufs.get(bu), ref_unary(ref_axpy(x1, y, 1.5))));
  be->upload(bx, x2.data(), n * sizeof(double));  // refresh the input between replays
  be->replay();
  be->synchronize();
  CHECK(same_bits(bufs.get(bo), ref_axpy(x2, y, 1.5)));
  CHECK(same_bits(bufs.get(bu), ref_unary(ref_axpy(x2, y, 1.5))));
  // A new capture replaces the episode.
  be->begin_capture();
  CHECK_THROWS_AS(be->begin_capture(), gr::Error);
  be->end_capture();
  be->upload(bu, x1.data(), n * sizeof(double));
  be->replay();  // empty episode: nothing changes
  CHECK(same_bits(bufs.get(bu), x1));
}

// CUDA invalidates a stream capture when a launch inside it fails; the host backend does the same,
// so code that ends a failed capture with end_capture (hiding the cause) fails here, not first on a
// GPU. capture_id names each episode so programs sharing a backend can tell theirs apart.
TEST_CASE("host backend: a failed launch invalidates the capture; abort, clear and capture ids", "[device]") {
  auto be = host(1);
  Module* m = be->compile(kSource, "test_device.cu");
  const size_t n = 16;
  Buffers bufs{*be, {}};
  Buffer bx = bufs.make(inputs(n, 1.0)), by = bufs.make(inputs(n, 2.0)), bo = bufs.zeros(n);
  double a = 1.5;
  long long nn = n;
  void* args[] = {&bx.handle, &by.handle, &bo.handle, &a, &nn};
  Kernel* k = be->kernel(m, "t_axpy");
  CHECK(be->capture_id() == 0);
  be->begin_capture();
  be->launch(k, 1, 8, args);
  be->end_capture();
  const uint64_t first = be->capture_id();
  CHECK(first != 0);

  be->begin_capture();
  CHECK_THROWS_WITH(be->launch(k, 0, 8, args), Catch::Contains("grid 0"));
  CHECK_THROWS_WITH(be->end_capture(), Catch::Contains("invalidated") && Catch::Contains("grid 0"));
  CHECK(be->capture_id() == first);  // the previous episode stays, as on CUDA
  be->replay();
  CHECK(same_bits(bufs.get(bo), ref_axpy(inputs(n, 1.0), inputs(n, 2.0), 1.5)));

  be->begin_capture();
  CHECK_THROWS_AS(be->launch(k, 1, 2000, args), gr::Error);
  be->abort_capture();  // quiet, records nothing
  be->abort_capture();  // no-op outside a capture
  CHECK(be->capture_id() == first);
  be->begin_capture();  // the backend is usable again
  be->end_capture();
  const uint64_t second = be->capture_id();
  CHECK(second != 0);
  CHECK(second != first);

  be->clear_capture();
  CHECK_FALSE(be->has_capture());
  CHECK(be->capture_id() == 0);
  CHECK_THROWS_AS(be->replay(), gr::Error);
}

TEST_CASE("host backend: modules are cached on disk by content", "[device]") {
  TempDir dir;
  HostOptions o;
  o.cache_dir = dir.path;
  const std::string src = std::string(kSource) + "\n// cache test\n";
  const unsigned long before = host_compiler_runs();
  auto first = make_host_backend(o);
  Module* m1 = first->compile(src, "cached.cu");
  CHECK(host_compiler_runs() == before + 1);
  CHECK(first->compile(src, "cached.cu") == m1);  // same backend: same module
  auto second = make_host_backend(o);              // new backend, same cache: no compiler run
  Module* m2 = second->compile(src, "cached.cu");
  CHECK(host_compiler_runs() == before + 1);
  CHECK(same_bits(run_shift(*second, m2, "t_shift", 2, 4), ref_shift(inputs(5 * 13, 1.0), 5, 13)));
  second->compile(src + " ", "cached.cu");  // a different text is a different module
  CHECK(host_compiler_runs() == before + 2);
  size_t objects = 0;
  for (const auto& e : std::filesystem::directory_iterator(dir.path + "/host"))
    if (e.path().extension() == ".so") ++objects;
  CHECK(objects == 2);
  // A damaged cache entry is rebuilt, not fatal (once no backend holds it loaded).
  first.reset();
  second.reset();
  for (const auto& e : std::filesystem::directory_iterator(dir.path + "/host"))
    if (e.path().extension() == ".so") std::filesystem::resize_file(e.path(), 100);
  auto third = make_host_backend(o);
  Module* m3 = third->compile(src, "cached.cu");
  CHECK(host_compiler_runs() == before + 3);
  CHECK(same_bits(run_shift(*third, m3, "t_shift", 2, 4), ref_shift(inputs(5 * 13, 1.0), 5, 13)));
}

TEST_CASE("host backend: a kernel's block limit: launch refuses more, fit_block clamps with the same bits", "[device]") {
  HostOptions o;
  o.cache_dir = cache_dir();
  o.max_block = 8;  // the stand-in for a CUDA kernel whose registers allow only 8 threads per block
  auto be = make_host_backend(o);
  Module* m = be->compile(kSource, "test_device.cu");
  Kernel* k = be->kernel(m, "t_shift");
  CHECK(be->max_block(k) == 8);
  CHECK(fit_block(*be, k, 4) == 4);
  CHECK(fit_block(*be, k, 32) == 8);
  CHECK_THROWS_WITH(run_shift(*be, m, "t_shift", 2, 32),
                    Catch::Contains("t_shift") && Catch::Contains("block 32 exceeds") && Catch::Contains("limit of 8"));
  CHECK(same_bits(run_shift(*be, m, "t_shift", 2, fit_block(*be, k, 32)), ref_shift(inputs(5 * 13, 1.0), 5, 13)));
  auto plain = host();
  Kernel* pk = plain->kernel(plain->compile(kSource, "test_device.cu"), "t_shift");
  CHECK(plain->max_block(pk) == 1024);
  CHECK(fit_block(*plain, pk, 1024) == 1024);
}

TEST_CASE("module cache: many threads missing one module build it once; different modules build in parallel", "[device]") {
  // The in-flight map (detail::build_once): 8 threads ask for one key at once; one builds.
  std::atomic<int> builds{0}, waits{0};
  std::vector<std::thread> pool;
  std::vector<std::string> got(8);
  for (int i = 0; i < 8; ++i)
    pool.emplace_back([&, i] {
      bool waited = false;
      got[static_cast<size_t>(i)] = detail::build_once("test-key", [&] {
        ++builds;
        std::this_thread::sleep_for(std::chrono::milliseconds(300));
        return std::string("image");
      }, &waited);
      waits += waited;
    });
  for (std::thread& t : pool) t.join();
  CHECK(builds == 1);
  CHECK(waits == 7);
  for (const std::string& g : got) CHECK(g == "image");
  // A failed build reaches every waiter, and is forgotten: the next caller builds again.
  pool.clear();
  std::atomic<int> failures{0};
  for (int i = 0; i < 4; ++i)
    pool.emplace_back([&] {
      try {
        detail::build_once("failing-key", []() -> std::string {
          std::this_thread::sleep_for(std::chrono::milliseconds(200));
          throw gr::Error("no compiler");
        });
      } catch (const gr::Error&) {
        ++failures;
      }
    });
  for (std::thread& t : pool) t.join();
  CHECK(failures == 4);
  CHECK(detail::build_once("failing-key", [] { return std::string("second try"); }) == "second try");
  // Two different keys build at the same time: each build waits (bounded) until the other started.
  std::atomic<int> started{0};
  std::atomic<bool> overlapped{true};
  auto build = [&] {
    ++started;
    const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (started < 2 && std::chrono::steady_clock::now() < until) std::this_thread::yield();
    if (started < 2) overlapped = false;
    return std::string("x");
  };
  std::thread a([&] { detail::build_once("key-a", build); }), b([&] { detail::build_once("key-b", build); });
  a.join();
  b.join();
  CHECK(overlapped);
}

TEST_CASE("host backend: 6 threads' backends missing one module run the compiler once", "[device]") {
  TempDir dir;
  HostOptions o;
  o.cache_dir = dir.path;
  const std::string src = std::string(kSource) + "\n// in-flight test\n";
  const unsigned long before = host_compiler_runs();
  std::vector<std::thread> pool;
  std::vector<std::vector<double>> outs(6);
  for (size_t i = 0; i < outs.size(); ++i)
    pool.emplace_back([&, i] {
      auto be = make_host_backend(o);
      outs[i] = run_shift(*be, be->compile(src, "inflight.cu"), "t_shift", 2, 4);
    });
  for (std::thread& t : pool) t.join();
  CHECK(host_compiler_runs() == before + 1);
  for (const std::vector<double>& out : outs) CHECK(same_bits(out, ref_shift(inputs(5 * 13, 1.0), 5, 13)));
}

TEST_CASE("nvrtc: threads missing the CUDA module cache at once compile each module once, in parallel", "[device][nvrtc]") {
  // The CUDA backend's cache step (detail::cuda_module_image) without a device: 6 threads ask for
  // the same module and 2 for another, from an empty cache; NVRTC runs once per module.
  try {
    (void)detail::nvrtc_version();
  } catch (const DeviceUnavailable& e) {
    GR_SKIP("nvrtc", "NVRTC is not available here: " << e.what());
  }
  TempDir dir;
  const std::string root = dir.path + "/cuda";
  const std::string one = detail::module_text(kSource, "one.cu"), two = detail::module_text(
      std::string(kSource) + "\nextern \"C\" __global__ void t_two(double* o) { o[0] = 2.0; }\nGR_EXPORT_KERNEL(t_two)\n", "two.cu");
  const unsigned long before = detail::nvrtc_stats().compiles;
  std::vector<std::thread> pool;
  std::vector<std::string> images(8);
  std::atomic<int> compiled{0};
  for (size_t i = 0; i < images.size(); ++i)
    pool.emplace_back([&, i] {
      const bool first = i < 6;
      bool c = false;
      images[i] = detail::cuda_module_image(root, root + (first ? "/one.ptx" : "/two.ptx"), first ? one : two,
                                            first ? "one.cu" : "two.cu", "compute_80", false, &c);
      compiled += c;
    });
  for (std::thread& t : pool) t.join();
  CHECK(detail::nvrtc_stats().compiles == before + 2);
  CHECK(compiled == 2);
  for (size_t i = 0; i < images.size(); ++i) {
    INFO("thread " << i);
    CHECK(images[i] == images[i < 6 ? 0 : 6]);
    CHECK(images[i].find(".entry t_shift(") != std::string::npos);
  }
  CHECK(images[0] != images[6]);
  // The cache now answers without NVRTC; rebuild = true compiles again.
  CHECK(detail::cuda_module_image(root, root + "/one.ptx", one, "one.cu", "compute_80", false) == images[0]);
  CHECK(detail::nvrtc_stats().compiles == before + 2);
  CHECK(detail::cuda_module_image(root, root + "/one.ptx", one, "one.cu", "compute_80", true) == images[0]);
  CHECK(detail::nvrtc_stats().compiles == before + 3);
}

TEST_CASE("host backend: compile errors carry the compiler's message and the cached source", "[device]") {
  auto be = host();
  auto message = [&](const std::string& src) {
    try {
      be->compile(src, "broken.cu");
    } catch (const gr::Error& e) {
      return std::string(e.what());
    }
    return std::string("(no error)");
  };
  const std::string syntax = message("extern \"C\" __global__ void k(double* p) { p[0] = undeclared_thing; }\n");
  CHECK(syntax.find("broken.cu") != std::string::npos);
  CHECK(syntax.find("undeclared_thing") != std::string::npos);
  CHECK(syntax.find(".cpp") != std::string::npos);  // the cached source path
  const std::string shared = message(
      "extern \"C\" __global__ void k(double* p) { __shared__ double s[4]; s[0] = 1.0; p[0] = s[0]; }\n"
      "GR_EXPORT_KERNEL(k)\n");
  CHECK(shared.find("__shared__") != std::string::npos);
  const std::string narrow = message("extern \"C\" __global__ void k(double* p, int n) { p[0] = n; }\nGR_EXPORT_KERNEL(k)\n");
  CHECK(narrow.find("8 bytes") != std::string::npos);
}

#if defined(__x86_64__)
TEST_CASE("host backend: a module that breaks the floating-point environment is refused", "[device]") {
  auto be = host();
  const unsigned saved = _mm_getcsr();
  // What a -ffast-math library does at load time: flush-to-zero and denormals-are-zero.
  const char* evil =
      "__attribute__((constructor)) static void gr_test_ftz() {\n"
      "  unsigned csr; __asm__ volatile(\"stmxcsr %0\" : \"=m\"(csr)); csr |= 0x8040u;\n"
      "  __asm__ volatile(\"ldmxcsr %0\" : : \"m\"(csr));\n"
      "}\n";
  std::string what = "(no error)";
  try {
    be->compile(evil, "ftz.cu");
  } catch (const gr::Error& e) {
    what = e.what();
  }
  _mm_setcsr(saved);
  CHECK(what.find("ftz.cu") != std::string::npos);
  CHECK(what.find("flush-to-zero") != std::string::npos);
}
#endif

TEST_CASE("host backend: a missing kernel and bad buffer use are errors and not crashes", "[device]") {
  auto be = host();
  Module* m = be->compile(kSource, "test_device.cu");
  try {
    be->kernel(m, "no_such_kernel");
    FAIL("missing kernel not reported");
  } catch (const gr::Error& e) {
    CHECK(std::string(e.what()).find("no_such_kernel") != std::string::npos);
  }
  Buffer b = be->alloc(16);
  double v[3] = {1, 2, 3};
  CHECK_THROWS_AS(be->upload(b, v, 24), gr::Error);
  CHECK_THROWS_AS(be->download(v, b, 8, 9), gr::Error);
  CHECK_THROWS_AS(be->launch(be->kernel(m, "t_divergent"), 1, 2048, nullptr), gr::Error);
  be->free(b);
  CHECK_THROWS_AS(be->free(b), gr::Error);
}

TEST_CASE("embedded headers are the source tree's", "[device]") {
  const auto& headers = detail::embedded_headers();
  REQUIRE(headers.size() >= 3);
  for (const auto& h : headers) {
    const std::string name = h.name;
    const std::string dir = (name == "host_shim.h" || name == "host_abi.h") ? "/lib/device/" : "/kernels/";
    std::ifstream in(GR_SOURCE_DIR + dir + name, std::ios::binary);
    std::ostringstream text;
    text << in.rdbuf();
    INFO(name);
    CHECK(text.str() == h.text);
  }
}

TEST_CASE("select_backend: host and auto and unknown kinds", "[device]") {
  Selection h = select_backend(gr::DeviceKind::Host);
  REQUIRE(h.backend);
  CHECK(h.backend->name() == "host");
  CHECK_THROWS_AS(select_backend(gr::DeviceKind::Cpu), gr::Error);
  Selection a = select_backend(gr::DeviceKind::Auto);
  if (a.backend) {
    CHECK(a.backend->name() == "cuda");
  } else {
    CHECK(a.why.rfind("no usable CUDA device: ", 0) == 0);
    CHECK(a.why.find("unavailable") == std::string::npos);
  }
}

TEST_CASE("cuda backend: reports unavailability here or matches the host bit for bit", "[device][cuda]") {
  void* driver = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (!driver) {
    try {
      make_cuda_backend();
      FAIL("make_cuda_backend succeeded without libcuda.so.1");
    } catch (const DeviceUnavailable& e) {
      const std::string what = e.what();
      CHECK(what.rfind("unavailable: ", 0) == 0);
      CHECK(what.find("libcuda.so.1") != std::string::npos);
    }
    CHECK_THROWS_AS(select_backend(gr::DeviceKind::Cuda), DeviceUnavailable);
    // The toolkit's stub libcuda.so must never have been loaded into the process.
    std::ifstream maps("/proc/self/maps");
    std::string line;
    bool stub = false;
    while (std::getline(maps, line)) stub = stub || line.find("libcuda.so") != std::string::npos;
    CHECK_FALSE(stub);
    GR_SKIP("gpu", "no NVIDIA driver: only the unavailability path was checked");
  }
  dlclose(driver);
  std::unique_ptr<Backend> cuda;
  try {
    CudaOptions o;
    o.cache_dir = cache_dir();
    cuda = make_cuda_backend(o);
  } catch (const DeviceUnavailable& e) {
    GR_SKIP("gpu", "libcuda.so.1 is present but CUDA is unusable: " << e.what());
  }
  CHECK(cuda->name() == "cuda");
  CHECK(cuda->capabilities().real_gpu);
  CHECK(cuda->capabilities().default_block == 128);
  CHECK(cuda->describe().rfind("cuda: ", 0) == 0);
  auto hb = host();
  CHECK(same_bits(workload(*cuda), workload(*hb)));
  // Capture/replay on the device, as on the host.
  Module* m = cuda->compile(kSource, "test_device.cu");
  const size_t n = 300;
  Buffers bufs{*cuda, {}};
  const std::vector<double> x1 = inputs(n, 1.0), x2 = inputs(n, -0.75), y = inputs(n, 2.0);
  Buffer bx = bufs.make(x1), by = bufs.make(y), bo = bufs.zeros(n);
  double a = 1.5;
  long long nn = n;
  void* args[] = {&bx.handle, &by.handle, &bo.handle, &a, &nn};
  cuda->begin_capture();
  cuda->launch(cuda->kernel(m, "t_axpy"), 4, 128, args);
  cuda->end_capture();
  cuda->upload(bx, x2.data(), n * sizeof(double));
  cuda->replay();
  CHECK(same_bits(bufs.get(bo), ref_axpy(x2, y, 1.5)));
  CHECK_THROWS_AS(cuda->kernel(m, "no_such_kernel"), gr::Error);
}

TEST_CASE("nvrtc: the kernel text compiles for the GPU with no FMA", "[device][nvrtc]") {
  std::string ptx, log;
  try {
    ptx = nvrtc_compile_ptx(kSource, "compute_90", &log);
  } catch (const DeviceUnavailable& e) {
    GR_SKIP("nvrtc", "GPU compile not checked: " << e.what());
  }
  INFO(log);
  for (const char* k : {"t_axpy", "t_unary", "t_shift", "t_shift_nobarrier", "t_divergent"})
    CHECK(ptx.find(std::string(".entry ") + k) != std::string::npos);
  CHECK(ptx.find("fma") == std::string::npos);
  CHECK(ptx.find("bar.sync") != std::string::npos);  // __syncthreads survived
  CHECK(ptx.back() != '\0');
  // A cubin for a real architecture (what the CUDA backend loads) needs no GPU either.
  const std::string cubin =
      detail::nvrtc_compile(detail::module_text(kSource, "test_device.cu"), "test_device.cu", "sm_90", nullptr);
  CHECK(cubin.compare(0, 4, "\x7f" "ELF") == 0);
  // Compile errors come back with NVRTC's log.
  try {
    nvrtc_compile_ptx("extern \"C\" __global__ void k() { undeclared_thing = 1; }", "compute_90", &log);
    FAIL("NVRTC accepted a broken kernel");
  } catch (const gr::Error& e) {
    CHECK(std::string(e.what()).find("undeclared_thing") != std::string::npos);
  }
}
