// matmul_check.h — what test_matmul.cpp (double) and test_matmul_f32.cpp (float) share: the
// arguments of C = A·B with A and/or B stored transposed, and one run of both routines.
#pragma once
#include <cstdint>
#include <utility>
#include <vector>

#include "tensor/matmul.h"

namespace gr::test {

// A is M×K (stored K×M when a_trans), B is K×N (stored N×K when b_trans); C is set per run.
template <class T>
MatmulArgsOf<T> layout_args(const T* a, const T* b, int64_t m, int64_t k, int64_t n, bool a_trans, bool b_trans) {
  return {a, a_trans ? 1 : k, a_trans ? m : 1, b, b_trans ? 1 : n, b_trans ? k : 1, nullptr, m, k, n, MatmulStore::Overwrite};
}

// matmul_reference and matmul_exact on copies of c0 with `store`: {want, got}.
template <class T>
std::pair<std::vector<T>, std::vector<T>> reference_and_exact(MatmulArgsOf<T> x, const std::vector<T>& c0, MatmulStore store) {
  std::vector<T> want = c0, got = c0;
  x.store = store;
  x.c = want.data();
  matmul_reference(x);
  x.c = got.data();
  matmul_exact(x);
  return {std::move(want), std::move(got)};
}

// C = A·B over K computed as consecutive k ranges [0, cuts[0]), [cuts[0], cuts[1]), ..., [cuts.back(), K):
// the first with Overwrite, the rest with MatmulStore::Continue, each by `run` (matmul_exact or
// matmul_reference, or the f32 tape's form). One call's bytes whatever the cuts (matmul.h).
template <class T, class Run>
void run_in_k_pieces(MatmulArgsOf<T> x, const std::vector<int64_t>& cuts, Run&& run) {
  int64_t k0 = 0;
  const int64_t k_all = x.k;
  for (size_t p = 0; p <= cuts.size(); ++p) {
    const int64_t k1 = p < cuts.size() ? cuts[p] : k_all;
    MatmulArgsOf<T> piece = x;
    piece.a = x.a + k0 * x.a_cs;
    piece.b = x.b + k0 * x.b_rs;
    piece.k = k1 - k0;
    piece.store = p == 0 ? MatmulStore::Overwrite : MatmulStore::Continue;
    run(piece);
    k0 = k1;
  }
}

}  // namespace gr::test
