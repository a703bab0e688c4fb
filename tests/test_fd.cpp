// test_fd.cpp — central finite differences for every op of the op table.
//
// Each case declares its inputs (shape and domain) and tolerance in ONE table (kFdCases), the way
// PyTorch's OpInfo keeps per-op metadata out of test bodies. The harness makes every input a
// parameter (or a one-hot constant), builds L = Σ op(inputs) ⊙ R with a fixed random R (so lane ops
// like softmax get a non-trivial gradient), and compares every element of every parameter's
// analytic gradient with (L(x+ε) − L(x−ε)) / 2ε. A coverage check fails when an op has no case.
#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>
#include <cstdio>
#include <functional>
#include <set>

#include "grad/tape.h"
#include "support/rng.h"

using namespace gr;
using gr::test::Rng;

namespace {

enum class Domain {
  Any,       // uniform in [-2, 2]
  Positive,  // uniform in [0.5, 2.5]  (log, sqrt, divisors)
  Kinkless,  // |x| in [0.2, 2], random sign: keeps relu away from its kink at 0
  OneHot,    // a constant one-hot matrix (softmax cross-entropy targets)
};

struct FdInput {
  Shape shape;
  Domain domain = Domain::Any;
};

struct FdCase {
  const char* name;
  std::vector<FdInput> inputs;
  std::function<Var(Tape&, const std::vector<Var>&)> build;
  double rtol = 1e-6;
  double atol = 1e-8;
};

std::vector<double> draw(Rng& rng, const FdInput& in) {
  const int64_t n = in.shape.numel();
  std::vector<double> v(static_cast<size_t>(n), 0.0);
  switch (in.domain) {
    case Domain::Any: return rng.uniform_vec(n, -2.0, 2.0);
    case Domain::Positive: return rng.uniform_vec(n, 0.5, 2.5);
    case Domain::Kinkless:
      for (double& x : v) x = rng.uniform(0.2, 2.0) * (rng.next() & 1 ? 1.0 : -1.0);
      return v;
    case Domain::OneHot: {
      const int64_t cols = in.shape[in.shape.rank() - 1];
      for (int64_t r = 0; r < n / cols; ++r) v[static_cast<size_t>(r * cols + static_cast<int64_t>(rng.next() % cols))] = 1.0;
      return v;
    }
  }
  return v;
}

using B = const std::vector<Var>&;
const int64_t kSliceStarts[] = {1, -4}, kSliceStops[] = {3, 5};
const int64_t kReshapeTo[] = {2, -1};

const std::vector<FdCase> kFdCases = {
    {"add", {{{3, 4}}, {{3, 4}}}, [](Tape& t, B v) { return t.add(v[0], v[1]); }},
    {"add row broadcast", {{{3, 4}}, {{4}}}, [](Tape& t, B v) { return t.add(v[0], v[1]); }},
    {"add outer broadcast", {{{3, 1}}, {{1, 4}}}, [](Tape& t, B v) { return t.add(v[0], v[1]); }},
    {"add scalar broadcast", {{{2, 3, 4}}, {{1}}}, [](Tape& t, B v) { return t.add(v[0], v[1]); }},
    {"sub", {{{3, 4}}, {{3, 1}}}, [](Tape& t, B v) { return t.sub(v[0], v[1]); }},
    {"mul", {{{3, 4}}, {{3, 4}}}, [](Tape& t, B v) { return t.mul(v[0], v[1]); }},
    {"mul broadcast", {{{2, 3, 4}}, {{3, 1}}}, [](Tape& t, B v) { return t.mul(v[0], v[1]); }},
    {"mul fan-out x*x", {{{5}}}, [](Tape& t, B v) { return t.mul(v[0], v[0]); }},
    {"div", {{{3, 4}}, {{3, 4}, Domain::Positive}}, [](Tape& t, B v) { return t.div(v[0], v[1]); }},
    {"div broadcast", {{{3, 4}}, {{4}, Domain::Positive}}, [](Tape& t, B v) { return t.div(v[0], v[1]); }},
    {"neg", {{{3, 4}}}, [](Tape& t, B v) { return t.neg(v[0]); }},
    {"adds", {{{3, 4}}}, [](Tape& t, B v) { return t.adds(v[0], 0.7); }},
    {"muls", {{{3, 4}}}, [](Tape& t, B v) { return t.muls(v[0], -1.3); }},
    {"relu", {{{3, 4}, Domain::Kinkless}}, [](Tape& t, B v) { return t.relu(v[0]); }},
    {"sigmoid", {{{3, 4}}}, [](Tape& t, B v) { return t.sigmoid(v[0]); }},
    {"tanh", {{{3, 4}}}, [](Tape& t, B v) { return t.tanh(v[0]); }},
    {"exp", {{{3, 4}}}, [](Tape& t, B v) { return t.exp(v[0]); }},
    {"log", {{{3, 4}, Domain::Positive}}, [](Tape& t, B v) { return t.log(v[0]); }},
    {"sqrt", {{{3, 4}, Domain::Positive}}, [](Tape& t, B v) { return t.sqrt(v[0]); }},
    {"sum", {{{3, 4}}}, [](Tape& t, B v) { return t.sum(v[0]); }},
    {"mean", {{{3, 4}}}, [](Tape& t, B v) { return t.mean(v[0]); }},
    {"sum axis 0", {{{3, 4}}}, [](Tape& t, B v) { return t.sum(v[0], 0); }},
    {"sum axis 1 keepdims", {{{2, 3, 4}}}, [](Tape& t, B v) { return t.sum(v[0], 1, true); }},
    {"mean axis -1", {{{2, 3, 4}}}, [](Tape& t, B v) { return t.mean(v[0], -1); }},
    {"matmul", {{{3, 4}}, {{4, 5}}}, [](Tape& t, B v) { return t.matmul(v[0], v[1]); }},
    {"bmm", {{{2, 3, 4}}, {{2, 4, 5}}}, [](Tape& t, B v) { return t.bmm(v[0], v[1]); }},
    {"bmm broadcast batch", {{{1, 3, 4}}, {{3, 4, 2}}}, [](Tape& t, B v) { return t.bmm(v[0], v[1]); }},
    {"transpose", {{{2, 3, 4}}}, [](Tape& t, B v) { return t.transpose(v[0]); }},
    {"reshape", {{{3, 4}}}, [](Tape& t, B v) { return t.reshape(v[0], kReshapeTo); }},
    {"softmax last axis", {{{3, 5}}}, [](Tape& t, B v) { return t.softmax(v[0], -1); }},
    {"softmax middle axis", {{{2, 3, 4}}}, [](Tape& t, B v) { return t.softmax(v[0], 1); }},
    {"log_softmax", {{{3, 5}}}, [](Tape& t, B v) { return t.log_softmax(v[0], 0); }},
    {"softmax_cross_entropy", {{{4, 5}}, {{4, 5}, Domain::OneHot}},
     [](Tape& t, B v) { return t.softmax_cross_entropy(v[0], v[1]); }},
    {"softmax_cross_entropy soft targets", {{{3, 4}}, {{3, 4}, Domain::Positive}},
     [](Tape& t, B v) { return t.softmax_cross_entropy(v[0], v[1]); }},
    {"slice", {{{4, 5}}}, [](Tape& t, B v) { return t.slice(v[0], kSliceStarts, kSliceStops); }},
    {"concat axis 0", {{{2, 3}}, {{1, 3}}}, [](Tape& t, B v) { return t.concat(v[0], v[1], 0); }},
    {"concat axis -1", {{{2, 2, 3}}, {{2, 2, 1}}}, [](Tape& t, B v) { return t.concat(v[0], v[1], -1); }},
    {"mse composite", {{{3, 4}}, {{3, 4}}}, [](Tape& t, B v) { return t.mse(v[0], v[1]); }},
    {"fan-out composite", {{{6}}},
     [](Tape& t, B v) {
       const Var x = v[0];
       const Var a = t.mul(t.tanh(x), x);
       const Var b = t.div(t.exp(t.muls(x, 0.5)), t.adds(t.mul(x, x), 1.0));
       return t.add(t.sub(a, b), t.sigmoid(a));
     }},
};

struct FdResult {
  double max_abs = 0, max_rel = 0;
  int64_t checked = 0;
};

// Builds the case on a fresh tape (inputs first, then the mark), returns the worst errors.
FdResult run_case(const FdCase& c, uint64_t seed, std::set<Op>& seen) {
  Rng rng(0xFD00 + seed);
  Tape t;
  std::vector<Var> in;
  for (const FdInput& fi : c.inputs) {
    const std::vector<double> vals = draw(rng, fi);
    in.push_back(fi.domain == Domain::OneHot ? t.constant(fi.shape, vals) : t.param(fi.shape, vals));
  }
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
      CHECK(err <= c.atol + c.rtol * scale);
      res.max_abs = std::max(res.max_abs, err);
      if (scale > 1e-6) res.max_rel = std::max(res.max_rel, err / scale);
      ++res.checked;
    }
  }
  return res;
}

}  // namespace

TEST_CASE("finite differences agree with backward for every op", "[fd]") {
  std::set<Op> seen;
  double worst_abs = 0, worst_rel = 0;
  int64_t total = 0;
  for (size_t i = 0; i < kFdCases.size(); ++i) {
    const FdResult r = run_case(kFdCases[i], i, seen);
    worst_abs = std::max(worst_abs, r.max_abs);
    worst_rel = std::max(worst_rel, r.max_rel);
    total += r.checked;
  }
  std::printf("fd: %zu cases, %lld gradient elements, worst abs err %.3g, worst rel err %.3g\n", kFdCases.size(),
              static_cast<long long>(total), worst_abs, worst_rel);
  for (const OpInfo& info : kOps) {
    INFO("op without a finite-difference case: " << info.name);
    CHECK(seen.count(info.op) == 1);
  }
}
