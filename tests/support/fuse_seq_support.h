// fuse_seq_support.h — the seeded random graph generator over rank-3 activations [N, T, c] for the
// fusion tests (test_fuse.cpp): the planner fuses such tensors as flattened rows [N·T, c]
// (docs/fusion.md), so these graphs exercise row segments over flattened rows — matmul of [N, T, c]
// by a leaf W, every b-side shape the planner accepts ([c], [1], [1, c], [1, 1, c], [N, T, c], x∘x)
// and ones it must refuse ([T, c] position tables, [N, 1, c] per-sequence broadcasts), layer_norm,
// gelu, last-axis softmax / log_softmax, causal softmax over [N, T, T] (row s is query s mod T),
// softmax over a non-last axis, and segment breaks. Shape legend: N sequences, T positions, c width.
#pragma once
#include "fuse_support.h"

namespace gr::fusetest {

inline void build_random_seq(Graph& gr, uint64_t seed) {
  Rng rng(seed);
  Tape& t = gr.tape;
  auto pick = [&](uint64_t n) { return static_cast<int64_t>(rng.next() % n); };
  const int64_t N = 1 + pick(3), T = 1 + pick(4);
  int64_t c = 1 + pick(5);
  Var x = t.constant(Shape({N, T, c}), rng.uniform_vec(N * T * c, -1.5, 1.5));
  gr.inputs.push_back(x);
  std::vector<Var> pool{x};  // [N, T, *] activations
  std::vector<Var> weights;  // [k, n] params
  Var cur = x;
  auto width = [&](Var v) { return t.node(v).shape[2]; };
  auto new_weight = [&](int64_t rows, int64_t n) {
    const std::vector<double> v = rng.uniform_vec(rows * n, -0.8, 0.8);
    const Var w = pick(5) == 0 ? t.constant(Shape({rows, n}), v) : t.param(Shape({rows, n}), v);
    if (t.node(w).op == Op::Param) weights.push_back(w);
    return w;
  };
  const int steps = 5 + static_cast<int>(pick(12));
  for (int s = 0; s < steps; ++s) {
    c = width(cur);
    switch (pick(12)) {
      case 0:
      case 1: {  // matmul [N, T, c]·W[c, n]: a new weight, a const one, or a shared one of the right shape
        Var w{-1};
        for (Var cand : weights)
          if (t.node(cand).shape[0] == c && pick(2) == 0) w = cand;
        if (w.id < 0) w = new_weight(c, pick(3) == 0 ? T : 1 + pick(5));
        cur = t.matmul(cur, w);
        break;
      }
      case 2:
      case 3: {  // binary: row-compatible b-sides, and ones the planner must refuse
        const int kind = static_cast<int>(pick(9));
        Var b{-1};
        if (kind == 0) b = t.param(Shape({c}), rng.uniform_vec(c, 0.5, 1.5));
        else if (kind == 1) b = t.param(Shape({1}), rng.uniform_vec(1, 0.5, 1.5));
        else if (kind == 2) b = t.constant(Shape({1, c}), rng.uniform_vec(c, 0.5, 1.5));
        else if (kind == 3) b = t.param(Shape({1, 1, c}), rng.uniform_vec(c, 0.5, 1.5));
        else if (kind == 4) b = cur;  // x ∘ x
        else if (kind == 5) b = t.param(Shape({T, c}), rng.uniform_vec(T * c, 0.5, 1.5));     // position table: refused
        else if (kind == 6) b = t.param(Shape({N, 1, c}), rng.uniform_vec(N * c, 0.5, 1.5));  // per sequence: refused
        else {
          for (Var p : pool)
            if (t.node(p).shape == t.node(cur).shape && p != cur) b = p;
          if (b.id < 0) b = t.param(Shape({N, T, c}), rng.uniform_vec(N * T * c, 0.5, 1.5));
        }
        const int op = static_cast<int>(pick(4));
        if (op == 3 && (t.node(b).op == Op::Param || t.node(b).op == Op::Const)) cur = t.div(cur, b);
        else if (op == 2) cur = t.mul(cur, b);
        else if (op == 1) cur = t.sub(cur, b);
        else cur = t.add(cur, b);
        break;
      }
      case 4: cur = t.layer_norm(cur, pick(2) ? 1e-5 : 0.25); break;
      case 5: {
        const int u = static_cast<int>(pick(4));
        cur = u == 0 ? t.unary_op(Op::Gelu, cur) : u == 1 ? t.tanh(cur) : u == 2 ? t.sigmoid(cur) : t.relu(cur);
        break;
      }
      case 6: {
        const int u = static_cast<int>(pick(4));
        if (u == 0) cur = t.log(t.adds(t.sigmoid(cur), 0.25));
        else if (u == 1) cur = t.exp(t.muls(t.tanh(cur), 0.5));
        else if (u == 2) cur = t.neg(cur);
        else cur = t.muls(t.adds(cur, -0.3), 1.7);
        break;
      }
      case 7: {  // last-axis lanes; softmax over the T axis is not row-local (refused)
        const int u = static_cast<int>(pick(3));
        cur = u == 0 ? t.softmax(cur, -1) : u == 1 ? t.log_softmax(cur, -1) : t.softmax(cur, 1);
        break;
      }
      case 8:
      case 9: {  // causal softmax over [N, T, T] (query row s mod T sees keys <= it), made square first
        if (c != T) cur = t.matmul(cur, new_weight(c, T));
        cur = t.softmax(t.muls(cur, 1.5), -1, true);
        break;
      }
      case 10: {  // a segment break: transpose twice, a T-axis sum broadcast back, or a reshape round trip
        const int u = static_cast<int>(pick(3));
        if (u == 0) cur = t.transpose(t.transpose(cur));
        else if (u == 1) cur = t.add(cur, t.sum(cur, 1, true));
        else {
          const int64_t flat[2] = {N * T, c}, back[3] = {N, T, c};
          cur = t.reshape(t.tanh(t.reshape(cur, flat)), back);
        }
        break;
      }
      default: {  // a [N, T, c] param on the a-side, or a const-only branch joined in
        if (pick(2)) {
          cur = t.add(t.param(Shape({N, T, c}), rng.uniform_vec(N * T * c, -1, 1)), cur);
        } else {
          const Var k = t.constant(Shape({N, T, c}), rng.uniform_vec(N * T * c, -1, 1));
          gr.inputs.push_back(k);
          cur = t.mul(cur, t.tanh(k));
        }
        break;
      }
    }
    pool.push_back(cur);
  }
  c = width(cur);
  switch (pick(4)) {
    case 0: gr.loss = t.mean(cur); break;  // a segment head over flattened rows
    case 1: {  // the next-token loss: logits [N, T, c], class ids [N, T] (opaque, per-node)
      std::vector<double> ids(static_cast<size_t>(N * T));
      for (double& id : ids) id = static_cast<double>(pick(static_cast<uint64_t>(c)));
      gr.loss = t.cross_entropy(cur, t.constant(Shape({N, T}), ids));
      break;
    }
    case 2: gr.loss = t.adds(t.muls(t.sum(cur), 0.5), 1.25); break;  // a serial tail
    default: {
      const Var r = t.constant(Shape({1}), std::vector<double>{0.75});
      gr.loss = t.mul(t.sqrt(t.adds(t.mean(t.mul(cur, cur)), 1.0)), r);
      break;
    }
  }
}

}  // namespace gr::fusetest
