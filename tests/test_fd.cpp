// test_fd.cpp — central finite differences for every op of the op table.
//
// The cases (inputs, shapes, domains) and per-op tolerances come from the one case table,
// support/op_cases.h (PyTorch's OpInfo is the model; elementwise rows get theirs derived). The
// harness makes every input a parameter (or a constant where the case says so), builds L = Σ op(inputs) ⊙ R with a fixed random R (so lane ops
// like softmax get a non-trivial gradient), and compares every element of every parameter's
// analytic gradient with (L(x+ε) − L(x−ε)) / 2ε. A coverage check fails when an op has no case.
#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>
#include <cstdio>
#include <functional>
#include <set>

#include "grad/tape.h"
#include "support/op_cases.h"
#include "support/rng.h"

using namespace gr;
using gr::test::Rng;

namespace {

using gr::test::OpCase;

struct FdResult {
  double max_abs = 0, max_rel = 0;
  int64_t checked = 0;
};

// Builds the case on a fresh tape (inputs first, then the mark), returns the worst errors.
FdResult run_case(const OpCase& c, uint64_t seed, std::set<Op>& seen) {
  Rng rng(0xFD00 + seed);
  Tape t;
  const std::vector<Var> in = gr::test::make_inputs(t, rng, c);
  const gr::test::OpTest tol = gr::test::op_test(c.op);
  const int32_t mark = t.mark();
  // Weights R: built once to the first output's shape, as a constant after the mark each time.
  std::vector<double> weights;
  auto loss_of = [&]() -> Var {
    const Var y = c.build(t, in);
    REQUIRE(t.ok());
    if (weights.empty()) weights = rng.uniform_vec(t.node(y).numel(), -1.0, 1.0);
    const Var r = t.constant(t.node(y).shape, weights);
    return t.sum(t.mul(y, r));
  };
  const Var loss = loss_of();
  for (int32_t id = 0; id < t.size(); ++id) seen.insert(t.node(id).op);
  REQUIRE(t.backward(loss));
  std::vector<std::vector<double>> analytic;
  for (const Var p : in) {
    const auto g = t.grad(p).values();
    analytic.emplace_back(g.begin(), g.end());
  }
  FdResult res;
  const double eps = 1e-6;
  for (size_t k = 0; k < in.size(); ++k) {
    if (t.node(in[k]).op != Op::Param) continue;
    for (size_t e = 0; e < analytic[k].size(); ++e) {
      double* w = t.param_value(in[k]).data() + e;
      const double saved = *w;
      t.reset_to(mark);
      *w = saved + eps;
      const double lp = t.scalar(loss_of());
      t.reset_to(mark);
      *w = saved - eps;
      const double lm = t.scalar(loss_of());
      t.reset_to(mark);
      *w = saved;
      const double fd = (lp - lm) / (2 * eps);
      const double an = analytic[k][e];
      const double err = std::fabs(fd - an);
      const double scale = std::max(std::fabs(fd), std::fabs(an));
      INFO(c.name << ": input " << k << " element " << e << ": analytic " << an << " vs fd " << fd);
      CHECK(err <= tol.fd_atol + tol.fd_rtol * scale);
      res.max_abs = std::max(res.max_abs, err);
      if (scale > 1e-6) res.max_rel = std::max(res.max_rel, err / scale);
      ++res.checked;
    }
  }
  return res;
}

}  // namespace

TEST_CASE("finite differences agree with backward for every op", "[fd]") {
  INFO("ops of kOps without a finite-difference case in support/op_cases.h: " << gr::test::op_cases_missing(gr::test::kUseFd));
  REQUIRE(gr::test::op_cases_missing(gr::test::kUseFd).empty());
  const std::vector<const OpCase*> cases = gr::test::op_cases(gr::test::kUseFd);
  std::set<Op> seen, about;
  double worst_abs = 0, worst_rel = 0;
  int64_t total = 0;
  for (size_t i = 0; i < cases.size(); ++i) {
    const FdResult r = run_case(*cases[i], i, seen);
    about.insert(cases[i]->op);
    worst_abs = std::max(worst_abs, r.max_abs);
    worst_rel = std::max(worst_rel, r.max_rel);
    total += r.checked;
  }
  std::printf("fd: %zu cases, %lld gradient elements, worst abs err %.3g, worst rel err %.3g\n", cases.size(),
              static_cast<long long>(total), worst_abs, worst_rel);
  std::printf("fd ops: %s\n", gr::test::op_list(about).c_str());
  for (const OpInfo& info : kOps) {
    INFO("op without a finite-difference case: " << info.name);
    CHECK(seen.count(info.op) == 1);
  }
}
