// fuzz_gen.h — the differential fuzzer's generator (support/fuzz_graph.h: generate, generate_image, ...),
// shared by its files: tests/fuzz_gen.cpp (the entry points, the spec), fuzz_gen_tensor.cpp (the
// tensor case: random moves, losses, special values) and fuzz_gen_cases.cpp (the batch, token, image
// and scalar cases). Gen's small building blocks (a leaf, a node, a b-side, a unary or binary move)
// are here; each case's recipe is in its file. Every draw comes from the one stream rng_, in program
// order, so a seed's graph depends on the order of the draws only, not on which file holds them.
#pragma once
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "support/fuzz_graph.h"
#include "support/rng.h"

namespace gr::fuzz::gen {


using test::op_test;

using Dims = std::vector<int64_t>;

struct Val {
  std::string name;
  Dims shape;
  double bound = 1.0;  // |value| ≤ bound (a crude interval estimate)
};

inline int64_t numel(const Dims& d) {
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
  // One element of v, drawn (one draw).
  template <class T>
  const T& pick_of(const std::vector<T>& v) {
    return v[static_cast<size_t>(pick(static_cast<int64_t>(v.size())))];
  }
  // The op table's rows that `keep` selects, in table order (the fold, row, batch and window ops).
  template <class Keep>
  static std::vector<const OpInfo*> table_rows(Keep keep) {
    std::vector<const OpInfo*> v;
    for (const OpInfo& info : kOps)
      if (keep(info)) v.push_back(&info);
    return v;
  }
  // A fold reduction of the table (max, ...), in turn from the seed (no draw: the stream, and so every
  // seed's graph, is as it was; seeds alternate when there are several). Its value is an element of
  // the lane: |y| <= bound.
  std::string fold_name() {
    static const std::vector<const OpInfo*> folds = table_rows([](const OpInfo& i) { return i.fold(); });
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
        if (k == 0 && !same.empty()) v = pick_of(same);
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
    return *pick_of(v);
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

  // fuzz_gen_tensor.cpp: the tensor case.
  Val move(const Val& a);  // one random move on an activation [R, C]
  Val binary_with(const Val& a, const Val& param_a_side);
  Val loss(const Val& a);
  // `steps` random moves from cur, each capped to at most [8, 8] when it grows past 96 elements, every
  // result added to the pool; returns the last.
  Val moves(Val cur, int steps);
  void tensor_case();
  void special_branch(const Val& a);

  // fuzz_gen_cases.cpp: the batch, token, image and scalar cases.
  void moves_to_loss(Val cur);  // from cur (pooled): 0..3 random moves, then a loss
  void batch_case();
  void token_case();
  Val window_move(const Val& a);
  void image_case();
  void scalar_case();

 private:
  // A const leaf of `shape`, zero-filled, for the caller to set (integer ids, one-hot targets).
  Leaf& const_leaf(const Dims& shape) {
    Leaf& l = c_.graph.leaves.emplace_back(Leaf{pre_ + "k" + std::to_string(leaves_++), false, shape, {}});
    l.values.assign(static_cast<size_t>(numel(shape)), 0.0);
    c_.ops.insert("const");
    return l;
  }

  test::Rng rng_;
  Case& c_;
  uint64_t seed_;
  uint64_t folds_drawn_ = 0;  // fold_name's turn
  std::string pre_;
  int leaves_ = 0, nodes_ = 0;
  std::vector<Val> pool_, params_;
};

}  // namespace gr::fuzz::gen
