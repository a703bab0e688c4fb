// matmul_kernels_f64_direct.cpp — the micro-kernels of matmul_exact (matmul_kernel.h) for
// double arithmetic on doubles, A read in place (a narrow C).
// One kernel table per unit (matmul_tile.h), so that the variants compile in parallel.
#include "tensor/matmul_kernel.h"

namespace gr::detail {

constinit const KernelGrid<double, double> kF64Direct = make_grid<double, double, true>();

}  // namespace gr::detail
