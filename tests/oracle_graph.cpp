// oracle_graph.cpp — the PyTorch oracle's graph (support/oracle_support.h): every op of the op table,
// a hand-built network plus one branch per case of the case table (support/op_cases.h), and the
// check that it covers them.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cstdint>
#include <vector>

#include "support/op_cases.h"
#include "support/oracle_support.h"
#include "support/rng.h"

namespace gr::test::oracle {

// Every op of the table, broadcasting in all the listed forms, fan-out, consts and params of
// several shapes; the loss is a sum of positive scalars, one per branch. Shapes in the comments.
void build_graph(Graph& g) {
  Tape& t = g.tape;
  Rng rng(0x6772616472756eULL);  // "gradrun"; SplitMix64 (support/rng.h): the inputs never depend on the library
  const auto param = [&](Shape s, double lo, double hi) {
    const Var p = t.param(s, rng.uniform_vec(s.numel(), lo, hi));
    g.params.push_back(p);
    return p;
  };
  const auto constant = [&](Shape s, double lo, double hi) { return t.constant(s, rng.uniform_vec(s.numel(), lo, hi)); };

  const Var X = constant({4, 6}, -1.0, 1.0);
  const Var W1 = param({6, 5}, -0.8, 0.8);
  const Var b1 = param({5}, -0.5, 0.5);
  const Var s1 = param({1}, 0.5, 1.5);
  const Var u = param({4, 1}, -1.0, 1.0);
  const Var v = param({1, 5}, -1.0, 1.0);
  const Var W2 = param({5, 3}, -1.0, 1.0);
  const Var A3 = param({3, 4, 5}, -1.0, 1.0);
  const Var Bk = param({1, 5, 3}, -1.0, 1.0);
  const Var Y = constant({4, 5}, -0.5, 0.5);
  const Var Cc = constant({2, 6}, -1.0, 1.0);
  std::vector<double> onehot(4 * 3, 0.0);
  for (int64_t r = 0; r < 4; ++r) onehot[static_cast<size_t>(r * 3 + static_cast<int64_t>(rng.next() % 3))] = 1.0;
  const Var T = t.constant({4, 3}, onehot);

  // Dense branch.
  const Var h = t.add(t.matmul(X, W1), b1);           // [4,5] + [5]
  const Var hc = t.sub(h, t.mean(h, 1, true));        // [4,5] − [4,1]   (h fans out)
  const Var z = t.mul(hc, s1);                        // [4,5] · [1]
  const Var a = t.add(z, t.mul(u, v));                // [4,1] · [1,5] → [4,5]
  const Var r = t.relu(a);                            // a is used four times: relu, sigmoid, a·a
  const Var sg = t.sigmoid(a);
  const Var th = t.tanh(t.sub(r, sg));
  const Var lg = t.log(t.adds(t.exp(t.muls(th, 0.5)), 1.0));  // log of a positive value
  const Var sq = t.sqrt(t.adds(t.mul(a, a), 0.25));           // sqrt of a positive value
  const Var d = t.div(t.div(lg, sq), t.exp(b1));              // [4,5] / [4,5], then / [5]
  const Var logits = t.matmul(t.neg(d), W2);                  // [4,3]
  const Var ce = t.softmax_cross_entropy(logits, T);
  const Var nll = t.neg(t.mean(t.log_softmax(logits, 1)));    // positive
  const Var mse = t.mse(th, Y);

  // Batched branch.
  const Var P = t.bmm(A3, Bk);                        // [3,4,5] · [1,5,3] → [3,4,3]
  const Var Pt = t.transpose(t.softmax(P, 1));        // softmax on the middle axis → [3,3,4]
  const Var Q = t.bmm(Pt, A3);                        // [3,3,4] · [3,4,5] → [3,3,5]  (A3 fans out)
  const int64_t to_rows[] = {-1, 5};
  const Var R2 = t.reshape(t.softmax(Q, -1), to_rows);  // [9,5]
  const int64_t s_lo[] = {2, -4}, s_hi[] = {-1, 5};
  const Var S = t.slice(R2, s_lo, s_hi);              // rows 2..7, cols 1..4 → [6,4]
  const int64_t s2_lo[] = {0, 0}, s2_hi[] = {6, 2};
  const Var S2 = t.slice(R2, s2_lo, s2_hi);           // [6,2]
  const Var K = t.concat(t.concat(S, S2, 1), t.exp(Cc), 0);  // [6,6] ++ [2,6] (a const branch) → [8,6]
  const Var col = t.sum(K, 0);                        // [6]
  const Var tb = t.add(t.add(t.mean(col), t.sum(t.mean(K, 1, true))), t.sum(col, 0));  // [1] each
  const Var tk = t.muls(t.sum(t.sum(K, -1, true)), 0.125);

  g.loss = t.add(t.add(t.add(ce, nll), t.add(mse, tb)), tk);
  g.mutate = th;

  // Every case of the case table (support/op_cases.h) the oracle takes, as one more branch each:
  // loss += 2^-10 · mean(y · y) over the case's output y (small, so the tampered variants below still
  // move the loss beyond kLossTol). Elementwise rows reach torch through their row's
  // `torch` expression, so a new elementwise op is checked here with no edit.
  // Each case draws from its own stream, seeded by its name: a new op's cases (scripts/check-new-op)
  // leave every other case's inputs, and so its rounding against torch, as they were.
  for (const OpCase* c : op_cases(kUseOracle)) {
    uint64_t seed = 0x0AC1E ^ 0xcbf29ce484222325ULL;  // FNV-1a of the name
    for (const char ch : c->name) seed = (seed ^ static_cast<unsigned char>(ch)) * 0x100000001b3ULL;
    Rng crng(seed);
    const std::vector<Var> in = make_inputs(t, crng, *c);
    for (size_t k = 0; k < in.size(); ++k)
      if (t.node(in[k]).op == Op::Param && std::find(g.params.begin(), g.params.end(), in[k]) == g.params.end())
        g.params.push_back(in[k]);
    const Var y = c->build(t, in);
    g.cases.emplace_back(c->name, c->op);
    g.loss = t.add(g.loss, t.muls(t.mean(t.mul(y, y)), 0x1p-10));  // 2^-10: the hand graph still dominates
  }
}

// Every node is an ancestor of the loss, every op of the table occurs, every param got a gradient.
void check_coverage(Graph& g) {
  Tape& t = g.tape;
  std::vector<char> reaches(static_cast<size_t>(t.size()), 0);
  reaches[static_cast<size_t>(g.loss.id)] = 1;
  for (int32_t id = g.loss.id; id >= 0; --id) {
    if (!reaches[static_cast<size_t>(id)]) continue;
    const gr::Node& n = t.node(id);
    if (n.a >= 0) reaches[static_cast<size_t>(n.a)] = 1;
    if (n.b >= 0) reaches[static_cast<size_t>(n.b)] = 1;
    if (n.c >= 0) reaches[static_cast<size_t>(n.c)] = 1;
  }
  std::vector<char> seen(gr::kOpCount, 0);
  for (int32_t id = 0; id < t.size(); ++id) {
    INFO(node_label(t, id) << " does not influence the loss");
    CHECK(reaches[static_cast<size_t>(id)]);
    seen[static_cast<size_t>(t.node(id).op)] = 1;
  }
  for (const gr::OpInfo& info : gr::kOps) {
    INFO("op '" << info.name << "' is not in the oracle graph");
    CHECK(seen[static_cast<size_t>(info.op)]);
    INFO("elementwise, row or fold op '" << info.name << "' has no torch expression in kernels/gr_op_table.h");
    CHECK((!(info.elementwise() || info.row() || info.fold() || info.window()) || !info.torch.empty()));
  }
  INFO("ops of kOps without an oracle case in support/op_cases.h: " << op_cases_missing(kUseOracle));
  CHECK(op_cases_missing(kUseOracle).empty());
  for (const Var p : g.params) {
    INFO(node_label(t, p.id) << " got no gradient");
    CHECK(t.node(p).touched);
    const auto gv = t.grad(p).values();
    CHECK(std::any_of(gv.begin(), gv.end(), [](double x) { return x != 0.0; }));
  }
}

void build_and_backward(Graph& g) {
  build_graph(g);
  const bool built = g.tape.ok();
  const bool back = built && g.tape.backward(g.loss);
  INFO(g.tape.error());
  REQUIRE(built);
  REQUIRE(back);
  REQUIRE(g.tape.node(g.loss).numel() == 1);
}

}  // namespace gr::test::oracle
