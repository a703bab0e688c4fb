// matmul_kernels_f32.cpp — the micro-kernels of matmul_exact (matmul_kernel.h) for
// float arithmetic on floats (MatmulArgsF32), A packed.
// One kernel table per unit (matmul_tile.h), so that the variants compile in parallel.
#include "tensor/matmul_kernel.h"

namespace gr::detail {

constinit const KernelGrid<float, float> kF32Packed = make_grid<float, float, false>();

}  // namespace gr::detail
