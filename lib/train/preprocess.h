// preprocess.h — what a trained model needs at inference besides its weights: how each input was
// read and transformed during training, with the hash of the spec it belongs to.
//
// Saved by every training run as ONE JSON string under the safetensors metadata key
// "gradrun.preprocessing" of weights.safetensors, and as the same JSON object under
// "preprocessing" in run.json:
//   {"spec_sha256": "<hex>",
//    "inputs": [{"name": "x", "source_kind": "csv", "columns": ["a", "b"], "tensor": "",
//                "mean": [..], "std": [..], "one_hot_classes": [], "dtype": "f64",
//                "row_shape": [2]}, ...]}
// in the spec's input order. Applying it to a raw row x of input i:
//   one-hot (labels → [k], class c at position c) when one_hot_classes is non-empty, then
//   (x[c] − mean[c]) / std[c] per column c when mean is non-empty (std was 0 → saved as 1).
// mean/std are over the TRAINING rows (spec/dataset.h). Numbers are written in shortest
// round-trip form and read back exactly.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace gr {

struct Spec;
struct Datasets;

inline constexpr const char* kPreprocessingKey = "gradrun.preprocessing";

struct InputPrep {
  std::string name;                          // the spec's input name
  std::string source_kind;                   // "csv" | "npy" | "npz" | "safetensors"
  std::vector<std::string> columns;          // csv: the columns read, in order (empty otherwise)
  std::string tensor;                        // npy/npz/safetensors: the tensor's name (empty for csv)
  std::vector<double> mean, std;             // one per column when standardized; empty otherwise
  std::vector<std::string> one_hot_classes;  // "0".."k-1" when one-hot encoded; empty otherwise
  std::string dtype;                         // element type the model computes in: "f64"
  std::vector<int64_t> row_shape;            // one row after preprocessing (e.g. [4], or [3] one-hot)
};

// A prediction in the data's units: a regression output whose target input was standardized maps
// each value v of column c back with v·std[c] + mean[c] (train/evaluate.h to_data_units), the
// training rows' statistics of `input`. Empty: the output is used as computed.
struct OutputUnits {
  std::string input;
  std::vector<double> mean, std;
  bool empty() const { return mean.empty(); }
};

struct Preprocessing {
  std::string spec_sha256;
  std::vector<InputPrep> inputs;
  const InputPrep* find(const std::string& name) const;  // nullptr when absent
};

// The preprocessing of a spec's loaded data (load_datasets): sources, statistics, row shapes.
Preprocessing make_preprocessing(const Spec& spec, const Datasets& data);

std::string to_json(const Preprocessing& p);
// Throws InputError("preprocessing", place, what) on malformed JSON or missing/mistyped fields.
Preprocessing preprocessing_from_json(const std::string& json);
// From a run folder (its weights.safetensors) or a .safetensors file; InputError when the file
// carries no "gradrun.preprocessing" metadata (weights from before it was saved).
Preprocessing read_preprocessing(const std::string& weights_or_run_dir);
// A run folder → its weights.safetensors; a file path as is.
std::string weights_path(const std::string& weights_or_run_dir);

}  // namespace gr
