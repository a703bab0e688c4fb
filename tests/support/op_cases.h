// op_cases.h — THE case table of every op check (PyTorch's OpInfo is the model): per op, its cases
// (input shapes, input domains, attributes) and its tolerances, read by the finite differences
// (test_fd.cpp), the replay and fusion sweeps (test_replay.cpp), the PyTorch oracle (test_oracle.cpp),
// the emitter sweep (test_emit_ops.cpp) and the differential fuzzer's per-op metadata (fuzz_graph.h).
//
// Every elementwise, row and fold op of kernels/gr_op_table.h (Unary/Binary/Row/fold Reduction) gets its cases DERIVED from its row:
//   unary    [3,4] (one case per scalar value when the op takes a scalar)
//   binary   same shape [3,4]∘[3,4], a row b-side [3,4]∘[4], a broadcast numerator [4]∘[3,4] and a
//            one-element b-side [2,3,4]∘[1]
//   row      [3,5] times a const [5], [2,3,4] with eps 0.1, one column [3,1] (replay only), fan-out
//   batch    (batch_norm) [N,C] and [N,C,H,W] in training (eps, momentum varied), eval, batch 1 with fan-out
//   fold     (a fold reduction: max, ...) all of [3,4], axis 0, axis -1 keepdims of [2,3,4], a middle
//            axis with fan-out, and ties (x concatenated with itself; replay only)
// with the row's input domains, so a new elementwise or row op needs no test edit. Hand-written cases keep
// the other ops (reductions, contractions, movement, lanes) and the extra elementwise edge cases
// (outer broadcasts, x∘x fan-out, const sides, composites). op_cases_missing() names every op of
// kOps without a case: each reader fails on it.
#pragma once
#include <cmath>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "grad/op_table.h"
#include "grad/tape.h"
#include "rng.h"

namespace gr::test {

// Input domains: the production row's (gr::Domain) plus test-only stress domains.
enum class Dom : uint8_t {
  Any,           // uniform in [-2, 2]
  Positive,      // uniform in [0.5, 2.5]  (log, sqrt, soft targets)
  AwayFromZero,  // |x| in [0.2, 2], random sign: away from a kink or pole at 0 (relu, divisors)
  OneHot,        // one 1 per row of the last axis, the rest 0 (a constant: cross-entropy targets)
  ClassId,       // integer class ids in {0, 1, 2} (a constant: cross_entropy's ids; cases use C >= 3)
  Big,           // test-only: uniform in [-300, 300] (large logits; no finite differences)
  Bounded,       // test-only, the fuzzer: its input squashed to |x| <= 3 first (exp)
};

constexpr Dom dom_of(Domain d) {
  switch (d) {
    case Domain::None:
    case Domain::Any: return Dom::Any;
    case Domain::Positive: return Dom::Positive;
    case Domain::AwayFromZero: return Dom::AwayFromZero;
    case Domain::OneHot: return Dom::OneHot;
    case Domain::ClassId: return Dom::ClassId;
  }
  return Dom::Any;
}

struct CaseInput {
  Shape shape;
  Dom dom = Dom::Any;
  bool constant = false;  // a const leaf (OneHot inputs are always constants)
  bool is_constant() const { return constant || dom == Dom::OneHot || dom == Dom::ClassId; }
};

enum CaseUse : unsigned {
  kUseFd = 1u << 0,      // test_fd: central differences
  kUseReplay = 1u << 1,  // test_replay: the per-node, fused and f32 sweeps
  kUseOracle = 1u << 2,  // test_oracle: a branch of the torch graph
  kUseAll = kUseFd | kUseReplay | kUseOracle,
};

using CaseBuild = std::function<Var(Tape&, const std::vector<Var>&)>;

struct OpCase {
  std::string name;
  Op op;  // the op the case is about (coverage is counted by it)
  std::vector<CaseInput> inputs;
  CaseBuild build;
  bool derived = false;      // generated from an elementwise, row, batch or fold row
  unsigned uses = kUseAll;   // the checks that take it
};

// Per-op test metadata: tolerances, the fuzzer's input adapters, the scalar attribute values.
struct OpTest {
  double fd_rtol = 1e-6, fd_atol = 1e-8;  // test_fd: one case alone (eps 1e-6)
  double graph_fd_rtol = 1e-5;            // the fuzzer: a random graph's gate is the largest of its ops'
  Dom fuzz_a = Dom::Any, fuzz_b = Dom::Any;  // Positive: the fuzzer makes the input >= 0.25; Bounded: |x| <= 3
  double scalars[2] = {0.7, -1.3};        // the scalar attribute's values (ops with kAttrScalar)
};

// ---- per-op metadata --------------------------------------------------------------------------------
inline OpTest op_test(const OpInfo& info) {
  OpTest t;
  auto kinked = [](Domain d) { return d == Domain::Positive || d == Domain::AwayFromZero; };
  if (info.elementwise()) {
    // A domain edge (a kink, pole or log/sqrt near 0) needs a looser finite-difference gate in graphs.
    if (kinked(info.dom_a) || kinked(info.dom_b)) t.graph_fd_rtol = 1e-4;
    // The fuzzer keeps Positive inputs positive and divisors away from 0 (>= 0.25); a unary kink at 0
    // (relu) stays as it is, its looser gate covers an input within eps of 0.
    t.fuzz_a = info.dom_a == Domain::Positive ? Dom::Positive : Dom::Any;
    t.fuzz_b = kinked(info.dom_b) ? Dom::Positive : Dom::Any;
  }
  // Test-only overrides (stress domains, scalar values).
  if (info.op == Op::Exp) t.fuzz_a = Dom::Bounded;  // exp of an unbounded activation overflows the gate
  if (info.op == Op::AddScalar) t.scalars[0] = 0.75, t.scalars[1] = -0.3;
  if (info.op == Op::MulScalar) t.scalars[0] = -0.5, t.scalars[1] = 1.7;
  if (info.op == Op::Pow) t.scalars[0] = 3.0, t.scalars[1] = -1.5;  // the integer path and exp·log
  return t;
}
inline OpTest op_test(Op op) { return op_test(op_info(op)); }

// The spec names the fuzzer generates: every op of the table, plus the spec composite "mse".
inline std::vector<std::string> spec_op_names() {
  std::vector<std::string> names;
  for (const OpInfo& info : kOps) names.emplace_back(info.name);
  names.emplace_back("mse");
  return names;
}
// Metadata by spec name (the composite mse: the defaults); nullopt for an unknown name.
inline std::optional<OpTest> spec_op_test(std::string_view name) {
  if (name == "mse") return OpTest{};
  if (const std::optional<Op> op = op_by_name(name)) return op_test(*op);
  return std::nullopt;
}

// ---- drawing inputs ---------------------------------------------------------------------------------
inline std::vector<double> draw(Rng& rng, const Shape& shape, Dom dom) {
  const int64_t n = shape.numel();
  std::vector<double> v(static_cast<size_t>(n), 0.0);
  switch (dom) {
    case Dom::Any: return rng.uniform_vec(n, -2.0, 2.0);
    case Dom::Positive: return rng.uniform_vec(n, 0.5, 2.5);
    case Dom::Big: return rng.uniform_vec(n, -300.0, 300.0);
    case Dom::Bounded: return rng.uniform_vec(n, -2.0, 2.0);
    case Dom::AwayFromZero:
      for (double& x : v) x = rng.uniform(0.2, 2.0) * (rng.next() & 1 ? 1.0 : -1.0);
      return v;
    case Dom::ClassId:
      for (double& x : v) x = static_cast<double>(rng.next() % 3);
      return v;
    case Dom::OneHot: {
      const int64_t cols = shape[shape.rank() - 1];
      for (int64_t r = 0; r < n / cols; ++r) v[static_cast<size_t>(r * cols + static_cast<int64_t>(rng.next() % cols))] = 1.0;
      return v;
    }
  }
  return v;
}
inline std::vector<double> draw(Rng& rng, const CaseInput& in) { return draw(rng, in.shape, in.dom); }

// Records the case's inputs on `t` (params, or consts), in order.
inline std::vector<Var> make_inputs(Tape& t, Rng& rng, const OpCase& c) {
  std::vector<Var> in;
  for (const CaseInput& i : c.inputs) {
    const std::vector<double> v = draw(rng, i);
    in.push_back(i.is_constant() ? t.constant(i.shape, v) : t.param(i.shape, v));
  }
  return in;
}

// ---- the derived cases of an elementwise row --------------------------------------------------------
inline std::vector<OpCase> derived_cases(const OpInfo& info) {
  std::vector<OpCase> out;
  const Op op = info.op;
  const Dom da = dom_of(info.dom_a), db = dom_of(info.dom_b);
  const std::string name(info.name);
  if (info.cls == OpClass::Unary) {
    if (info.attrs & kAttrScalar) {
      for (const double s : op_test(info).scalars)
        out.push_back({name + " s=" + std::to_string(s), op, {{{3, 4}, da}},
                       [op, s](Tape& t, const std::vector<Var>& v) { return t.unary_op(op, v[0], s); }, true});
    } else {
      out.push_back({name, op, {{{3, 4}, da}}, [op](Tape& t, const std::vector<Var>& v) { return t.unary_op(op, v[0]); },
                     true});
    }
  } else if (info.cls == OpClass::Binary) {
    const CaseBuild b = [op](Tape& t, const std::vector<Var>& v) { return t.binary_op(op, v[0], v[1]); };
    out.push_back({name, op, {{{3, 4}, da}, {{3, 4}, db}}, b, true});
    out.push_back({name + " row broadcast", op, {{{3, 4}, da}, {{4}, db}}, b, true});
    out.push_back({name + " broadcast numerator", op, {{{4}, da}, {{3, 4}, db}}, b, true});
    out.push_back({name + " one-element b", op, {{{2, 3, 4}, da}, {{1}, db}}, b, true});
  } else if (info.cls == OpClass::Row) {
    // A normalizing row's output hardly depends on x as a whole (layer_norm's Σy² ≈ n), so the plain
    // op gets a const scale after it (the affine form users write), or its gradients would be noise.
    out.push_back({name + ", const scale", op, {{{3, 5}, da}, {{5}, Dom::Any, true}},
                   [op](Tape& t, const std::vector<Var>& v) { return t.mul(t.row_op(op, v[0]), v[1]); }, true});
    out.push_back({name + " 3-D, eps 0.1", op, {{{2, 3, 4}, da}},
                   [op](Tape& t, const std::vector<Var>& v) { return t.row_op(op, v[0], 0.1); }, true});
    // one column: layer_norm's y = 0 exactly and no gradient (the oracle wants a non-zero one)
    out.push_back({name + " one column", op, {{{3, 1}, da}}, [op](Tape& t, const std::vector<Var>& v) { return t.row_op(op, v[0]); },
                   true, kUseReplay});
    out.push_back({name + " fan-out", op, {{{4, 3}, da}},
                   [op](Tape& t, const std::vector<Var>& v) { return t.mul(t.row_op(op, v[0]), v[0]); }, true});
  } else if (info.batch()) {
    // A batch-statistics op (batch_norm): x, then its running mean and variance (consts: state, no
    // gradient; the variance positive). Training (batch statistics) or eval (the running ones) is the
    // tape's key when recorded; a const scale after it, as for a row op (Σy = 0 per channel otherwise).
    const auto bn = [op](bool training, double eps, double momentum, bool fan_out) {
      return [=](Tape& t, const std::vector<Var>& v) {
        t.set_dropout_key({7, 1, training});
        const Var y = t.batch_op(op, v[0], v[1], v[2], eps, momentum);
        return t.mul(y, fan_out ? v[0] : v[3]);
      };
    };
    const auto state = [](int64_t C) {
      return std::vector<CaseInput>{{{C}, Dom::Any, true}, {{C}, Dom::Positive, true}};
    };
    const auto with = [&](Shape x, int64_t C, bool scale) {
      std::vector<CaseInput> in{{x, da}};
      for (const CaseInput& c : state(C)) in.push_back(c);
      if (scale) in.push_back({x, Dom::Any, true});
      return in;
    };
    out.push_back({name + " [N,C] training, const scale", op, with({4, 3}, 3, true), bn(true, 1e-5, 0.1, false), true});
    out.push_back({name + " [N,C,H,W] training, eps 0.1, momentum 0.3", op, with({2, 3, 2, 2}, 3, true), bn(true, 0.1, 0.3, false), true});
    out.push_back({name + " eval (running statistics)", op, with({2, 3, 2, 2}, 3, true), bn(false, 1e-5, 0.1, false), true});
    out.push_back({name + " batch 1, fan-out", op, with({1, 2, 2, 3}, 2, false), bn(true, 1e-5, 0.1, true), true});
  } else if (info.fold()) {
    out.push_back({name, op, {{{3, 4}, da}}, [op](Tape& t, const std::vector<Var>& v) { return t.fold_op(op, v[0]); }, true});
    out.push_back({name + " axis 0", op, {{{3, 4}, da}},
                   [op](Tape& t, const std::vector<Var>& v) { return t.fold_op(op, v[0], 0); }, true});
    out.push_back({name + " axis -1 keepdims", op, {{{2, 3, 4}, da}},
                   [op](Tape& t, const std::vector<Var>& v) { return t.fold_op(op, v[0], -1, true); }, true});
    out.push_back({name + " middle axis, fan-out", op, {{{2, 3, 2}, da}},
                   [op](Tape& t, const std::vector<Var>& v) { return t.add(t.fold_op(op, v[0], 1), t.sum(v[0], 1)); }, true});
    // ties: the lane's rule picks (max: the first index takes the gradient; no derivative at a tie,
    // so no FD or oracle)
    out.push_back({name + " ties", op, {{{2, 3}, da}},
                   [op](Tape& t, const std::vector<Var>& v) { return t.fold_op(op, t.concat(v[0], v[0], 1), 1); }, true,
                   kUseReplay});
  } else if (info.window()) {
    // A window op (conv2d, the pools over NCHW): geometries that cover stride, padding (explicit, "same",
    // "valid", pools' padded cells), dilation, groups (depthwise), batch 1, a non-square kernel, and
    // slots that already hold a contribution (fan-out). conv2d's w is [F, C/groups, KH, KW].
    using P = WindowAttrs::Pad;
    const auto attrs = [](int64_t k0, int64_t k1, int64_t s0, int64_t s1, P pad, int64_t p0, int64_t p1, int64_t d0 = 1,
                          int64_t d1 = 1, int64_t groups = 1) {
      WindowAttrs w;
      w.kh = k0, w.kw = k1, w.sh = s0, w.sw = s1, w.pad = pad, w.ph = p0, w.pw = p1, w.dh = d0, w.dw = d1, w.groups = groups;
      return w;
    };
    const auto add = [&](std::string what, std::vector<CaseInput> in, WindowAttrs w, bool fan_out = false,
                         unsigned uses = kUseAll) {
      out.push_back({name + " " + what, op, std::move(in),
                     [op, w, fan_out](Tape& t, const std::vector<Var>& v) {
                       Var y = t.window_op(op, v[0], v.size() > 1 ? v[1] : Var{}, w);
                       if (v.size() > 1) {  // a conv's outputs sum K = C/groups·KH·KW products: scaled by 1/sqrt(K) to
                         const Shape& ws = t.node(v[1]).shape;  // O(1), as every other case's (f32 sweep gates)
                         y = t.muls(y, 1.0 / std::sqrt(static_cast<double>(ws[1] * ws[2] * ws[3])));
                       }
                       if (!fan_out) return y;
                       // the inputs' slots hold a contribution before the window op's lands (higher ids first)
                       Var extra = t.mean(t.mul(v[0], v[0]));
                       if (v.size() > 1) extra = t.add(extra, t.mean(t.mul(v[1], v[1])));
                       return t.add(y, t.muls(extra, 0.1));
                     },
                     true, uses});
    };
    if (info.attrs & kAttrConv) {
      add("3x3", {{{2, 3, 5, 6}, da}, {{4, 3, 3, 3}, db}}, attrs(0, 0, 1, 1, P::Explicit, 0, 0));
      add("stride 2, padding 1", {{{2, 2, 7, 7}, da}, {{3, 2, 3, 3}, db}}, attrs(0, 0, 2, 2, P::Explicit, 1, 1));
      add("same, stride [2,1], dilation [1,2], batch 1", {{{1, 2, 7, 8}, da}, {{2, 2, 3, 2}, db}},
          attrs(0, 0, 2, 1, P::Same, 0, 0, 1, 2));
      add("groups 2, padding [1,0]", {{{2, 4, 5, 5}, da}, {{6, 2, 3, 3}, db}}, attrs(0, 0, 1, 1, P::Explicit, 1, 0, 1, 1, 2));
      add("depthwise, same", {{{2, 3, 6, 6}, da}, {{3, 1, 3, 3}, db}}, attrs(0, 0, 1, 1, P::Same, 0, 0, 1, 1, 3));
      add("1x1 valid, fan-out", {{{2, 3, 4, 4}, da}, {{5, 3, 1, 1}, db}}, attrs(0, 0, 1, 1, P::Valid, 0, 0), true);
      add("5x5 stride 3, padding 2, fan-out", {{{2, 2, 9, 8}, da}, {{3, 2, 5, 5}, db}}, attrs(0, 0, 3, 3, P::Explicit, 2, 2), true);
    } else {
      add("2x2", {{{2, 3, 6, 6}, da}}, attrs(2, 2, 0, 0, P::Explicit, 0, 0));
      add("3x3 stride 2, padding 1", {{{2, 2, 7, 7}, da}}, attrs(3, 3, 2, 2, P::Explicit, 1, 1));
      add("[2,3] stride [1,2], same, batch 1", {{{1, 2, 5, 7}, da}}, attrs(2, 3, 1, 2, P::Same, 0, 0));
      add("3x3 stride 1 (overlapping), fan-out", {{{2, 2, 5, 5}, da}}, attrs(3, 3, 1, 1, P::Explicit, 1, 1), true);
    }
  }
  return out;
}

// A one-element instance of an elementwise row (the emitter's sweep): inputs [1] in the row's domains.
inline OpCase scalar_case(const OpInfo& info) {
  OpCase c = derived_cases(info).at(0);
  for (CaseInput& i : c.inputs) i.shape = Shape{1};
  return c;
}

// ---- the table ----------------------------------------------------------------------------------------
inline std::vector<OpCase> hand_cases() {
  using V = const std::vector<Var>&;
  static const int64_t kStarts2[] = {1, -4}, kStops2[] = {3, 5};
  static const int64_t kStarts3[] = {0, 1, 1}, kStops3[] = {2, 3, 4};
  static const int64_t kReshapeTo[] = {2, -1};
  const Dom P = Dom::Positive;
  return {
      // elementwise edge cases beyond the derived ones
      {"add outer broadcast", Op::Add, {{{3, 1}}, {{1, 4}}}, [](Tape& t, V v) { return t.add(v[0], v[1]); }},
      {"add scalar on the left, rank 2", Op::Add, {{{1, 1}}, {{3, 4}}}, [](Tape& t, V v) { return t.add(v[0], v[1]); }},
      {"sub middle broadcast", Op::Sub, {{{2, 3, 4}}, {{2, 1, 4}}}, [](Tape& t, V v) { return t.sub(v[0], v[1]); }},
      {"sub column broadcast", Op::Sub, {{{3, 4}}, {{3, 1}}}, [](Tape& t, V v) { return t.sub(v[0], v[1]); }},
      {"mul broadcast", Op::Mul, {{{2, 3, 4}}, {{3, 1}}}, [](Tape& t, V v) { return t.mul(v[0], v[1]); }},
      // b a trailing block of a (a position table [T, D] over [N, T, D]): the channel path with Q = 1
      {"add a trailing block", Op::Add, {{{6, 4, 5}}, {{4, 5}}}, [](Tape& t, V v) { return t.add(v[0], v[1]); }},
      {"mul a trailing block", Op::Mul, {{{6, 4, 5}}, {{4, 5}}}, [](Tape& t, V v) { return t.mul(v[0], v[1]); }},
      {"mul both stretched", Op::Mul, {{{2, 1, 4}}, {{3, 1}}}, [](Tape& t, V v) { return t.mul(v[0], v[1]); }},
      {"mul fan-out x*x", Op::Mul, {{{5}}}, [](Tape& t, V v) { return t.mul(v[0], v[0]); }},
      {"mul const side", Op::Mul, {{{3, 4}}, {{4}, Dom::Any, true}}, [](Tape& t, V v) { return t.mul(v[0], v[1]); }},
      // reductions
      {"sum", Op::Sum, {{{3, 4}}}, [](Tape& t, V v) { return t.sum(v[0]); }},
      {"mean", Op::Mean, {{{3, 4}}}, [](Tape& t, V v) { return t.mean(v[0]); }},
      {"sum axis 0", Op::Sum, {{{3, 4}}}, [](Tape& t, V v) { return t.sum(v[0], 0); }},
      {"sum axis 1 keepdims", Op::Sum, {{{2, 3, 4}}}, [](Tape& t, V v) { return t.sum(v[0], 1, true); }},
      {"mean axis -1", Op::Mean, {{{2, 3, 4}}}, [](Tape& t, V v) { return t.mean(v[0], -1); }},
      {"mean axis 0 keepdims", Op::Mean, {{{3, 2, 2}}}, [](Tape& t, V v) { return t.mean(v[0], 0, true); }},
      // contractions
      {"matmul", Op::Matmul, {{{3, 4}}, {{4, 5}}}, [](Tape& t, V v) { return t.matmul(v[0], v[1]); }},
      // a batched left input [..., M, K]·[K, N] (nn.Linear on a sequence): dW sums over every leading row
      {"matmul batched left [2,3,4]·[4,5]", Op::Matmul, {{{2, 3, 4}}, {{4, 5}}}, [](Tape& t, V v) { return t.matmul(v[0], v[1]); }},
      {"matmul batched left [2,2,3,4]·[4,2]", Op::Matmul, {{{2, 2, 3, 4}}, {{4, 2}}},
       [](Tape& t, V v) { return t.matmul(v[0], v[1]); }},
      {"matmul A·A", Op::Matmul, {{{4, 4}}}, [](Tape& t, V v) { return t.matmul(v[0], v[0]); }},
      {"matmul const weight", Op::Matmul, {{{3, 4}, Dom::Any, true}, {{4, 2}}}, [](Tape& t, V v) { return t.matmul(v[0], v[1]); }},
      {"bmm", Op::Bmm, {{{2, 3, 4}}, {{2, 4, 5}}}, [](Tape& t, V v) { return t.bmm(v[0], v[1]); }},
      {"bmm broadcast batch a", Op::Bmm, {{{1, 3, 4}}, {{3, 4, 2}}}, [](Tape& t, V v) { return t.bmm(v[0], v[1]); }},
      {"bmm broadcast batch b", Op::Bmm, {{{3, 2, 4}}, {{1, 4, 3}}}, [](Tape& t, V v) { return t.bmm(v[0], v[1]); }},
      // movement
      {"transpose", Op::Transpose, {{{2, 3, 4}}}, [](Tape& t, V v) { return t.transpose(v[0]); }},
      {"transpose 2-D", Op::Transpose, {{{3, 5}}}, [](Tape& t, V v) { return t.transpose(v[0]); }},
      {"reshape", Op::Reshape, {{{3, 4}}}, [](Tape& t, V v) { return t.reshape(v[0], kReshapeTo); }},
      {"slice", Op::Slice, {{{4, 5}}}, [](Tape& t, V v) { return t.slice(v[0], kStarts2, kStops2); }},
      {"slice 3-D", Op::Slice, {{{2, 3, 4}}}, [](Tape& t, V v) { return t.slice(v[0], kStarts3, kStops3); }},
      {"concat axis 0", Op::Concat, {{{2, 3}}, {{1, 3}}}, [](Tape& t, V v) { return t.concat(v[0], v[1], 0); }},
      {"concat axis -1", Op::Concat, {{{2, 2, 3}}, {{2, 2, 1}}}, [](Tape& t, V v) { return t.concat(v[0], v[1], -1); }},
      {"concat x with x", Op::Concat, {{{2, 3}}}, [](Tape& t, V v) { return t.concat(v[0], v[0], 1); }},
      // lanes
      {"softmax last axis", Op::Softmax, {{{3, 5}}}, [](Tape& t, V v) { return t.softmax(v[0], -1); }},
      {"softmax middle axis", Op::Softmax, {{{2, 3, 4}}}, [](Tape& t, V v) { return t.softmax(v[0], 1); }},
      // causal: query row i sees keys <= i; [2,4,4] square, [5,3] more queries than keys (rows 2.. see
      // all), [3,5] fewer (the last keys masked for every row), and x used again after the softmax
      // (fan-out: the masked slots stay what the other use put there).
      {"softmax causal [2,4,4]", Op::Softmax, {{{2, 4, 4}}}, [](Tape& t, V v) { return t.softmax(v[0], -1, true); }},
      {"softmax causal [5,3]", Op::Softmax, {{{5, 3}}}, [](Tape& t, V v) { return t.softmax(v[0], -1, true); }},
      {"softmax causal [2,3,5] with fan-out", Op::Softmax, {{{2, 3, 5}}},
       [](Tape& t, V v) { return t.add(t.softmax(v[0], -1, true), t.muls(v[0], 0.5)); }},
      {"softmax large logits", Op::Softmax, {{{2, 6}, Dom::Big}}, [](Tape& t, V v) { return t.softmax(v[0], -1); }, false,
       kUseReplay},
      {"log_softmax axis 0", Op::LogSoftmax, {{{3, 5}}}, [](Tape& t, V v) { return t.log_softmax(v[0], 0); }},
      {"log_softmax middle axis", Op::LogSoftmax, {{{2, 3, 4}}}, [](Tape& t, V v) { return t.log_softmax(v[0], 1); }},
      {"softmax_cross_entropy", Op::SoftmaxCrossEntropy, {{{4, 5}}, {{4, 5}, Dom::OneHot}},
       [](Tape& t, V v) { return t.softmax_cross_entropy(v[0], v[1]); }},
      {"softmax_cross_entropy soft targets", Op::SoftmaxCrossEntropy, {{{3, 4}}, {{3, 4}, P}},
       [](Tape& t, V v) { return t.softmax_cross_entropy(v[0], v[1]); }},
      {"softmax_cross_entropy x with x", Op::SoftmaxCrossEntropy, {{{3, 4}, P}},
       [](Tape& t, V v) { return t.softmax_cross_entropy(v[0], v[0]); }},
      {"cross_entropy ids [N]", Op::CrossEntropy, {{{4, 5}}, {{4}, Dom::ClassId}},
       [](Tape& t, V v) { return t.cross_entropy(v[0], v[1]); }},
      {"cross_entropy ids [N,1], batch 1", Op::CrossEntropy, {{{1, 3}}, {{1, 1}, Dom::ClassId}},
       [](Tape& t, V v) { return t.cross_entropy(v[0], v[1]); }},
      {"cross_entropy [N,T,C] ids [N,T]", Op::CrossEntropy, {{{2, 3, 4}}, {{2, 3}, Dom::ClassId}},
       [](Tape& t, V v) { return t.cross_entropy(v[0], v[1]); }},
      {"cross_entropy large logits", Op::CrossEntropy, {{{3, 4}, Dom::Big}, {{3}, Dom::ClassId}},
       [](Tape& t, V v) { return t.cross_entropy(v[0], v[1]); }, false, kUseReplay},
      // embedding: ids in {0, 1, 2} (a const), so a table of 4 rows has one row no id selects (its
      // gradient stays 0); repeated ids pin the ascending-position sum; fan-out pins a table slot that
      // already holds a contribution when the gather's rows land (the mean of T·T has a higher id)
      {"embedding ids [2,3], table [4,5]", Op::Embedding, {{{2, 3}, Dom::ClassId}, {{4, 5}}},
       [](Tape& t, V v) { return t.embedding(v[0], v[1]); }},
      {"embedding ids [6], table [3,2]", Op::Embedding, {{{6}, Dom::ClassId}, {{3, 2}}},
       [](Tape& t, V v) { return t.embedding(v[0], v[1]); }},
      {"embedding ids [2,2,2], table fan-out", Op::Embedding, {{{2, 2, 2}, Dom::ClassId}, {{3, 4}}},
       [](Tape& t, V v) { return t.add(t.embedding(v[0], v[1]), t.muls(t.mean(t.mul(v[1], v[1])), 0.1)); }},
      {"embedding of a computed table", Op::Embedding, {{{3, 2}, Dom::ClassId}, {{3, 3}}},
       [](Tape& t, V v) { return t.mul(t.embedding(v[0], t.tanh(v[1])), t.embedding(v[0], v[1])); }},
      // the fold reductions (max, ...): derived from their rows (derived_cases)
      // dropout: the counter mask in training (cases set the tape's key; the oracle draws the same mask
      // from the documented formula), the identity outside it
      {"dropout rate 0.3", Op::Dropout, {{{4, 6}}},
       [](Tape& t, V v) {
         t.set_dropout_key({12345, 7, true});
         return t.dropout(v[0], 0.3);
       }},
      {"dropout rate 0.75, fan-out", Op::Dropout, {{{3, 5}}},
       [](Tape& t, V v) {
         t.set_dropout_key({0xfeedfacecafebeefULL, 1, true});
         return t.mul(t.dropout(v[0], 0.75), v[0]);
       }},
      {"dropout outside training", Op::Dropout, {{{2, 3}}},
       [](Tape& t, V v) {
         t.set_dropout_key({1, 1, false});
         return t.dropout(v[0], 0.5);
       }},
      // composites
      {"mse composite", Op::Mean, {{{3, 4}}, {{3, 4}}}, [](Tape& t, V v) { return t.mse(v[0], v[1]); }},
      {"mse composite, const target", Op::Mean, {{{3, 4}}, {{3, 4}, Dom::Any, true}},
       [](Tape& t, V v) { return t.mse(v[0], v[1]); }},
      {"fan-out composite", Op::Mul, {{{6}}},
       [](Tape& t, V v) {
         const Var x = v[0];
         const Var a = t.mul(t.tanh(x), x);
         const Var b = t.div(t.exp(t.muls(x, 0.5)), t.adds(t.mul(x, x), 1.0));
         return t.add(t.sub(a, b), t.sigmoid(a));
       }},
      // Slots that already hold a contribution when a broadcast walk / a matmul sum lands in them
      // (the orders of accumulation into a non-zero slot are what these pin).
      {"broadcast slot with two consumers", Op::Mul, {{{3, 4}}, {{4}}, {{2, 3, 4}}},
       [](Tape& t, V v) { return t.add(t.mul(v[0], v[1]), t.mul(v[1], t.sum(v[2], 0))); }},
      {"matmul shared weight", Op::Matmul, {{{3, 4}}, {{4, 4}}},
       [](Tape& t, V v) {
         const Var h = t.matmul(v[0], v[1]);
         return t.add(t.add(t.matmul(t.tanh(h), v[1]), h), t.sum(t.muls(v[0], 0.3)));  // v[0]'s slot is non-zero first
       }},
      {"bmm shared batch with a second consumer", Op::Bmm, {{{1, 3, 4}}, {{2, 4, 2}}},
       [](Tape& t, V v) { return t.add(t.sum(t.bmm(v[0], v[1])), t.sum(t.exp(v[0]))); }},
      {"const-only branch and an unused param", Op::Mul, {{{3, 4}}, {{3, 4}, Dom::Any, true}, {{2}}},
       [](Tape& t, V v) {
         const Var c = t.exp(t.neg(v[1]));  // const-only: no gradient memory anywhere
         t.relu(v[2]);                      // depends on a param, but not on the loss
         return t.mul(t.sigmoid(v[0]), c);
       },
       false, kUseFd | kUseReplay},
  };
}

// Every case: the derived cases of every elementwise row (in table order), then the hand cases.
inline const std::vector<OpCase>& op_cases() {
  static const std::vector<OpCase> all = [] {
    std::vector<OpCase> v;
    for (const OpInfo& info : kOps)
      for (OpCase& c : derived_cases(info)) v.push_back(std::move(c));
    for (OpCase& c : hand_cases()) v.push_back(std::move(c));
    return v;
  }();
  return all;
}

// A training forward on a device also takes the step's running-statistics update of every batch node
// (grk_<stem>_update right after its forward); the CPU tape takes it from Tape::update_running_stats.
// Sweeps that compare every node after a device forward call this on the tape after the capture
// (which uploads the statistics as they were).
inline void update_running_stats(Tape& t) {
  for (int32_t id = 0; id < t.size(); ++id)
    if (op_info(t.node(id).op).batch()) t.update_running_stats(Var{id});
}

// The cases a check takes (`use` is one of CaseUse).
inline std::vector<const OpCase*> op_cases(unsigned use) {
  std::vector<const OpCase*> v;
  for (const OpCase& c : op_cases())
    if (c.uses & use) v.push_back(&c);
  return v;
}

// The ops of kOps (leaves aside: every case has them) without a case that `use` takes: "" when none.
inline std::string op_cases_missing(unsigned use = kUseAll) {
  std::string missing;
  for (const OpInfo& info : kOps) {
    if (info.leaf()) continue;
    bool found = false;
    for (const OpCase& c : op_cases())
      found = found || (c.op == info.op && (c.uses & use));
    if (!found) missing += (missing.empty() ? "" : " ") + std::string(info.name);
  }
  return missing;
}

// "add sub ..." — the distinct ops of a set, in table order (the sweeps print what they covered).
template <class Set> std::string op_list(const Set& ops) {
  std::string s;
  for (const OpInfo& info : kOps)
    if (ops.count(info.op)) s += (s.empty() ? "" : " ") + std::string(info.name);
  return s;
}

}  // namespace gr::test
