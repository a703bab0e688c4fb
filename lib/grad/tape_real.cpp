#include "grad/tape_real.h"

#include <algorithm>

#include "tensor/parallel.h"

namespace gr {

namespace {
// Conversions of big operands run on every thread (elementwise: any split gives the same bytes).
constexpr int64_t kParallelConvert = int64_t(1) << 16;
template <class F>
void in_chunks(int64_t n, F&& f) {
  const int64_t tasks = n >= kParallelConvert ? num_threads() : 1;
  if (tasks <= 1) return f(int64_t(0), n);
  const int64_t per = (n + tasks - 1) / tasks;
  parallel_for(tasks, [&](int64_t t) {
    const int64_t lo = t * per, hi = std::min(n, lo + per);
    if (lo < hi) f(lo, hi - lo);
  });
}

}  // namespace

void matmul_in(Real real, const MatmulArgs& g, std::vector<float>& scratch) {
  if (real == Real::F64) return matmul_exact(g);
  // A and B are narrowed as the matmul packs them; C goes through a float copy.
  const int64_t nc = g.m * g.n;
  if (scratch.size() < static_cast<size_t>(nc)) scratch.resize(static_cast<size_t>(nc));
  float* c = scratch.data();
  if (g.store == MatmulStore::Accumulate) in_chunks(nc, [&](int64_t lo, int64_t n) { narrow(g.c + lo, n, c + lo); });
  matmul_exact(MatmulArgsF32From64{g.a, g.a_rs, g.a_cs, g.b, g.b_rs, g.b_cs, c, g.m, g.k, g.n, g.store});
  in_chunks(nc, [&](int64_t lo, int64_t n) { widen(c + lo, n, g.c + lo); });
}

}  // namespace gr
