// host_shim.h — included first by every kernel module, so the SAME source text compiles under
// NVRTC, nvcc and the host C++ compiler (docs/device.md has the kernel ABI rules).
//
// Under CUDA it only supplies GR_EXPORT_KERNEL (empty) and the rn intrinsics' host twins from
// gr_device.h. On the host it maps the CUDA dialect onto plain C++:
//   * __global__/__device__/__host__ vanish; blockIdx/threadIdx/blockDim/gridDim are thread_local
//     variables the launch trampoline sets (threads of one block share an OS thread as fibers);
//   * __syncthreads() switches to the backend's block scheduler (lib/device/host_exec.cpp);
//   * __shared__ and __constant__ are compile errors: the host has no per-block memory, so kernels
//     keep block-shared scratch in global buffers;
//   * GR_EXPORT_KERNEL(k) emits gr_host_launch_k, a trampoline with one uniform signature that
//     unpacks cuLaunchKernel-style `void** args` by deducing k's parameter types, and
//     gr_host_nargs_k. Every parameter must be 8 bytes (pointer, long long, double).
// Only the few libm functions kernels may use are declared: <cmath> would double compile time.
#pragma once

#if defined(__CUDACC_RTC__) || defined(__CUDACC__)

#include "gr_device.h"
#define GR_EXPORT_KERNEL(name)

#else  // host C++

#include "gr_device.h"
#include "host_abi.h"

#define __global__
#define __device__
#define __host__
#define __forceinline__ inline __attribute__((always_inline))
#define __noinline__ __attribute__((noinline))
#define __launch_bounds__(...)
#define __shared__ \
  static_assert(false, "gradrun kernels may not use __shared__ (the host backend has no per-block memory): use a global buffer");
#define __constant__ \
  static_assert(false, "gradrun kernels may not use __constant__: pass a pointer to a global buffer");

struct gr_host_dim3 {
  unsigned x, y, z;
};
static thread_local gr_host_dim3 threadIdx, blockIdx, blockDim, gridDim;
static thread_local const gr_host_ctx* gr_host_ctx_now;

static inline void __syncthreads() {
  const gr_host_ctx* c = gr_host_ctx_now;
  if (c->barrier) {
    // Fibers of one block share this OS thread's thread_locals: each puts its own ids back
    // when the scheduler resumes it.
    const gr_host_dim3 t = threadIdx, b = blockIdx;
    c->barrier(c->sched);
    threadIdx = t;
    blockIdx = b;
    gr_host_ctx_now = c;
  }
}

extern "C" double sqrt(double) noexcept;
extern "C" float sqrtf(float) noexcept;
static inline double __dsqrt_rn(double x) { return __builtin_sqrt(x); }
static inline float __fsqrt_rn(float x) { return __builtin_sqrtf(x); }
static inline float __double2float_rn(double x) { return static_cast<float>(x); }
static inline long long __double_as_longlong(double x) { return __builtin_bit_cast(long long, x); }
static inline double __longlong_as_double(long long x) { return __builtin_bit_cast(double, x); }
static inline int __float_as_int(float x) { return __builtin_bit_cast(int, x); }
static inline float __int_as_float(int x) { return __builtin_bit_cast(float, x); }

// ---- launch trampolines -----------------------------------------------------------------------
template <unsigned long... I>
struct gr_host_seq {};
template <unsigned long N, unsigned long... I>
struct gr_host_make_seq : gr_host_make_seq<N - 1, N - 1, I...> {};
template <unsigned long... I>
struct gr_host_make_seq<0, I...> {
  typedef gr_host_seq<I...> type;
};

template <class... P, unsigned long... I>
static inline void gr_host_run(void (*k)(P...), const gr_host_ctx* c, void** a, gr_host_seq<I...>) {
  static_assert((true && ... && (sizeof(P) == 8)),
                "gradrun kernel ABI: every kernel parameter is 8 bytes (a pointer, long long or double)");
  (void)a;
  gr_host_ctx_now = c;
  gridDim = gr_host_dim3{c->grid, 1, 1};
  blockDim = gr_host_dim3{c->block, 1, 1};
  threadIdx = gr_host_dim3{c->thread, 0, 0};
  for (unsigned b = c->block_begin; b < c->block_end; ++b) {
    blockIdx = gr_host_dim3{b, 0, 0};
    k(*static_cast<P*>(a[I])...);
  }
}

template <class... P>
static inline void gr_host_invoke(void (*k)(P...), const gr_host_ctx* c, void** a) {
  gr_host_run(k, c, a, typename gr_host_make_seq<sizeof...(P)>::type());
}

template <class... P>
static inline unsigned gr_host_arity(void (*)(P...)) {
  return sizeof...(P);
}

#define GR_EXPORT_KERNEL(name)                                                                 \
  extern "C" __attribute__((visibility("default"))) void gr_host_launch_##name(                \
      const gr_host_ctx* c, void** a) {                                                        \
    gr_host_invoke(name, c, a);                                                                \
  }                                                                                            \
  extern "C" __attribute__((visibility("default"))) unsigned gr_host_nargs_##name(void) {      \
    return gr_host_arity(name);                                                                \
  }

#endif
