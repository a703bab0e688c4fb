// matmul_kernels_f64.cpp — the micro-kernels of matmul_exact (matmul_kernel.h) for
// double arithmetic on doubles, A packed into MR-row panels (C wider than GR_MM_DIRECT_A_N columns).
// One kernel table per unit (matmul_tile.h), so that the variants compile in parallel.
#include "tensor/matmul_kernel.h"

namespace gr::detail {

constinit const KernelGrid<double, double> kF64Packed = make_grid<double, double, false>();

}  // namespace gr::detail
