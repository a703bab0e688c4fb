#include "spec/dataset.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <map>

#include "io/csv.h"
#include "io/errors.h"
#include "io/npy.h"
#include "spec/random.h"
#include "io/safetensors.h"

namespace gr {

namespace {

// Labels (one value per row) → one-hot rows of width k; a label must be an integer in [0, k).
Tensor one_hot(const Tensor& labels, int64_t k, const std::string& file, const std::string& what,
               const std::vector<int64_t>* lines) {
  const int64_t rows = labels.shape()[0];
  if (labels.numel() != rows) throw InputError(file, what, "a one-hot input needs one label per row");
  Tensor out(Shape{rows, k});
  for (int64_t r = 0; r < rows; ++r) {
    const double v = labels[r];
    if (!(v >= 0 && v < static_cast<double>(k)) || v != std::floor(v)) {
      const std::string place = lines ? "line " + std::to_string((*lines)[static_cast<size_t>(r)]) : "row " + std::to_string(r);
      throw InputError(file, place, what + ": label " + std::to_string(v) + " is not an integer in [0, " +
                                        std::to_string(k) + ")");
    }
    out[r * k + static_cast<int64_t>(v)] = 1.0;
  }
  return out;
}

// Reads a data file; one that cannot be opened or read is bad input in the spec (exit 2), named by
// the spec's pointer, the path as the spec resolves it and the absolute path.
template <class Read>
auto read_data_file(const Spec& spec, const std::string& key, const std::string& path, Read read) {
  try {
    return read(path);
  } catch (const IoError& e) {
    std::string why = e.what();
    if (why.starts_with(path + ": ")) why = why.substr(path.size() + 2);
    std::error_code ec;
    const std::string abs = std::filesystem::absolute(path, ec).lexically_normal().string();
    throw InputError(spec.path, "/data/" + key,
                     "cannot read the data file " + path + (ec || abs == path ? "" : " (resolved: " + abs + ")") + ": " + why);
  }
}

// The accuracy metric compares argmaxes: its labels must be one-hot rows (a "one_hot" binding, or
// data that already holds one 1 per row) or one class id per row, not features.
void check_label_input(const Spec& spec, const DataTable& t) {
  if (!spec.metrics.accuracy || !spec.data) return;
  for (size_t i = 0; i < t.names.size(); ++i) {
    const InputSpec& in = spec.data->inputs[i];
    if (t.names[i] != spec.metrics.labels || in.one_hot) continue;
    const Tensor& y = t.tensors[i];
    const int64_t rows = y.shape()[0], width = rows ? y.numel() / rows : 0;
    for (int64_t r = 0; r < rows; ++r) {
      int64_t ones = 0;
      bool binary = true;
      for (int64_t c = 0; c < width; ++c) ones += y[r * width + c] == 1.0, binary = binary && (y[r * width + c] == 0.0 || y[r * width + c] == 1.0);
      // One column: a class id per row (a non-negative integer), as cross_entropy takes.
      const double id = width == 1 ? y[r] : -1.0;
      const bool class_id = width == 1 && id >= 0.0 && id < 0x1p53 && id == static_cast<double>(static_cast<int64_t>(id));
      if ((!class_id && (!binary || ones != 1)) || in.standardize)
        throw InputError(spec.path, "/metrics/accuracy/labels",
                         "\"" + in.name + "\" is not a label input (row " + std::to_string(r + 1) +
                             " is neither one-hot nor a class id" + (in.standardize ? ", and it is standardized" : "") +
                             "); bind the class column with \"one_hot\": CLASSES, or use it as class ids");
    }
  }
}

}  // namespace

DataTable read_inputs(const Spec& spec) {
  const DataSpec& d = *spec.data;
  DataTable t;
  if (d.source == DataSpec::Source::Csv) {
    const std::string& path = d.files.at("");
    const CsvTable csv = read_data_file(spec, "csv", path, read_csv);
    for (const InputSpec& in : d.inputs) {
      std::vector<int64_t> cols;
      for (const std::string& c : in.columns) {
        const int64_t idx = csv.column(c);
        if (idx < 0) {
          std::string known;
          for (const std::string& h : csv.header) known += (known.empty() ? "" : ", ") + h;
          throw InputError(spec.path, in.pointer, "column \"" + c + "\" is not in " + path + " (columns: " + known + ")");
        }
        cols.push_back(idx);
      }
      Tensor x(Shape{csv.rows, static_cast<int64_t>(cols.size())});
      for (int64_t r = 0; r < csv.rows; ++r)
        for (size_t c = 0; c < cols.size(); ++c)
          x[r * static_cast<int64_t>(cols.size()) + static_cast<int64_t>(c)] = csv.values[static_cast<size_t>(r * csv.cols + cols[c])];
      if (in.one_hot) x = one_hot(x, in.one_hot, path, "column \"" + in.columns[0] + "\"", &csv.lines);
      t.names.push_back(in.name);
      t.tensors.push_back(std::move(x));
    }
  } else {
    std::map<std::string, Tensor> found;
    std::string file;
    if (d.source == DataSpec::Source::Safetensors) {
      file = d.files.at("");
      for (NamedTensor& nt : read_data_file(spec, "safetensors", file, read_safetensors).tensors) found.emplace(nt.name, std::move(nt.tensor));
    } else if (d.source == DataSpec::Source::Npz) {
      file = d.files.at("");
      for (NamedTensor& nt : read_data_file(spec, "npz", file, read_npz)) found.emplace(nt.name, std::move(nt.tensor));
    } else {
      for (const auto& [name, path] : d.files) found.emplace(name, read_data_file(spec, "npy", path, read_npy)), file += (file.empty() ? "" : ", ") + path;
    }
    for (const InputSpec& in : d.inputs) {
      auto it = found.find(in.tensor);
      if (it == found.end()) {
        std::string known;
        for (const auto& [name, tensor] : found) known += (known.empty() ? "" : ", ") + name;
        throw InputError(spec.path, in.pointer + "/tensor", "tensor \"" + in.tensor + "\" is not in " + file + " (tensors: " + known + ")");
      }
      Tensor x = it->second;
      for (double v : x.values())
        if (!std::isfinite(v)) throw InputError(file, in.tensor, "NaN/inf values are not allowed in data");
      if (in.one_hot) x = one_hot(x, in.one_hot, file, "tensor \"" + in.tensor + "\"", nullptr);
      t.names.push_back(in.name);
      t.tensors.push_back(std::move(x));
    }
  }
  t.rows = t.tensors.front().shape()[0];
  for (size_t i = 0; i < t.tensors.size(); ++i)
    if (t.tensors[i].shape()[0] != t.rows)
      throw InputError(spec.path, d.inputs[i].pointer,
                       "input \"" + t.names[i] + "\" has " + std::to_string(t.tensors[i].shape()[0]) + " rows, but \"" +
                           t.names[0] + "\" has " + std::to_string(t.rows));
  check_label_input(spec, t);
  return t;
}

namespace {

DataTable take_rows(const DataTable& all, const std::vector<int64_t>& rows) {
  DataTable t;
  t.names = all.names;
  t.rows = static_cast<int64_t>(rows.size());
  if (rows.empty()) return t;
  for (const Tensor& src : all.tensors) {
    std::vector<int64_t> dims(src.shape().dims().begin(), src.shape().dims().end());
    dims[0] = t.rows;
    Tensor x{Shape(std::span<const int64_t>(dims))};
    gather_rows(src, rows, x.data());
    t.tensors.push_back(std::move(x));
  }
  return t;
}

void standardize(Tensor& train, Tensor* val, std::vector<double>& means, std::vector<double>& stds) {
  const int64_t rows = train.shape()[0], cols = train.numel() / rows;
  for (int64_t c = 0; c < cols; ++c) {
    double sum = 0.0;
    for (int64_t r = 0; r < rows; ++r) sum = sum + train[r * cols + c];
    const double mean = sum / static_cast<double>(rows);
    double sq = 0.0;
    for (int64_t r = 0; r < rows; ++r) sq = sq + (train[r * cols + c] - mean) * (train[r * cols + c] - mean);
    double sd = std::sqrt(sq / static_cast<double>(rows));
    if (sd == 0.0) sd = 1.0;
    means.push_back(mean);
    stds.push_back(sd);
    for (int64_t r = 0; r < rows; ++r) train[r * cols + c] = (train[r * cols + c] - mean) / sd;
    if (val) {
      const int64_t vrows = val->shape()[0];
      for (int64_t r = 0; r < vrows; ++r) (*val)[r * cols + c] = ((*val)[r * cols + c] - mean) / sd;
    }
  }
}

}  // namespace

std::vector<int64_t> epoch_order(const Spec& spec, int64_t n, int64_t epoch) {
  if (spec.train.shuffle) return random_permutation(n, spec.seed, kShuffleStream + static_cast<uint64_t>(epoch));
  std::vector<int64_t> order(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) order[static_cast<size_t>(i)] = i;
  return order;
}

void gather_rows(const Tensor& src, std::span<const int64_t> rows, double* dst) {
  const int64_t width = src.numel() / src.shape()[0];
  for (size_t i = 0; i < rows.size(); ++i)
    std::memcpy(dst + static_cast<int64_t>(i) * width, src.data() + rows[i] * width, static_cast<size_t>(width) * sizeof(double));
}

Datasets load_datasets(const Spec& spec) {
  Datasets out;
  if (!spec.data) return out;
  const DataTable all = read_inputs(spec);
  const int64_t n_val = static_cast<int64_t>(std::floor(spec.data->validation * static_cast<double>(all.rows)));
  if (spec.data->validation > 0 && (n_val == 0 || n_val == all.rows))
    throw InputError(spec.path, "/data/validation",
                     "a validation fraction of " + std::to_string(spec.data->validation) + " leaves an empty split of " +
                         std::to_string(all.rows) + " rows");
  const std::vector<int64_t> perm = random_permutation(all.rows, spec.seed, kSplitStream);
  std::vector<int64_t> val(perm.begin(), perm.begin() + n_val), train(perm.begin() + n_val, perm.end());
  std::sort(val.begin(), val.end());
  std::sort(train.begin(), train.end());
  out.train = take_rows(all, train);
  out.validation = take_rows(all, val);
  out.mean.resize(spec.data->inputs.size());
  out.std.resize(spec.data->inputs.size());
  for (size_t i = 0; i < spec.data->inputs.size(); ++i)
    if (spec.data->inputs[i].standardize)
      standardize(out.train.tensors[i], out.validation.rows ? &out.validation.tensors[i] : nullptr, out.mean[i], out.std[i]);
  return out;
}

}  // namespace gr
