// gr_device.h — the one header that lets kernels/ compile as host C++ and as CUDA device code.
//
// Every floating-point operation in kernels/ is spelled with the CUDA round-to-nearest intrinsics
// (__dadd_rn, __dsub_rn, __dmul_rn, __ddiv_rn). Under nvcc/NVRTC they are the real intrinsics,
// which the compiler never contracts into an FMA. On the host they are plain IEEE operations;
// the whole project is built with -ffp-contract=off, so they are never contracted there either.
// That is how one scalar definition gives the same bits on every path (DESIGN §2).
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
