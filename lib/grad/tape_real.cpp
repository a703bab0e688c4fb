#include "grad/tape_real.h"

#include <algorithm>

namespace gr {

namespace {
// The elements a strided [rows, cols] operand spans: its largest index + 1.
int64_t span_of(int64_t rows, int64_t cols, int64_t rs, int64_t cs) {
  return rows == 0 || cols == 0 ? 0 : (rows - 1) * rs + (cols - 1) * cs + 1;
}
}  // namespace

void matmul_in(Real real, const MatmulArgs& g, std::vector<float>& scratch, bool c_zero) {
  if (real == Real::F64) return matmul_exact(g);
  const int64_t na = span_of(g.m, g.k, g.a_rs, g.a_cs), nb = span_of(g.k, g.n, g.b_rs, g.b_cs), nc = g.m * g.n;
  if (scratch.size() < static_cast<size_t>(na + nb + nc)) scratch.resize(static_cast<size_t>(na + nb + nc));
  float* a = scratch.data();
  float* b = a + na;
  float* c = b + nb;
  narrow(g.a, na, a);
  narrow(g.b, nb, b);
  const bool onto_zero = g.store == MatmulStore::Accumulate && c_zero;
  if (g.store == MatmulStore::Accumulate && !onto_zero) narrow(g.c, nc, c);
  matmul_exact(MatmulArgsF32{a, g.a_rs, g.a_cs, b, g.b_rs, g.b_cs, c, g.m, g.k, g.n,
                             onto_zero ? MatmulStore::Overwrite : g.store});
  if (onto_zero)
    for (int64_t k = 0; k < nc; ++k) g.c[k] = static_cast<double>(gr_radd(c[k], 0.0f));  // = gr_accumulate(+0, acc)
  else
    widen(c, nc, g.c);
}

}  // namespace gr
