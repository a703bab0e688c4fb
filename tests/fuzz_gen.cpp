// fuzz_gen.cpp — the differential fuzzer's seeded graph generator (support/fuzz_graph.h).
//
// A tensor case starts from an input x [B, C] (B in 1..8, a const) and applies 3–12 random moves,
// each recorded with its shape: every unary op; binaries whose b-side is [B,C] (computed, leaf,
// x∘x), [1], [1,1], [B,1], [1,C] or [C] — each as a leaf or computed from the activation (fan-out),
// sometimes swapped onto the a-side; matmul with a new, const, shared (a parameter used in several
// places) or computed weight, and with the activation as the right operand; bmm with a batch-1 or a
// per-batch weight or the activation's own transpose; transposes, reshapes, row and column slices
// (negative indices), concat on either axis, softmax/log_softmax on either axis, axis reductions;
// on [R, c1, c2] reshapes a causal softmax over a·aᵀ's scores and matmul with a batched left input.
// Branches restart from an earlier node; a dead branch sometimes dangles. The loss is one of mean,
// sum, mse, softmax cross-entropy, a serial scalar tail, or the sum of two of them.
// A scalar case holds one element everywhere (the emitter's ops only) so `emit-cuda` can take it.
// A batch case (generate_batch: its own stream and names, so no seed's graph above changes) puts a
// batch-statistics op (batch_norm) over [B, C] or [B, C, H, W] before random moves. A token case
// (generate_tokens, its own stream too) gathers const ids [B, T] from a param table (embedding) first.
// Unary and binary moves draw from the op table's elementwise rows, so a new one is generated too.
// Values stay in the ops' domains (support/op_cases.h, from the op table's rows) and bounded: no NaN or infinity by construction.
#include <algorithm>
#include <cmath>

#include "support/fuzz_graph.h"
#include "support/rng.h"

namespace gr::fuzz {

namespace {

using test::op_test;

using Dims = std::vector<int64_t>;

struct Val {
  std::string name;
  Dims shape;
  double bound = 1.0;  // |value| ≤ bound (a crude interval estimate)
};

int64_t numel(const Dims& d) {
  int64_t n = 1;
  for (int64_t x : d) n *= x;
  return n;
}

class Gen {
 public:
  Gen(uint64_t seed, Case& c) : rng_(seed * 0x9E3779B97F4A7C15ULL + 0x5EED), c_(c), seed_(seed) {
    pre_ = "s" + std::to_string(seed) + "_";
  }
  // An image case's generator: a stream of its own (the seed's tensor or scalar graph is untouched)
  // and names of its own ("i<seed>_"), so it can join the seed's bundle.
  Gen(uint64_t seed, Case& c, bool image) : rng_(seed * 0x9E3779B97F4A7C15ULL + 0x1A6E), c_(c), seed_(seed) {
    pre_ = (image ? "i" : "s") + std::to_string(seed) + "_";
  }
  // A generator of its own stream and names (the batch cases: generate_batch), so no draw of the
  // seed's own graph moves.
  Gen(uint64_t seed, Case& c, const std::string& prefix, uint64_t stream)
      : rng_(seed * 0x9E3779B97F4A7C15ULL + stream), c_(c), seed_(seed), pre_(prefix + std::to_string(seed) + "_") {}

  // Draws in order: two draws in one call's arguments (f(coin(), pick(3))) are unsequenced in C++,
  // and GCC orders them differently on x86-64 and aarch64 — the same seed made another graph on
  // each (scripts/cross-check found it). Every call below takes at most one draw in its arguments;
  // the others are named first, in the order x86-64 GCC evaluated them, so the seeds keep their graphs.
  int64_t pick(int64_t n) { return static_cast<int64_t>(rng_.next() % static_cast<uint64_t>(n)); }
  bool coin(int64_t n = 2) { return pick(n) == 0; }
  // A fold reduction of the table (max, ...), in turn from the seed (no draw: the stream, and so every
  // seed's graph, is as it was; seeds alternate when there are several). Its value is an element of
  // the lane: |y| <= bound.
  std::string fold_name() {
    static const std::vector<const OpInfo*> folds = [] {
      std::vector<const OpInfo*> v;
      for (const OpInfo& info : kOps)
        if (info.fold()) v.push_back(&info);
      return v;
    }();
    return std::string(folds[static_cast<size_t>((seed_ + folds_drawn_++) % folds.size())]->name);
  }

  Val leaf(bool param, const Dims& shape, double lo, double hi) {
    Leaf l{pre_ + (param ? "p" : "k") + std::to_string(leaves_++), param, shape, rng_.uniform_vec(numel(shape), lo, hi)};
    c_.graph.leaves.push_back(l);
    c_.ops.insert(param ? "param" : "const");
    if (param && coin(3)) c_.graph.l2[l.name] = 1e-3;
    if (param) params_.push_back({l.name, shape, std::max(std::fabs(lo), std::fabs(hi))});
    return {l.name, shape, std::max(std::fabs(lo), std::fabs(hi))};
  }
  Val op(const std::string& o, std::vector<Val> in, json attrs, const Dims& shape, double bound) {
    Node n{pre_ + "n" + std::to_string(nodes_++), o, {}, std::move(attrs), shape};
    for (const Val& v : in) n.inputs.push_back(v.name);
    c_.graph.nodes.push_back(n);
    c_.ops.insert(o);
    return {n.id, shape, bound};
  }
  Val un(const std::string& o, const Val& a) {
    double b = a.bound;
    if (o == "sigmoid") b = 1;
    else if (o == "tanh") b = std::min(1.0, b);
    else if (o == "exp") b = std::exp(b);
    else if (o == "log") b = std::max(std::fabs(std::log(0.25)), std::log(std::max(b, 1.0)));
    else if (o == "sqrt") b = std::sqrt(b);
    else if (o == "sin" || o == "cos") b = 1;
    return op(o, {a}, json::object(), a.shape, b);
  }
  Val scal(const std::string& o, const Val& a, double s) {
    // pow's input is kept >= 0.25 (its Positive adapter), so |x^s| <= max(bound^s, 0.25^s).
    const double b = o == "adds"  ? a.bound + std::fabs(s)
                     : o == "pow" ? std::max(std::pow(std::max(a.bound, 0.25), s), std::pow(0.25, s))
                                  : a.bound * std::fabs(s);
    return op(o, {a}, {{"scalar", s}}, a.shape, b);
  }
  Val squash(const Val& a, double limit = 4.0) { return a.bound > limit ? un("tanh", a) : a; }
  Val positive(const Val& a) {  // ≥ 0.25
    if (coin()) return scal("adds", un("sigmoid", a), 0.25);
    return un("exp", scal("muls", un("tanh", a), 0.5));
  }
  Val reduce(const std::string& o, const Val& a, int axis, bool keep) {  // axis -9: all axes
    Dims s = a.shape;
    json at = json::object();
    const int64_t n = axis == -9 ? numel(s) : s[static_cast<size_t>(axis < 0 ? axis + static_cast<int>(s.size()) : axis)];
    if (axis == -9) {
      s = {1};
    } else {
      at["axis"] = axis;
      const size_t ax = static_cast<size_t>(axis < 0 ? axis + static_cast<int>(s.size()) : axis);
      if (keep) at["keepdims"] = true, s[ax] = 1;
      else s.erase(s.begin() + static_cast<long>(ax));
      if (s.empty()) s = {1};
    }
    return op(o, {a}, at, s, o == "sum" ? a.bound * static_cast<double>(n) : a.bound);
  }
  Val reshape(const Val& a, Dims to, bool minus_one) {
    json shp = to;
    if (minus_one) shp[static_cast<size_t>(pick(static_cast<int64_t>(to.size())))] = -1;
    return op("reshape", {a}, {{"shape", shp}}, to, a.bound);
  }
  Val matmul(const Val& a, const Val& w) {
    return op("matmul", {a, w}, json::object(), {a.shape[0], w.shape[1]},
              static_cast<double>(a.shape[1]) * a.bound * w.bound);
  }
  Val weight(int64_t k, int64_t n) {  // [k, n]: shared, new param, const, or computed
    if (coin(3))
      for (const Val& p : params_)
        if (p.shape.size() == 2 && p.shape[0] == k && p.shape[1] == n) return p;  // used again
    const double a = 1.0 / std::sqrt(static_cast<double>(k));
    const int kind = static_cast<int>(pick(6));
    if (kind == 0) return leaf(false, {k, n}, -a, a);
    if (kind == 1) return un("tanh", leaf(true, {k, n}, -a, a));  // a computed weight: not row-local
    return leaf(true, {k, n}, -a, a);
  }

  // A b-side for an activation a [R, C]; pattern 0 [R,C], 1 [1], 2 [1,1], 3 [R,1], 4 [1,C], 5 [C].
  Val bside(const Val& a, int pattern, bool computed, bool pos) {
    const int64_t R = a.shape[0], C = a.shape[1];
    const Dims shapes[] = {{R, C}, {1}, {1, 1}, {R, 1}, {1, C}, {C}};
    const Dims& s = shapes[pattern];
    if (!computed) return pos ? leaf(coin(), s, 0.5, 1.5) : leaf(coin(), s, -1.0, 1.0);
    Val v;
    switch (pattern) {
      case 0: {
        std::vector<Val> same;
        for (const Val& p : pool_)
          if (p.shape == a.shape && p.name != a.name) same.push_back(p);
        const int k = static_cast<int>(pick(3));
        if (k == 0 && !same.empty()) v = same[static_cast<size_t>(pick(static_cast<int64_t>(same.size())))];
        else if (k == 1) v = a;  // x ∘ x
        else v = un(coin() ? "sigmoid" : "tanh", a);
        break;
      }
      case 1: v = coin() ? reduce("mean", a, -9, false) : un("tanh", reduce("sum", a, -9, false)); break;
      case 2:
        if (R == 1 || coin(3)) v = un("sigmoid", matmul(a, weight(C, 1)));  // sigmoid(h·Wg): [1,1] at B = 1
        else v = reduce("mean", reduce("sum", a, 0, true), 1, true);
        break;
      case 3:
        if (coin()) {
          const Val w = weight(C, 1);  // before the name's coin (Draws in order, above)
          v = un(coin() ? "tanh" : "sigmoid", matmul(a, w));
        }
        else v = squash(reduce(coin() ? "mean" : "sum", a, -1, true));
        break;
      case 4:
        if (coin(3)) v = un("tanh", leaf(true, {1, C}, -1, 1));
        else v = squash(reduce(coin() ? "mean" : "sum", a, 0, true));
        break;
      default:
        if (coin(3)) v = un("tanh", leaf(true, {C}, -1, 1));
        else if (coin()) v = squash(reduce("mean", a, 0, false));
        else v = reshape(reduce("mean", a, 0, true), {C}, coin());
        break;
    }
    return pos ? positive(v) : v;
  }

  // The elementwise rows of the op table the generator draws from (table order; unary ops with a
  // scalar attribute last), so a new elementwise op is generated with no edit here.
  static const std::vector<const OpInfo*>& rows(OpClass cls, bool emit_only) {
    static const auto make = [](OpClass k, bool emit) {
      std::vector<const OpInfo*> v;
      for (int scalar = 0; scalar < 2; ++scalar)
        for (const OpInfo& info : kOps)
          if (info.cls == k && (!emit || info.emit_scalar) && ((info.attrs & kAttrScalar) != 0) == (scalar != 0))
            v.push_back(&info);
      return v;
    };
    static const std::vector<const OpInfo*> lists[4] = {make(OpClass::Unary, false), make(OpClass::Unary, true),
                                                        make(OpClass::Binary, false), make(OpClass::Binary, true)};
    return lists[(cls == OpClass::Binary ? 2 : 0) + (emit_only ? 1 : 0)];
  }
  const OpInfo& pick_row(OpClass cls, bool emit_only) {
    const auto& v = rows(cls, emit_only);
    return *v[static_cast<size_t>(pick(static_cast<int64_t>(v.size())))];
  }
  // The bound of a ∘ b: a divisor kept >= 0.25 (the b-side adapter) at most quadruples |a|.
  static double binary_bound(const OpInfo& info, const Val& a, const Val& b) {
    if (op_test(info).fuzz_b == Dom::Positive) return a.bound * 4.0;
    if (info.op == Op::BceWithLogits) return a.bound * (1.0 + b.bound) + 1.0;  // relu(a) − a·b + log(1 + e^−|a|)
    return info.op == Op::Mul ? a.bound * b.bound : a.bound + b.bound;
  }

  Val binary(const Val& a) {
    const OpInfo& info = pick_row(OpClass::Binary, false);
    const OpTest m = op_test(info);
    const std::string o(info.name);
    // bce_with_logits takes targets of the logits' shape or one element (a loss shape the spec
    // checks: docs/spec.md); every other binary row takes every broadcast b-side.
    const int pattern = static_cast<int>(pick(info.op == Op::BceWithLogits ? 2 : 6));  // 0 [R,C], 1 [1]
    const Val b = bside(a, pattern, coin(), m.fuzz_b == Dom::Positive);
    const bool swap = m.fuzz_a == Dom::Any && m.fuzz_b == Dom::Any && coin(5);
    return squash(op(o, swap ? std::vector<Val>{b, a} : std::vector<Val>{a, b}, json::object(), a.shape,
                     binary_bound(info, a, b)),
                  30.0);
  }

  Val unary(const Val& a, bool emit_only = false) {
    const OpInfo& info = pick_row(OpClass::Unary, emit_only);
    const OpTest m = op_test(info);
    const std::string o(info.name);
    if (info.attrs & kAttrScalar) {
      const double k = pick(2) ? m.scalars[1] : m.scalars[0];
      return scal(o, m.fuzz_a == Dom::Positive ? positive(a) : a, k);
    }
    if (m.fuzz_a == Dom::Positive) return un(o, positive(a));
    if (m.fuzz_a == Dom::Bounded) return un(o, squash(a, 3.0));
    return un(o, a);
  }

  Val move(const Val& a) {
    const int64_t R = a.shape[0], C = a.shape[1];
    switch (pick(15)) {
      case 0:
      case 1: return unary(a);
      case 2:
      case 3:
      case 4: return binary(a);
      case 5: {
        const Val w = weight(C, 1 + pick(6));
        return squash(matmul(a, w), 6.0);
      }
      case 6: {  // the activation as the right operand: P [M, R] · a
        const Val p = leaf(true, {1 + pick(4), R}, -0.7, 0.7);
        return squash(op("matmul", {p, a}, json::object(), {p.shape[0], C}, static_cast<double>(R) * 0.7 * a.bound), 6.0);
      }
      case 7: {  // bmm on [R, c1, c2]
        std::vector<int64_t> divs;
        for (int64_t d = 1; d <= C; ++d)
          if (C % d == 0) divs.push_back(d);
        const int64_t c1 = divs[static_cast<size_t>(pick(static_cast<int64_t>(divs.size())))], c2 = C / c1;
        const Val a3 = reshape(a, {R, c1, c2}, coin());
        Val out;
        if (coin(3)) {  // a · aᵀ per batch, sometimes through a causal softmax (scores [R, c1, c1], row i sees keys <= i)
          const Val t = op("transpose", {a3}, json::object(), {R, c2, c1}, a.bound);
          out = op("bmm", {a3, t}, json::object(), {R, c1, c1}, static_cast<double>(c2) * a.bound * a.bound);
          if (coin()) {
            out = op("softmax", {squash(out, 6.0)}, {{"causal", true}}, out.shape, 1.0);
            c_.ops.insert("softmax(causal)");  // an attribute variant the coverage check requires too
          }
        } else if (coin(3)) {  // a batched left input: [R, c1, c2]·[c2, n] (nn.Linear on a sequence)
          const Val w = weight(c2, 1 + pick(4));
          out = op("matmul", {a3, w}, json::object(), {R, c1, w.shape[1]}, static_cast<double>(c2) * a.bound * w.bound);
          c_.ops.insert("matmul(batched)");
        } else {
          const int64_t n = 1 + pick(4);
          const Val w = leaf(true, {coin() ? 1 : R, c2, n}, -0.6, 0.6);
          out = op("bmm", {a3, w}, json::object(), {R, c1, n}, static_cast<double>(c2) * a.bound * 0.6);
        }
        return squash(reshape(out, {R, out.shape[1] * out.shape[2]}, coin()), 6.0);
      }
      case 8: {  // transpose, something over the other axis, transpose back
        const Val t = op("transpose", {a}, json::object(), {C, R}, a.bound);
        const Val u = coin() ? unary(t) : op(coin() ? "softmax" : "log_softmax", {t}, {{"axis", -1}}, {C, R}, a.bound + 3);
        return op("transpose", {u}, json::object(), {R, C}, u.bound);
      }
      case 9: {  // slice rows or columns (negative indices sometimes)
        if (C >= 2 && (R < 2 || coin())) {
          const int64_t c0 = pick(C - 1), c1 = c0 + 1 + pick(C - c0 - 1);
          const bool neg = coin();
          return op("slice", {a}, {{"starts", {0, neg ? c0 - C : c0}}, {"stops", {R, (neg && c1 < C) ? c1 - C : c1}}},
                    {R, c1 - c0}, a.bound);
        }
        if (R >= 2) {
          const int64_t r0 = pick(R - 1), r1 = r0 + 1 + pick(R - r0 - 1);
          return op("slice", {a}, {{"starts", {r0, 0}}, {"stops", {r1, C}}}, {r1 - r0, C}, a.bound);
        }
        return unary(a);
      }
      case 10: {  // concat on either axis
        const bool rows = coin(3);
        std::vector<Val> fit;
        for (const Val& p : pool_)
          if (p.shape.size() == 2 && (rows ? p.shape[1] == C : p.shape[0] == R)) fit.push_back(p);
        Val b;
        if (coin(3) || fit.empty()) {
          if (coin()) {
            b = a;
          } else {
            const Dims shape = rows ? Dims{1 + pick(3), C} : Dims{R, 1 + pick(3)};
            b = leaf(coin(), shape, -1, 1);
          }
        } else {
          b = fit[static_cast<size_t>(pick(static_cast<int64_t>(fit.size())))];
        }
        const Dims s = rows ? Dims{R + b.shape[0], C} : Dims{R, C + b.shape[1]};
        const int axis = rows ? 0 : (coin() ? 1 : -1);
        const bool a_first = coin();
        return op("concat", a_first ? std::vector<Val>{a, b} : std::vector<Val>{b, a}, {{"axis", axis}}, s,
                  std::max(a.bound, b.bound));
      }
      case 11: {  // softmax / log_softmax over the rows (last axis) or over the batch (axis 0)
        const bool last = !coin(4);
        return op(coin() ? "softmax" : "log_softmax", {a}, {{"axis", last ? -1 : 0}}, a.shape, a.bound + 3);
      }
      case 13: {  // a row op (layer_norm, ...) over the rows, a − max(a) over the last axis (or the batch), or dropout
        if (coin(3)) return op("dropout", {a}, {{"rate", coin() ? 0.25 : 0.6}}, a.shape, a.bound * 2.5);
        if (coin()) {
          const double eps = coin() ? 1e-5 : 0.25;
          static const std::vector<const OpInfo*> rows = [] {  // the table's Class Row ops
            std::vector<const OpInfo*> v;
            for (const OpInfo& info : kOps)
              if (info.row()) v.push_back(&info);
            return v;
          }();
          const OpInfo& r = *rows[rows.size() == 1 ? 0 : static_cast<size_t>(pick(static_cast<int64_t>(rows.size())))];
          // a normalized row: |y| <= sqrt(C) (layer_norm: Σy² < C; rms_norm: Σy² < C)
          return op(std::string(r.name), {a}, {{"eps", eps}}, a.shape, std::sqrt(static_cast<double>(C)));
        }
        const bool last = !coin(3);
        const Val m = op(fold_name(), {a}, {{"axis", last ? -1 : 0}, {"keepdims", true}}, last ? Dims{R, 1} : Dims{1, C}, a.bound);
        return op("sub", {a, m}, json::object(), a.shape, 2.0 * a.bound);
      }
      case 12: {  // a [R, C] param on the a-side, or a reshape round trip
        if (coin()) return binary_with(a, leaf(true, a.shape, -1, 1));
        const Val f = reshape(a, {C, R}, coin());
        return reshape(unary(f), {R, C}, false);
      }
      default: {  // branch: restart from an earlier activation (its value is used again: fan-out)
        const Val& p = pool_[static_cast<size_t>(pick(static_cast<int64_t>(pool_.size())))];
        return p.shape.size() == 2 ? unary(p) : unary(a);
      }
    }
  }
  Val binary_with(const Val& a, const Val& param_a_side) {
    return op("add", {param_a_side, a}, json::object(), a.shape, a.bound + param_a_side.bound);
  }

  Val loss(const Val& a) {
    const int64_t R = a.shape[0], C = a.shape[1];
    int kind = static_cast<int>(pick(7));
    // softmax / class-id cross-entropy over one column is constant, and the spec refuses it
    // (docs/spec.md): one column takes the mean instead.
    if (C == 1 && (kind == 3 || kind == 5)) kind = 0;
    switch (kind) {
      case 0: return reduce("mean", a, -9, false);
      case 1: return reduce("sum", a, -9, false);
      case 2: {
        const Val t = leaf(false, a.shape, -1, 1);
        return op("mse", {a, t}, json::object(), {1}, 0);
      }
      case 3: {
        Leaf& l = c_.graph.leaves.emplace_back(Leaf{pre_ + "k" + std::to_string(leaves_++), false, a.shape, {}});
        l.values.assign(static_cast<size_t>(R * C), 0.0);
        for (int64_t r = 0; r < R; ++r) l.values[static_cast<size_t>(r * C + pick(C))] = 1.0;
        c_.ops.insert("const");
        return op("softmax_cross_entropy", {a, Val{l.name, a.shape, 1}}, json::object(), {1}, 0);
      }
      case 4: return scal("adds", scal("muls", reduce("sum", a, -9, false), 0.5), 1.25);  // a serial tail
      case 5: {  // integer class ids [R] or [R, 1]; or the max of everything
        if (coin(4)) return op(fold_name(), {a}, json::object(), {1}, a.bound);  // max, ... of everything
        const Dims ids = coin() ? Dims{R} : Dims{R, 1};
        Leaf& l = c_.graph.leaves.emplace_back(Leaf{pre_ + "k" + std::to_string(leaves_++), false, ids, {}});
        l.values.assign(static_cast<size_t>(R), 0.0);
        for (double& v : l.values) v = static_cast<double>(pick(C));
        c_.ops.insert("const");
        return op("cross_entropy", {a, Val{l.name, ids, static_cast<double>(C)}}, json::object(), {1}, 0);
      }
      default: {
        const Val m = reduce("mean", op("mul", {a, a}, json::object(), a.shape, a.bound * a.bound), -9, false);
        return op("mul", {un("sqrt", scal("adds", m, 1.0)), leaf(false, {1}, 0.5, 1.0)}, json::object(), {1}, 0);
      }
    }
  }

  void tensor_case() {
    const int64_t B = 1 + pick(8), C = 1 + pick(6);
    Val cur = leaf(false, {B, C}, -1.5, 1.5);
    pool_.push_back(cur);
    const int steps = 2 + static_cast<int>(pick(7));
    for (int s = 0; s < steps; ++s) {
      cur = move(cur);
      if (numel(cur.shape) > 96) cur = op("slice", {cur}, {{"starts", {0, 0}}, {"stops", {std::min<int64_t>(cur.shape[0], 8), std::min<int64_t>(cur.shape[1], 8)}}},
                                          {std::min<int64_t>(cur.shape[0], 8), std::min<int64_t>(cur.shape[1], 8)}, cur.bound);
      pool_.push_back(cur);
    }
    if (coin(5)) un("tanh", pool_[static_cast<size_t>(pick(static_cast<int64_t>(pool_.size())))]);  // dead branch
    Val l = loss(cur);
    if (coin(4)) {
      const Val& p = pool_[static_cast<size_t>(pick(static_cast<int64_t>(pool_.size())))];
      l = op("add", {l, loss(p)}, json::object(), {1}, 0);
    }
    c_.graph.losses.push_back(l.name);
    if (c_.seed % 3 == 1) special_branch(pool_[static_cast<size_t>(pick(static_cast<int64_t>(pool_.size())))]);
  }

  // A batch case: a batch-statistics op (batch_norm) over a computed activation, [B, C] (B >= 2) or
  // reshaped to [B, C, H, W] (B·H·W >= 2), training on every path (its running statistics are state
  // the replay check compares too), a param scale after it, then random moves and a loss.
  void batch_case() {
    const bool four = coin();
    int64_t B = 1 + pick(8);
    const int64_t C = 1 + pick(four ? 3 : 5);
    const int64_t H = four ? 1 + pick(3) : 1;
    const int64_t W = four ? 1 + pick(3) : 1;
    if (B * H * W < 2) B = 2;
    const int64_t F = C * H * W;
    const Val x = leaf(false, {B, F}, -1.5, 1.5);
    pool_.push_back(x);
    Val h = matmul(x, leaf(true, {F, F}, -1, 1));
    const double eps = coin() ? 1e-5 : 0.25, momentum = coin() ? 0.1 : 0.7;
    const double bound = std::sqrt(static_cast<double>(B * H * W));  // |y| <= sqrt(M) (Σ y² <= M per channel)
    static const std::vector<const OpInfo*> batch_ops = [] {  // the table's Class Batch ops
      std::vector<const OpInfo*> v;
      for (const OpInfo& info : kOps)
        if (info.batch()) v.push_back(&info);
      return v;
    }();
    const std::string name(batch_ops[static_cast<size_t>(pick(static_cast<int64_t>(batch_ops.size())))]->name);
    const json attrs = {{"eps", eps}, {"momentum", momentum}};
    Val y;
    if (four) {
      const Val r = reshape(h, {B, C, H, W}, false);
      y = reshape(op(name, {r}, attrs, r.shape, bound), {B, F}, coin());
    } else {
      y = op(name, {h}, attrs, h.shape, bound);
    }
    Val cur = op("mul", {y, leaf(true, {F}, 0.5, 1.5)}, json::object(), y.shape, 1.5 * bound);
    pool_.push_back(cur);
    const int steps = static_cast<int>(pick(4));
    for (int s = 0; s < steps; ++s) {
      cur = move(cur);
      if (numel(cur.shape) > 96) cur = op("slice", {cur}, {{"starts", {0, 0}}, {"stops", {std::min<int64_t>(cur.shape[0], 8), std::min<int64_t>(cur.shape[1], 8)}}},
                                          {std::min<int64_t>(cur.shape[0], 8), std::min<int64_t>(cur.shape[1], 8)}, cur.bound);
      pool_.push_back(cur);
    }
    c_.graph.losses.push_back(loss(cur).name);
  }

  // A token case: integer ids [B, T] (a const, ids drawn in [0, V)) through embedding into a param table
  // [V, D], sometimes a second gather of other ids from the same table (a slot that already holds a
  // contribution when the first gather's rows land), reshaped to [B, T·D], then random moves and a loss.
  void token_case() {
    const int64_t B = 1 + pick(4), T = 1 + pick(4), V = 2 + pick(5), D = 1 + pick(4);
    const auto ids = [&] {
      Leaf& l = c_.graph.leaves.emplace_back(Leaf{pre_ + "k" + std::to_string(leaves_++), false, {B, T}, {}});
      l.values.assign(static_cast<size_t>(B * T), 0.0);
      for (double& v : l.values) v = static_cast<double>(pick(V));
      c_.ops.insert("const");
      return Val{l.name, {B, T}, static_cast<double>(V)};
    };
    const Val i0 = ids();
    const Val table = leaf(true, {V, D}, -1, 1);
    Val e = op("embedding", {i0, table}, json::object(), {B, T, D}, table.bound);
    if (coin()) {
      const Val i1 = ids();
      e = op("add", {e, op("embedding", {i1, table}, json::object(), {B, T, D}, table.bound)}, json::object(), {B, T, D},
             2 * table.bound);
    }
    Val cur = reshape(e, {B, T * D}, coin());
    pool_.push_back(cur);
    const int steps = static_cast<int>(pick(4));
    for (int s = 0; s < steps; ++s) {
      cur = move(cur);
      if (numel(cur.shape) > 96) cur = op("slice", {cur}, {{"starts", {0, 0}}, {"stops", {std::min<int64_t>(cur.shape[0], 8), std::min<int64_t>(cur.shape[1], 8)}}},
                                          {std::min<int64_t>(cur.shape[0], 8), std::min<int64_t>(cur.shape[1], 8)}, cur.bound);
      pool_.push_back(cur);
    }
    c_.graph.losses.push_back(loss(cur).name);
  }

  // Special values (docs/numerics.md "NaN and infinities"): on every third tensor seed a dead branch
  // (no path to the loss, so the gradients and the finite-difference oracle keep their meaning)
  // makes NaN (log of a negative, 0/0), ±inf (exp overflow, x/0) and both mixed with finite values,
  // then runs random moves over them — matmul, softmax, layer_norm, max, concat, ... Every path must
  // put NaN and ±inf in the same places (tensor/same_bits.h: a NaN's sign and payload are not
  // compared). Drawn after the loss: the seed's graph is otherwise the one it always was.
  void special_branch(const Val& a) {
    constexpr double kHuge = 1e300;
    const Val t = un("tanh", a);
    const Val nan_or_log = un("log", scal("adds", t, -0.5));  // NaN where tanh(a) < 0.5
    const Val overflow = un("exp", scal("muls", a, 800.0));   // +inf where a > 0.887, else finite
    const Val zero = op("sub", {a, a}, json::object(), a.shape, 0.0);
    const Val zero_by_zero = op("div", {zero, zero}, json::object(), a.shape, kHuge);  // NaN everywhere
    const Val by_zero = op("div", {a, zero}, json::object(), a.shape, kHuge);          // ±inf, NaN at a = 0
    const Val parts[] = {nan_or_log, overflow, zero_by_zero, by_zero};
    Val cur = parts[static_cast<size_t>(pick(4))];
    const Val other = parts[static_cast<size_t>(pick(4))];
    cur = op(coin() ? "add" : "mul", {cur, other}, json::object(), a.shape, kHuge);  // inf − inf, 0·inf
    const int steps = 1 + static_cast<int>(pick(3));
    for (int s = 0; s < steps; ++s) {
      Val next = move(cur);
      if (numel(next.shape) > 96) break;
      cur = next;
    }
  }

  // Every node and parameter holds one element ([1] or [1, 1]); only the emitter's ops.
  // ---- image cases: the window ops (conv2d, max_pool2d, avg_pool2d) over x [N, C, H, W] --------------
  // Output size of one axis, or 0 when the window does not fit ("same": ceil(in / s)).
  static int64_t window_out(int64_t in, int64_t k, int64_t s, int64_t d, const json& pad) {
    if (pad.is_string()) return pad == "same" ? (in + s - 1) / s : (in - d * (k - 1) - 1 >= 0 ? (in - d * (k - 1) - 1) / s + 1 : 0);
    const int64_t e = in + 2 * pad.get<int64_t>() - d * (k - 1) - 1;
    return e >= 0 ? e / s + 1 : 0;
  }
  Val window_move(const Val& a) {
    const int64_t N = a.shape[0], C = a.shape[1], H = a.shape[2], W = a.shape[3];
    static const std::vector<const OpInfo*> windows = [] {  // the table's window rows (conv2d, the pools, ...)
      std::vector<const OpInfo*> v;
      for (const OpInfo& info : kOps)
        if (info.window()) v.push_back(&info);
      return v;
    }();
    const OpInfo& row = *windows[static_cast<size_t>(pick(static_cast<int64_t>(windows.size())))];
    const int kind = (row.attrs & kAttrConv) ? 0 : 1;  // 0: a conv (a weight, groups, dilation), 1: a pool
    const int64_t kh = 1 + pick(3), kw = 1 + pick(3), sh = 1 + pick(2), sw = 1 + pick(2);
    const int64_t dil = kind == 0 ? 1 + pick(2) : 1;
    const int pad_kind = static_cast<int>(pick(4));  // 0 same, 1 valid, else an int
    json pad;
    if (pad_kind == 0) pad = "same";
    else if (pad_kind == 1) pad = "valid";
    else pad = kind == 0 ? pick(3) : pick(std::min(kh, kw) / 2 + 1);
    int64_t oh = window_out(H, kh, sh, dil, pad), ow = window_out(W, kw, sw, dil, pad);
    if (oh < 1 || ow < 1) pad = "same", oh = (H + sh - 1) / sh, ow = (W + sw - 1) / sw;
    json at = {{"stride", json::array({sh, sw})}, {"padding", pad}};
    if (kind != 0) {
      at["kernel"] = json::array({kh, kw});
      const double bound = a.bound;
      return op(std::string(row.name), {a}, at, {N, C, oh, ow}, bound);  // a pool's value is a mean or a cell
    }
    std::vector<int64_t> gs;  // groups dividing C (and F, drawn as a multiple)
    for (int64_t g = 1; g <= C; ++g)
      if (C % g == 0) gs.push_back(g);
    const int64_t groups = gs[static_cast<size_t>(pick(static_cast<int64_t>(gs.size())))];
    const int64_t F = groups * (1 + pick(3));
    if (dil > 1) at["dilation"] = dil;
    if (groups > 1) at["groups"] = groups;
    const int64_t K = C / groups * kh * kw;
    const double wb = 1.0 / std::sqrt(static_cast<double>(K));
    const Val w = leaf(!coin(5), {F, C / groups, kh, kw}, -wb, wb);
    std::vector<Val> in{a, w};
    if (coin(3)) in.push_back(leaf(true, {F}, -0.5, 0.5));  // a bias: lowered to reshape + add
    Val y = op(std::string(row.name), in, at, {N, F, oh, ow}, static_cast<double>(K) * a.bound * wb + 0.5);
    return coin() ? un(coin() ? "tanh" : "relu", y) : squash(y, 6.0);
  }
  void image_case() {
    const int64_t N = 1 + pick(3), C = 1 + pick(3), H = 2 + pick(7), W = 2 + pick(7);
    Val cur = leaf(coin(3), {N, C, H, W}, -1.5, 1.5);  // sometimes a param: the input's gradient is checked too
    const int steps = 1 + static_cast<int>(pick(3));
    for (int s = 0; s < steps; ++s) {
      cur = window_move(cur);
      if (numel(cur.shape) > 2000) break;
    }
    const int64_t C2 = cur.shape[1], HW = cur.shape[2] * cur.shape[3];
    Val flat;
    if (coin(3)) {  // global average pooling: mean over the spatial axes (one axis at a time)
      flat = reduce("mean", reduce("mean", cur, -1, false), -1, false);
    } else {
      flat = reshape(cur, {N, C2 * HW}, coin());
      if (C2 * HW > 8) flat = squash(matmul(flat, weight(C2 * HW, 1 + pick(4))), 6.0);
    }
    Val l = loss(flat);
    c_.graph.losses.push_back(l.name);
  }

  void scalar_case() {
    auto one = [&] { return coin() ? Dims{1} : Dims{1, 1}; };
    std::vector<Val> vals{leaf(true, one(), -1, 1), leaf(false, {1}, -1, 1)};
    Val cur = vals[0];
    const int steps = 3 + static_cast<int>(pick(6));
    for (int s = 0; s < steps; ++s) {
      switch (pick(6)) {
        case 0:
        case 1: {
          const OpInfo& info = pick_row(OpClass::Binary, true);
          const OpTest m = op_test(info);
          const std::string o(info.name);
          const bool pos = m.fuzz_b == Dom::Positive;
          Val b;
          if (coin(3)) {
            const Dims shape = one();
            b = leaf(coin(), shape, pos ? 0.5 : -1, 1.5);
          } else {
            b = vals[static_cast<size_t>(pick(static_cast<int64_t>(vals.size())))];
          }
          if (pos) b = positive(b);
          const Dims s2 = cur.shape.size() == 2 || b.shape.size() == 2 ? Dims{1, 1} : Dims{1};
          const bool swap = m.fuzz_a == Dom::Any && !pos && coin(4);
          cur = squash(op(o, swap ? std::vector<Val>{b, cur} : std::vector<Val>{cur, b}, json::object(), s2,
                          binary_bound(info, cur, b)),
                       30.0);
          break;
        }
        case 2:
        case 3: cur = unary(cur, true); break;
        case 4: {
          const std::string o = coin() ? "sum" : "mean";
          static const int kAxes[] = {0, 1, -1, -9};
          if (cur.shape.size() == 2) {
            const bool keep = coin();
            cur = reduce(o, cur, kAxes[pick(4)], keep);
          } else {
            cur = reduce(o, cur, coin() ? 0 : -9, false);
          }
          break;
        }
        default: cur = reshape(cur, cur.shape.size() == 2 ? Dims{1} : Dims{1, 1}, coin()); break;
      }
      vals.push_back(cur);
    }
    Val l = cur;
    if (coin(3)) l = op("mse", {cur, leaf(false, {1}, -1, 1)}, json::object(), {1}, 0);
    c_.graph.losses.push_back(l.name);
  }

 private:
  test::Rng rng_;
  Case& c_;
  uint64_t seed_;
  uint64_t folds_drawn_ = 0;  // fold_name's turn
  std::string pre_;
  int leaves_ = 0, nodes_ = 0;
  std::vector<Val> pool_, params_;
};

}  // namespace

Case generate(uint64_t seed, bool scalar) {
  Case c;
  c.seed = seed;
  c.scalar = scalar;
  Gen g(seed, c);
  if (scalar) g.scalar_case();
  else g.tensor_case();
  return c;
}

Case generate_image(uint64_t seed) {
  Case c;
  c.seed = seed;
  c.image = true;
  Gen g(seed, c, true);
  g.image_case();
  return c;
}

Case generate_batch(uint64_t seed) {
  Case c;
  c.seed = seed;
  Gen g(seed, c, "b", 0xBA7C4);
  g.batch_case();
  return c;
}

Case generate_tokens(uint64_t seed) {
  Case c;
  c.seed = seed;
  Gen g(seed, c, "t", 0x70CE5);
  g.token_case();
  return c;
}

Graph bundle(const std::vector<const Case*>& cases) {
  Graph g;
  for (const Case* c : cases) {
    g.leaves.insert(g.leaves.end(), c->graph.leaves.begin(), c->graph.leaves.end());
    g.nodes.insert(g.nodes.end(), c->graph.nodes.begin(), c->graph.nodes.end());
    g.losses.insert(g.losses.end(), c->graph.losses.begin(), c->graph.losses.end());
    g.l2.insert(c->graph.l2.begin(), c->graph.l2.end());
  }
  return g;
}

json spec_json(const Graph& g, const std::string& name, const OptimizerChoice& opt, bool emit_params_signature) {
  json s;
  s["gradrun"] = 1;
  s["name"] = name;
  s["description"] = "generated by tests/fuzz_diff (a differential fuzzer case); run: gradrun check FILE --replay --device host --fuse";
  s["seed"] = 1;
  json params = json::object(), consts = json::object();
  for (const Leaf& l : g.leaves) {
    if (l.param) params[l.name] = {{"shape", l.shape}, {"init", {{"values", l.values}}}};
    else consts[l.name] = {{"shape", l.shape}, {"values", l.values}};
  }
  if (!params.empty()) s["params"] = params;
  if (!consts.empty()) s["consts"] = consts;
  json graph = json::array();
  for (const Node& n : g.nodes) {
    json j = {{"id", n.id}, {"op", n.op}, {"inputs", n.inputs}};
    for (auto it = n.attrs.begin(); it != n.attrs.end(); ++it) j[it.key()] = it.value();
    graph.push_back(j);
  }
  std::string loss = g.losses.empty() ? "" : g.losses[0];
  for (size_t i = 1; i < g.losses.size(); ++i) {
    const std::string id = "loss_sum_" + std::to_string(i);
    graph.push_back({{"id", id}, {"op", "add"}, {"inputs", {loss, g.losses[i]}}});
    loss = id;
  }
  s["graph"] = graph;
  s["loss"] = loss;
  json o = {{"kind", opt.kind}, {"lr", opt.lr}};
  json l2 = json::object();
  for (const Leaf& l : g.leaves)
    if (l.param && g.l2.count(l.name)) l2[l.name] = g.l2.at(l.name);
  if (!l2.empty()) o["l2"] = l2;
  if (opt.clip > 0) o["clip"] = opt.clip;
  s["optimizer"] = o;
  s["train"] = {{"epochs", 1}};
  if (emit_params_signature) s["emit"] = {{"signature", "params"}};
  return s;
}

double fd_rtol(const Graph& g) {
  double r = 0;
  for (const Node& n : g.nodes)
    if (const std::optional<OpTest> m = op_meta(n.op)) r = std::max(r, m->graph_fd_rtol);
  return r;
}

}  // namespace gr::fuzz
