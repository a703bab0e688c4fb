// tape_window.cpp — the window ops (Class Window: conv2d, max_pool2d, avg_pool2d) on the CPU tape:
// the geometry check and resolution, the forward, and the backward rules (called from backward.cpp).
//
// Every element is the one definition of kernels/gr_ops_window.h (docs/numerics.md "conv2d"); tests/
// test_window.cpp checks the bytes of every path below against those functions. The pools run by window
// (the winner found once per window, the backward a scatter in window order). conv2d:
//   forward  direct, vectorized across the batch (tape_conv.cpp): each output the fma chain over
//            (c, i, j) ascending
//   dx       stride 1: direct, the same way (tape_conv.cpp); else (tape_conv_dx.cpp) the product
//            D[k, (n,p)] = W[f, k]ᵀ · G[(n,p), f]ᵀ (the chain over f), then col2im sums each cell's D
//            over its taps (i, j) ascending; then slot = slot + acc
//   dW       per group, direct with the filters as SIMD lanes (tape_conv_dw.cpp): dWᵀ[k, f] one chain
//            over (n, oh, ow) ascending (a padded tap an fma with +0), then slot = slot + acc
#include <algorithm>
#include <cstring>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "gr_ops_window.h"
#include "grad/tape.h"
#include "grad/tape_real.h"
#include "tensor/matmul.h"
#include "tensor/matmul_simd.h"  // max_pool_2x2 (Simd<double>)

namespace gr {

template <class R>
void conv2d_direct(const double* x, const double* w, const gr_window& g, double* y);  // tape_conv.cpp
template <class R>
bool conv2d_direct_dx(const double* gy, const double* w, const gr_window& g, double* acc);  // tape_conv.cpp
template <class R>
void conv2d_product_dx(const double* gy, const double* w, const gr_window& g, double* acc);  // tape_conv_dx.cpp
template <class R>
bool conv2d_plane_dx(const double* gy, const double* w, const gr_window& g, double* acc);  // tape_conv_dx_plane.cpp
template <class R>
void conv2d_direct_dw(const double* x, const double* gy, const gr_window& g, int64_t grp, double* out);  // tape_conv_dw.cpp

namespace {

std::string pair_text(int64_t a, int64_t b) { return std::to_string(a) + "x" + std::to_string(b); }

// One axis of "same": out = ceil(in / s), total = max((out − 1)·s + (k − 1)·d + 1 − in, 0), the
// smaller half first (TensorFlow's rule; PyTorch's "same" for stride 1).
void same_pads(int64_t in, int64_t k, int64_t s, int64_t d, long long& lo, long long& hi) {
  const int64_t out = (in + s - 1) / s;
  const int64_t total = std::max<int64_t>((out - 1) * s + (k - 1) * d + 1 - in, 0);
  lo = total / 2;
  hi = total - lo;
}

// The pools by window instead of by element (the per-element rules recompute every window's winner
// once per cell it covers, and divide indices per element). The backward scatters each window's
// gradient into an accumulator, windows ascending (n, c, oh, ow): a cell then receives its windows'
// terms in exactly the order of gr_*_pool2d_win_bwd_a (windows ascending), each from +0, each add in R.
// The winner is gr_max_pool2d_argmax itself, so ties and NaNs resolve as the definition says.
//
// A window wholly inside the input (no padding tap) takes argmax_inside, without branches (on random
// data "v > m" is a coin flip, and mispredicted branches cost more than the pools' arithmetic). It
// names the cell gr_max_pool2d_argmax names: that scan keeps its first cell until a strictly larger one
// or, while it holds a number, a NaN; once it holds a NaN nothing replaces it. So the winner is the
// first NaN if there is one, else the first cell equal to the maximum (±0 compare equal, and the scan
// keeps the first of them too).
template <class R>
inline long long argmax_inside(const double* x, const gr_window& g, long long n, long long c, long long oh, long long ow) {
  // One pass: `at` moves only on a strictly larger value, so it ends on the first cell equal to the
  // maximum (a NaN never compares larger; ±0 compare equal); the first NaN is tracked beside it.
  const long long base = ((n * g.c + c) * g.h + oh * g.sh - g.pt) * g.w + ow * g.sw - g.pl;
  R mx = static_cast<R>(x[base]);
  long long at = base, first_nan = -1;
  for (long long i = 0; i < g.kh; ++i)
    for (long long j = 0; j < g.kw; ++j) {
      const long long cell = base + i * g.dh * g.w + j * g.dw;
      const R v = static_cast<R>(x[cell]);
      const bool larger = v > mx;
      at = larger ? cell : at;
      mx = larger ? v : mx;
      first_nan = v != v && first_nan < 0 ? cell : first_nan;
    }
  return first_nan >= 0 ? first_nan : at;
}

// The winner of window (n, c, oh, ow) (gr_max_pool2d_argmax's answer): [oh_lo, oh_hi) × [ow_lo, ow_hi)
// are the windows with no padding tap.
struct PoolInside {
  long long oh_lo, oh_hi, ow_lo, ow_hi;
  explicit PoolInside(const gr_window& g) {
    // o·s − p ≥ 0 and o·s − p + (k − 1)·d ≤ in − 1
    oh_lo = (g.pt + g.sh - 1) / g.sh, ow_lo = (g.pl + g.sw - 1) / g.sw;
    const long long th = g.h - 1 + g.pt - (g.kh - 1) * g.dh, tw = g.w - 1 + g.pl - (g.kw - 1) * g.dw;
    oh_hi = th < 0 ? 0 : std::min<long long>(g.oh, th / g.sh + 1);
    ow_hi = tw < 0 ? 0 : std::min<long long>(g.ow, tw / g.sw + 1);
  }
  bool holds(long long oh, long long ow) const { return oh >= oh_lo && oh < oh_hi && ow >= ow_lo && ow < ow_hi; }
};
template <class R>
inline long long pool_argmax(const double* x, const gr_window& g, const PoolInside& in, long long n, long long c, long long oh,
                             long long ow) {
  return in.holds(oh, ow) ? argmax_inside<R>(x, g, n, c, oh, ow) : gr_max_pool2d_argmax<R, double>(x, g, n, c, oh, ow);
}

// 2 × 2 windows at stride 2 wholly inside the input (the spec's {"layer": "max_pool2d", "kernel": 2}), L windows
// of an output row at once: the two input rows' L·2 cells de-interleaved into the windows' four cells
// (i, j) = (0,0), (0,1), (1,0), (1,1), then argmax_inside's scan per lane in that order — a strictly larger
// value moves the winner, the first NaN is kept beside it — on doubles (the f32 tape's floats compare as
// floats do). Values and winner indices as argmax_inside gives them, vectorized across the windows.
template <size_t... I>
inline detail::Simd<double>::V even_lanes(detail::Simd<double>::V a, detail::Simd<double>::V b, std::index_sequence<I...>) {
  return __builtin_shufflevector(a, b, (2 * I)...);
}
template <size_t... I>
inline detail::Simd<double>::V odd_lanes(detail::Simd<double>::V a, detail::Simd<double>::V b, std::index_sequence<I...>) {
  return __builtin_shufflevector(a, b, (2 * I + 1)...);
}
// One run of cnt ≤ L windows: top/bottom rows' cells de-interleaved into the windows' four cells, base
// each window's first cell (an index into x), w the input's row length.
inline void max_pool_2x2_run(detail::Simd<double>::V a0, detail::Simd<double>::V a1, detail::Simd<double>::V b0,
                             detail::Simd<double>::V b1, detail::Simd<double>::V base, int64_t w, int cnt, double* y,
                             double* winner) {
  using V = detail::Simd<double>::V;
  constexpr auto lanes = std::make_index_sequence<detail::Simd<double>::W>{};
  const V v[4] = {even_lanes(a0, a1, lanes), odd_lanes(a0, a1, lanes), even_lanes(b0, b1, lanes), odd_lanes(b0, b1, lanes)};
  const double off[4] = {0.0, 1.0, static_cast<double>(w), static_cast<double>(w + 1)};
  V m = v[0], at = base, nan_at = v[0] != v[0] ? base : V{} - 1.0, nan_v = v[0];
  for (int t = 1; t < 4; ++t) {
    const auto larger = v[t] > m;
    at = larger ? base + off[t] : at;
    m = larger ? v[t] : m;
    const auto first_nan = v[t] != v[t] && nan_at < 0.0;
    nan_v = first_nan ? v[t] : nan_v;
    nan_at = first_nan ? base + off[t] : nan_at;
  }
  const auto has_nan = nan_at >= 0.0;
  detail::store_n<double>(y, has_nan ? nan_v : m, cnt);
  detail::store_n<double>(winner, has_nan ? nan_at : at, cnt);
}

void max_pool_2x2(const double* x, const gr_window& g, double* y, double* winner) {
  using V = detail::Simd<double>::V;
  constexpr int L = detail::Simd<double>::W;
  V iota2;  // 0, 2, 4, ...: a window's first cell, relative to the run's
  for (int l = 0; l < L; ++l) iota2[l] = 2.0 * l;
  // Rows of L/2 windows (the digits CNN's 8 × 8 → 4 × 4): two output rows a run, their four input rows
  // loaded whole, so every lane holds a window (one row a run left half the lanes idle).
  const bool row_pairs = 2 * g.ow == L;
  V iota_pair;  // window l's first cell: row l / OW of the pair (2·W further), column 2·(l % OW)
  for (int l = 0; l < L; ++l) iota_pair[l] = static_cast<double>(2 * (l % g.ow) + l / g.ow * 2 * g.w);
  for (int64_t plane = 0; plane < g.n * g.c; ++plane) {
    int64_t oh = 0;
    if (row_pairs)
      for (; oh + 2 <= g.oh; oh += 2) {
        const int64_t row0 = (plane * g.h + 2 * oh) * g.w;
        const double* r0 = x + row0;
        const int64_t out = (plane * g.oh + oh) * g.ow;
        max_pool_2x2_run(detail::load_v<double>(r0), detail::load_v<double>(r0 + 2 * g.w), detail::load_v<double>(r0 + g.w),
                         detail::load_v<double>(r0 + 3 * g.w), iota_pair + static_cast<double>(row0), g.w, L, y + out,
                         winner + out);
      }
    for (; oh < g.oh; ++oh) {
      const int64_t row0 = (plane * g.h + 2 * oh) * g.w;
      for (int64_t ow0 = 0; ow0 < g.ow; ow0 += L) {
        const int cnt = static_cast<int>(std::min<int64_t>(L, g.ow - ow0)), cells = 2 * cnt;
        const double* r0 = x + row0 + 2 * ow0;
        const double* r1 = r0 + g.w;
        const V a0 = detail::load_n<double>(r0, std::min(cells, L)), a1 = cells > L ? detail::load_n<double>(r0 + L, cells - L) : V{};
        const V b0 = detail::load_n<double>(r1, std::min(cells, L)), b1 = cells > L ? detail::load_n<double>(r1 + L, cells - L) : V{};
        const int64_t out = (plane * g.oh + oh) * g.ow + ow0;
        max_pool_2x2_run(a0, a1, b0, b1, iota2 + static_cast<double>(row0 + 2 * ow0), g.w, cnt, y + out, winner + out);
      }
    }
  }
}

// y, and each window's winner (an index into x, −1 when every cell is padding) into `winner`: the
// backward reads it instead of finding it again (Node::kept).
template <class R>
void max_pool_fwd(const double* x, const gr_window& g, double* y, double* winner) {
  // every window inside the input: no padding before, and none after that a window reaches ("same" on
  // an odd size pads a last row or column)
  if (g.kh == 2 && g.kw == 2 && g.sh == 2 && g.sw == 2 && g.dh == 1 && g.dw == 1 && g.pt == 0 && g.pl == 0 &&
      2 * g.oh <= g.h && 2 * g.ow <= g.w)
    return max_pool_2x2(x, g, y, winner);
  const PoolInside in(g);
  for (int64_t n = 0; n < g.n; ++n)
    for (int64_t c = 0; c < g.c; ++c)
      for (int64_t oh = 0; oh < g.oh; ++oh)
        for (int64_t ow = 0; ow < g.ow; ++ow) {
          const long long at = pool_argmax<R>(x, g, in, n, c, oh, ow);
          *y++ = at < 0 ? static_cast<double>(R(0)) : static_cast<double>(static_cast<R>(x[at]));
          *winner++ = static_cast<double>(at);
        }
}

// acc [N, C, H, W] (zeroed here) = the per-cell sums of max_pool2d's (its windows' winners from the
// forward) or avg_pool2d's backward.
template <class R>
void pool_bwd(Op op, const double* gy, const double* winner, const gr_window& g, double* acc) {
  std::fill(acc, acc + g.n * g.c * g.h * g.w, 0.0);
  const R div = static_cast<R>(g.kh * g.kw);
  for (int64_t n = 0; n < g.n; ++n)
    for (int64_t c = 0; c < g.c; ++c) {
      double* plane = acc + (n * g.c + c) * g.h * g.w;
      for (int64_t oh = 0; oh < g.oh; ++oh)
        for (int64_t ow = 0; ow < g.ow; ++ow) {
          const R gv = static_cast<R>(*gy++);
          if (op == Op::MaxPool2d) {
            const long long at = static_cast<long long>(*winner++);
            if (at >= 0) acc[at] = static_cast<double>(gr_radd(static_cast<R>(acc[at]), gv));
            continue;
          }
          const R v = gr_rdiv(gv, div);  // avg_pool2d: every in-bounds tap of the window
          for (int64_t i = 0; i < g.kh; ++i) {
            const int64_t ih = oh * g.sh - g.pt + i * g.dh;
            if (ih < 0 || ih >= g.h) continue;
            for (int64_t j = 0; j < g.kw; ++j) {
              const int64_t iw = ow * g.sw - g.pl + j * g.dw;
              if (iw < 0 || iw >= g.w) continue;
              double& cell = plane[ih * g.w + iw];
              cell = static_cast<double>(gr_radd(static_cast<R>(cell), v));
            }
          }
        }
    }
}

// A window op's rule per element, from its row (an exhaustive switch generated from the table; window
// rows only reach it): gr_<stem>_win_fwd / _bwd_a / _bwd_b of gr_ops_window.h.
template <class R>
R win_fwd(Op op, const double* x, const double* w, const gr_window& g, int64_t e) {
  switch (op) {
#define GR_TAPE_WIN_FWD(E, name, arity, cls, attrs, stem, ...) \
  case Op::E: GR_OP_IF_WINDOW_##cls(return gr_##stem##_win_fwd<R, double>(x, w, g, e);) break;
    GR_OP_TABLE(GR_TAPE_WIN_FWD)
#undef GR_TAPE_WIN_FWD
  }
  throw Error("win_fwd: " + std::string(op_name(op)) + " is not a window op");
}
template <class R>
R win_bwd_a(Op op, const double* gy, const double* x, const double* w, const gr_window& g, int64_t e) {
  switch (op) {
#define GR_TAPE_WIN_BWD_A(E, name, arity, cls, attrs, stem, ...) \
  case Op::E: GR_OP_IF_WINDOW_##cls(return gr_##stem##_win_bwd_a<R, double>(gy, x, w, g, e);) break;
    GR_OP_TABLE(GR_TAPE_WIN_BWD_A)
#undef GR_TAPE_WIN_BWD_A
  }
  throw Error("win_bwd_a: " + std::string(op_name(op)) + " is not a window op");
}
template <class R>
R win_bwd_b(Op op, const double* gy, const double* x, const double* w, const gr_window& g, int64_t e) {
  switch (op) {
#define GR_TAPE_WIN_BWD_B(E, name, arity, cls, attrs, stem, fwd, bwda, bwdb, ...) \
  case Op::E: GR_OP_IF_WINDOW_##cls(GR_OP_IF_WIN_BWDB_##bwdb(return gr_##stem##_win_bwd_b<R, double>(gy, x, w, g, e);)) break;
    GR_OP_TABLE(GR_TAPE_WIN_BWD_B)
#undef GR_TAPE_WIN_BWD_B
  }
  throw Error("win_bwd_b: " + std::string(op_name(op)) + " has no second input");
}

}  // namespace

Var Tape::window_op(Op op, Var x, Var w, const WindowAttrs& at) {
  if (!op_info(op).window()) return poison(op, "is not a window op");
  const bool conv = op == Op::Conv2d;
  if (!usable(op, x) || (conv && !usable(op, w))) return Var{};
  const Shape xs = nodes_[x.id].shape;
  if (xs.rank() != 4) return poison(op, "needs an input [N, C, H, W], got " + xs.str());
  gr_window g{};
  g.n = xs[0], g.c = xs[1], g.h = xs[2], g.w = xs[3];
  g.groups = conv ? at.groups : 1;
  g.dh = conv ? at.dh : 1, g.dw = conv ? at.dw : 1;
  if (conv) {
    const Shape ws = nodes_[w.id].shape;
    if (ws.rank() != 4) return poison(op, "needs a weight [F, C/groups, KH, KW], got " + ws.str());
    if (g.groups < 1) return poison(op, "groups must be >= 1, got " + std::to_string(g.groups));
    if (g.c % g.groups != 0 || ws[0] % g.groups != 0)
      return poison(op, "groups " + std::to_string(g.groups) + " must divide the input channels (" + std::to_string(g.c) +
                            ") and the filters (" + std::to_string(ws[0]) + ")");
    if (ws[1] != g.c / g.groups)
      return poison(op, "weight " + ws.str() + " needs " + std::to_string(g.c / g.groups) + " input channels per group (input " +
                            xs.str() + ", groups " + std::to_string(g.groups) + ")");
    g.f = ws[0], g.kh = ws[2], g.kw = ws[3];
  } else {
    g.f = g.c, g.kh = at.kh, g.kw = at.kw;
  }
  g.sh = at.sh ? at.sh : (conv ? 1 : g.kh);
  g.sw = at.sw ? at.sw : (conv ? 1 : g.kw);
  if (g.kh < 1 || g.kw < 1) return poison(op, "kernel must be >= 1, got " + pair_text(g.kh, g.kw));
  if (g.sh < 1 || g.sw < 1) return poison(op, "stride must be >= 1, got " + pair_text(g.sh, g.sw));
  if (g.dh < 1 || g.dw < 1) return poison(op, "dilation must be >= 1, got " + pair_text(g.dh, g.dw));
  switch (at.pad) {
    case WindowAttrs::Pad::Explicit:
      if (at.ph < 0 || at.pw < 0) return poison(op, "padding must be >= 0, got " + pair_text(at.ph, at.pw));
      if (!conv && (2 * at.ph > g.kh || 2 * at.pw > g.kw))
        return poison(op, "padding " + pair_text(at.ph, at.pw) + " must be at most half the kernel " + pair_text(g.kh, g.kw));
      g.pt = g.pb = at.ph, g.pl = g.pr = at.pw;
      break;
    case WindowAttrs::Pad::Same:
      same_pads(g.h, g.kh, g.sh, g.dh, g.pt, g.pb);
      same_pads(g.w, g.kw, g.sw, g.dw, g.pl, g.pr);
      break;
    case WindowAttrs::Pad::Valid: break;
  }
  const int64_t eh = g.h + g.pt + g.pb - g.dh * (g.kh - 1) - 1, ew = g.w + g.pl + g.pr - g.dw * (g.kw - 1) - 1;
  if (eh < 0 || ew < 0)
    return poison(op, "output would be empty: input " + xs.str() + " padded by " + pair_text(g.pt + g.pb, g.pl + g.pr) +
                          " is smaller than the " + (g.dh * g.dw > 1 ? "dilated " : "") + "kernel " +
                          pair_text(g.dh * (g.kh - 1) + 1, g.dw * (g.kw - 1) + 1));
  g.oh = eh / g.sh + 1, g.ow = ew / g.sw + 1;
  Shape out;
  try {
    out = Shape{g.n, g.f, g.oh, g.ow};
  } catch (const Error& e) {
    return poison(op, e.what());
  }
  Node* n = push(op, x.id, conv ? w.id : -1, out);
  n->win = g;
  if (n->val && op == Op::MaxPool2d) keep(n, n->numel());  // the windows' winners (max_pool_fwd)
  if (n->val) by_real([&](auto r) { window_values<decltype(r)>(*n); });
  return Var{size() - 1};
}

template <class R>
void Tape::window_values(Node& n) {
  const gr_window& g = n.win;
  const double* x = nodes_[n.a].val;
  if (n.op == Op::MaxPool2d) return max_pool_fwd<R>(x, g, n.val, n.kept);  // by window (above)
  if (n.op != Op::Conv2d) {  // per element, the row's rule
    const double* w = n.b >= 0 ? nodes_[n.b].val : nullptr;
    for (int64_t e = 0; e < n.numel(); ++e) n.val[e] = static_cast<double>(win_fwd<R>(n.op, x, w, g, e));
    return;
  }
  // conv2d's fast path: the same chains, direct and vectorized across the batch (tape_conv.cpp).
  conv2d_direct<R>(x, nodes_[n.b].val, g, n.val);
}

template <class R>
void Tape::window_backward(const Node& n, const double* gy) {
  const gr_window& g = n.win;
  const double* x = nodes_[n.a].val;
  const bool want_x = nodes_[n.a].requires_grad;
  const int32_t a = n.a, b = n.b;
  // slot = slot + v (a fresh slot: +0 + v), element e of the input, in R.
  const auto write = [&](int32_t id, auto value) {
    bool fresh = false;
    double* slot = grad_slot(id, fresh);
    const int64_t count = nodes_[id].numel();
    if (fresh)
      for (int64_t e = 0; e < count; ++e) first_into(slot[e], static_cast<R>(value(e)));
    else
      for (int64_t e = 0; e < count; ++e) accumulate_into(slot[e], static_cast<R>(value(e)));
  };
  if (n.op == Op::MaxPool2d || n.op == Op::AvgPool2d) {  // by window (above); one input
    if (!want_x) return;
    if (n.op == Op::MaxPool2d && g.sh >= g.dh * (g.kh - 1) + 1 && g.sw >= g.dw * (g.kw - 1) + 1) {
      // Windows that do not overlap (a stride of at least the dilated kernel, as pool 2 / stride 2):
      // each cell gets at most one gradient, so into a fresh slot every cell is +0 + (+0 + gy) at
      // its window's winner and +0 elsewhere — pool_bwd's sums and write()'s first_into, without
      // the scratch tensor and its extra pass.
      bool fresh = false;
      double* slot = grad_slot(a, fresh);
      if (fresh) {
        std::fill(slot, slot + nodes_[a].numel(), 0.0);
        for (int64_t e = 0; e < n.numel(); ++e) {
          const long long at = static_cast<long long>(n.kept[e]);
          if (at >= 0) first_into(slot[at], gr_radd(R(0), static_cast<R>(gy[e])));
        }
        return;
      }
    }
    win_tmp_.resize(static_cast<size_t>(nodes_[a].numel()));
    pool_bwd<R>(n.op, gy, n.kept, g, win_tmp_.data());
    write(a, [&](int64_t e) { return win_tmp_[static_cast<size_t>(e)]; });
    return;
  }
  if (n.op != Op::Conv2d) {  // per element, the row's rules: x's side, then w's
    const double* w = b >= 0 ? nodes_[b].val : nullptr;
    if (want_x) write(a, [&](int64_t e) { return win_bwd_a<R>(n.op, gy, x, w, g, e); });
    if (b >= 0 && nodes_[b].requires_grad) write(b, [&](int64_t e) { return win_bwd_b<R>(n.op, gy, x, w, g, e); });
    return;
  }
  // conv2d's fast path.
  const double* w = nodes_[b].val;
  const bool want_w = nodes_[b].requires_grad;
  const int64_t fg = g.f / g.groups, K = g.c / g.groups * g.kh * g.kw;
  if (want_x) {  // the a-side first, as every binary op
    // The per-cell sums start at +0 and never become −0, so a fresh slot (+0 + acc = acc) is its own acc.
    bool fresh = false;
    double* slot = grad_slot(a, fresh);
    std::vector<double> own;
    double* acc = slot;
    if (!fresh) own.resize(static_cast<size_t>(nodes_[a].numel())), acc = own.data();
    // Each path writes every cell or declines (measured, docs/performance.md "stop 58"): on floats with
    // channels a group the direct loop where it applies (tape_conv.cpp: digits conv2 0.11 ms, plane 0.16),
    // then along the output plane (tape_conv_dx_plane.cpp), then the direct loop for the rest (floats
    // only), then the product and col2im (tape_conv_dx.cpp), which take every layer.
    const bool direct_first = g.c / g.groups > 1;
    if (!(direct_first && conv2d_direct_dx<R>(gy, w, g, acc)) && !conv2d_plane_dx<R>(gy, w, g, acc) &&
        !(!direct_first && conv2d_direct_dx<R>(gy, w, g, acc)))
      conv2d_product_dx<R>(gy, w, g, acc);
    if (!fresh)
      for (int64_t e = 0; e < nodes_[a].numel(); ++e) accumulate_into(slot[e], static_cast<R>(acc[e]));
  }
  if (want_w) {
    bool fresh = false;
    double* slot = grad_slot(b, fresh);
    win_tmp_.resize(static_cast<size_t>(K * fg));
    for (int64_t grp = 0; grp < g.groups; ++grp) {
      conv2d_direct_dw<R>(x, gy, g, grp, win_tmp_.data());  // tape_conv_dw.cpp: dWᵀ [K, Fg]
      double* dw = slot + grp * fg * K;
      for (int64_t f = 0; f < fg; ++f)
        for (int64_t k = 0; k < K; ++k) {
          const R v = static_cast<R>(win_tmp_[static_cast<size_t>(k * fg + f)]);
          if (fresh) first_into(dw[f * K + k], v);
          else accumulate_into(dw[f * K + k], v);
        }
    }
  }
}

template void Tape::window_backward<double>(const Node&, const double*);
template void Tape::window_backward<float>(const Node&, const double*);

}  // namespace gr
