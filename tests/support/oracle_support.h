// oracle_support.h — the PyTorch oracle's parts (tests/test_oracle.cpp holds the test cases):
//   tests/oracle_graph.cpp     the graph through every op (hand-built + one branch per case-table case),
//                              its coverage check
//   tests/oracle_exchange.cpp  the program written for tests/oracle/torch_oracle.py, running it, and
//                              reading its answer back (exact bits as hex)
//   tests/oracle_compare.cpp   the comparison of the tape with torch's answer (loss, gradients, node
//                              values, running statistics) under the tolerances below
#pragma once
#include <cstdint>
#include <filesystem>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "grad/op_table.h"
#include "grad/tape.h"
#include "temp_dir.h"

namespace gr::test::oracle {

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

// ---- the graph (oracle_graph.cpp) ----------------------------------------------------------------
struct Graph {
  explicit Graph(DType real = DType::F64) : tape(real) {}
  Tape tape;
  Var loss;
  Var mutate;  // the node the "wrong answer" variants of the oracle tamper with
  std::vector<Var> params;
  std::vector<std::pair<std::string, Op>> cases;  // the case-table branches (name, op)
};

void build_graph(Graph& g);
void build_and_backward(Graph& g);  // build_graph, backward; REQUIREs both succeed and a scalar loss
void check_coverage(Graph& g);      // every node feeds the loss, every op occurs, every param has a gradient

// ---- the exchange (oracle_exchange.cpp) ----------------------------------------------------------
std::string hex_bits(double x);  // the 16 hex digits of x's bits
std::string program_text(const Graph& g);

struct OracleResult {
  double loss = 0.0;
  std::map<int32_t, std::vector<double>> grads;   // by param node id
  std::map<int32_t, std::vector<double>> values;  // by node id
  std::map<int32_t, std::vector<double>> states;  // by batch_norm node id: running mean then variance, updated
};

bool read_result(const std::filesystem::path& path, OracleResult& r, std::string& err);

enum class Run { Ok, Skipped, Failed };

// Writes the program and runs the torch script on it (--variants: also the tampered answers).
Run run_oracle(const Graph& g, const TempDir& dir, bool variants, std::string& log);
// Runs the oracle on g (torch float32 for an f32 tape) and reads its answer; nullopt when torch is
// missing (`log` says why).
std::optional<OracleResult> oracle_answer(const Graph& g, const TempDir& dir, std::string& log);

// ---- the comparison (oracle_compare.cpp) ---------------------------------------------------------
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
  std::string summary() const;
};

std::string node_label(const Tape& t, int32_t id);
Comparison compare(Graph& g, const OracleResult& r, const Tolerances& tol = kF64Tol);
// The running statistics of every batch node against torch's; returns the worst, `at` names it.
double compare_states(Graph& g, const OracleResult& r, std::string& at);

}  // namespace gr::test::oracle
