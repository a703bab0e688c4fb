#include "grad/tape_real.h"

#include <algorithm>

namespace gr {

namespace {
// The elements a strided [rows, cols] operand spans: its largest index + 1.
int64_t span_of(int64_t rows, int64_t cols, int64_t rs, int64_t cs) {
  return rows == 0 || cols == 0 ? 0 : (rows - 1) * rs + (cols - 1) * cs + 1;
}
}  // namespace

void matmul_in(Real real, const MatmulArgs& g, std::vector<float>& scratch) {
  if (real == Real::F64) return matmul_exact(g);
  const int64_t na = span_of(g.m, g.k, g.a_rs, g.a_cs), nb = span_of(g.k, g.n, g.b_rs, g.b_cs), nc = g.m * g.n;
  if (scratch.size() < static_cast<size_t>(na + nb + nc)) scratch.resize(static_cast<size_t>(na + nb + nc));
  float* a = scratch.data();
  float* b = a + na;
  float* c = b + nb;
  narrow_lane(g.a, na, 1, a);
  narrow_lane(g.b, nb, 1, b);
  if (g.store == MatmulStore::Accumulate) narrow_lane(g.c, nc, 1, c);
  matmul_exact(MatmulArgsF32{a, g.a_rs, g.a_cs, b, g.b_rs, g.b_cs, c, g.m, g.k, g.n, g.store});
  widen_lane(c, nc, g.c, 1);
}

}  // namespace gr
