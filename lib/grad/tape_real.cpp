#include "grad/tape_real.h"

namespace gr {

void matmul_in(DType real, const MatmulArgs& g) {
  if (real == DType::F64) return matmul_exact(g);
  // A and B are narrowed as the matmul packs them, C converted as its kernel loads and stores it.
  matmul_exact_f32(g);
}

}  // namespace gr
