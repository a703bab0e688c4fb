// test_device_cache.cpp — lib/device's module cache and compiler: modules cached on disk by content,
// one build per module when many threads (or backends) miss it at once, on the host compiler and NVRTC,
// and a compile error or a module that breaks the floating-point environment refused with the cause.
// The test module and helpers: support/device_module.h.
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

