// dataset.h — a spec's data: the bound inputs as tensors with rows along dim 0, split into
// training and validation rows, missing cells filled, categories encoded and standardized with the
// training split's statistics.
//
// Split: perm = random_permutation(rows, seed, kSplitStream); the first floor(validation·rows)
// entries are the validation rows, the rest training; each keeps ascending row order. With data.cv
// the validation rows are one fold instead (spec/folds.h).
//
// From the raw values of an input (numbers, NaN where a cell is missing; a CSV categorical column
// as its texts) to the model's rows, in this order (docs/spec.md, "Missing values and categories"):
//   1. the missing indicator (missing_indicator): one 0/1 column per raw column, 1 ⇔ missing;
//   2. fill: a missing cell becomes the column's fill value — "mean": Σ_{asc} x / n over the
//      training rows' present values, "median": the middle of their sorted values (the mean of the
//      two middle ones, (a + b) / 2, for an even count), "most_frequent": the value seen most often
//      (ties: the smallest; for categories: the first in the list), or the spec's value;
//   3. encoding: categories → one-hot over the category list (or the id, "encode": "ids"; a value
//      not in the list is an error, or a row of zeros with "unknown": "zeros"); "threshold": t →
//      1 ⇔ value > t, else 0; "one_hot": k → class ids one-hot (ids must be integers in [0, k));
//   4. the indicator columns appended after the encoded ones;
//   5. standardize: per column, mean = Σ_{asc} x / n and std = sqrt(Σ_{asc} (x − mean)² / n) over
//      the TRAINING rows (std 0 → 1); both splits get (x − mean) / std; indicator columns are left
//      as they are (saved as mean 0, std 1).
// "auto" categories are the training rows' distinct present values, sorted: numerically when every
// one is a number (then "1" and "1.0" are one category), else as byte strings. Fill values and
// categories that need the training rows are computed after the split, from the training rows only;
// everything else is applied to all rows before it (errors then come in file order).
#pragma once
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "io/csv.h"
#include "spec/spec.h"
#include "tensor/tensor.h"

namespace gr {

struct DataTable {
  std::vector<std::string> names;  // the spec's input names, in spec order
  std::vector<Tensor> tensors;     // one per name, shape [rows, ...]
  int64_t rows = 0;
  // The data file's row (0-based, after a CSV's header) of each row, when split from a file (the
  // validation split picks rows by a permutation); empty: row r is the file's row r. Errors name it.
  std::vector<int64_t> source_rows;
};

// What turns one input's raw values into the model's rows (steps 1–4 above), fitted on the training
// rows; saved in the run's preprocessing (interchange/preprocess.h) and applied again by predict/evaluate.
struct InputFit {
  std::string missing = "error";    // the spec's policy: error | mean | median | most_frequent | value
  std::vector<DataValue> fill;      // per raw column (one for categories); empty: a missing cell is an error
  bool indicator = false;
  bool categorical = false;
  std::vector<DataValue> categories;  // in id order: all numbers or all strings
  bool unknown_zeros = false, ids = false;
  bool has_threshold = false;
  double threshold = 0;
  int64_t one_hot = 0;
  bool identity() const { return !indicator && !categorical && !has_threshold && one_hot == 0; }
  bool operator==(const InputFit&) const = default;
};

// A category's name as written in predictions and messages: the text, or the number's shortest form.
std::string category_name(const DataValue& v);

// A text data set's vocabulary (spec/text_data.h): token id i is tokens[i]; kind "chars" (UTF-8
// code points) or "words"; empty kind: not text data. Saved in the run (vocab.json, and the
// weights' preprocessing) so predict and generate read new text with the ids training used.
struct Vocab {
  std::string kind;
  int64_t context = 0;
  std::vector<std::string> tokens;  // sorted byte-wise, each once
  bool empty() const { return kind.empty(); }
  bool operator==(const Vocab&) const = default;
};

struct Datasets {
  DataTable train, validation;
  Vocab vocab;  // text data only
  // Per input (spec order): the standardization statistics of the training rows, one per column;
  // both empty when the input is not standardized (saved with the weights: interchange/preprocess.h).
  std::vector<std::vector<double>> mean, std;
  std::vector<InputFit> fit;  // per input (spec order)
};

// Reads the data files and applies bindings, split, fill, encoding and standardization.
Datasets load_datasets(const Spec& spec);

// One input as read, before any transform: numbers (NaN: missing), or a CSV categorical column's
// codes into `texts` (first appearance order).
struct RawInput {
  std::vector<int64_t> dims;  // [rows, ...]
  std::vector<double> values;
  std::vector<std::string> texts;
  bool text = false;
};

struct RawTable {
  std::string file;  // the data file (several npy files: their paths joined)
  std::vector<std::string> names;
  std::vector<RawInput> inputs;
  int64_t rows = 0;
  bool csv = false;
  CsvLines lines;  // csv: each row's line in the file
  std::string place(int64_t row) const;  // "line N" (csv) or "row N"
};

// Reads the spec's data files with its bindings and dialect: no split and no transform. Missing
// cells are errors unless the input has a "missing" policy. Errors are located like load_datasets'.
RawTable read_raw(const Spec& spec);

// The fit of input `in` that needs no data (everything but statistics and "auto" categories).
InputFit static_fit(const InputSpec& in);

// Applies a fitted transform to every row of a raw input. `origin`: each raw row's row in `table`
// (for messages, through table.place; empty: the same). The spec's input (`in`) names the column
// in messages. Consumes `raw.values` (moved into the result when the transform is the identity).
Tensor apply_fit(RawInput& raw, const InputFit& fit, std::span<const int64_t> origin, const RawTable& table,
                 const InputSpec& in);

// An input's declared row shape (InputSpec::row_shape, "shape"): `t` [rows, ...] as [rows, shape...].
// Rows of another size are an InputError at `file`, `place` (the spec's binding, or a data file).
Tensor shape_rows(const Tensor& t, const InputSpec& in, const std::string& file, const std::string& place);

// The accuracy metric's labels must be one-hot rows or class ids (throws InputError at
// /metrics/accuracy/labels otherwise); inputs encoded by a binding are labels by construction.
void check_labels(const Spec& spec, const DataTable& t);

// The order in which epoch `epoch` (0-based) visits n training rows: a permutation from the
// spec's seed when train.shuffle is on, ascending otherwise (random.h documents the generator).
std::vector<int64_t> epoch_order(const Spec& spec, int64_t n, int64_t epoch);

// Copies the given rows of `src` ([rows, ...]) into dst, one after another.
void gather_rows(const Tensor& src, std::span<const int64_t> rows, double* dst);

}  // namespace gr
