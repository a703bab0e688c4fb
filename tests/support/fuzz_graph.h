// fuzz_graph.h — the differential fuzzer's graph model (tests/fuzz_diff.cpp): a random graph is kept
// as the parts of a spec (leaves with explicit values, nodes in order, the loss), so every case —
// a single seed, a bundle of many seeds, a shrunk failure — is written as an ordinary spec file that
// `gradrun check FILE --replay` runs. Per-op test metadata (input domain, finite-difference
// tolerance) comes from the one case table (support/op_cases.h).
#pragma once
#include <cstdint>
#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "grad/op_table.h"
#include "support/op_cases.h"

namespace gr::fuzz {

using json = nlohmann::ordered_json;

// Per-op test metadata — the input adapters (Dom::Positive: the generator wraps the input as
// adds(sigmoid(x), 0.25) or exp(muls(tanh(x), 0.5)), at least 0.25; Dom::Bounded: tanh(x) when |x| may
// exceed 3) and the finite-difference tolerance — comes from the one case table, support/op_cases.h
// (test::OpTest), derived from the op table's rows; every spec op (the table's and "mse") has one.
using test::Dom;
using test::OpTest;

inline constexpr double kFdEps = 1e-6, kFdAtol = 1e-6;

inline std::optional<OpTest> op_meta(std::string_view name) { return test::spec_op_test(name); }

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
  bool image = false;   // an image case (generate_image): the window ops over [N, C, H, W]
  Graph graph;
  std::set<std::string> ops;  // spec ops it uses ("mse" included), for coverage
};

// tests/fuzz_gen.cpp
Case generate(uint64_t seed, bool scalar);
// An image case of the seed (conv2d, pools, their geometry, batch 1..3), from a stream of its own: the
// seed's generate() graph is what it always was. fuzz_diff adds one for every seed with seed % 5 == 2.
Case generate_image(uint64_t seed);
inline bool has_image_case(uint64_t seed) { return seed % 5 == 2; }
// A batch case (batch_norm, ...) from its own stream: generate(seed, ...)'s graph is unchanged by it.
Case generate_batch(uint64_t seed);
// A token case (embedding of const ids [B, T] from a param table, ...) from its own stream, likewise.
Case generate_tokens(uint64_t seed);
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
