// gr_prelude.cuh — the common head of the replay kernel module (lib/replay concatenates
// gr_prelude.cuh, gr_node_kernels.cuh, gr_opt_kernels.cuh into one text).
//
// The element type: the f64 module is this text as is; the f32 module is the same text with
// `#define GR_F32 1` in front. Kernels spell their own arithmetic (sums, matmul, optimizer) with
// GRK_ADD/SUB/MUL/DIV (the rn intrinsics of the element type) and call the shared scalar/lane
// definitions by name: gr_ops_elementwise.h (the table's gr_ew_<stem> over gr_ops_scalar.h) and
// gr_ops_lane.h are templates over the element type, so
// the same kernel text instantiates them for double or float. Scalars always arrive as
// `double` kernel parameters (the 8-byte ABI) and are converted with GRK_REAL (__double2float_rn).
#include "gr_ops_lane.h"
#include "gr_ops_batch.h"
#include "gr_ops_window.h"
#include "gr_ops_gather.h"
#include "gr_reduce.h"
#include "gr_ops_elementwise.h"
#include "gr_optim.h"

#if defined(GR_F32) && GR_F32
typedef float gr_real;
#define GRK_ADD __fadd_rn
#define GRK_SUB __fsub_rn
#define GRK_MUL __fmul_rn
#define GRK_DIV __fdiv_rn
#define GRK_REAL(x) __double2float_rn(x)
#else
typedef double gr_real;
#define GRK_ADD __dadd_rn
#define GRK_SUB __dsub_rn
#define GRK_MUL __dmul_rn
#define GRK_DIV __ddiv_rn
#define GRK_REAL(x) (x)
#endif

#define GRK_LOOP(i, n) \
  for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < (n); i += (long long)gridDim.x * blockDim.x)
#define GRK_FIRST_THREAD (blockIdx.x == 0 && threadIdx.x == 0)
#define GRK_MAXD 8

// The planted mismatch (docs/verification.md "GPU first contact"): only in a build with
// GR_TEST_PLANT_MISMATCH=ON and GRADRUN_TEST_FLIP_BIT=KERNEL set does lib/replay define
// GR_TEST_FLIP_KERNEL as the name of one elementwise forward kernel, which then flips the lowest bit
// of its output element 0 (the thread that wrote it, after its loop). Everywhere else GRK_TEST_FLIP
// is empty: the generated code is the same.
#ifdef GR_TEST_FLIP_KERNEL
GR_HD static inline int grk_test_same(const char* a, const char* b) {
  while (*a && *a == *b) {
    ++a;
    ++b;
  }
  return *a == *b;
}
#define GRK_TEST_FLIP(name, y, n)                                               \
  if (GRK_FIRST_THREAD && (n) > 0 && grk_test_same(name, GR_TEST_FLIP_KERNEL)) { \
    union {                                                                     \
      gr_real r;                                                                \
      unsigned char b[sizeof(gr_real)];                                         \
    } u_;                                                                       \
    u_.r = (y)[0];                                                              \
    u_.b[0] ^= 1;                                                               \
    (y)[0] = u_.r;                                                              \
  }
#else
#define GRK_TEST_FLIP(name, y, n)
#endif
