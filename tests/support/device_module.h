// device_module.h — what tests/test_device.cpp and test_device_cache.cpp share: one module that
// exercises the kernel conventions (the same text goes to the host compiler and NVRTC), a host
// backend on a per-process cache folder, inputs, the scalar reference results and a launch helper.
#pragma once
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "device/backend.h"
#include "gr_ops_scalar.h"
#include "temp_dir.h"

namespace gr_device_test {

using namespace gr::device;

// One module exercising the kernel conventions; the same text goes to the host compiler and NVRTC.
inline const char* const kSource = R"(
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

inline const std::string& cache_dir() {
  static gr::test::CacheDir dir("gr_test_device");  // $GR_TEST_CACHE when set (support/temp_dir.h)
  return dir.path;
}

inline std::unique_ptr<Backend> host(unsigned threads = 1, bool fibers = true) {
  HostOptions o;
  o.threads = threads;
  o.fiber_block = fibers;
  o.cache_dir = cache_dir();
  return make_host_backend(o);
}

inline std::vector<double> inputs(size_t n, double scale) {
  std::vector<double> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = scale * (double(i % 37) - 18.25) / 7.0 + 1e-3 * double(i);
  return v;
}

inline bool same_bits(const std::vector<double>& a, const std::vector<double>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(double)) == 0;
}

// The reference results, computed with the same scalar definitions the kernels inline.
inline std::vector<double> ref_axpy(const std::vector<double>& x, const std::vector<double>& y, double a) {
  std::vector<double> o(x.size());
  for (size_t i = 0; i < x.size(); ++i) o[i] = __dadd_rn(__dmul_rn(a, x[i]), y[i]);
  return o;
}
inline std::vector<double> ref_unary(const std::vector<double>& x) {
  std::vector<double> o(x.size());
  for (size_t i = 0; i < x.size(); ++i) o[i] = gr_add_fwd(gr_tanh_fwd(x[i]), gr_sigmoid_fwd(x[i]));
  return o;
}
inline std::vector<double> ref_shift(const std::vector<double>& x, long long rows, long long cols) {
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
inline std::vector<double> run_shift(Backend& be, Module* m, const char* kernel, unsigned grid, unsigned block) {
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
inline std::vector<double> workload(Backend& be) {
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


}  // namespace gr_device_test
