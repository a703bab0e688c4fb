// text_gen.h — a trained text model's next-token distribution and the sampler behind
// `gradrun generate` (docs/cli.md "generate"; docs/spec.md "Text data").
//
// Context: a prompt's token ids; the model sees the last T (its context) of them, right-padded with
// id 0 to T, and the logits at the last real position are the next token's. The padding is after
// that position, so a causal model (every sequence op looks only backwards) gives the same logits
// as without it. The row is run in a batch of the spec's batch size (the other rows copies of it),
// on the CPU tape or the device replay engine (per-node or fused): the same bits on every engine.
//
// Probabilities (predict): m = max_i z_i, e_i = gr_exp(z_i − m), S = Σ_i e_i (ascending i),
// p_i = e_i / S, all in f64 (an f32 model's logits are floats, widened exactly).
//
// Sampling step s (0-based) with temperature t, top-k k, seed: t = 0 → the first argmax. Else the
// kept ids K are all of them, or with k > 0 the k largest logits (ties: the smaller id first);
// m = max_{i∈K} z_i, w_i = gr_exp((z_i − m) / t) for i ∈ K; S = Σ_{i∈K} w_i (ascending i);
// u = random_unit(seed, kGenerateStream, s) (spec/random.h), target = u·S; the token is the first
// i ∈ K (ascending) whose running sum Σ_{j∈K, j≤i} w_j exceeds target, the last of K when rounding
// leaves none. A few lines of Python reproduce it (tests/test_text_cli.py).
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "device/backend.h"
#include "spec/dataset.h"
#include "train/model.h"
#include "train/predict.h"

namespace gr {

inline constexpr uint64_t kGenerateStream = (uint64_t(1) << 32) + 2;

class DeviceRunner;

class NextToken {
 public:
  // backend: null for the CPU tape, else an open Host/Cuda backend (fuse as for predict).
  NextToken(Model& model, const Vocab& vocab, std::unique_ptr<device::Backend> backend, FuseMode fuse);
  ~NextToken();
  // The logits [V] of the token after `ids` (at least one id).
  std::vector<double> logits(const std::vector<int64_t>& ids);

 private:
  Model& model_;
  Vocab vocab_;
  PredictTarget target_;
  std::unique_ptr<Optimizer> opt_;
  std::unique_ptr<DeviceRunner> runner_;
  Var out_{};
  DataTable table_;
};

std::vector<double> next_token_probabilities(const std::vector<double>& logits);

struct SampleOptions {
  double temperature = 1.0;
  int64_t top_k = 0;
  uint64_t seed = 0;
};
int64_t sample_token(const std::vector<double>& logits, const SampleOptions& o, int64_t step);

// A prompt's ids: its tokens, or for an empty prompt the line break (a chars vocabulary with "\n":
// the start of a line). InputError at `where` when a token is not in the vocabulary.
std::vector<int64_t> prompt_ids(const Vocab& vocab, const std::string& prompt, const std::string& where);

}  // namespace gr
