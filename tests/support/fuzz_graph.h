// fuzz_graph.h — the differential fuzzer's graph model (tests/fuzz_diff.cpp): a random graph is kept
// as the parts of a spec (leaves with explicit values, nodes in order, the loss), so every case —
// a single seed, a bundle of many seeds, a shrunk failure — is written as an ordinary spec file that
// `gradrun check FILE --replay` runs. Per-op test metadata (input domain, finite-difference
// tolerance) lives in one table, kOpMeta, with a coverage check against the op table.
#pragma once
#include <cstdint>
#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "grad/op_table.h"

namespace gr::fuzz {

using json = nlohmann::ordered_json;

// What an op's inputs must satisfy. The generator wraps an input that may violate it with an
// adapter made of other ops (Positive: adds(sigmoid(x), 0.25) or exp(muls(tanh(x), 0.5)) — at
// least 0.25; Bounded: tanh(x) when |x| may exceed 4).
enum class Domain { Any, Positive, Bounded };

struct OpMeta {
  std::string_view name;  // the spec name ("mse" is the composite)
  Domain a, b;            // a-side and b-side input domains
  double fd_rtol;         // finite-difference gate of a graph: the largest over its ops (atol kFdAtol)
};

inline constexpr double kFdEps = 1e-6, kFdAtol = 1e-6;

inline constexpr OpMeta kOpMeta[] = {
    {"param", Domain::Any, Domain::Any, 1e-5},
    {"const", Domain::Any, Domain::Any, 1e-5},
    {"add", Domain::Any, Domain::Any, 1e-5},
    {"sub", Domain::Any, Domain::Any, 1e-5},
    {"mul", Domain::Any, Domain::Any, 1e-5},
    {"div", Domain::Any, Domain::Positive, 1e-4},  // denominators ≥ 0.25
    {"neg", Domain::Any, Domain::Any, 1e-5},
    {"adds", Domain::Any, Domain::Any, 1e-5},
    {"muls", Domain::Any, Domain::Any, 1e-5},
    {"relu", Domain::Any, Domain::Any, 1e-4},  // a kink: an input within eps of 0 would need more
    {"sigmoid", Domain::Any, Domain::Any, 1e-5},
    {"tanh", Domain::Any, Domain::Any, 1e-5},
    {"exp", Domain::Bounded, Domain::Any, 1e-5},
    {"log", Domain::Positive, Domain::Any, 1e-4},
    {"sqrt", Domain::Positive, Domain::Any, 1e-4},
    {"sum", Domain::Any, Domain::Any, 1e-5},
    {"mean", Domain::Any, Domain::Any, 1e-5},
    {"matmul", Domain::Any, Domain::Any, 1e-5},
    {"bmm", Domain::Any, Domain::Any, 1e-5},
    {"transpose", Domain::Any, Domain::Any, 1e-5},
    {"reshape", Domain::Any, Domain::Any, 1e-5},
    {"slice", Domain::Any, Domain::Any, 1e-5},
    {"concat", Domain::Any, Domain::Any, 1e-5},
    {"softmax", Domain::Any, Domain::Any, 1e-5},
    {"log_softmax", Domain::Any, Domain::Any, 1e-5},
    {"softmax_cross_entropy", Domain::Any, Domain::Any, 1e-5},
    {"mse", Domain::Any, Domain::Any, 1e-5},
};

// Every op of ops.def has a row (checked at startup by the fuzzer; a new op fails until it has one).
inline const OpMeta* op_meta(std::string_view name) {
  for (const OpMeta& m : kOpMeta)
    if (m.name == name) return &m;
  return nullptr;
}

struct Leaf {
  std::string name;
  bool param = false;
  std::vector<int64_t> shape;
  std::vector<double> values;  // params: {"init": {"values": ...}} — the same bits in a bundle and alone
};

struct Node {
  std::string id, op;
  std::vector<std::string> inputs;
  json attrs = json::object();  // scalar, axis, keepdims, shape, starts, stops
  std::vector<int64_t> shape;   // the generator's inferred shape (for the shrinker's rewiring)
};

// One seed's graph or a bundle of several: leaves, nodes in order, and the losses (node ids with
// one element). A spec's loss is the single loss, or the sum of them as a chain of `add` nodes.
struct Graph {
  std::vector<Leaf> leaves;
  std::vector<Node> nodes;
  std::vector<std::string> losses;
  std::map<std::string, double> l2;  // per-parameter L2
};

struct OptimizerChoice {
  std::string kind = "adam";  // adam | sgd
  double lr = 0.01, clip = 0.0;
};

struct Case {
  uint64_t seed = 0;
  bool scalar = false;  // every node and parameter holds one element: the emitter takes it
  Graph graph;
  std::set<std::string> ops;  // spec ops it uses ("mse" included), for coverage
};

// tests/fuzz_gen.cpp
Case generate(uint64_t seed, bool scalar);
Graph bundle(const std::vector<const Case*>& cases);  // parts concatenated (names are seed-prefixed)
json spec_json(const Graph& g, const std::string& name, const OptimizerChoice& opt, bool emit_params_signature);
double fd_rtol(const Graph& g);  // the largest fd_rtol of the graph's ops

// ---- paths (tests/fuzz_diff.cpp) ------------------------------------------------------------------------
// One comparison a case goes through. Replay: `check --replay`'s lockstep (lib/train/replay_check) of
// the CPU tape against the per-node or fused f64 replay, every node value and gradient, every loss and
// the parameters after `episodes` optimizer steps. F32: per-node f32 replay vs fused f32 replay, the same
// comparisons. Emit: `emit-cuda --verify` (scalar cases). Fd: central differences (the outside oracle).
struct Path {
  enum Kind { Replay, F32, Emit, Fd } kind = Replay;
  bool fuse = false;
  unsigned block = 1, max_grid = 65535;
  bool adversarial = true;
  uint64_t schedule_seed = 0;
  std::string describe() const;
};

struct RunOptions {
  std::string backend = "host", cache_dir;
  int episodes = 3;
  unsigned threads = 3;
};

// "" when the path agrees; else the first difference. Throws gr::Error for a spec that does not load.
std::string run_path(const Path& p, const Graph& g, const OptimizerChoice& opt, const RunOptions& ro);

// tests/fuzz_shrink.cpp: deletes parts and nodes (rewiring consumers to a same-shape input, or to a
// const) while `fails` still holds; at most `max_trials` calls of `fails`.
Graph shrink(const Graph& g, const std::function<bool(const Graph&)>& fails, int max_trials, int* trials);

}  // namespace gr::fuzz
