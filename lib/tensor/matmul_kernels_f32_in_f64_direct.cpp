// matmul_kernels_f32_in_f64_direct.cpp — the micro-kernels of matmul_exact (matmul_kernel.h) for
// float arithmetic on doubles that hold floats (matmul_exact_f32, the f32 tape), A read in place
// (each double narrowed to the float it holds as the kernel broadcasts it).
// One kernel table per unit (matmul_tile.h), so that the variants compile in parallel.
#include "tensor/matmul_kernel.h"

namespace gr::detail {

constinit const KernelGrid<float, double> kF32InF64Direct = make_grid<float, double, true>();

}  // namespace gr::detail
