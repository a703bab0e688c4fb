// fuzz_gen_tensor.cpp — the fuzzer's tensor case (support/fuzz_gen.h, entry point generate() in
// fuzz_gen.cpp): random moves on an activation [R, C] (unary, binary with every b-side, matmul and bmm,
// transposes, slices, concat, softmax, row ops, branches), the losses, and the special-values branch.
#include "support/fuzz_gen.h"

namespace gr::fuzz::gen {

Val Gen::move(const Val& a) {
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
      const int64_t c1 = pick_of(divs), c2 = C / c1;
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
        b = pick_of(fit);
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
        static const std::vector<const OpInfo*> rows = table_rows([](const OpInfo& i) { return i.row(); });  // Class Row
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
      const Val& p = pick_of(pool_);
      return p.shape.size() == 2 ? unary(p) : unary(a);
    }
  }
}
Val Gen::binary_with(const Val& a, const Val& param_a_side) {
  return op("add", {param_a_side, a}, json::object(), a.shape, a.bound + param_a_side.bound);
}

Val Gen::loss(const Val& a) {
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
      Leaf& l = const_leaf(a.shape);  // one-hot rows
      for (int64_t r = 0; r < R; ++r) l.values[static_cast<size_t>(r * C + pick(C))] = 1.0;
      return op("softmax_cross_entropy", {a, Val{l.name, a.shape, 1}}, json::object(), {1}, 0);
    }
    case 4: return scal("adds", scal("muls", reduce("sum", a, -9, false), 0.5), 1.25);  // a serial tail
    case 5: {  // integer class ids [R] or [R, 1]; or the max of everything
      if (coin(4)) return op(fold_name(), {a}, json::object(), {1}, a.bound);  // max, ... of everything
      const Dims ids = coin() ? Dims{R} : Dims{R, 1};
      Leaf& l = const_leaf(ids);
      for (double& v : l.values) v = static_cast<double>(pick(C));
      return op("cross_entropy", {a, Val{l.name, ids, static_cast<double>(C)}}, json::object(), {1}, 0);
    }
    default: {
      const Val m = reduce("mean", op("mul", {a, a}, json::object(), a.shape, a.bound * a.bound), -9, false);
      return op("mul", {un("sqrt", scal("adds", m, 1.0)), leaf(false, {1}, 0.5, 1.0)}, json::object(), {1}, 0);
    }
  }
}

Val Gen::moves(Val cur, int steps) {
  for (int s = 0; s < steps; ++s) {
    cur = move(cur);
    if (numel(cur.shape) > 96) cur = op("slice", {cur}, {{"starts", {0, 0}}, {"stops", {std::min<int64_t>(cur.shape[0], 8), std::min<int64_t>(cur.shape[1], 8)}}},
                                        {std::min<int64_t>(cur.shape[0], 8), std::min<int64_t>(cur.shape[1], 8)}, cur.bound);
    pool_.push_back(cur);
  }
  return cur;
}

void Gen::tensor_case() {
  const int64_t B = 1 + pick(8), C = 1 + pick(6);
  Val cur = leaf(false, {B, C}, -1.5, 1.5);
  pool_.push_back(cur);
  const int steps = 2 + static_cast<int>(pick(7));
  cur = moves(cur, steps);
  if (coin(5)) un("tanh", pick_of(pool_));  // dead branch
  Val l = loss(cur);
  if (coin(4)) {
    const Val& p = pick_of(pool_);
    l = op("add", {l, loss(p)}, json::object(), {1}, 0);
  }
  c_.graph.losses.push_back(l.name);
  if (c_.seed % 3 == 1) special_branch(pick_of(pool_));
}

// Special values (docs/numerics.md "NaN and infinities"): on every third tensor seed a dead branch
// (no path to the loss, so the gradients and the finite-difference oracle keep their meaning)
// makes NaN (log of a negative, 0/0), ±inf (exp overflow, x/0) and both mixed with finite values,
// then runs random moves over them — matmul, softmax, layer_norm, max, concat, ... Every path must
// put NaN and ±inf in the same places (tensor/same_bits.h: a NaN's sign and payload are not
// compared). Drawn after the loss: the seed's graph is otherwise the one it always was.
void Gen::special_branch(const Val& a) {
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

}  // namespace gr::fuzz::gen
