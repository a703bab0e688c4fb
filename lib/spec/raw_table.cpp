// raw_table.cpp — read_raw (spec/dataset.h): the spec's data files with its bindings and dialect,
// as read, before any split or transform; and shape_rows, a data input's declared row shape ("shape").
#include <cmath>
#include <filesystem>
#include <map>

#include "emit/bind_expr.h"
#include "io/errors.h"
#include "io/npy.h"
#include "io/safetensors.h"
#include "spec/dataset.h"
#include "tensor/diag.h"

namespace gr {

namespace {

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

}  // namespace

std::string RawTable::place(int64_t row) const { return csv ? "line " + std::to_string(lines.line(row)) : "row " + std::to_string(row); }

RawTable read_raw(const Spec& spec) {
  if (spec.data->source == DataSpec::Source::Text)  // no table: load_datasets and predict read text themselves
    throw InputError(spec.path, "/data/text", "text data is not a table (this command reads CSV or tensor files only)");
  const DataSpec& d = *spec.data;
  RawTable t;
  if (d.source == DataSpec::Source::Csv) {
    const std::string& path = d.files.at("");
    CsvDialect dialect;
    dialect.delimiter = d.delimiter;
    dialect.quote = d.quote;
    dialect.na_values = d.na_values;
    CsvReader csv = read_data_file(spec, "csv", path, [&](const std::string& p) { return CsvReader::open(p, dialect); });
    // A detected delimiter other than the usual ',' is worth a line (a comma file says nothing, so the
    // examples' output and the one-line errors of bad input stay as they were).
    if (csv.delimiter_detected() && csv.delimiter() != ',')
      diag::info(csv.delimiter() == ' ' ? std::string("data: delimiter ' ' (runs of spaces, detected from the header)")
                                        : "data: delimiter " + describe_delimiter(csv.delimiter()) + " (detected from the header)");
    std::vector<std::vector<CsvField>> groups;
    for (const InputSpec& in : d.inputs) {
      std::vector<CsvField> fields;
      for (const std::string& c : in.columns) {
        const int64_t idx = csv.column(c);
        if (idx < 0) {
          std::string known;
          for (const std::string& h : csv.header()) known += (known.empty() ? "" : ", ") + printable(h);
          throw InputError(spec.path, in.pointer, "column \"" + c + "\" is not in " + path + " (columns: " + known + ")");
        }
        CsvField f;
        f.column = idx;
        f.text = in.categorical;
        f.missing_ok = in.missing != "error";
        f.missing_hint = in.is_label ? "the label \"" + in.name + "\" cannot be missing: every row needs one"
                                     : "set \"missing\" on input \"" + in.name + "\" to fill it";
        fields.push_back(std::move(f));
      }
      groups.push_back(std::move(fields));
    }
    CsvData data = csv.read(groups);
    t.file = path;
    t.csv = true;
    t.rows = data.rows;
    t.lines = std::move(data.lines);
    for (size_t i = 0; i < d.inputs.size(); ++i) {
      RawInput r;
      r.dims = {data.rows, static_cast<int64_t>(d.inputs[i].columns.size())};
      r.values = std::move(data.groups[i]);
      if (d.inputs[i].categorical) {
        r.text = true;
        r.texts = std::move(data.texts[i][0]);
      }
      t.names.push_back(d.inputs[i].name);
      t.inputs.push_back(std::move(r));
    }
    return t;
  }
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
  t.file = file;
  for (const InputSpec& in : d.inputs) {
    auto it = found.find(in.tensor);
    if (it == found.end()) {
      std::string known;
      for (const auto& [name, tensor] : found) known += (known.empty() ? "" : ", ") + name;
      throw InputError(spec.path, in.pointer + "/tensor", "tensor \"" + in.tensor + "\" is not in " + file + " (tensors: " + known + ")");
    }
    const Tensor& x = it->second;
    for (double v : x.values())
      if (!std::isfinite(v) && (in.missing == "error" || !std::isnan(v)))
        throw InputError(file, in.tensor, "NaN/inf values are not allowed in data");
    RawInput r;
    r.dims.assign(x.shape().dims().begin(), x.shape().dims().end());
    r.values.assign(x.values().begin(), x.values().end());
    t.names.push_back(in.name);
    t.inputs.push_back(std::move(r));
  }
  t.rows = t.inputs.front().dims[0];
  for (size_t i = 0; i < t.inputs.size(); ++i)
    if (t.inputs[i].dims[0] != t.rows)
      throw InputError(spec.path, d.inputs[i].pointer,
                       "input \"" + t.names[i] + "\" has " + std::to_string(t.inputs[i].dims[0]) + " rows, but \"" + t.names[0] +
                           "\" has " + std::to_string(t.rows));
  return t;
}

// "shape" (dataset.h): kept here, beside the other row readers, so dataset.cpp stays small.
Tensor shape_rows(const Tensor& t, const InputSpec& in, const std::string& file, const std::string& place) {
  if (in.row_shape.empty()) return t;
  const int64_t rows = t.shape().rank() ? t.shape()[0] : 1;
  const Shape want{std::span<const int64_t>(in.row_shape)};
  const int64_t have = rows ? t.numel() / rows : 0;
  if (rows && have != want.numel()) {
    std::vector<int64_t> row(t.shape().dims().begin() + 1, t.shape().dims().end());
    throw InputError(file, place,
                     "input \"" + in.name + "\" has rows of " + std::to_string(have) + " values (" +
                         Shape(std::span<const int64_t>(row)).str() + "), but its row shape " + want.str() + " holds " +
                         std::to_string(want.numel()));
  }
  std::vector<int64_t> dims{rows};
  dims.insert(dims.end(), in.row_shape.begin(), in.row_shape.end());
  return Tensor(Shape(std::span<const int64_t>(dims)), std::vector<double>(t.values().begin(), t.values().end()));
}

}  // namespace gr
