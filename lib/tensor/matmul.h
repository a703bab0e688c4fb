// matmul.h — the bit-exact CPU contraction loop (docs/numerics.md).
//
// Contract, for every output element (i, j), whatever the fast path:
//     acc = 0.0
//     for k = 0 .. K-1 ascending:  acc = acc + A(i,k) * B(k,j)      (one rounding per * and per +)
//     Overwrite:  C[i*N + j] = acc          Accumulate:  C[i*N + j] = C[i*N + j] + acc
// A(i,k) = A[i*a_rs + k*a_cs],  B(k,j) = B[k*b_rs + j*b_cs]  (strides in elements, so the same
// routine serves A·B, g·Bᵀ and Aᵀ·g of matmul's backward). C is contiguous row-major [M, N].
// Vectorizing over i or j and tiling registers is allowed; reordering or splitting k is not.
#pragma once
#include <cstdint>

namespace gr {

enum class MatmulStore { Overwrite, Accumulate };

struct MatmulArgs {
  const double* a;
  int64_t a_rs, a_cs;
  const double* b;
  int64_t b_rs, b_cs;
  double* c;
  int64_t m, k, n;
  MatmulStore store;
};

// The fast exact loop (register-tiled, vectorized). Same bits as matmul_reference.
void matmul_exact(const MatmulArgs& args);

// The plain serial-k triple loop: the definition the tests compare matmul_exact against.
void matmul_reference(const MatmulArgs& args);

}  // namespace gr
