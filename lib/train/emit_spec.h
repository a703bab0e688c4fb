// emit_spec.h — `gradrun emit-cuda`: a spec's per-example loss as CUDA-C (emit.h), and --verify, the
// bit-exact host oracle.
//
// The spec is recorded for ONE example: whatever train.batch_size says, every data input gets one
// row ([1, ...]), and the data set is read whole, in file order (the validation split is ignored).
// Leaves: parameters bind to p[j] in registration order (each must hold one element); data inputs,
// and consts that emit.bind names, bind to the C expressions of emit.bind; other consts inline.
// Only the loss's ancestor cone is emitted and checked.
//
// verify() builds the emitted file unchanged with the host C++ compiler ($CXX, else c++; -O2
// -ffp-contract=off -fno-fast-math) next to a small harness, loads it, and then, for every example
// (row r of the data set; one example when the spec has no data):
//   • calls the emitted function with x = r and v = the row's value of the data input bound to
//     exactly "v" (0 when none is), on g zero-filled and p = the spec's initial parameters;
//   • evaluates every bind expression with the same x, v, p and requires its bits to equal the
//     value the tape's leaf holds for that row — so the tape and the emitted code see the same data;
//   • records the row on the tape, runs backward, and requires the loss (through gr_emit_loss) and
//     every g[j] to have exactly the tape's bits.
// It stops at the first difference and names it. The one allowance: a NaN matches a NaN whatever
// the sign and payload bits (IEEE 754 leaves them unspecified for arithmetic results, and compilers
// use that freedom); such matches are counted in nan_bit_differences.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "emit/emit.h"
#include "grad/tape.h"
#include "spec/dataset.h"
#include "spec/program.h"
#include "spec/spec.h"

namespace gr {

struct EmitVerifyResult {
  bool ok = false;
  int64_t examples = 0;        // examples compared (all of them when ok)
  int64_t params = 0;
  int64_t nan_bit_differences = 0;  // values that were NaN on both sides with different bits
  std::string compiler;        // the host compile command
  std::string difference;      // the first difference, or why the build failed (may span lines)
};

class SpecEmitter {
 public:
  // Loads the data and records the spec for one example. Throws InputError (at the JSON pointer of
  // the offending node, leaf or emit key) or IoError.
  explicit SpecEmitter(const Spec& spec);
  SpecEmitter(const SpecEmitter&) = delete;
  SpecEmitter& operator=(const SpecEmitter&) = delete;

  // The emitted CUDA-C (the same text every time; it names the spec file and its sha256).
  const std::string& source() const { return source_; }
  int64_t examples() const;
  const std::vector<std::string>& param_names() const { return param_names_; }
  const Tape& tape() const { return tape_; }
  Var loss() const { return loss_; }

  // The host oracle (see above). Throws IoError when the compiler cannot be started at all.
  EmitVerifyResult verify();

 private:
  void record_example(int64_t row);
  std::vector<double> leaf_values_for_row(int64_t row) const;

  Spec spec_;  // a copy: batch size 1, no validation split
  Datasets data_;
  Program program_;
  Tape tape_;
  std::vector<Var> params_, consts_, slots_, nodes_;
  std::vector<double> init_;     // p[j]
  std::vector<std::string> param_names_;
  int32_t mark_ = 0;
  Var loss_;
  std::vector<std::pair<int32_t, std::string>> binds_;  // leaf node id → expression (tape order)
  std::vector<std::string> bind_names_;                 // the bound leaves' names, same order
  int v_leaf_ = -1;                                     // index into binds_ of the leaf bound to "v"
  std::string source_;
};

}  // namespace gr
