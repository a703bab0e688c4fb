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

}  // namespace gr::test
