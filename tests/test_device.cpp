// test_device.cpp — lib/device: the host backend end to end (launch, fibers, threads,
// capture/replay, errors), the CUDA backend's unavailability report (or, where a GPU is present,
// bit-parity with the host backend), and NVRTC compiling the same kernel text. The module cache and
// the compilers' one-build-per-module rules: test_device_cache.cpp; the shared module: support/device_module.h.
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
#include "support/device_module.h"

using namespace gr::device;
using namespace gr_device_test;


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
