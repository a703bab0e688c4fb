// run_model.h — a run folder is the trained model (docs/use-a-model.md): it keeps the spec as
// trained (spec.json), its weights, and the model identity that decides whether another spec file
// describes the same model.
//
// The model identity is the canonical JSON (sorted keys) of what a prediction depends on:
//   {"graph": the graph nodes as written, without "init" and "trainable";
//    "params": the spec's params as written, without "init" and "trainable";
//    "consts": [{"name", "shape", "values_sha256"}]; "loss": the loss node's id;
//    "inputs": data.inputs as written (names, columns or tensors, one_hot, standardize)}.
// Epochs, seed, optimizer, train, metrics, predict, output, device, name, description, the data
// file's path and split, and parameter inits do not count: a spec that differs only in those
// predicts the same numbers from the same weights.
#pragma once
#include <string>
#include <vector>

#include "spec/spec.h"

namespace gr {

// The weights' metadata key holding the model identity (weights.safetensors, weights.best.safetensors).
inline constexpr const char* kModelIdentityKey = "gradrun.model";

// Needs the spec's const values (before release_tensor_values).
std::string model_identity(const Spec& spec);
// The first difference between two identities as "<JSON pointer into the spec>: was X, now Y", or
// empty when they are equal. `pointer` receives the pointer (empty when none applies).
std::string model_difference(const std::string& trained, const std::string& now, std::string* pointer);

// Writes DIR/spec.json (atomically): the spec's text as trained, --set applied (its sha256 is the
// run's spec_sha256). train's --seed and --epochs are run.json's "seed" and "target_epochs".
void write_run_spec(const std::string& dir, const Spec& spec);
// A folder holding a spec.json (a run folder of this gradrun).
bool is_run_folder(const std::string& path);
// DIR/spec.json with `sets` (--set) applied; relative data and tensor-file paths resolve against the
// original spec's folder (run.json "spec_dir"), the default name is the original's, the seed and
// epochs are run.json's "seed" and "target_epochs" (train's --seed, --epochs). InputError when
// DIR holds no spec.json (a run from before it was kept: name the spec file then).
Spec load_run_spec(const std::string& dir, const std::vector<std::string>& sets);

// The weights file of `weights_or_run_dir`: a file as is; a run folder's weights.best.safetensors
// when early stopping wrote one and `which` is "best" (the default), else its weights.safetensors.
// `note` (may be null) receives one line naming the file chosen from a folder, empty otherwise.
std::string choose_weights(const std::string& weights_or_run_dir, const std::string& which, std::string* note);

// The engine a run used, from its run.json (empty fields when there is none): a resume continues on it.
struct RunEngine {
  std::string device, dtype;
  bool fused = false;
};
RunEngine read_run_engine(const std::string& run_dir);

// `s` quoted for a POSIX shell when it needs it (spaces, quotes, $ …): hints print commands to type.
std::string shell_quote(const std::string& s);

}  // namespace gr
