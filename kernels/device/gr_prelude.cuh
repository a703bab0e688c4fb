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
