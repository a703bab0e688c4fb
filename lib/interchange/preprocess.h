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
// in the spec's input order. An input with tabular transforms (spec/dataset.h) adds, only when
// they apply: "missing" (mean | median | most_frequent | value) with "fill" (one value per raw
// column, a number or, for string categories, a string), "missing_indicator": true,
// "categories" (the list, numbers or strings, in id order) with "encode" (one_hot | ids) and
// "unknown" (error | zeros), "threshold" (a number). Applying it to a raw row x of input i:
//   the missing indicator (1 ⇔ x[c] is missing), the fill of missing cells, then the encoding —
//   categories (one-hot over the list, or the id), threshold (1 ⇔ x > t), or one-hot (labels →
//   [k], class c at position c) when one_hot_classes is non-empty —, the indicator columns
//   appended, then (x[c] − mean[c]) / std[c] per column c when mean is non-empty (std was 0 →
//   saved as 1; indicator columns have mean 0, std 1).
// mean/std, fill values and "auto" categories are over the TRAINING rows (spec/dataset.h). Numbers
// are written in shortest round-trip form and read back exactly.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "spec/dataset.h"

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
  InputFit fit;                              // fill, indicator, categories, threshold (one_hot mirrors one_hot_classes)
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
  // Text data: the vocabulary (saved as "text": {"kind", "context", "tokens"}; absent otherwise).
  Vocab vocab;
  const InputPrep* find(const std::string& name) const;  // nullptr when absent
};

// What the exports take and do for an input's tabular transforms (docs/use-a-model.md, Export).
// An exported model takes each input as numbers, NaN where a cell is missing: numeric columns as
// they are; a categorical column as its value when the categories are numbers, as its id (the
// position in the saved list) when they are strings — the category lists are in the run's
// preprocessing, and `gradrun predict`/`evaluate` apply them to the raw text.
//   export_raw_width: the width of one raw row (1 for categories, threshold and one-hot; the
//     encoded row less its indicator columns otherwise);
//   export_category_values: the k numbers a raw value is compared with (one-hot position j ⇔ equal
//     to the j-th);
//   export_fill: per raw column, the number a missing (NaN) cell becomes (a string fill: its id,
//     -1 when it is not a category).
int64_t export_raw_width(const InputPrep& ip, int64_t row_numel);
std::vector<double> export_category_values(const InputFit& fit);
std::vector<double> export_fill(const InputFit& fit);

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
