// test_frozen.cpp — frozen parameters ("trainable": false, docs/spec.md) on the CPU tape: the
// backward skips every gradient that only flows into frozen leaves (the trunk's nodes get no
// gradient memory and are never visited), the head's gradients are those of the all-trainable
// model bit for bit, the optimizer leaves frozen parameters alone (values, moments, clip share),
// and Tape::freeze refuses a parameter some op already consumed.
#include <catch2/catch.hpp>
#include <cstring>
#include <string>
#include <vector>

#include "grad/tape.h"
#include "io/errors.h"
#include "spec/dataset.h"
#include "spec/spec.h"
#include "train/model.h"

using namespace gr;

namespace {

// A 3-layer MLP on consts: trunk dense layers t1, t2 and a declared head W/b.
std::string mlp_spec(bool frozen) {
  const std::string trainable = frozen ? ", \"trainable\": false" : "";
  return R"({"gradrun": 1, "seed": 3,
    "consts": {"x": {"shape": [4, 3], "values": [0.1, -0.2, 0.3, 0.4, 0.5, -0.6, 0.7, 0.8, 0.9, -1.0, 1.1, 1.2]},
               "y": {"shape": [4, 2], "values": [1, 0, 0, 1, 1, 0, 0, 1]}},
    "params": {"W": {"shape": [5, 2], "init": "xavier_uniform"}, "b": {"shape": [2], "init": "zeros"}},
    "graph": [
      {"id": "t1", "layer": "dense", "inputs": ["x"], "units": 6, "activation": "tanh")" + trainable + R"(},
      {"id": "t2", "layer": "dense", "inputs": ["t1"], "units": 5, "activation": "relu")" + trainable + R"(},
      {"id": "z", "op": "matmul", "inputs": ["t2", "W"]},
      {"id": "logits", "op": "add", "inputs": ["z", "b"]},
      {"id": "loss", "op": "softmax_cross_entropy", "inputs": ["logits", "y"]}],
    "loss": "loss",
    "optimizer": {"kind": "adam", "lr": 0.1, "l2": 0.5, "clip": 0.01}})";
}

struct Backward {
  int visited = 0;                 // non-leaf nodes whose gradient backward computed
  std::vector<double> head_grads;  // dW then db
  std::vector<bool> param_touched;
};

Backward run_backward(Model& m) {
  const std::vector<Var>& nodes = m.record(m.data().train, {});
  Tape& t = m.tape();
  REQUIRE(t.backward(nodes[static_cast<size_t>(m.program().loss)]));
  Backward r;
  for (int32_t id = 0; id < t.size(); ++id) {
    const Node& n = t.node(id);
    if (n.op != Op::Param && n.op != Op::Const && n.touched) ++r.visited;
  }
  for (const Var p : m.params()) r.param_touched.push_back(t.node(p).touched);
  for (size_t k = 0; k < 2; ++k) {  // W and b are parameters 0 and 1 (declared params come first)
    const auto g = t.grad(m.params()[k]).values();
    r.head_grads.insert(r.head_grads.end(), g.begin(), g.end());
  }
  return r;
}

}  // namespace

TEST_CASE("frozen trunk: backward skips its gradient work, the head's gradients are unchanged", "[frozen]") {
  const Spec all = parse_spec(mlp_spec(false), "all.json"), frz = parse_spec(mlp_spec(true), "frozen.json");
  Model ma(all, load_datasets(all)), mf(frz, load_datasets(frz));
  const Backward a = run_backward(ma), f = run_backward(mf);
  // Trainable: t1 (matmul, add, tanh), t2 (matmul, add, relu), z, logits, loss = 9 nodes.
  CHECK(a.visited == 9);
  // Frozen trunk: only z, logits and loss; nothing inside t1 or t2 is visited.
  CHECK(f.visited == 3);
  CHECK(f.param_touched == std::vector<bool>{true, true, false, false, false, false});
  CHECK(a.param_touched == std::vector<bool>{true, true, true, true, true, true});
  // Same init (streams by registration order), same forward: the head's gradient is the same bits.
  REQUIRE(a.head_grads.size() == f.head_grads.size());
  CHECK(std::memcmp(a.head_grads.data(), f.head_grads.data(), a.head_grads.size() * sizeof(double)) == 0);
  // No gradient memory for the trunk's nodes: backward never reached them.
  Tape& t = mf.tape();
  for (int32_t id = 0; id < t.size(); ++id)
    if (t.node(id).op != Op::Param && t.node(id).op != Op::Const && !t.node(id).requires_grad) CHECK(t.node(id).grad == nullptr);
  mf.reset();
  ma.reset();
}

TEST_CASE("frozen parameters stay out of the optimizer: no moments, no update, no L2, no clip share", "[frozen]") {
  const Spec frz = parse_spec(mlp_spec(true), "frozen.json");
  Model m(frz, load_datasets(frz));
  Optimizer opt = m.make_optimizer();
  REQUIRE(opt.count() == 2);  // W and b only
  CHECK(m.param_index(opt.param(0)) == 0);
  CHECK(m.param_index(opt.param(1)) == 1);
  std::vector<std::vector<double>> before;
  for (const Var p : m.params()) before.emplace_back(m.tape().param_value(p).begin(), m.tape().param_value(p).end());
  for (int step = 0; step < 3; ++step) {
    const std::vector<Var>& nodes = m.record(m.data().train, {});
    REQUIRE(m.tape().backward(nodes[static_cast<size_t>(m.program().loss)]));
    opt.step(m.tape());
    m.reset();
  }
  for (size_t k = 0; k < m.params().size(); ++k) {
    const auto now = m.tape().param_value(m.params()[k]);
    const bool same = std::memcmp(now.data(), before[k].data(), now.size() * sizeof(double)) == 0;
    CHECK(same == !m.program().params[k].trainable);  // frozen: the same bits; the head moved
  }
}

TEST_CASE("Tape::freeze refuses a parameter that an op already consumed, and a non-parameter", "[frozen]") {
  Tape t;
  const Var w = t.param(Shape{2}, std::vector<double>{1.0, 2.0});
  const Var c = t.constant(Shape{2}, std::vector<double>{3.0, 4.0});
  t.mul(w, c);
  CHECK_THROWS_AS(t.freeze(w), Error);
  CHECK_THROWS_AS(t.freeze(c), Error);
  const Var v = t.param(Shape{2}, std::vector<double>{1.0, 2.0});
  t.freeze(v);
  CHECK_FALSE(t.node(v).requires_grad);
  CHECK_FALSE(t.node(t.mul(v, c)).requires_grad);
}
