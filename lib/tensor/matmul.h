// matmul.h — the bit-exact CPU contraction loop (docs/numerics.md).
//
// Contract, for every output element (i, j), whatever the fast path:
//     acc = 0.0                                                     (Continue: acc = C[i*N + j])
//     for k = 0 .. K-1 ascending:  acc = fma(A(i,k), B(k,j), acc)   (one rounding per step)
//     Overwrite, Continue:  C[i*N + j] = acc      Accumulate:  C[i*N + j] = C[i*N + j] + acc
// A(i,k) = A[i*a_rs + k*a_cs],  B(k,j) = B[k*b_rs + j*b_cs]  (strides in elements, so the same
// routine serves A·B, g·Bᵀ and Aᵀ·g of matmul's backward). C is contiguous row-major [M, N].
// Vectorizing over i or j and tiling registers is allowed; reordering k is not, and k is split only
// by carrying acc on exactly (parked between k slices, or in C between calls with Continue).
#pragma once
#include <cstdint>

#include "tensor/parallel.h"

namespace gr {

// Overwrite: C = acc. Accumulate: C = C + acc. OntoZero: C = +0 + acc without reading C (a
// gradient slot nobody has written yet): Overwrite's bits, except that −0 becomes +0.
// Continue: acc starts at C[i*N + j] instead of +0 and C = acc: the chain goes on from where an
// earlier call left it, so a K-long product computed as consecutive k ranges — the first with
// Overwrite, the rest with Continue — has the bytes of one call (a conv's dW = G·Colᵀ, whose k runs
// over (n, oh, ow), built a few images at a time so that Col stays in cache).
enum class MatmulStore { Overwrite, Accumulate, OntoZero, Continue };

// T: the arithmetic type; S: how A, B and C are stored (S = T, or double holding floats).
template <class T, class S = T>
struct MatmulArgsOf {
  const S* a;
  int64_t a_rs, a_cs;
  const S* b;
  int64_t b_rs, b_cs;
  S* c;
  int64_t m, k, n;
  MatmulStore store;
};
using MatmulArgs = MatmulArgsOf<double>;
// float: the same contract in single precision — acc = fmaf(a, b, acc), C = C + acc in float —
// gr_dot<float>, what an f32 device program computes (docs/numerics.md).
using MatmulArgsF32 = MatmulArgsOf<float>;
// The fast exact loop (register-tiled, vectorized). Same bits as matmul_reference.
void matmul_exact(const MatmulArgs& args);
void matmul_exact(const MatmulArgsF32& args);
// The float contract (MatmulArgsF32's bytes) over A, B and C stored as doubles that hold floats
// exactly (the f32 CPU tape's storage, lib/grad/tape_real.h): B is narrowed as it is packed, A
// too, or for a narrow C (N <= 128) read in place and narrowed value by value as the kernel
// broadcasts it, and C is converted in the kernel's loads and stores, so there is no separate
// conversion pass; C receives the floats, widened.
void matmul_exact_f32(const MatmulArgs& args);

// Threads and data placement. matmul_exact splits an [M, N] output into blocks of whole rows x
// whole NR-column panels (output_grid: a function of M, N and num_threads() only, not of K), and
// task t of parallel_for runs on thread t (tensor/parallel.h). Code that reads or writes a buffer
// of that shape — the activation over a product, a bias add, their gradients, the zeroing of a
// weight gradient before dW = Xᵀ·G accumulates into it — splits it the same way, so each block is
// touched by one core from the product through the backward; a different split moves the block
// between the cores' caches, which costs more than the split saves when they share no cache.
// Any split gives the same bytes (each element is computed by one thread, in the serial order).
struct OutputBlock {
  int64_t r0, r1, c0, c1;  // rows [r0, r1) x columns [c0, c1)
};
struct OutputGrid {
  int64_t m, n;        // the buffer
  int64_t rows, cols;  // block size
  int64_t nrb, ncb;    // row and column blocks
  int64_t tasks() const { return nrb * ncb; }
  OutputBlock block(int64_t t) const {
    const int64_t r0 = t / ncb * rows, c0 = t % ncb * cols;
    return {r0, r0 + rows < m ? r0 + rows : m, c0, c0 + cols < n ? c0 + cols : n};
  }
};
OutputGrid output_grid(int64_t m, int64_t n);

// f(block) for each block of output_grid(m, n): in parallel (task t = block t) when m·n is at least
// min_elems and there is more than one thread, else one call over the whole buffer.
template <class F>
void for_each_output_block(int64_t m, int64_t n, int64_t min_elems, F&& f) {
  if (num_threads() > 1 && m * n >= min_elems) {
    const OutputGrid g = output_grid(m, n);
    if (g.tasks() > 1) {
      parallel_for(g.tasks(), [&](int64_t t) { f(g.block(t)); });
      return;
    }
  }
  f(OutputBlock{0, m, 0, n});
}

// The plain serial-k triple loop: the definition the tests compare matmul_exact against.
void matmul_reference(const MatmulArgs& args);
void matmul_reference(const MatmulArgsF32& args);

}  // namespace gr
