// gr_device.h — the one header that lets kernels/ compile as host C++ and as CUDA device code.
//
// Every floating-point operation in kernels/ is spelled with the CUDA round-to-nearest intrinsics
// (__dadd_rn, __dsub_rn, __dmul_rn, __ddiv_rn, __fma_rn). Under nvcc/NVRTC they are the real
// intrinsics, which the compiler never contracts or splits. On the host they are plain IEEE
// operations; the whole project is built with -ffp-contract=off, so an add of a product is never
// contracted there either. The one fused multiply-add is explicit: __fma_rn(a, b, c) is IEEE 754's
// fusedMultiplyAdd, one rounding of the exact a·b + c, so it has the same bits on every target —
// an x86-64 vfmadd, glibc's fma() where the CPU has none, a CUDA DFMA (docs/design.md §2, §5).
// That is how one scalar definition gives the same bits on every path.
#pragma once

#if defined(__CUDACC_RTC__) || defined(__CUDACC__)
#define GR_HD __host__ __device__
#define GR_DEVICE_CODE 1
#else
#define GR_HD
#define GR_DEVICE_CODE 0
#endif

#if !GR_DEVICE_CODE
// Host shim: the same names as the CUDA intrinsics, one IEEE operation each.
// `static inline` keeps them private to each translation unit / generated module.
static inline double __dadd_rn(double a, double b) { return a + b; }
static inline double __dsub_rn(double a, double b) { return a - b; }
static inline double __dmul_rn(double a, double b) { return a * b; }
static inline double __ddiv_rn(double a, double b) { return a / b; }
static inline float __fadd_rn(float a, float b) { return a + b; }
static inline float __fsub_rn(float a, float b) { return a - b; }
static inline float __fmul_rn(float a, float b) { return a * b; }
static inline float __fdiv_rn(float a, float b) { return a / b; }
static inline double __fma_rn(double a, double b, double c) { return __builtin_fma(a, b, c); }
static inline float __fmaf_rn(float a, float b, float c) { return __builtin_fmaf(a, b, c); }
#endif

// Bit casts that work in both worlds (memcpy is not available under NVRTC without headers).
#if GR_DEVICE_CODE
GR_HD static inline long long gr_bits(double x) { return __double_as_longlong(x); }
GR_HD static inline double gr_from_bits(long long b) { return __longlong_as_double(b); }
GR_HD static inline double gr_sqrt(double x) { return __dsqrt_rn(x); }
#else
GR_HD static inline long long gr_bits(double x) { return __builtin_bit_cast(long long, x); }
GR_HD static inline double gr_from_bits(long long b) { return __builtin_bit_cast(double, b); }
// IEEE sqrt is correctly rounded on every target, so the builtin is exact and portable.
GR_HD static inline double gr_sqrt(double x) { return __builtin_sqrt(x); }
#endif

// ---- element-type generic spellings -------------------------------------------------------------
// The shared definitions (gr_ops_scalar.h, gr_ops_lane.h) are templates over the element type, so
// ONE text serves f64 programs (the tape, every device path, the emitter) and f32 device programs:
// gr_radd & co. pick the double or float rn operation by overload.
GR_HD static inline double gr_radd(double a, double b) { return __dadd_rn(a, b); }
GR_HD static inline double gr_rsub(double a, double b) { return __dsub_rn(a, b); }
GR_HD static inline double gr_rmul(double a, double b) { return __dmul_rn(a, b); }
GR_HD static inline double gr_rdiv(double a, double b) { return __ddiv_rn(a, b); }
GR_HD static inline float gr_radd(float a, float b) { return __fadd_rn(a, b); }
GR_HD static inline float gr_rsub(float a, float b) { return __fsub_rn(a, b); }
GR_HD static inline float gr_rmul(float a, float b) { return __fmul_rn(a, b); }
GR_HD static inline float gr_rdiv(float a, float b) { return __fdiv_rn(a, b); }
// a·b + c with one rounding: the step of every dot product (gr_reduce.h gr_dot), nothing else.
GR_HD static inline double gr_rfma(double a, double b, double c) { return __fma_rn(a, b, c); }
GR_HD static inline float gr_rfma(float a, float b, float c) { return __fmaf_rn(a, b, c); }

#if GR_DEVICE_CODE
GR_HD static inline float gr_sqrt(float x) { return __fsqrt_rn(x); }
GR_HD static inline float gr_to_float(double x) { return __double2float_rn(x); }
GR_HD static inline int gr_bits(float x) { return __float_as_int(x); }
GR_HD static inline float gr_from_bits(int b) { return __int_as_float(b); }
#else
GR_HD static inline float gr_sqrt(float x) { return __builtin_sqrtf(x); }
GR_HD static inline float gr_to_float(double x) { return static_cast<float>(x); }  // round to nearest
GR_HD static inline int gr_bits(float x) { return __builtin_bit_cast(int, x); }
GR_HD static inline float gr_from_bits(int b) { return __builtin_bit_cast(float, b); }
#endif

// |x| and copysign(r, x) by bit manipulation: exact, and NaN-payload preserving, on every target.
GR_HD static inline double gr_abs(double x) {
  return gr_from_bits(gr_bits(x) & ~(long long)(0x8000000000000000ULL));
}
GR_HD static inline double gr_copysign(double r, double x) {
  const long long sign = (long long)(0x8000000000000000ULL);
  return gr_from_bits((gr_bits(r) & ~sign) | (gr_bits(x) & sign));
}
GR_HD static inline float gr_abs(float x) { return gr_from_bits(gr_bits(x) & ~(int)0x80000000u); }
GR_HD static inline float gr_copysign(float r, float x) {
  const int sign = (int)0x80000000u;
  return gr_from_bits((gr_bits(r) & ~sign) | (gr_bits(x) & sign));
}

// A non-deduced parameter type (std::type_identity without the standard library, for NVRTC):
// lets `0` or a null pointer stand for "no gradient wanted" in the lane functions.
template <class T>
struct gr_same {
  typedef T type;
};

