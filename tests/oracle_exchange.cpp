// oracle_exchange.cpp — the PyTorch oracle's exchange (support/oracle_support.h): the tape written as
// a "program" for tests/oracle/torch_oracle.py (every node's op, inputs, attributes, shape, and the
// exact bits of every param and const), running the script, and reading its answer (exact bits).
#include <catch2/catch.hpp>

#include <sys/wait.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>

#include "support/oracle_support.h"

namespace gr::test::oracle {

constexpr const char* kPython = "/usr/bin/python3";

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

}  // namespace gr::test::oracle
