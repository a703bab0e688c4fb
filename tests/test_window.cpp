// test_window.cpp — the window ops (conv2d, max_pool2d, avg_pool2d): the CPU tape's values and
// gradients equal the one definition (kernels/gr_ops_window.h, per element) byte for byte over random
// geometries, f64 and f32 (conv2d's direct and im2col + matmul paths and the pools' by-window loops
// are the fast versions of those chains, as matmul_exact is of matmul_reference); the tape's and the spec's located errors; and, with
// GR_WINDOW_BENCH=1, the forward/backward GFLOP/s of LeNet's conv2 and a digits-CNN-sized conv.
#include <catch2/catch.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <limits>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "gr_ops_scalar.h"
#include "gr_ops_window.h"
#include "grad/tape.h"
#include "io/errors.h"
#include "spec/program.h"
#include "spec/spec.h"
#include "support/rng.h"
#include "tensor/matmul.h"
#include "tensor/matmul_simd.h"

using namespace gr;
using gr::test::Rng;

namespace {

struct Geometry {
  Op op;
  Shape x, w;  // w: conv2d only
  WindowAttrs at;
};

// A random geometry that gives a non-empty output (batch 1 and groups included).
Geometry draw_geometry(Rng& rng, Op op) {
  const auto pick = [&](int64_t lo, int64_t hi) { return lo + static_cast<int64_t>(rng.next() % static_cast<uint64_t>(hi - lo + 1)); };
  for (;;) {
    Geometry g{op, Shape{1}, Shape{1}, {}};
    WindowAttrs& a = g.at;
    const int64_t n = pick(1, 3), groups = op == Op::Conv2d ? pick(1, 3) : 1;
    const int64_t c = groups * pick(1, 3), h = pick(1, 9), w = pick(1, 9);
    a.kh = pick(1, 4), a.kw = pick(1, 4);
    a.sh = pick(1, 3), a.sw = pick(1, 3);
    const int64_t mode = pick(0, 3);
    a.pad = mode == 0 ? WindowAttrs::Pad::Same : mode == 1 ? WindowAttrs::Pad::Valid : WindowAttrs::Pad::Explicit;
    a.ph = op == Op::Conv2d ? pick(0, 3) : pick(0, a.kh / 2);
    a.pw = op == Op::Conv2d ? pick(0, 3) : pick(0, a.kw / 2);
    if (op == Op::Conv2d) a.dh = pick(1, 2), a.dw = pick(1, 2), a.groups = groups;
    g.x = Shape{n, c, h, w};
    if (op == Op::Conv2d) g.w = Shape{groups * pick(1, 3), c / groups, a.kh, a.kw};
    Tape probe;
    const Var x = probe.constant_lazy(g.x);
    const Var wv = op == Op::Conv2d ? probe.constant_lazy(g.w) : Var{};
    probe.window_op(op, x, wv, a);
    if (probe.ok()) return g;
  }
}

// slot bits of "+0 + v" in T, widened
template <class T>
double fresh(T v) {
  return static_cast<double>(gr_accumulate(T(0), v));
}

// Records op(x, w) with loss Σ y ⊙ R and checks y, dx, dw against the per-element definitions in T.
// x_values: x's values instead of uniform ones (ties, signed zeros and NaNs for the pools).
template <class T>
void check_geometry(const Geometry& geo, uint64_t seed, const std::vector<double>* x_values = nullptr,
                    const std::vector<double>* w_values = nullptr) {
  Rng rng(seed);
  Tape t(std::is_same_v<T, float> ? DType::F32 : DType::F64);
  const bool conv = geo.op == Op::Conv2d;
  const Var x = t.param(geo.x, x_values ? *x_values : rng.uniform_vec(geo.x.numel(), -2.0, 2.0));
  const Var w = conv ? t.param(geo.w, w_values ? *w_values : rng.uniform_vec(geo.w.numel(), -2.0, 2.0)) : Var{};
  const Var y = t.window_op(geo.op, x, w, geo.at);
  REQUIRE(t.ok());
  const Var r = t.constant(t.node(y).shape, rng.uniform_vec(t.node(y).numel(), -1.0, 1.0));
  REQUIRE(t.backward(t.sum(t.mul(y, r))));
  const gr_window& g = t.node(y).win;
  const double* xv = t.value(x).data;
  const double* wv = conv ? t.value(w).data : nullptr;
  const double* gy = t.grad(y).data;
  const auto y_of = [&](int64_t e) -> T {
    if (geo.op == Op::Conv2d) return gr_conv2d_win_fwd<T, double>(xv, wv, g, e);
    if (geo.op == Op::MaxPool2d) return gr_max_pool2d_win_fwd<T, double>(xv, wv, g, e);
    return gr_avg_pool2d_win_fwd<T, double>(xv, wv, g, e);
  };
  const auto dx_of = [&](int64_t e) -> T {
    if (geo.op == Op::Conv2d) return gr_conv2d_win_bwd_a<T, double>(gy, xv, wv, g, e);
    if (geo.op == Op::MaxPool2d) return gr_max_pool2d_win_bwd_a<T, double>(gy, xv, wv, g, e);
    return gr_avg_pool2d_win_bwd_a<T, double>(gy, xv, wv, g, e);
  };
  std::vector<double> want(static_cast<size_t>(t.node(y).numel()));
  for (int64_t e = 0; e < t.node(y).numel(); ++e) want[static_cast<size_t>(e)] = static_cast<double>(y_of(e));
  CHECK(std::memcmp(want.data(), t.value(y).data, want.size() * sizeof(double)) == 0);
  want.assign(static_cast<size_t>(geo.x.numel()), 0.0);
  for (int64_t e = 0; e < geo.x.numel(); ++e) want[static_cast<size_t>(e)] = fresh<T>(dx_of(e));
  CHECK(std::memcmp(want.data(), t.grad(x).data, want.size() * sizeof(double)) == 0);
  if (conv) {
    want.assign(static_cast<size_t>(geo.w.numel()), 0.0);
    for (int64_t e = 0; e < geo.w.numel(); ++e) want[static_cast<size_t>(e)] = fresh<T>(gr_conv2d_win_bwd_b<T, double>(gy, xv, wv, g, e));
    CHECK(std::memcmp(want.data(), t.grad(w).data, want.size() * sizeof(double)) == 0);
  }
}

std::string describe(const Geometry& g) {
  const WindowAttrs& a = g.at;
  return std::string(op_name(g.op)) + " x " + g.x.str() + (g.op == Op::Conv2d ? " w " + g.w.str() : "") + " k " +
         std::to_string(a.kh) + "x" + std::to_string(a.kw) + " s " + std::to_string(a.sh) + "x" + std::to_string(a.sw) +
         " pad " + (a.pad == WindowAttrs::Pad::Same ? "same" : a.pad == WindowAttrs::Pad::Valid ? "valid" : std::to_string(a.ph) + "x" + std::to_string(a.pw)) +
         " d " + std::to_string(a.dh) + "x" + std::to_string(a.dw) + " groups " + std::to_string(a.groups);
}

// Attributes the fixed cases share: "same" padding; row stride 2 with dilation 2 and a padding of 2.
WindowAttrs same_padding() {
  WindowAttrs a;
  a.pad = WindowAttrs::Pad::Same;
  return a;
}
WindowAttrs rows_strided_dilated() {
  WindowAttrs a;
  a.sh = 2, a.dh = a.dw = 2, a.ph = a.pw = 2;
  return a;
}

// Each fixed geometry against the definition, f64 and f32, with seeds seed0, seed0 + 1, ...
template <size_t N>
void check_cases(const Geometry (&cases)[N], uint64_t seed0) {
  for (size_t i = 0; i < N; ++i) {
    INFO(describe(cases[i]));
    check_geometry<double>(cases[i], seed0 + i);
    check_geometry<float>(cases[i], seed0 + i);
  }
}

std::string tape_error(Op op, const Shape& xs, const Shape& ws, const WindowAttrs& a) {
  Tape t;
  const Var x = t.constant_lazy(xs);
  const Var w = op == Op::Conv2d ? t.constant_lazy(ws) : Var{};
  t.window_op(op, x, w, a);
  return t.ok() ? "" : t.error();
}

std::string spec_error(const std::string& node, const std::string& x_shape = "[2, 3, 8, 8]",
                       const std::string& w_shape = "[4, 3, 3, 3]") {
  const std::string text = R"({"gradrun": 1, "name": "w", "params": {"x": {"shape": )" + x_shape +
                           R"(}, "W": {"shape": )" + w_shape + R"(}, "b": {"shape": [4]}}, "graph": [)" + node +
                           R"(, {"id": "loss", "op": "mean", "inputs": ["c"]}], "loss": "loss"})";
  try {
    const Spec spec = parse_spec(text, "w.json");
    resolve_program(spec, DataTable{});
  } catch (const InputError& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST_CASE("window ops: the CPU tape equals the per-element definition byte for byte (f64, f32)", "[window]") {
  Rng rng(0x817D0);
  int geometries = 0;
  for (const Op op : {Op::Conv2d, Op::MaxPool2d, Op::AvgPool2d})
    for (int i = 0; i < 120; ++i) {
      const Geometry g = draw_geometry(rng, op);
      INFO(describe(g));
      check_geometry<double>(g, 1000 + static_cast<uint64_t>(i));
      check_geometry<float>(g, 1000 + static_cast<uint64_t>(i));
      ++geometries;
    }
  std::printf("window: %d random geometries, f64 and f32, values and gradients equal the definition\n", geometries);
}

// The direct conv paths put one sample per SIMD lane (8 doubles or 16 floats): batches of 1-3 above
// fill part of one block; these fill several, with a partial last one.
TEST_CASE("window ops: batches over the SIMD lanes equal the definition byte for byte (f64, f32)", "[window]") {
  Rng rng(0x1A4E5);
  for (const Op op : {Op::Conv2d, Op::MaxPool2d, Op::AvgPool2d})
    for (int i = 0; i < 12; ++i) {
      Geometry g = draw_geometry(rng, op);
      g.x = Shape{i % 2 ? 19 : 33, g.x[1], g.x[2], g.x[3]};
      INFO(describe(g));
      check_geometry<double>(g, 5000 + static_cast<uint64_t>(i));
      check_geometry<float>(g, 5000 + static_cast<uint64_t>(i));
    }
  // 5×5 kernels (LeNet's; the random draws stop at 4): valid, same, and stride 2 with padding
  for (int i = 0; i < 3; ++i) {
    Geometry g{Op::Conv2d, Shape{19, 3, 12, 11}, Shape{6, 3, 5, 5}, {}};
    g.at.pad = i == 1 ? WindowAttrs::Pad::Same : i == 2 ? WindowAttrs::Pad::Explicit : WindowAttrs::Pad::Valid;
    if (i == 2) g.at.sh = g.at.sw = 2, g.at.ph = g.at.pw = 2;
    INFO(describe(g));
    check_geometry<double>(g, 6000 + static_cast<uint64_t>(i));
    check_geometry<float>(g, 6000 + static_cast<uint64_t>(i));
  }
  // every block shape of the direct forward (tape_conv.cpp fwd_block_shape: 4x4, 4x5, 6x4, 4x6, 3x4, 4x3,
  // 4x1, 1x4, 1x1), each with a last partial block of filters or columns where the shape allows one
  for (const auto& [fg, ow] : std::vector<std::pair<int64_t, int64_t>>{
           {4, 4}, {9, 7}, {8, 10}, {6, 8}, {11, 11}, {4, 6}, {3, 4}, {3, 7}, {4, 3}, {5, 3}, {4, 2}, {2, 4}, {2, 2}}) {
    Geometry g{Op::Conv2d, Shape{5, 2, 4, ow + 2}, Shape{fg, 2, 3, 3}, {}};
    g.at.pad = WindowAttrs::Pad::Valid;
    INFO(describe(g));
    check_geometry<double>(g, 6200 + static_cast<uint64_t>(fg * 100 + ow));
    check_geometry<float>(g, 6200 + static_cast<uint64_t>(fg * 100 + ow));
  }
  // the forward along output rows (tape_conv.cpp fwd_lanes: at most 32 taps, rows of whole vectors): 8
  // columns (f64 one full vector, f32 a half one), 28 (f64 half vectors; f32 full ones, the last
  // overlapping), a depthwise layer with rows of 16, and row stride 2 with dilation 2 and padding; partial
  // blocks of filters and of rows
  {
    const WindowAttrs same = same_padding(), strided = rows_strided_dilated();
    WindowAttrs depthwise = same;
    depthwise.groups = 4;
    WindowAttrs valid;
    valid.pad = WindowAttrs::Pad::Valid;
    const Geometry cases[] = {
        {Op::Conv2d, Shape{3, 1, 10, 8}, Shape{16, 1, 3, 3}, same},
        {Op::Conv2d, Shape{3, 1, 10, 10}, Shape{16, 1, 3, 3}, valid},  // 16 filters, not along the plane (OW < W)
        {Op::Conv2d, Shape{2, 1, 30, 28}, Shape{6, 1, 5, 5}, same},
        {Op::Conv2d, Shape{2, 4, 9, 16}, Shape{8, 1, 3, 3}, depthwise},
        {Op::Conv2d, Shape{2, 2, 13, 16}, Shape{5, 2, 3, 3}, strided},
    };
    check_cases(cases, 6400);
  }
  // the forward along the output plane (tape_conv_fwd_plane.cpp: stride 1, OW = W, filters a group a
  // multiple of 8, a group's plane ≤ 16 KB): the digits CNN's conv2, 5×5 taps over a plane one position
  // short of whole vectors, dilation 2, a 3×1 kernel in 2 groups, a 1×1 kernel; padded taps in every
  // corner (masked to +0) and a column tap that would wrap into the next row. Planes of whole 8-lane
  // vectors take 512-bit vectors on doubles: 16 positions (one block), 24 (a block of 2 and 1), 40 with
  // 5×5 taps (2 + 2 + 1), 24 dilated.
  {
    const WindowAttrs same = same_padding();
    WindowAttrs dilated = same, grouped = same;
    dilated.dh = dilated.dw = 2;
    grouped.groups = 2;
    const Geometry cases[] = {
        {Op::Conv2d, Shape{3, 16, 4, 4}, Shape{32, 16, 3, 3}, same},
        {Op::Conv2d, Shape{2, 3, 7, 9}, Shape{8, 3, 5, 5}, same},
        {Op::Conv2d, Shape{3, 2, 6, 7}, Shape{16, 2, 3, 3}, dilated},
        {Op::Conv2d, Shape{2, 4, 5, 6}, Shape{16, 2, 3, 1}, grouped},
        {Op::Conv2d, Shape{1, 8, 3, 3}, Shape{8, 8, 1, 1}, {}},
        {Op::Conv2d, Shape{2, 3, 3, 8}, Shape{8, 3, 3, 3}, same},
        {Op::Conv2d, Shape{2, 2, 5, 8}, Shape{16, 2, 5, 5}, same},
        {Op::Conv2d, Shape{2, 2, 4, 6}, Shape{8, 2, 3, 3}, dilated},
    };
    check_cases(cases, 6450);
    // an infinite weight: a padded tap is fma(inf, +0, acc) = NaN in the definition, and the masked lanes
    // must load that +0 (not skip the tap)
    Rng wrng(0x2F2F);
    std::vector<double> w = wrng.uniform_vec(cases[1].w.numel(), -2.0, 2.0);
    w[0] = std::numeric_limits<double>::infinity();
    INFO(describe(cases[1]) << " with an infinite weight");
    check_geometry<double>(cases[1], 6460, nullptr, &w);
    check_geometry<float>(cases[1], 6461, nullptr, &w);
    std::vector<double> w8 = wrng.uniform_vec(cases[6].w.numel(), -2.0, 2.0);  // the same on 512-bit vectors
    w8[0] = std::numeric_limits<double>::infinity();
    INFO(describe(cases[6]) << " with an infinite weight");
    check_geometry<double>(cases[6], 6462, nullptr, &w8);
  }
  // dx along the output plane (tape_conv_dx_plane.cpp, AVX-512VL: column stride 1, KW 3 or 5; floats with
  // channels a group take the direct loop first where it applies): the digits CNN's conv2 (a plane of 4
  // vectors), 5×5 taps with a left padding, row stride and dilations, a one-channel layer, LeNet's conv2
  // ("valid" 14 → 10: 13 float vectors in blocks of 4, 3, 3, 3, rows of 14 cells padded to 16), and a
  // plane of one position short of whole vectors
  {
    const WindowAttrs same = same_padding(), strided = rows_strided_dilated();
    WindowAttrs pad1;
    pad1.ph = pad1.pw = 1;
    const Geometry cases[] = {
        {Op::Conv2d, Shape{3, 16, 4, 4}, Shape{32, 16, 3, 3}, same},
        {Op::Conv2d, Shape{2, 2, 9, 12}, Shape{34, 2, 5, 5}, pad1},
        {Op::Conv2d, Shape{2, 3, 11, 9}, Shape{33, 3, 3, 3}, strided},
        {Op::Conv2d, Shape{2, 1, 7, 8}, Shape{5, 1, 5, 5}, same},
        {Op::Conv2d, Shape{2, 6, 14, 14}, Shape{16, 6, 5, 5}, {}},
        {Op::Conv2d, Shape{3, 5, 7, 5}, Shape{7, 5, 3, 3}, {}},
    };
    check_cases(cases, 6600);
    // an infinite weight: the definition skips a tap whose column misses; the plane's masks must keep the
    // NaNs that inf · 0 makes in the lanes past the last position (and the product's) out of every cell
    Rng wrng(0x1F1F);
    std::vector<double> w = wrng.uniform_vec(cases[1].w.numel(), -2.0, 2.0);
    w[0] = std::numeric_limits<double>::infinity();  // filter 0, channel 0, tap (0, 0)
    INFO(describe(cases[1]) << " with an infinite weight");
    check_geometry<double>(cases[1], 6610, nullptr, &w);
    check_geometry<float>(cases[1], 6611, nullptr, &w);
  }
  // dx by the product and col2im (tape_conv_dx.cpp: where the plane path declines — column taps other than
  // 3 or 5, a column stride; the 5×5 and 3×3 cases below now take the plane, the 4- and 7-wide ones and the
  // column stride the product): samples in several chunks (K·P above the chunk's bytes), rows of more than
  // one vector of cells, a left padding, a dilation
  {
    WindowAttrs pad1;
    pad1.ph = pad1.pw = 1;
    WindowAttrs dil2;
    dil2.dh = dil2.dw = 2;
    WindowAttrs col2;
    col2.sw = 2;
    const Geometry cases[] = {
        {Op::Conv2d, Shape{3, 40, 12, 12}, Shape{4, 40, 5, 5}, {}},
        {Op::Conv2d, Shape{2, 2, 5, 24}, Shape{3, 2, 3, 9}, {}},
        {Op::Conv2d, Shape{2, 3, 9, 12}, Shape{5, 3, 3, 7}, pad1},
        {Op::Conv2d, Shape{2, 2, 9, 14}, Shape{3, 2, 3, 3}, dil2},
        {Op::Conv2d, Shape{3, 6, 14, 14}, Shape{16, 6, 5, 5}, {}},  // LeNet conv2: 6 channels × 2 runs a row
        {Op::Conv2d, Shape{3, 40, 12, 12}, Shape{4, 40, 5, 4}, {}},
        {Op::Conv2d, Shape{3, 6, 14, 14}, Shape{16, 6, 5, 4}, {}},
        {Op::Conv2d, Shape{2, 2, 9, 14}, Shape{3, 2, 3, 4}, dil2},
        {Op::Conv2d, Shape{3, 6, 14, 14}, Shape{16, 6, 5, 5}, col2},
    };
    check_cases(cases, 6500);
  }
  // dW by filters (tape_conv.cpp): more filters than one pass of 4 vectors holds (40: f64 4 + 1 vectors,
  // f32 2 + 1), 27 taps (whole blocks, then 4s, then single taps), stride 2 and dilation 2
  for (int i = 0; i < 2; ++i) {
    Geometry g{Op::Conv2d, Shape{5, 3, 9, 10}, Shape{40, 3, 3, 3}, {}};
    g.at.pad = WindowAttrs::Pad::Same;
    if (i) g.at.sh = g.at.sw = 2, g.at.dh = g.at.dw = 2;
    INFO(describe(g));
    check_geometry<double>(g, 6100 + static_cast<uint64_t>(i));
    check_geometry<float>(g, 6100 + static_cast<uint64_t>(i));
  }
  // large images: dW's samples in chunks of one (each sample's gradient rows above 128 KB), the chains
  // paused and resumed between them
  for (int i = 0; i < 2; ++i) {
    Geometry g{Op::Conv2d, Shape{19, 1, i ? 80 : 60, i ? 77 : 60}, Shape{6, 1, 5, i ? 4 : 5}, {}};
    g.at.pad = i ? WindowAttrs::Pad::Explicit : WindowAttrs::Pad::Same;
    if (i) g.at.sh = g.at.sw = 2, g.at.ph = g.at.pw = 2;
    INFO(describe(g));
    check_geometry<double>(g, 7000 + static_cast<uint64_t>(i));
    check_geometry<float>(g, 7000 + static_cast<uint64_t>(i));
  }
}

TEST_CASE("window ops: 2x2 stride-2 max_pool2d, vectorized across windows, equals the definition with ties, zeros, NaNs",
          "[window]") {
  // tape_window.cpp max_pool_2x2: rows of several vector runs and a partial one, odd sizes (a last row
  // and column no window reads), rows of half a vector of windows taken two rows a run (8 x 8 and 7 x 9:
  // a last odd row alone), values drawn from a few so most windows tie, ±0 and NaNs among them
  const double nan = std::numeric_limits<double>::quiet_NaN();
  const double pool[] = {-1.0, 0.0, -0.0, 1.0, 1.0, 2.5, nan};
  Rng rng(0x2222);
  // "same" on odd sizes pads a last row and column: those windows take the scalar scan (fuzz_diff found
  // the vectorized one reading past the row). Fresh gradient slots start as NaN (the tape's test hook), so
  // a cell the one-pass backward (max_pool_2x2_bwd) leaves unwritten shows.
  Tape::poison_fresh_gradients(true);
  for (const Shape& xs : {Shape{3, 2, 7, 37}, Shape{2, 3, 5, 4}, Shape{1, 1, 2, 2}, Shape{4, 2, 9, 33}, Shape{2, 2, 7, 17},
                          Shape{3, 2, 8, 8}, Shape{2, 1, 7, 9}})
    for (const bool same : {false, true}) {
      std::vector<double> values(static_cast<size_t>(xs.numel()));
      for (double& v : values) v = pool[rng.next() % std::size(pool)];
      WindowAttrs a;
      a.kh = a.kw = 2;
      if (same) a.pad = WindowAttrs::Pad::Same;
      const Geometry g{Op::MaxPool2d, xs, Shape{1}, a};
      INFO(describe(g));
      check_geometry<double>(g, 7100, &values);
      check_geometry<float>(g, 7100, &values);
    }
  Tape::poison_fresh_gradients(false);
}

TEST_CASE("window ops: max_pool2d sends the gradient to the first largest cell, a NaN wins", "[window]") {
  Tape t;
  // one window of four: ties at 1 and 3 (the first wins), and a NaN window
  const double nan = std::numeric_limits<double>::quiet_NaN();
  const Var x = t.param(Shape{1, 1, 2, 4}, std::vector<double>{5, 1, 2, nan, 5, 0, 3, 7});
  WindowAttrs a;
  a.kh = a.kw = 2;
  const Var y = t.max_pool2d(x, a);
  REQUIRE(t.ok());
  CHECK(t.value(y).data[0] == 5.0);
  CHECK(std::isnan(t.value(y).data[1]));
  REQUIRE(t.backward(t.sum(y)));
  const std::vector<double> want{1, 0, 0, 1, 0, 0, 0, 0};
  for (size_t e = 0; e < want.size(); ++e) CHECK(t.grad(x).data[e] == want[e]);
}

TEST_CASE("window ops: the tape names bad geometries", "[window]") {
  WindowAttrs a;
  CHECK(tape_error(Op::Conv2d, Shape{2, 3, 8}, Shape{4, 3, 3, 3}, a).find("needs an input [N, C, H, W], got [2, 3, 8]") !=
        std::string::npos);
  CHECK(tape_error(Op::Conv2d, Shape{2, 3, 8, 8}, Shape{4, 3, 3}, a).find("needs a weight [F, C/groups, KH, KW]") != std::string::npos);
  a.groups = 2;
  CHECK(tape_error(Op::Conv2d, Shape{2, 3, 8, 8}, Shape{4, 1, 3, 3}, a).find("groups 2 must divide the input channels (3)") !=
        std::string::npos);
  a.groups = 1;
  CHECK(tape_error(Op::Conv2d, Shape{2, 3, 8, 8}, Shape{4, 2, 3, 3}, a).find("needs 3 input channels per group") != std::string::npos);
  CHECK(tape_error(Op::Conv2d, Shape{2, 3, 2, 8}, Shape{4, 3, 3, 3}, a).find("output would be empty") != std::string::npos);
  a.kh = a.kw = 2;
  a.ph = 2;
  CHECK(tape_error(Op::MaxPool2d, Shape{2, 3, 8, 8}, Shape{1}, a).find("must be at most half the kernel") != std::string::npos);
  a.ph = 0;
  a.pad = WindowAttrs::Pad::Same;
  a.sh = a.sw = 2;
  CHECK(tape_error(Op::AvgPool2d, Shape{1, 1, 7, 5}, Shape{1}, a).empty());
}

TEST_CASE("window ops: spec attributes, the conv2d bias lowering and located errors", "[window][spec]") {
  CHECK(spec_error(R"({"id": "c", "op": "conv2d", "inputs": ["x", "W", "b"], "stride": 2, "padding": "same"})").empty());
  CHECK(spec_error(R"({"id": "c", "op": "max_pool2d", "inputs": ["x"], "kernel": [2, 3], "stride": [1, 2]})").empty());
  CHECK(spec_error(R"({"id": "c", "op": "avg_pool2d", "inputs": ["x"], "kernel": 2, "padding": 1})").empty());
  CHECK(spec_error(R"({"id": "c", "op": "conv2d", "inputs": ["x", "W"], "groups": 2})").find("/graph/0") != std::string::npos);
  CHECK(spec_error(R"({"id": "c", "op": "conv2d", "inputs": ["x", "W"], "groups": 2})").find("groups 2 must divide") !=
        std::string::npos);
  CHECK(spec_error(R"({"id": "c", "op": "conv2d", "inputs": ["x", "W"], "padding": "full"})").find("\"same\" or \"valid\"") !=
        std::string::npos);
  CHECK(spec_error(R"({"id": "c", "op": "conv2d", "inputs": ["x", "W"], "stride": 0})").find("/graph/0/stride") != std::string::npos);
  CHECK(spec_error(R"({"id": "c", "op": "conv2d", "inputs": ["x", "W"], "kernel": 3})").find("has no attribute \"kernel\"") !=
        std::string::npos);
  CHECK(spec_error(R"({"id": "c", "op": "max_pool2d", "inputs": ["x"]})").find("kernel") != std::string::npos);
  CHECK(spec_error(R"({"id": "c", "op": "max_pool2d", "inputs": ["x"], "kernel": 2, "dilation": 2})")
            .find("has no attribute \"dilation\"") != std::string::npos);
  CHECK(spec_error(R"({"id": "c", "op": "max_pool2d", "inputs": ["x"], "kernel": 9})").find("output would be empty") !=
        std::string::npos);
  CHECK(spec_error(R"({"id": "c", "op": "conv2d", "inputs": ["x", "W", "b"]})", "[2, 3, 8, 8]", "[5, 3, 3, 3]")
            .find("a conv2d bias needs one value per filter, [5], got [4]") != std::string::npos);
  CHECK(spec_error(R"({"id": "c", "op": "conv2d", "inputs": ["x"]})").find("takes 2 inputs [x, W] or 3 [x, W, b]") !=
        std::string::npos);
  CHECK(spec_error(R"({"id": "c", "op": "conv2d", "inputs": ["x", "W"], "stride": [1, 2, 3]})").find("[rows, columns]") !=
        std::string::npos);
}

// The vector FMA peak of this core in T (12 independent chains of Simd<T>::fma, the step every conv and
// matmul path uses), GFLOP/s: the denominator of the bench's "% of peak", measured in the same run.
template <class T>
double fma_peak_gflops() {
  using S = gr::detail::Simd<T>;
  using V = typename S::V;
  constexpr int kChains = 12;
  constexpr int64_t kIters = 5'000'000;
  double best = 0;
  for (int r = 0; r < 3; ++r) {
    V acc[kChains];
    for (int c = 0; c < kChains; ++c) acc[c] = V{} + T(1 + c * 1e-3);  // distinct, so no two chains fold into one
    T y = T(1e-9);
    const auto t0 = std::chrono::steady_clock::now();
    for (int64_t it = 0; it < kIters; ++it) {
      asm volatile("" : "+x"(y));
#pragma GCC unroll 16
      for (int c = 0; c < kChains; ++c) acc[c] = S::fma(acc[c], y, acc[c]);
    }
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    T sink = 0;
    for (int c = 0; c < kChains; ++c) sink += acc[c][0];
    if (sink == T(42)) std::printf(" ");
    best = std::max(best, 2.0 * S::W * kChains * static_cast<double>(kIters) / s * 1e-9);
  }
  return best;
}

// GR_WINDOW_BENCH=1: GFLOP/s of conv2d forward and backward (dx + dW) on the tape, 1 thread, and the
// share of the FMA peak measured in the same run.
TEST_CASE("window ops: conv2d GFLOP/s (GR_WINDOW_BENCH=1)", "[window][bench]") {
  const char* want = std::getenv("GR_WINDOW_BENCH");  // 1: every layer; else a word of the layer's name
  if (!want) return;
  const std::string only = std::string(want) == "1" ? "" : want;
  struct Layer {
    const char* name;
    Shape x, w;
    WindowAttrs a;
  };
  WindowAttrs same;
  same.pad = WindowAttrs::Pad::Same;
  WindowAttrs same2 = same;
  same2.sh = same2.sw = 2;
  WindowAttrs depthwise = same;
  depthwise.groups = 32;
  const Layer layers[] = {
      {"LeNet conv2 (64x6x14x14, 16x6x5x5)", Shape{64, 6, 14, 14}, Shape{16, 6, 5, 5}, {}},
      {"LeNet conv1 (64x1x28x28, 6x1x5x5, same)", Shape{64, 1, 28, 28}, Shape{6, 1, 5, 5}, same},
      {"digits conv2 (64x16x4x4, 32x16x3x3, same)", Shape{64, 16, 4, 4}, Shape{32, 16, 3, 3}, same},
      {"digits conv1 (64x1x8x8, 16x1x3x3, same)", Shape{64, 1, 8, 8}, Shape{16, 1, 3, 3}, same},
      // larger than the examples: where a path that wins on small layers could lose (cache reuse)
      {"wide conv (32x64x16x16, 128x64x3x3, same)", Shape{32, 64, 16, 16}, Shape{128, 64, 3, 3}, same},
      {"stride 2 (32x32x32x32, 64x32x3x3, stride 2, same)", Shape{32, 32, 32, 32}, Shape{64, 32, 3, 3}, same2},
      {"depthwise (32x32x16x16, 32x1x3x3, groups 32, same)", Shape{32, 32, 16, 16}, Shape{32, 1, 3, 3}, depthwise},
  };
  const double peak64 = fma_peak_gflops<double>(), peak32 = fma_peak_gflops<float>();
  std::printf("FMA peak (1 core): f64 %.1f GFLOP/s, f32 %.1f GFLOP/s\n", peak64, peak32);
  for (const DType dt : {DType::F64, DType::F32})
    for (const Layer& l : layers) {
      if (!only.empty() && std::string(l.name).find(only) == std::string::npos) continue;
      const double peak = dt == DType::F32 ? peak32 : peak64;
      Rng rng(7);
      Tape t(dt);
      // GR_WINDOW_SIDE=x or w: only that side's gradient (the other input a constant)
      const char* side_env = std::getenv("GR_WINDOW_SIDE");
      const std::string side = side_env ? side_env : "";
      const auto x_vals = rng.uniform_vec(l.x.numel(), -1.0, 1.0), w_vals = rng.uniform_vec(l.w.numel(), -1.0, 1.0);
      const Var x = side == "w" ? t.constant(l.x, x_vals) : t.param(l.x, x_vals);
      const Var w = side == "x" ? t.constant(l.w, w_vals) : t.param(l.w, w_vals);
      const int32_t mark = t.mark();
      double fwd = 1e30, bwd = 1e30;
      double flops = 0;
      for (int rep = 0; rep < 30; ++rep) {
        t.reset_to(mark);
        const auto t0 = std::chrono::steady_clock::now();
        const Var y = t.conv2d(x, w, l.a);
        const auto t1 = std::chrono::steady_clock::now();
        const Var loss = t.sum(y);
        const auto t2 = std::chrono::steady_clock::now();
        REQUIRE(t.backward(loss));
        const auto t3 = std::chrono::steady_clock::now();
        fwd = std::min(fwd, std::chrono::duration<double>(t1 - t0).count());
        bwd = std::min(bwd, std::chrono::duration<double>(t3 - t2).count());
        const gr_window& g = t.node(y).win;
        flops = 2.0 * static_cast<double>(g.n * g.f * g.oh * g.ow) * static_cast<double>(g.c / g.groups * g.kh * g.kw);
      }
      const double bwd_flops = side.empty() ? 2 * flops : flops;
      std::printf("conv2d %s %-44s forward %7.2f GFLOP/s %3.0f%% (%.3f ms)  backward %s %7.2f GFLOP/s %3.0f%% (%.3f ms)\n",
                  dt == DType::F32 ? "f32" : "f64", l.name, flops / fwd * 1e-9, 100 * flops / fwd * 1e-9 / peak, fwd * 1e3,
                  side == "x" ? "dx" : side == "w" ? "dW" : "dx+dW", bwd_flops / bwd * 1e-9, 100 * bwd_flops / bwd * 1e-9 / peak,
                  bwd * 1e3);
    }
}

// GR_WINDOW_BENCH=matmul: the products of LeNet conv2's forward alone, both orientations (context for
// the im2col arrangement: rows = N·OH·OW against rows = F).
TEST_CASE("window ops: the im2col products alone (GR_WINDOW_BENCH=matmul)", "[window][bench]") {
  const char* want = std::getenv("GR_WINDOW_BENCH");
  if (!want || std::string(want) != "matmul") return;
  Rng rng(3);
  const int64_t NP = 6400, K = 150, F = 16;
  const std::vector<double> col = rng.uniform_vec(NP * K, -1, 1), w = rng.uniform_vec(F * K, -1, 1);
  std::vector<double> out(static_cast<size_t>(NP * F));
  const auto time = [&](auto f) {
    double best = 1e30;
    for (int r = 0; r < 30; ++r) {
      const auto t0 = std::chrono::steady_clock::now();
      f();
      best = std::min(best, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    }
    return 2.0 * static_cast<double>(NP * K * F) / best * 1e-9;
  };
  const double tall = time([&] { matmul_exact(MatmulArgs{col.data(), K, 1, w.data(), 1, K, out.data(), NP, K, F, MatmulStore::Overwrite}); });
  const double wide = time([&] { matmul_exact(MatmulArgs{w.data(), K, 1, col.data(), 1, K, out.data(), F, K, NP, MatmulStore::Overwrite}); });
  std::printf("matmul_exact f64 [6400,150]x[150,16] (rows N*OH*OW): %.2f GFLOP/s; [16,150]x[150,6400] (rows F): %.2f GFLOP/s\n",
              tall, wide);
  // dW: Colᵀ·G ([150,6400]x[6400,16]) against Gᵀ·Col ([16,6400]x[6400,150]); dx: Wᵀ·Gᵀ ([150,16]x[16,6400])
  const std::vector<double> gt = rng.uniform_vec(NP * F, -1, 1);
  std::vector<double> dw(static_cast<size_t>(K * F)), d(static_cast<size_t>(K * NP));
  const double dw_t = time([&] { matmul_exact(MatmulArgs{col.data(), 1, K, gt.data(), F, 1, dw.data(), K, NP, F, MatmulStore::Overwrite}); });
  const double dw_g = time([&] { matmul_exact(MatmulArgs{gt.data(), 1, F, col.data(), K, 1, dw.data(), F, NP, K, MatmulStore::Overwrite}); });
  const double dx = time([&] { matmul_exact(MatmulArgs{w.data(), 1, K, gt.data(), 1, F, d.data(), K, F, NP, MatmulStore::Overwrite}); });
  const double dx_rows = time([&] { matmul_exact(MatmulArgs{gt.data(), F, 1, w.data(), K, 1, d.data(), NP, F, K, MatmulStore::Overwrite}); });
  {  // LeNet conv1's forward product: F = 6, K = 25, N·OH·OW = 50176
    const int64_t np1 = 50176, k1 = 25, f1 = 6;
    const std::vector<double> c1 = rng.uniform_vec(np1 * k1, -1, 1), w1 = rng.uniform_vec(f1 * k1, -1, 1);
    std::vector<double> o1(static_cast<size_t>(np1 * f1));
    const auto time1 = [&](auto f) {
      double best = 1e30;
      for (int r = 0; r < 20; ++r) {
        const auto t0 = std::chrono::steady_clock::now();
        f();
        best = std::min(best, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
      }
      return 2.0 * static_cast<double>(np1 * k1 * f1) / best * 1e-9;
    };
    const double t1 = time1([&] { matmul_exact(MatmulArgs{c1.data(), k1, 1, w1.data(), 1, k1, o1.data(), np1, k1, f1, MatmulStore::Overwrite}); });
    const double w1g = time1([&] { matmul_exact(MatmulArgs{w1.data(), k1, 1, c1.data(), 1, k1, o1.data(), f1, k1, np1, MatmulStore::Overwrite}); });
    std::printf("LeNet conv1 product: [50176,25]x[25,6] %.2f GFLOP/s, [6,25]x[25,50176] %.2f GFLOP/s\n", t1, w1g);
  }
  std::printf("dW as Col^T.G %.2f GFLOP/s, as G^T.Col %.2f GFLOP/s; dx as W^T.G^T %.2f GFLOP/s, as G.W (rows) %.2f GFLOP/s\n",
              dw_t, dw_g, dx, dx_rows);
}
