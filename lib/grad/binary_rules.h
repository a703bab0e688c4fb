// binary_rules.h — private to backward.cpp: the backward rules of the binary elementwise ops, their
// gradients summed over the broadcast map (the same-shaped case, a stretched single element, a bias row
// vector, a channel vector, the general odometer) in the orders of backward.cpp's contract.
#pragma once
#include <algorithm>
#include <cstdint>

#include "grad/channel_lanes.h"
#include "grad/owned.h"
#include "grad/rule_context.h"
#include "tensor/broadcast.h"

namespace gr {

template <class R>
struct BinaryRules : RuleContext<R> {
  GR_RULE_CONTEXT_NAMES(RuleContext<R>);

  // slot[ia(e)] += c(e) over the broadcast map, for whichever sides want a gradient.
  template <class CA, class CB>
  void binary(CA ca, CB cb) {
    if (in(n.a).shape == in(n.b).shape) {  // no broadcast: ia = ib = e
      // Per element the a-side lands before the b-side (the same slot when a and b are one node:
      // then the b-side finds it touched and adds).
      const Slot da = slot_of(n.a), db = slot_of(n.b);
      for_each_owned_run(n.shape, [&](int64_t lo, int64_t hi) {
        if (da) write_range(da, lo, hi, [&](int64_t e) { return ca(e, e, e); });
        if (db) write_range(db, lo, hi, [&](int64_t e) { return cb(e, e, e); });
      });
      return;
    }
    const Shape &sa = in(n.a).shape, &sb = in(n.b).shape;
    if ((sb.numel() == 1 && sa == n.shape) || (sa.numel() == 1 && sb == n.shape)) {  // a stretched single element
      const int64_t count = n.numel();
      const bool b1 = sb.numel() == 1 && sa == n.shape;
      if (wants(n.a)) {
        double* slot = t.ensure_grad(n.a);
        for (int64_t e = 0; e < count; ++e) {
          const int64_t ia = b1 ? e : 0, ib = b1 ? 0 : e;
          accumulate_into(slot[ia], ca(e, ia, ib));
        }
      }
      if (wants(n.b)) {
        double* slot = t.ensure_grad(n.b);
        for (int64_t e = 0; e < count; ++e) {
          const int64_t ia = b1 ? e : 0, ib = b1 ? 0 : e;
          accumulate_into(slot[ib], cb(e, ia, ib));
        }
      }
      return;
    }
    if (is_row_vector_of(sb, sa)) return bias(ca, cb);  // as the forward: after the single element
    if (ChannelRun cr; is_channel_vector_of(sb, sa, cr)) return channel_bias(ca, cb, cr);
    BroadcastMap m{n.shape};  // validated by the forward; n.shape is the broadcast shape
    aligned_strides(in(n.a).shape, n.shape, m.a_stride);
    aligned_strides(in(n.b).shape, n.shape, m.b_stride);
    if (wants(n.a)) {
      double* slot = t.ensure_grad(n.a);
      for_each_broadcast(m, [&](int64_t e, int64_t ia, int64_t ib) { accumulate_into(slot[ia], ca(e, ia, ib)); });
    }
    if (wants(n.b)) {
      double* slot = t.ensure_grad(n.b);
      for_each_broadcast(m, [&](int64_t e, int64_t ia, int64_t ib) { accumulate_into(slot[ib], cb(e, ia, ib)); });
    }
  }

  // A bias add, b a row vector of a ([.., N] and [N]): ia = e, ib = e mod N. The b-side slot j
  // sums its contributions over the rows in ascending order (the row-major subsequence order), so
  // a column's sum must stay in one task: the b-side runs inside the blocks only when the grid
  // splits columns alone, and after them on this thread otherwise.
  template <class CA, class CB>
  void bias(CA ca, CB cb) {
    const RowsCols rc = rows_cols(n.shape);
    const int64_t N = rc.n;
    // The a-side writes each of its elements once, so a fresh slot takes first_into (+0 + c) and
    // needs no zeroing pass first (mlp1024: a 2 MB memset and its reread per step).
    const Slot da = slot_of(n.a);
    double* db = wants(n.b) ? t.ensure_grad(n.b) : nullptr;
    const auto b_side = [&](int64_t r0, int64_t r1, int64_t c0, int64_t c1) {
      for (int64_t i = r0; i < r1; ++i)
        for (int64_t j = c0; j < c1; ++j) accumulate_into(db[j], cb(i * N + j, i * N + j, j));
    };
    const bool split_rows = num_threads() > 1 && rc.m * N >= kOwnedMinElems && output_grid(rc.m, N).nrb > 1;
    for_each_output_block(rc.m, N, kOwnedMinElems, [&](const OutputBlock& k) {
      if (da)
        for (int64_t i = k.r0; i < k.r1; ++i)
          write_range(da, i * N + k.c0, i * N + k.c1, [&](int64_t e) { return ca(e, e, e - i * N); });
      if (db && !split_rows) b_side(k.r0, k.r1, k.c0, k.c1);
    });
    if (db && split_rows) b_side(0, rc.m, 0, N);
  }

  // A channel bias, b a channel vector of a (owned.h: a as [P, C, Q], ib = c): the broadcast map's
  // sums without its odometer. The a-side, then the b-side; slot c sums over p, then q, ascending —
  // e's order — in a register (the slot's bits between two adds are R's, so keeping R is exact),
  // up to eight channels' chains side by side so their adds overlap.
  template <class CA, class CB>
  void channel_bias(CA ca, CB cb, const ChannelRun& cr) {
    const int64_t C = cr.c, Q = cr.q;
    if (Q == 1) {  // b a trailing block of a ([T, D] over [N, T, D]): rows of C, the loops over c run wide
      // The a-side writes each element once: a fresh slot takes first_into, no zeroing pass (as bias()).
      if (const Slot da = slot_of(n.a))
        for (int64_t p = 0; p < cr.p; ++p) write_range(da, p * C, p * C + C, [&](int64_t e) { return ca(e, e, e - p * C); });
      if (!wants(n.b)) return;
      double* db = t.ensure_grad(n.b);
      for (int64_t p = 0; p < cr.p; ++p)  // slot c still sums over p ascending
        for (int64_t c = 0; c < C; ++c) accumulate_into(db[c], cb(p * C + c, p * C + c, c));
      return;
    }
    if (wants(n.b) && n.a != n.b && channel_lanes_fit<R>(cr)) {  // both sides in one pass (channel_lanes.h)
      const Slot da = slot_of(n.a);
      return channel_bias_lanes<R>(ca, cb, da.p, da.fresh, t.ensure_grad(n.b), cr);
    }
    // The a-side writes each element once: a fresh slot takes first_into, no zeroing pass (a conv
    // bias over LeNet's conv1 output: a 2.4 MB memset and its reread per step).
    if (const Slot da = slot_of(n.a))
      for (int64_t p = 0, e = 0; p < cr.p; ++p)
        for (int64_t c = 0; c < C; ++c, e += Q) write_range(da, e, e + Q, [&](int64_t x) { return ca(x, x, c); });
    if (!wants(n.b)) return;
    double* db = t.ensure_grad(n.b);
    for (int64_t p = 0; p < cr.p; ++p)
      for (int64_t c = 0; c < C;) {  // up to 8 channels' chains side by side (LeNet conv1's 6 in one group)
        switch (std::min<int64_t>(C - c, 8)) {
          case 8: channel_sums<8>(cb, db, p, c, C, Q), c += 8; break;
          case 7: channel_sums<7>(cb, db, p, c, C, Q), c += 7; break;
          case 6: channel_sums<6>(cb, db, p, c, C, Q), c += 6; break;
          case 5: channel_sums<5>(cb, db, p, c, C, Q), c += 5; break;
          case 4: channel_sums<4>(cb, db, p, c, C, Q), c += 4; break;
          case 3: channel_sums<3>(cb, db, p, c, C, Q), c += 3; break;
          case 2: channel_sums<2>(cb, db, p, c, C, Q), c += 2; break;
          default: channel_sums<1>(cb, db, p, c, C, Q), c += 1; break;
        }
      }
  }
  // Slots db[c0 .. c0 + CB) each += its channel's Q contributions of row p, q ascending, in registers
  // (the slot's bits between two adds are R's, so keeping R is exact).
  template <int CB, class CBF>
  static void channel_sums(CBF& cb, double* db, int64_t p, int64_t c0, int64_t C, int64_t Q) {
    R s[CB];
    for (int a = 0; a < CB; ++a) s[a] = R(db[c0 + a]);
    const int64_t e0 = (p * C + c0) * Q;
    for (int64_t q = 0; q < Q; ++q)
#pragma GCC unroll 8
      for (int a = 0; a < CB; ++a) s[a] = gr_accumulate(s[a], cb(e0 + a * Q + q, e0 + a * Q + q, c0 + a));
    for (int a = 0; a < CB; ++a) db[c0 + a] = double(s[a]);
  }
};

}  // namespace gr
