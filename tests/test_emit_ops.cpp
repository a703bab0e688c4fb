// test_emit_ops.cpp — the scalar emitter over every op it supports: the emitter's rules are the op
// table's Emit column; every emittable elementwise row, built from the case table
// (support/op_cases.h: a one-element instance in the row's input domains), is emitted and verified bit
// for bit against the tape by the host oracle (as `emit-cuda --verify` does), so a new emittable op
// is emitted and verified with no test edit; and the golden all-ops loss verifies.
#include <catch2/catch.hpp>
#include <cstdio>
#include <fstream>
#include <set>
#include <string>

#include "emit/emit.h"
#include "support/op_cases.h"
#include "support/temp_dir.h"
#include "train/emit_spec.h"

using namespace gr;

namespace {

std::string source_path(const std::string& rel) { return std::string(GR_SOURCE_DIR) + "/" + rel; }

std::string num(double v) {
  char buf[40];
  std::snprintf(buf, sizeof buf, "%.17g", v);
  return buf;
}

}  // namespace

TEST_CASE("emit: the emitter's rules are the op table's Emit column", "[emit]") {
  std::string names;
  for (const OpInfo& info : kOps) {
    INFO(info.name);
    CHECK(emit_has_rule(info.op) == info.emit_scalar);
    if (info.emit_scalar) names += (names.empty() ? "" : ", ") + std::string(info.name);
  }
  CHECK(emit_supported_ops() == names);
}

TEST_CASE("emit: a loss touching every supported op verifies bit for bit", "[emit]") {
  const Spec spec = load_spec(source_path("tests/golden/emit/all_ops.json"));
  SpecEmitter e(spec);
  // Every op the table marks Emit=Yes is in the loss's cone.
  std::set<Op> seen;
  const Tape& t = e.tape();
  std::vector<char> cone(static_cast<size_t>(e.loss().id) + 1, 0);
  cone.back() = 1;
  for (int32_t id = e.loss().id; id >= 0; --id)
    if (cone[static_cast<size_t>(id)]) {
      seen.insert(t.node(id).op);
      if (t.node(id).a >= 0) cone[static_cast<size_t>(t.node(id).a)] = 1;
      if (t.node(id).b >= 0) cone[static_cast<size_t>(t.node(id).b)] = 1;
    }
  for (const OpInfo& info : kOps)
    if (info.emit_scalar) {
      INFO(info.name);
      CHECK(seen.count(info.op));
    }
  // Const-only branches emit no backward code: no gradient local for a node without a parameter upstream.
  for (int32_t id = 0; id <= e.loss().id; ++id) {
    INFO("node " << id);
    const bool has_local = e.source().find("double g" + std::to_string(id) + " = 0.0;") != std::string::npos;
    CHECK(has_local == (cone[static_cast<size_t>(id)] && t.node(id).requires_grad));
  }
  CHECK(e.source().find("gr_emit_grad(g, 4, 0.0);") != std::string::npos);  // "unused": one call, zero
  const EmitVerifyResult r = e.verify();
  INFO(r.difference);
  REQUIRE(r.ok);
  CHECK(r.examples == 12);
  CHECK(r.params == 5);
}

TEST_CASE("emit: every emittable elementwise row of the op table, from the case table, verifies bit for bit",
          "[emit][sweep]") {
  // One spec: per row a one-element case (params a_<op>, b_<op> drawn in the row's domains), the
  // loss the sum of every row's output. verify() compiles the emitted source on the host and
  // compares every parameter gradient with the tape's, bit for bit.
  gr::test::Rng rng(0xE417);
  std::string params, graph, loss;
  std::set<Op> swept;
  for (const OpInfo& info : kOps) {
    if (!info.emit_scalar || !info.elementwise()) continue;
    const gr::test::OpCase c = gr::test::scalar_case(info);
    const std::string name(info.name);
    std::string inputs;
    for (size_t k = 0; k < c.inputs.size(); ++k) {
      const std::string p = std::string(k == 0 ? "a_" : "b_") + name;
      const double v = gr::test::draw(rng, c.inputs[k]).at(0);
      params += (params.empty() ? "" : ", ") + ("\"" + p + "\": {\"shape\": [1], \"init\": {\"values\": [" + num(v) + "]}}");
      inputs += (inputs.empty() ? "\"" : ", \"") + p + "\"";
    }
    std::string node = R"({"id": "y_)" + name + R"(", "op": ")" + name + R"(", "inputs": [)" + inputs + "]";
    if (info.attrs & kAttrScalar) node += ", \"scalar\": " + num(gr::test::op_test(info).scalars[0]);
    graph += (graph.empty() ? "" : ", ") + node + "}";
    if (!loss.empty()) {
      graph += R"(, {"id": "sum_)" + name + R"(", "op": "add", "inputs": [")" + loss + R"(", "y_)" + name + R"("]})";
      loss = "sum_" + name;
    } else {
      loss = "y_" + name;
    }
    swept.insert(info.op);
  }
  REQUIRE(!swept.empty());
  gr::test::TempDir dir("gr_test_emit_ops");
  const std::string path = dir.file("sweep.json");
  std::ofstream(path) << R"({"gradrun": 1, "params": {)" << params << R"(}, "graph": [)" << graph << R"(], "loss": ")" << loss
                      << R"(", "emit": {"signature": "params"}})";
  SpecEmitter e(load_spec(path));
  for (const Op op : swept) {
    INFO(op_name(op));
    CHECK(e.source().find("gr_" + std::string(op_info(op).stem) + "_fwd(") != std::string::npos);
  }
  const EmitVerifyResult r = e.verify();
  INFO(r.difference);
  REQUIRE(r.ok);
  CHECK(r.params == static_cast<int64_t>(e.param_names().size()));
  std::printf("emit sweep: %zu ops emitted and verified: %s\n", swept.size(), gr::test::op_list(swept).c_str());
}

TEST_CASE("emit: every row op, Emit-No fold reduction and window op of the op table is refused, naming its node",
          "[emit][sweep]") {
  // Per Class Row op (and fold reduction marked Emit No: max, ...): a spec x [1] -> op -> sum; per window
  // op (conv2d, pools): x [1,1,1,1] (conv2d: with w [1,1,1,1]; pools: kernel 1); the emitter refuses it
  // at construction.
  std::set<Op> refused;
  for (const OpInfo& info : kOps) {
    if (!info.row() && !(info.fold() && !info.emit_scalar) && !info.window()) continue;
    REQUIRE(!info.emit_scalar);
    const std::string name(info.name);
    gr::test::TempDir dir("gr_test_emit_refuse");
    const std::string path = dir.file("refuse.json");
    const bool conv = info.window() && info.arity == 2;
    const std::string x_shape = info.window() ? "[1, 1, 1, 1]" : "[1]";
    const std::string extra = info.row() ? R"(, "eps": 0.001)" : info.window() && !conv ? R"(, "kernel": 1)" : "";
    std::ofstream(path) << R"({"gradrun": 1, "params": {"x": {"shape": )" << x_shape << R"(, "init": {"values": [1.5]}})"
                        << (conv ? R"(, "w": {"shape": [1, 1, 1, 1], "init": {"values": [0.5]}})" : "") << "},"
                        << R"( "graph": [{"id": "y", "op": ")" << name << R"(", "inputs": ["x")" << (conv ? R"(, "w")" : "")
                        << "]" << extra << "},"
                        << R"( {"id": "loss", "op": "sum", "inputs": ["y"]}], "loss": "loss", "emit": {"signature": "params"}})";
    std::string what;
    try {
      SpecEmitter e(load_spec(path));
    } catch (const std::exception& ex) {
      what = ex.what();
    }
    INFO(name << ": " << what);
    CHECK(what.find(name) != std::string::npos);
    if (what.find(name) != std::string::npos) refused.insert(info.op);
  }
  REQUIRE(!refused.empty());
  std::printf("emit refusals: %zu row, fold and window ops refused, named: %s\n", refused.size(), gr::test::op_list(refused).c_str());
}

TEST_CASE("emit: every batch-statistics op of the op table is refused, naming it", "[emit][sweep]") {
  // Per Class Batch op (batch_norm): in eval mode a [1,1] input holds one element everywhere, so the
  // scalar emitter's own Emit-No refusal is what stops it (a spec cannot reach it: training needs
  // more than one value per channel, which the spec refuses first, also naming the op).
  std::set<Op> refused;
  for (const OpInfo& info : kOps) {
    if (!info.batch()) continue;
    REQUIRE(!info.emit_scalar);
    const std::string name(info.name);
    Tape t;
    t.set_dropout_key({1, 1, false});
    const Var x = t.param(Shape{1}, std::vector<double>{0.5});
    const int64_t one_one[] = {1, 1};
    const Var rm = t.constant(Shape{1}, std::vector<double>{0.25}), rv = t.constant(Shape{1}, std::vector<double>{2.0});
    const Var y = t.batch_op(info.op, t.reshape(x, one_one), rm, rv);
    const Var loss = t.sum(y);
    REQUIRE(t.ok());
    EmitRequest r;
    r.tape = &t;
    r.loss = loss;
    r.params = {x};
    r.signature = EmitSignature::Params;
    std::string what;
    try {
      emit_scalar_cuda(r);
    } catch (const EmitError& e) {
      what = e.what();
    }
    INFO(name << ": " << what);
    CHECK(what.find("does not support " + name) != std::string::npos);
    if (what.find(name) != std::string::npos) refused.insert(info.op);
    // and through a spec: refused before the emitter, naming the op
    gr::test::TempDir dir("gr_test_emit_refuse");
    const std::string path = dir.file("refuse.json");
    std::ofstream(path) << R"({"gradrun": 1, "params": {"x": {"shape": [1], "init": {"values": [1.5]}}},)"
                        << R"( "graph": [{"id": "r", "op": "reshape", "inputs": ["x"], "shape": [1, 1]}, {"id": "y", "op": ")" << name
                        << R"(", "inputs": ["r"]}, {"id": "loss", "op": "sum", "inputs": ["y"]}], "loss": "loss", "emit": {"signature": "params"}})";
    std::string spec_what;
    try {
      SpecEmitter e(load_spec(path));
    } catch (const std::exception& ex) {
      spec_what = ex.what();
    }
    INFO(spec_what);
    CHECK(spec_what.find(name) != std::string::npos);
  }
  REQUIRE(!refused.empty());
  std::printf("emit refusals: %zu batch-statistics ops refused, named: %s\n", refused.size(), gr::test::op_list(refused).c_str());
}

TEST_CASE("emit: embedding (Emit No) is refused, naming its node", "[emit][sweep]") {
  // ids [1] (a const) and a table [1, 1]: every node holds one element, so only the op's own Emit-No
  // refusal can stop it.
  REQUIRE(!op_info(Op::Embedding).emit_scalar);
  gr::test::TempDir dir("gr_test_emit_refuse_embedding");
  const std::string path = dir.file("refuse.json");
  std::ofstream(path) << R"({"gradrun": 1, "params": {"E": {"shape": [1, 1], "init": {"values": [1.5]}}},)"
                      << R"( "consts": {"ids": {"shape": [1], "values": [0]}},)"
                      << R"( "graph": [{"id": "y", "op": "embedding", "inputs": ["ids", "E"]},)"
                      << R"( {"id": "loss", "op": "sum", "inputs": ["y"]}], "loss": "loss", "emit": {"signature": "params"}})";
  std::string what;
  try {
    SpecEmitter e(load_spec(path));
  } catch (const std::exception& ex) {
    what = ex.what();
  }
  INFO(what);
  CHECK(what.find("embedding") != std::string::npos);
}
