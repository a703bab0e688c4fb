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
#include <catch2/catch.hpp>

#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <optional>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "grad/op_table.h"
#include "grad/tape.h"
#include "support/op_cases.h"
#include "support/skip.h"
#include "support/temp_dir.h"

namespace {

using gr::Op;
using gr::Shape;
using gr::DType;
using gr::Tape;
using gr::Var;

constexpr double kLossTol = 4e-15;   // relative, on the scalar loss
constexpr double kGradTol = 1e-12;   // per element, relative to max(|g_torch|, floor)
constexpr double kValueTol = 1e-13;  // per node: max |diff| relative to max |value|
struct Tolerances {
  double loss, grad, value;
  double floor;  // of a gradient element's scale, relative to its param's largest |g|
};
constexpr Tolerances kF64Tol{kLossTol, kGradTol, kValueTol, 0x1p-20};
// The f32 tape against torch float32: both round every op to float, in different orders (torch's
// blocked sums, its own expf), so they agree to a few float ulps, scaled by the sums' lengths.
// Measured worst (this graph): loss 9.3e-8, gradient 3.1e-5 (normwise 4.0e-7), value 4.4e-7.
// Gates ~5x that; the floor is 2^-12 of the param's largest |g| (float cancellation leaves
// ~1e-7 of the scale in an element).
constexpr Tolerances kF32Tol{5e-7, 1.6e-4, 2.2e-6, 0x1p-12};
constexpr const char* kPython = "/usr/bin/python3";

// SplitMix64 (Steele, Lea, Flood 2014), written out so the inputs never depend on the library.
struct SplitMix64 {
  std::uint64_t s;
  std::uint64_t next() {
    std::uint64_t z = (s += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
  }
  double unit() { return static_cast<double>(next() >> 11) * 0x1p-53; }  // [0, 1)
  double uniform(double a, double b) { return a + (b - a) * unit(); }
  int64_t below(int64_t n) { return static_cast<int64_t>(next() % static_cast<std::uint64_t>(n)); }
};

std::string hex_bits(double x) {
  std::uint64_t b;
  std::memcpy(&b, &x, sizeof b);
  char buf[17];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(b));
  return buf;
}

bool parse_hex(const std::string& h, double& x) {
  if (h.size() != 16) return false;
  char* end = nullptr;
  const unsigned long long b = std::strtoull(h.c_str(), &end, 16);
  if (end != h.c_str() + 16) return false;
  const std::uint64_t u = b;
  std::memcpy(&x, &u, sizeof x);
  return true;
}

// ---- the graph -----------------------------------------------------------------------------------
struct Graph {
  explicit Graph(DType real = DType::F64) : tape(real) {}
  Tape tape;
  Var loss;
  Var mutate;  // the node the "wrong answer" variants of the oracle tamper with
  std::vector<Var> params;
  std::vector<std::pair<std::string, Op>> cases;  // the case-table branches (name, op)
};

std::vector<double> random_values(SplitMix64& rng, int64_t n, double lo, double hi) {
  std::vector<double> v(static_cast<size_t>(n));
  for (double& x : v) x = rng.uniform(lo, hi);
  return v;
}

// Every op of the table, broadcasting in all the listed forms, fan-out, consts and params of
// several shapes; the loss is a sum of positive scalars, one per branch. Shapes in the comments.
void build_graph(Graph& g) {
  Tape& t = g.tape;
  SplitMix64 rng{0x6772616472756eULL};  // "gradrun"
  const auto param = [&](Shape s, double lo, double hi) {
    const Var p = t.param(s, random_values(rng, s.numel(), lo, hi));
    g.params.push_back(p);
    return p;
  };
  const auto constant = [&](Shape s, double lo, double hi) { return t.constant(s, random_values(rng, s.numel(), lo, hi)); };

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
  for (int64_t r = 0; r < 4; ++r) onehot[static_cast<size_t>(r * 3 + rng.below(3))] = 1.0;
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
  for (const gr::test::OpCase* c : gr::test::op_cases(gr::test::kUseOracle)) {
    uint64_t seed = 0x0AC1E ^ 0xcbf29ce484222325ULL;  // FNV-1a of the name
    for (const char ch : c->name) seed = (seed ^ static_cast<unsigned char>(ch)) * 0x100000001b3ULL;
    gr::test::Rng crng(seed);
    const std::vector<Var> in = gr::test::make_inputs(t, crng, *c);
    for (size_t k = 0; k < in.size(); ++k)
      if (t.node(in[k]).op == Op::Param && std::find(g.params.begin(), g.params.end(), in[k]) == g.params.end())
        g.params.push_back(in[k]);
    const Var y = c->build(t, in);
    g.cases.emplace_back(c->name, c->op);
    g.loss = t.add(g.loss, t.muls(t.mean(t.mul(y, y)), 0x1p-10));  // 2^-10: the hand graph still dominates
  }
}

// ---- the exchange ----------------------------------------------------------------------------------
std::string program_text(const Graph& g) {
  const Tape& t = g.tape;
  std::ostringstream o;
  o << "gradrun-oracle 1\nloss " << g.loss.id << "\nmutate " << g.mutate.id << "\n";
  for (int32_t id = 0; id < t.size(); ++id) {
    const gr::Node& n = t.node(id);
    o << "node " << id << ' ' << gr::op_name(n.op) << ' ' << n.a << ' ' << n.b << ' ' << n.axis << ' '
      << (n.keepdims ? 1 : 0) << ' ' << hex_bits(n.scalar) << ' ' << n.shape.rank();
    for (int64_t dim : n.shape.dims()) o << ' ' << dim;
    for (int d = 0; d < n.shape.rank(); ++d) o << ' ' << n.starts[d];
    o << '\n';
    // An elementwise node carries its row's torch expression (over a, b and s): torch_oracle.py
    // evaluates it, so the oracle needs no edit for a new elementwise op.
    // A fold reduction's (max, ...) is over a, dim d and keepdim k, marked by a `fold` record.
    const gr::OpInfo& info = gr::op_info(n.op);
    if (info.elementwise() || info.row() || info.fold() || info.window()) o << "expr " << id << ' ' << info.torch << '\n';
    if (info.fold()) o << "fold " << id << '\n';
    if (n.causal) o << "causal " << id << '\n';  // a causal softmax: torch masks the keys after each query
    // A window op's (conv2d, pools) resolved geometry: its expression is over the padded input.
    if (info.window()) {
      const gr_window& w = n.win;
      o << "window " << id;
      for (const long long v : {w.kh, w.kw, w.sh, w.sw, w.pt, w.pl, w.pb, w.pr, w.dh, w.dw, w.groups}) o << ' ' << v;
      o << '\n';
    }
    // A dropout node's key (seed, step, training): torch_oracle.py draws the mask from it itself.
    if (n.op == Op::Dropout)
      o << "key " << id << ' ' << static_cast<uint64_t>(n.starts[0]) << ' ' << n.starts[1] << ' ' << n.starts[2] << '\n';
    // A batch-statistics node: its third input (the running variance), momentum and training flag;
    // torch_oracle.py answers with the running statistics after torch's own update (`state`).
    if (gr::op_info(n.op).batch())
      o << "batch " << id << ' ' << n.c << ' ' << hex_bits(n.momentum) << ' ' << n.starts[0] << '\n';
    if (n.op == Op::Param || n.op == Op::Const) {
      const auto vals = t.value(Var{id}).values();
      o << "vals " << id << ' ' << vals.size();
      for (double x : vals) o << ' ' << hex_bits(x);
      o << '\n';
    }
  }
  o << "end\n";
  return o.str();
}

struct OracleResult {
  double loss = 0.0;
  std::map<int32_t, std::vector<double>> grads;   // by param node id
  std::map<int32_t, std::vector<double>> values;  // by node id
  std::map<int32_t, std::vector<double>> states;  // by batch_norm node id: running mean then variance, updated
};

bool read_result(const std::filesystem::path& path, OracleResult& r, std::string& err) {
  std::ifstream in(path);
  if (!in) {
    err = "cannot open " + path.string();
    return false;
  }
  std::string line;
  bool have_loss = false, ended = false;
  while (std::getline(in, line)) {
    std::istringstream ls(line);
    std::string kind, h;
    if (!(ls >> kind)) continue;
    if (kind == "end") {
      ended = true;
    } else if (kind == "loss") {
      if (!(ls >> h) || !parse_hex(h, r.loss)) return err = "bad loss line", false;
      have_loss = true;
    } else if (kind == "grad" || kind == "value" || kind == "state") {
      int32_t id = -1;
      int64_t count = -1;
      if (!(ls >> id >> count) || count < 0) return err = "bad " + kind + " header", false;
      std::vector<double> v(static_cast<size_t>(count));
      for (double& x : v)
        if (!(ls >> h) || !parse_hex(h, x)) return err = "bad " + kind + " data for node " + std::to_string(id), false;
      (kind == "grad" ? r.grads : kind == "value" ? r.values : r.states)[id] = std::move(v);
    } else {
      return err = "unknown record '" + kind + "'", false;
    }
  }
  if (!have_loss || !ended) return err = path.string() + " is incomplete", false;
  return true;
}

// The shared test TempDir (support/temp_dir.h); GR_ORACLE_KEEP=1 keeps it, and so does a failing case.
using gr::test::TempDir;

enum class Run { Ok, Skipped, Failed };

// Writes the program and runs the torch script on it. Skipped (with a visible message) when the
// Debian interpreter or its torch is missing; Failed (message in `log`) on any other problem.
Run run_oracle(const Graph& g, const TempDir& dir, bool variants, std::string& log) {
  const bool f32 = g.tape.real() == DType::F32;  // torch float32 for an f32 tape
  if (::access(kPython, X_OK) != 0) {
    log = std::string(kPython) + " not found";
    return Run::Skipped;
  }
  {
    std::ofstream out(dir.file("program.txt"));
    out << program_text(g);
    if (!out) {
      log = "cannot write " + dir.file("program.txt");
      return Run::Failed;
    }
  }
  const std::string script = std::string(GR_SOURCE_DIR) + "/tests/oracle/torch_oracle.py";
  const std::string cmd =
      std::string(kPython) + " '" + script + "' '" + dir.path + "'" + (variants ? " --variants" : "") + (f32 ? " --float32" : "") + " 2>&1";
  FILE* p = ::popen(cmd.c_str(), "r");
  if (!p) {
    log = "popen failed: " + cmd;
    return Run::Failed;
  }
  char buf[512];
  while (std::fgets(buf, sizeof buf, p)) log += buf;
  while (!log.empty() && (log.back() == '\n' || log.back() == '\r')) log.pop_back();
  const int status = ::pclose(p);
  const int rc = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  if (rc == 77) return Run::Skipped;
  if (rc != 0) {
    log = "'" + cmd + "' exited with " + std::to_string(rc) + ":\n" + log;
    return Run::Failed;
  }
  return Run::Ok;
}


// ---- the comparison --------------------------------------------------------------------------------
struct Comparison {
  double loss_rel = 0.0;
  double worst_grad_rel = 0.0;
  double worst_grad_normwise = 0.0;  // max |diff| / max |g| per param (informational)
  int64_t grad_elems = 0;
  std::string worst_grad_at;
  double worst_value_rel = 0.0;
  std::string worst_value_at;
  std::string problem;  // structural mismatch (missing/extra entries), empty when none
  Tolerances tol = kF64Tol;
  bool pass() const {
    return problem.empty() && loss_rel <= tol.loss && worst_grad_rel <= tol.grad && worst_value_rel <= tol.value;
  }
  std::string summary() const {
    char a[160], b[96], c[64];
    std::snprintf(a, sizeof a, "oracle: loss rel err %.3g, worst grad rel err %.3g over %lld elements", loss_rel,
                  worst_grad_rel, static_cast<long long>(grad_elems));
    std::snprintf(b, sizeof b, "; normwise %.3g), worst node value rel err %.3g", worst_grad_normwise,
                  worst_value_rel);
    std::snprintf(c, sizeof c, ")");
    return std::string(a) + " (at " + worst_grad_at + b + " (at " + worst_value_at + c +
           (problem.empty() ? "" : "; PROBLEM: " + problem);
  }
};

std::string node_label(const Tape& t, int32_t id) {
  return "node " + std::to_string(id) + " " + std::string(gr::op_name(t.node(id).op)) + " " + t.node(id).shape.str();
}

// Gradients: |g_tape − g_torch| / max(|g_torch|, floor) per element, floor = 2^-20 · max |g_torch| of
// that parameter (so an element that is ~0 by cancellation is judged against its tensor's scale).
// Node values: max |v_tape − v_torch| / max |v_torch| per node (normwise; intermediates can be ~0).
Comparison compare(Graph& g, const OracleResult& r, const Tolerances& tol = kF64Tol) {
  Comparison c;
  c.tol = tol;
  Tape& t = g.tape;
  const double tl = t.scalar(g.loss);
  c.loss_rel = std::fabs(tl - r.loss) / std::max(std::fabs(r.loss), 1e-300);
  if (!(c.loss_rel == c.loss_rel)) c.loss_rel = INFINITY;
  for (const Var p : g.params) {
    const auto it = r.grads.find(p.id);
    const auto tg = t.grad(p).values();
    if (it == r.grads.end() || it->second.size() != tg.size()) {
      c.problem += "no or wrong-sized torch gradient for " + node_label(t, p.id) + ". ";
      continue;
    }
    double scale = 0.0;
    for (double x : it->second) scale = std::max(scale, std::fabs(x));
    const double floor = std::max(scale * tol.floor, 1e-300);
    double diff = 0.0;
    for (size_t e = 0; e < tg.size(); ++e) {
      const double o = it->second[e];
      const double dd = std::fabs(tg[e] - o);
      diff = (dd == dd) ? std::max(diff, dd) : INFINITY;
      double err = std::fabs(tg[e] - o) / std::max(std::fabs(o), floor);
      if (!(err == err)) err = INFINITY;
      ++c.grad_elems;
      if (err > c.worst_grad_rel || c.worst_grad_at.empty()) {
        c.worst_grad_rel = err;
        c.worst_grad_at = "param " + node_label(t, p.id) + " [" + std::to_string(e) + "]: tape " + hex_bits(tg[e]) +
                          " torch " + hex_bits(o);
      }
    }
    c.worst_grad_normwise = std::max(c.worst_grad_normwise, diff / std::max(scale, 1e-300));
  }
  if (r.grads.size() != g.params.size()) c.problem += "torch returned gradients for a different set of params. ";
  if (static_cast<int32_t>(r.values.size()) != t.size()) c.problem += "torch returned a different number of nodes. ";
  for (const auto& [id, ov] : r.values) {
    if (id < 0 || id >= t.size() || static_cast<int64_t>(ov.size()) != t.node(id).numel()) {
      c.problem += "bad value record for node " + std::to_string(id) + ". ";
      continue;
    }
    const auto tv = t.value(Var{id}).values();
    double scale = 0.0, diff = 0.0;
    for (size_t e = 0; e < ov.size(); ++e) {
      scale = std::max(scale, std::fabs(ov[e]));
      const double dd = std::fabs(tv[e] - ov[e]);
      diff = (dd == dd) ? std::max(diff, dd) : INFINITY;
    }
    const double err = diff / std::max(scale, 1e-300);
    if (err > c.worst_value_rel || c.worst_value_at.empty()) {
      c.worst_value_rel = err;
      c.worst_value_at = node_label(t, id);
    }
  }
  return c;
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
  INFO("ops of kOps without an oracle case in support/op_cases.h: " << gr::test::op_cases_missing(gr::test::kUseOracle));
  CHECK(gr::test::op_cases_missing(gr::test::kUseOracle).empty());
  for (const Var p : g.params) {
    INFO(node_label(t, p.id) << " got no gradient");
    CHECK(t.node(p).touched);
    const auto gv = t.grad(p).values();
    CHECK(std::any_of(gv.begin(), gv.end(), [](double x) { return x != 0.0; }));
  }
}

// The running statistics: every batch node's update on the tape (Tape::update_running_stats, after
// the comparisons above: it writes the leaves in place) against torch's, max |diff| / max |value| per
// node. Returns the worst; `at` names it. Every batch node must have torch's answer.
double compare_states(Graph& g, const OracleResult& r, std::string& at) {
  Tape& t = g.tape;
  double worst = 0.0;
  int nodes = 0;
  for (int32_t id = 0; id < t.size(); ++id) {
    const gr::Node& n = t.node(id);
    if (!gr::op_info(n.op).batch()) continue;
    ++nodes;
    const auto it = r.states.find(id);
    if (it == r.states.end() || static_cast<int64_t>(it->second.size()) != 2 * t.node(n.b).numel()) {
      at = "no torch running statistics for " + node_label(t, id);
      return INFINITY;
    }
    t.update_running_stats(Var{id});
    const int64_t C = t.node(n.b).numel();
    double scale = 0.0, diff = 0.0;
    for (int64_t e = 0; e < 2 * C; ++e) {
      const double tv = e < C ? t.value(Var{n.b}).data[e] : t.value(Var{n.c}).data[e - C], ov = it->second[static_cast<size_t>(e)];
      scale = std::max(scale, std::fabs(ov));
      const double dd = std::fabs(tv - ov);
      diff = dd == dd ? std::max(diff, dd) : INFINITY;
    }
    const double err = diff / std::max(scale, 1e-300);
    if (err >= worst) worst = err, at = node_label(t, id);
  }
  if (nodes == 0) at = "no batch node in the graph";
  return nodes == 0 ? INFINITY : worst;
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

// Runs the oracle on g (torch float32 for an f32 tape) and reads its answer; nullopt when torch is
// missing (`log` says why).
std::optional<OracleResult> oracle_answer(const Graph& g, const TempDir& dir, std::string& log) {
  const Run run = run_oracle(g, dir, false, log);
  if (run == Run::Skipped) return std::nullopt;
  INFO(log);
  REQUIRE(run == Run::Ok);
  OracleResult r;
  std::string err;
  const bool read = read_result(dir.file("result.txt"), r, err);
  INFO(err);
  REQUIRE(read);
  return r;
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
  INFO(c.summary());
  CHECK(c.problem.empty());
  CHECK(c.loss_rel <= kLossTol);
  CHECK(c.worst_grad_rel <= kGradTol);
  CHECK(c.worst_value_rel <= kValueTol);
  std::string at;
  const double state_rel = compare_states(g, *r, at);
  std::printf("oracle: running statistics (batch_norm) worst rel err %.3g (at %s)\n", state_rel, at.c_str());
  INFO("running statistics: " << at);
  CHECK(state_rel <= kValueTol);
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
  INFO(c.summary());
  CHECK(c.problem.empty());
  CHECK(c.loss_rel <= kF32Tol.loss);
  CHECK(c.worst_grad_rel <= kF32Tol.grad);
  CHECK(c.worst_value_rel <= kF32Tol.value);
  std::string state_at;
  const double state_rel = compare_states(g, *r, state_at);
  std::printf("oracle: f32 running statistics (batch_norm) worst rel err %.3g (at %s)\n", state_rel, state_at.c_str());
  INFO("running statistics: " << state_at);
  CHECK(state_rel <= kF32Tol.value);

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
