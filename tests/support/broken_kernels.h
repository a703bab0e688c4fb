// broken_kernels.h — three deliberately broken kernels and their fixed twins, shared by
// test_adversarial.cpp (the adversarial host schedule must catch each) and tsan_kernels.cpp (the
// ThreadSanitizer build must report each as a data race). The same text compiles for NVRTC.
#pragma once

namespace gr::test {

inline const char* kBrokenKernels = R"(
#include "gr_ops_scalar.h"

// (1) Missing barrier: thread t reads its RIGHT neighbour's phase-1 write. The in-order schedule
// resumes fibers highest-first, so the neighbour has always written: right by luck.
extern "C" __global__ void b_right_nobarrier(const double* x, double* scratch, double* out, long long n) {
  const long long t = threadIdx.x;
  scratch[t] = __dmul_rn(x[t], 3.0);
  out[t] = __dadd_rn(scratch[t + 1 < n ? t + 1 : t], x[t]);
}
GR_EXPORT_KERNEL(b_right_nobarrier)
extern "C" __global__ void b_right_barrier(const double* x, double* scratch, double* out, long long n) {
  const long long t = threadIdx.x;
  scratch[t] = __dmul_rn(x[t], 3.0);
  __syncthreads();
  out[t] = __dadd_rn(scratch[t + 1 < n ? t + 1 : t], x[t]);
}
GR_EXPORT_KERNEL(b_right_barrier)

// (2) Cross-block read: block b reads what block b-1 wrote in the same launch. Ascending blocks make
// it right by luck; a GPU gives no order between blocks.
extern "C" __global__ void b_cross_block(const double* x, double* y, double* out, long long n) {
  for (long long b = blockIdx.x; b < n; b += gridDim.x) {
    if (threadIdx.x == 0) y[b] = __dmul_rn(x[b], 3.0);
    if (threadIdx.x == 0) out[b] = __dadd_rn(b > 0 ? y[b - 1] : 0.0, x[b]);
  }
}
GR_EXPORT_KERNEL(b_cross_block)
// The fix: the neighbour's value is recomputed from the input, not read from another block.
extern "C" __global__ void b_cross_block_fixed(const double* x, double* y, double* out, long long n) {
  for (long long b = blockIdx.x; b < n; b += gridDim.x) {
    if (threadIdx.x == 0) y[b] = __dmul_rn(x[b], 3.0);
    if (threadIdx.x == 0) out[b] = __dadd_rn(b > 0 ? __dmul_rn(x[b - 1], 3.0) : 0.0, x[b]);
  }
}
GR_EXPORT_KERNEL(b_cross_block_fixed)

// (3) A non-atomic += shared by every block: lost updates once blocks run concurrently.
extern "C" __global__ void b_racy_add(double* acc, long long reps) {
  volatile double* a = acc;
  if (threadIdx.x == 0)
    for (long long r = 0; r < reps; ++r) a[0] = a[0] + 1.0;
}
GR_EXPORT_KERNEL(b_racy_add)
// The fix: one slot per block, summed afterwards in a fixed order.
extern "C" __global__ void b_racy_add_fixed(double* acc, long long reps) {
  volatile double* a = acc + 1 + blockIdx.x;
  if (threadIdx.x == 0)
    for (long long r = 0; r < reps; ++r) a[0] = a[0] + 1.0;
}
GR_EXPORT_KERNEL(b_racy_add_fixed)
)";

}  // namespace gr::test
