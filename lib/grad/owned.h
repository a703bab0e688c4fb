// owned.h — elementwise loops over a tensor split the way matmul_exact splits an output of its
// shape (tensor/matmul.h: output_grid), so the core that wrote a block of a product also applies
// its bias and activation, computes their gradients and zeroes its gradient buffer. A tensor is
// viewed as [M, N] with N its last dim. Each element is still computed by one thread, in the serial
// loop's order, so the bytes do not depend on the thread count (tensor/parallel.h).
#pragma once
#include <algorithm>
#include <cstdint>

#include "tensor/matmul.h"
#include "tensor/shape.h"

namespace gr {

// Smaller tensors stay on the calling thread. A parallel region costs ~1–2 µs, and on this VM a
// hand-off to the other core often costs more (its cache misses on the block): an elementwise op
// over 8K doubles takes ~3 µs, and at 8K the 6-64-32-64-6 autoencoder (batch 200, 12 800-element
// activations) ran slower on 2 threads than on 1 (125 → 194 µs); at 32K it does not (126–135 µs).
// docs/performance.md has the measurement.
inline constexpr int64_t kOwnedMinElems = int64_t(1) << 15;

struct RowsCols {
  int64_t m, n;
};
inline RowsCols rows_cols(const Shape& s) {
  const int64_t n = s[s.rank() - 1];
  return {s.numel() / n, n};
}

// f(base, c0, c1) for each row piece: elements base + j for columns j in [c0, c1).
template <class F>
void for_each_owned(const Shape& s, F&& f) {
  const RowsCols rc = rows_cols(s);
  for_each_output_block(rc.m, rc.n, kOwnedMinElems, [&](const OutputBlock& b) {
    for (int64_t i = b.r0; i < b.r1; ++i) f(i * rc.n, b.c0, b.c1);
  });
}

// f(lo, hi) for runs of elements [lo, hi) covering the same blocks, for loops that need only the
// element index: a block of whole rows is one run (a conv tensor's rows are a few elements long —
// LeNet's 28 — and a loop per row spent more in its vector loop's head and tail than in its body).
template <class F>
void for_each_owned_run(const Shape& s, F&& f) {
  const RowsCols rc = rows_cols(s);
  for_each_output_block(rc.m, rc.n, kOwnedMinElems, [&](const OutputBlock& b) {
    if (b.c0 == 0 && b.c1 == rc.n) return f(b.r0 * rc.n, b.r1 * rc.n);
    for (int64_t i = b.r0; i < b.r1; ++i) f(i * rc.n + b.c0, i * rc.n + b.c1);
  });
}

// A gradient buffer set to +0.0, each block by the thread that will accumulate into it (for a
// weight, the blocks of dW = Xᵀ·G, which has the weight's shape).
inline void zero_owned(double* p, const Shape& s) {
  for_each_owned_run(s, [p](int64_t lo, int64_t hi) { std::fill(p + lo, p + hi, 0.0); });
}

// b is a row vector of a: b's last dim is a's last dim and every other dim of b is 1, so b's
// element for a's element e is e mod N (the broadcast map's ib, without its odometer).
inline bool is_row_vector_of(const Shape& b, const Shape& a) {
  if (b.rank() > a.rank() || b[b.rank() - 1] != a[a.rank() - 1]) return false;
  return b.numel() == b[b.rank() - 1];
}

// b is a channel vector of a: a read as [P, C, Q] and b as [C], b's element for a's element
// e = (p·C + c)·Q + q being c — b's dims other than 1 are one run of a's dims (aligned from the
// right, as broadcasting aligns them) and a has the broadcast shape. A conv bias [F, 1, 1] over
// [N, F, OH, OW] is P = N, C = F, Q = OH·OW. The loops over (p, c, q) visit e in ascending order.
struct ChannelRun {
  int64_t p = 1, c = 1, q = 1;
};
inline bool is_channel_vector_of(const Shape& b, const Shape& a, ChannelRun& run) {
  const int ra = a.rank(), rb = b.rank();
  if (rb > ra || rb == 0 || b.numel() <= 1) return false;
  int first = -1, last = -1;  // the run of b's dims other than 1, in a's numbering
  for (int d = 0; d < rb; ++d) {
    if (b[d] == 1) continue;
    const int da = d + ra - rb;
    if (b[d] != a[da] || (last >= 0 && da != last + 1)) return false;
    if (first < 0) first = da;
    last = da;
  }
  run = ChannelRun{};
  for (int d = 0; d < ra; ++d) (d < first ? run.p : d <= last ? run.c : run.q) *= a[d];
  return true;
}

}  // namespace gr
