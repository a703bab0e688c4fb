// dataset.h — a spec's data: the bound inputs as tensors with rows along dim 0, split into
// training and validation rows, standardized with the training split's statistics.
//
// Split: perm = random_permutation(rows, seed, kSplitStream); the first floor(validation·rows)
// entries are the validation rows, the rest training; each keeps ascending row order.
// Standardize: per column, mean = Σ_{asc} x / n and std = sqrt(Σ_{asc} (x − mean)² / n) over the
// TRAINING rows (std 0 → 1); both splits get (x − mean) / std.
#pragma once
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "spec/spec.h"
#include "tensor/tensor.h"

namespace gr {

struct DataTable {
  std::vector<std::string> names;  // the spec's input names, in spec order
  std::vector<Tensor> tensors;     // one per name, shape [rows, ...]
  int64_t rows = 0;
};

struct Datasets {
  DataTable train, validation;
  // Per input (spec order): the standardization statistics of the training rows, one per column;
  // both empty when the input is not standardized (saved with the weights: train/preprocess.h).
  std::vector<std::vector<double>> mean, std;
};

// Reads the data files and applies bindings, split and standardization.
Datasets load_datasets(const Spec& spec);

// Reads the spec's data files and applies the bindings (columns/tensors, one-hot) to every row:
// no split, no standardization. Errors are located like load_datasets'.
DataTable read_inputs(const Spec& spec);

// The order in which epoch `epoch` (0-based) visits n training rows: a permutation from the
// spec's seed when train.shuffle is on, ascending otherwise (random.h documents the generator).
std::vector<int64_t> epoch_order(const Spec& spec, int64_t n, int64_t epoch);

// Copies the given rows of `src` ([rows, ...]) into dst, one after another.
void gather_rows(const Tensor& src, std::span<const int64_t> rows, double* dst);

}  // namespace gr
