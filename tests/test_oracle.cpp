// test_oracle.cpp — an outside oracle: the tape against PyTorch (float64 autograd).
//
// One graph goes through every op of the op table (checked here against kOps, so a new op fails
// this test until the graph covers it): a hand-built network plus one branch per case of the case
// table (support/op_cases.h, where elementwise rows get their cases derived). Its nodes are written generically, straight from the tape
// (op, inputs, attributes, shapes, the exact bits of every param and const, and each elementwise
// node's `torch` expression from its op-table row), to a temp
// directory as a small "program"; tests/oracle/torch_oracle.py interprets that program in torch
// float64 with autograd and writes back the loss, every parameter gradient and every node's value
// as exact bits. The tape's exp/log are its own (faithful, < 1 ulp) and torch sums in its own
// orders, so agreement is to a few ulp, not bit for bit: the loss within kLossTol relative, every
// gradient element within kGradTol relative to max(|g|, 2^-20 · the param's largest |g|), every
// node's value within kValueTol of that node's largest |value|. Figures: docs/verification.md.
//
// The second TEST_CASE proves the comparison can fail: a 1e-9 relative nudge of one gradient
// element, a 1e-10 relative change of one node's value in torch, and a 1e-9 relative change of
// the gradient through that node in torch must each be rejected.
//
// Needs /usr/bin/python3 with torch (Debian's python3-torch); without it the tests report Skipped
// (support/skip.h), which scripts/test counts as a failure because scripts/setup installs torch.
// Set GR_ORACLE_KEEP=1 to keep the temp directory.
//
// The parts (support/oracle_support.h): oracle_graph.cpp builds the graph, oracle_exchange.cpp talks to
// the torch script, oracle_compare.cpp compares; here the test cases.
#include <catch2/catch.hpp>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <optional>
#include <set>
#include <string>

#include "support/op_cases.h"
#include "support/oracle_support.h"
#include "support/skip.h"

using namespace gr::test::oracle;
using gr::DType;
using gr::Op;
using gr::test::TempDir;

namespace {

// The comparison within `tol`: no structural problem, loss, gradients and node values under the gates.
void check_within(const Comparison& c, const Tolerances& tol) {
  INFO(c.summary());
  CHECK(c.problem.empty());
  CHECK(c.loss_rel <= tol.loss);
  CHECK(c.worst_grad_rel <= tol.grad);
  CHECK(c.worst_value_rel <= tol.value);
}

// The running statistics (batch_norm) against torch's, within tol.value; printed with `what` ("f32 ").
void check_states(Graph& g, const OracleResult& r, const Tolerances& tol, const char* what) {
  std::string at;
  const double state_rel = compare_states(g, r, at);
  std::printf("oracle: %srunning statistics (batch_norm) worst rel err %.3g (at %s)\n", what, state_rel, at.c_str());
  INFO("running statistics: " << at);
  CHECK(state_rel <= tol.value);
}

}  // namespace

TEST_CASE("tape agrees with a PyTorch float64 oracle on every op", "[oracle]") {
  const auto t0 = std::chrono::steady_clock::now();
  Graph g;
  build_and_backward(g);
  check_coverage(g);

  TempDir dir("gr_oracle", std::getenv("GR_ORACLE_KEEP") != nullptr);
  std::string log;
  const std::optional<OracleResult> r = oracle_answer(g, dir, log);
  if (!r) GR_SKIP("torch", "torch not available (" << log << ")");

  const Comparison c = compare(g, *r);
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::printf("%s\noracle: %d nodes, %zu params, %zu case-table branches, loss %.17g; %.2f s\n", c.summary().c_str(),
              g.tape.size(), g.params.size(), g.cases.size(), g.tape.scalar(g.loss), secs);
  std::set<Op> ops;
  for (int32_t id = 0; id < g.tape.size(); ++id) ops.insert(g.tape.node(id).op);
  std::printf("oracle ops: %s\n", gr::test::op_list(ops).c_str());
  if (!c.pass()) dir.keep = true;  // leave program.txt / result.txt for diagnosis
  check_within(c, kF64Tol);
  check_states(g, *r, kF64Tol, "");
}

TEST_CASE("the oracle comparison rejects small discrepancies", "[oracle]") {
  Graph g;
  build_and_backward(g);

  TempDir dir("gr_oracle", std::getenv("GR_ORACLE_KEEP") != nullptr);
  std::string log;
  const Run run = run_oracle(g, dir, true, log);
  if (run == Run::Skipped) GR_SKIP("torch", "torch not available (" << log << ")");
  INFO(log);
  REQUIRE(run == Run::Ok);
  std::string err;
  OracleResult good, fwd, bwd;
  const bool read = read_result(dir.file("result.txt"), good, err) &&
                    read_result(dir.file("result_fwd.txt"), fwd, err) &&
                    read_result(dir.file("result_bwd.txt"), bwd, err);
  INFO(err);
  REQUIRE(read);

  // The honest answer passes (so the failures below are caused by the tampering alone).
  const Comparison base = compare(g, good);
  INFO(base.summary());
  REQUIRE(base.pass());

  {  // one gradient element nudged by 1e-9 relative
    OracleResult r = good;
    auto& gv = r.grads.at(g.params.back().id);
    const size_t e = gv.size() / 2;
    gv[e] = gv[e] * (1.0 + 1e-9);
    const Comparison c = compare(g, r);
    std::printf("oracle (one torch gradient element x (1 + 1e-9)): %s\n", c.summary().c_str());
    CHECK(c.worst_grad_rel > kGradTol);
    CHECK_FALSE(c.pass());
  }
  {  // the loss nudged by 1e-13 relative
    OracleResult r = good;
    r.loss = r.loss * (1.0 + 1e-13);
    const Comparison c = compare(g, r);
    CHECK(c.loss_rel > kLossTol);
    CHECK_FALSE(c.pass());
  }
  {  // torch with one node's value scaled by 1 + 1e-10
    const Comparison c = compare(g, fwd);
    std::printf("oracle (torch value of %s x (1 + 1e-10)): %s\n", node_label(g.tape, g.mutate.id).c_str(),
                c.summary().c_str());
    CHECK(c.loss_rel > kLossTol);
    CHECK_FALSE(c.pass());
  }
  {  // torch with the gradient through one node scaled by 1 + 1e-9 (values untouched)
    const Comparison c = compare(g, bwd);
    std::printf("oracle (torch gradient through %s x (1 + 1e-9)): %s\n", node_label(g.tape, g.mutate.id).c_str(),
                c.summary().c_str());
    CHECK(c.loss_rel <= kLossTol);
    CHECK(c.worst_value_rel <= kValueTol);
    CHECK(c.worst_grad_rel > kGradTol);
    CHECK_FALSE(c.pass());
  }
}

TEST_CASE("the f32 tape agrees with a PyTorch float32 oracle on every op", "[oracle][f32]") {
  Graph g(DType::F32);
  build_and_backward(g);
  check_coverage(g);
  TempDir dir("gr_oracle32", std::getenv("GR_ORACLE_KEEP") != nullptr);
  std::string log;
  const std::optional<OracleResult> r = oracle_answer(g, dir, log);
  if (!r) GR_SKIP("torch", "torch not available (" << log << ")");
  const Comparison c = compare(g, *r, kF32Tol);
  std::printf("%s (f32 tape vs torch float32)\n", c.summary().c_str());
  if (!c.pass()) dir.keep = true;
  check_within(c, kF32Tol);
  check_states(g, *r, kF32Tol, "f32 ");

  // It computed in float (against float64 torch it is off by float rounding, far beyond the f64
  // gates), and the f32 gate still rejects a 1e-3 relative error in one gradient element.
  Graph g64;
  build_and_backward(g64);
  CHECK(std::fabs(g.tape.scalar(g.loss) - g64.tape.scalar(g64.loss)) > kLossTol * std::fabs(g64.tape.scalar(g64.loss)));
  OracleResult nudged = *r;
  auto& gv = nudged.grads.at(g.params.front().id);
  size_t at = 0;
  for (size_t e = 0; e < gv.size(); ++e)
    if (std::fabs(gv[e]) > std::fabs(gv[at])) at = e;
  gv[at] = gv[at] * (1.0 + 1e-3);
  CHECK_FALSE(compare(g, nudged, kF32Tol).pass());
}
