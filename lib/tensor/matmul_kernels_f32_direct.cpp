// matmul_kernels_f32_direct.cpp — the micro-kernels of matmul_exact (matmul_kernel.h) for
// float arithmetic on floats (MatmulArgsF32), A read in place.
// One kernel table per unit (matmul_tile.h), so that the variants compile in parallel.
#include "tensor/matmul_kernel.h"

namespace gr::detail {

constinit const KernelGrid<float, float> kF32Direct = make_grid<float, float, true>();

}  // namespace gr::detail
