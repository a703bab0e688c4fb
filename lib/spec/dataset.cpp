#include "spec/dataset.h"
#include "spec/folds.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstring>
#include <limits>
#include <unordered_map>

#include "emit/bind_expr.h"
#include "io/errors.h"
#include "io/number_text.h"
#include "spec/random.h"
#include "spec/text_data.h"

namespace gr {

namespace {


// How messages name an input's data: column "c" (CSV) or tensor "t".
std::string source_name(const RawTable& t, const InputSpec& in) {
  return t.csv ? "column \"" + in.columns[0] + "\"" : "tensor \"" + in.tensor + "\"";
}

int64_t width_of(const RawInput& r) {
  int64_t w = 1;
  for (size_t d = 1; d < r.dims.size(); ++d) w *= r.dims[d];
  return w;
}

// ---- categories ------------------------------------------------------------------------------

// Finds a value's id in a category list: by text for string categories (a number by its shortest
// form), by value for numeric ones (a text that is not a number matches none). -1: not listed.
class CategoryIndex {
 public:
  explicit CategoryIndex(const std::vector<DataValue>& cats) {
    numeric_ = !cats.empty() && !cats[0].is_text;
    for (size_t i = 0; i < cats.size(); ++i) {
      if (numeric_) by_number_.emplace_back(cats[i].number, static_cast<int64_t>(i));
      else by_text_.emplace(cats[i].text, static_cast<int64_t>(i));
    }
    std::sort(by_number_.begin(), by_number_.end());
  }
  int64_t of_text(const std::string& s) const {
    if (!numeric_) {
      const auto it = by_text_.find(s);
      return it == by_text_.end() ? -1 : it->second;
    }
    double v = 0;
    return csv_number(s, v) ? of_number(v) : -1;
  }
  int64_t of_number(double v) const {
    if (!numeric_) return of_text(format_shortest(v));
    const auto it = std::lower_bound(by_number_.begin(), by_number_.end(), v, [](const auto& e, double x) { return e.first < x; });
    return it != by_number_.end() && it->first == v ? it->second : -1;
  }
  int64_t of(const DataValue& v) const { return v.is_text ? of_text(v.text) : of_number(v.number); }

 private:
  bool numeric_ = false;
  std::vector<std::pair<double, int64_t>> by_number_;
  std::unordered_map<std::string, int64_t> by_text_;
};

std::string list_of(const std::vector<DataValue>& cats) {
  std::string s;
  for (size_t i = 0; i < cats.size() && i < 12; ++i) s += (i ? ", " : "") + printable(category_name(cats[i]));
  if (cats.size() > 12) s += ", ... (" + std::to_string(cats.size()) + " in all)";
  return s;
}

// The training rows' distinct present values, sorted: numbers when every one is a number.
std::vector<DataValue> auto_categories(const RawInput& r, const InputSpec& in, const std::string& spec_path) {
  std::vector<DataValue> out;
  std::vector<double> numbers;
  if (r.text) {
    std::vector<bool> used(r.texts.size(), false);
    for (double v : r.values)
      if (!std::isnan(v)) used[static_cast<size_t>(v)] = true;
    std::vector<std::string> texts;
    bool all_numbers = true;
    for (size_t c = 0; c < used.size(); ++c) {
      if (!used[c]) continue;
      texts.push_back(r.texts[c]);
      double v = 0;
      if (all_numbers && csv_number(r.texts[c], v)) numbers.push_back(v);
      else all_numbers = false;
    }
    if (!all_numbers) {
      std::sort(texts.begin(), texts.end());
      for (std::string& t : texts) out.push_back(DataValue{true, std::move(t), 0});
      if (out.empty()) throw InputError(spec_path, in.pointer + "/categories", "no category in the training rows");
      return out;
    }
  } else {
    for (double v : r.values)
      if (!std::isnan(v)) numbers.push_back(v);
  }
  std::sort(numbers.begin(), numbers.end());
  for (size_t i = 0; i < numbers.size(); ++i)
    if (i == 0 || numbers[i] != numbers[i - 1]) out.push_back(DataValue{false, "", numbers[i]});
  if (out.empty()) throw InputError(spec_path, in.pointer + "/categories", "no category in the training rows");
  if (out.size() > (size_t{1} << 20)) throw InputError(spec_path, in.pointer + "/categories", "more than 1048576 distinct values");
  return out;
}

// The id of each raw value's code (text inputs) — computed once per distinct text.
std::vector<int64_t> code_ids(const RawInput& r, const CategoryIndex& index) {
  std::vector<int64_t> ids(r.texts.size());
  for (size_t c = 0; c < r.texts.size(); ++c) ids[c] = index.of_text(r.texts[c]);
  return ids;
}

// ---- fitting ---------------------------------------------------------------------------------

bool needs_training_rows(const InputSpec& in) {
  return in.categories_auto || in.missing == "mean" || in.missing == "median" || in.missing == "most_frequent";
}

// The present values of column c of a numeric raw input.
std::vector<double> present(const RawInput& r, int64_t c) {
  const int64_t w = width_of(r), rows = r.dims[0];
  std::vector<double> v;
  v.reserve(static_cast<size_t>(rows));
  for (int64_t i = 0; i < rows; ++i) {
    const double x = r.values[static_cast<size_t>(i * w + c)];
    if (!std::isnan(x)) v.push_back(x);
  }
  return v;
}

// `train`: the training rows (needs_training_rows) or any rows (only its shape is read).
InputFit fit_input(const InputSpec& in, const RawInput& train, const RawTable& table, const std::string& spec_path) {
  InputFit f;
  f.missing = in.missing;
  f.indicator = in.missing_indicator;
  f.categorical = in.categorical;
  f.unknown_zeros = in.unknown_zeros;
  f.ids = in.encode_ids;
  f.has_threshold = in.has_threshold;
  f.threshold = in.threshold;
  f.one_hot = in.one_hot;
  const int64_t w = width_of(train);
  const std::string what = source_name(table, in);
  if ((f.categorical || f.has_threshold) && w != 1)
    throw InputError(spec_path, in.pointer, what + " has " + std::to_string(w) + " values per row; " +
                                                (f.categorical ? "categories" : "a threshold") + " need one");
  if (f.indicator && train.dims.size() > 2)
    throw InputError(spec_path, in.pointer, what + " has rows of rank " + std::to_string(train.dims.size() - 1) +
                                                "; a missing indicator needs rows that are vectors");
  if (f.categorical) {
    f.categories = in.categories_auto ? auto_categories(train, in, spec_path) : in.categories;
    const CategoryIndex index(f.categories);
    if (in.missing == "value") {
      f.fill = {in.missing_value};
    } else if (in.missing == "most_frequent") {
      std::vector<int64_t> counts(f.categories.size(), 0);
      const std::vector<int64_t> by_code = train.text ? code_ids(train, index) : std::vector<int64_t>{};
      for (double v : train.values) {
        if (std::isnan(v)) continue;
        const int64_t id = train.text ? by_code[static_cast<size_t>(v)] : index.of_number(v);
        if (id >= 0) ++counts[static_cast<size_t>(id)];
      }
      const auto best = std::max_element(counts.begin(), counts.end());  // the first of the largest
      if (*best == 0) throw InputError(spec_path, in.pointer + "/missing", "no category in the training rows to take the most frequent of");
      f.fill = {f.categories[static_cast<size_t>(best - counts.begin())]};
    }
    if (!f.fill.empty() && index.of(f.fill[0]) < 0 && !f.unknown_zeros)
      throw InputError(spec_path, in.pointer + "/missing",
                       "the fill value " + category_name(f.fill[0]) + " is not one of the categories (" + list_of(f.categories) + ")");
    return f;
  }
  if (train.text) throw Error("fit_input: text values for a numeric input");
  if (in.missing == "value") {
    f.fill.assign(static_cast<size_t>(w), in.missing_value);
  } else if (in.missing == "mean") {
    // One pass over the rows for every column (each column's sum still adds its rows in order).
    std::vector<double> sum(static_cast<size_t>(w), 0.0);
    std::vector<int64_t> count(static_cast<size_t>(w), 0);
    const int64_t rows = train.dims[0];
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t c = 0; c < w; ++c) {
        const double x = train.values[static_cast<size_t>(r * w + c)];
        if (std::isnan(x)) continue;
        sum[static_cast<size_t>(c)] = sum[static_cast<size_t>(c)] + x;
        ++count[static_cast<size_t>(c)];
      }
    for (int64_t c = 0; c < w; ++c) {
      if (count[static_cast<size_t>(c)] == 0) {
        const std::string col = table.csv ? "column \"" + in.columns[static_cast<size_t>(c)] + "\"" : what + " column " + std::to_string(c);
        throw InputError(spec_path, in.pointer + "/missing", col + " has no value in the training rows to take the mean of");
      }
      f.fill.push_back(DataValue{false, "", sum[static_cast<size_t>(c)] / static_cast<double>(count[static_cast<size_t>(c)])});
    }
  } else if (in.missing != "error") {
    for (int64_t c = 0; c < w; ++c) {
      std::vector<double> v = present(train, c);
      const std::string col = table.csv ? "column \"" + in.columns[static_cast<size_t>(c)] + "\"" : what + " column " + std::to_string(c);
      if (v.empty()) throw InputError(spec_path, in.pointer + "/missing", col + " has no value in the training rows to take the " + in.missing + " of");
      double x = 0;
      if (in.missing == "mean") {
        double sum = 0.0;
        for (double e : v) sum = sum + e;
        x = sum / static_cast<double>(v.size());
      } else if (in.missing == "median") {
        std::sort(v.begin(), v.end());
        const size_t n = v.size();
        x = n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2.0;
      } else {  // most_frequent: the longest run of the sorted values, the smallest on ties
        std::sort(v.begin(), v.end());
        size_t best = 0, best_len = 0;
        for (size_t i = 0; i < v.size();) {
          size_t j = i;
          while (j < v.size() && v[j] == v[i]) ++j;
          if (j - i > best_len) best = i, best_len = j - i;
          i = j;
        }
        x = v[best];
      }
      f.fill.push_back(DataValue{false, "", x});
    }
  }
  return f;
}

// ---- applying --------------------------------------------------------------------------------

std::string origin_place(const RawTable& t, std::span<const int64_t> origin, int64_t r) {
  return t.place(origin.empty() ? r : origin[static_cast<size_t>(r)]);
}

}  // namespace

std::string category_name(const DataValue& v) { return v.is_text ? v.text : format_shortest(v.number); }


namespace {

// apply_fit's rows as dims and values (load_datasets splits them in place before they become tensors).
RawInput apply_rows(RawInput& raw, const InputFit& fit, std::span<const int64_t> origin, const RawTable& table, const InputSpec& in) {
  const int64_t rows = raw.dims[0], w = width_of(raw);
  const std::string what = source_name(table, in);
  if ((fit.categorical || fit.has_threshold || fit.one_hot) && w != 1)
    throw InputError(table.file, what, std::string(fit.one_hot ? "a one-hot input needs one label per row" : "one value per row is needed") +
                                           " (rows of " + std::to_string(w) + ")");
  // 1. the indicator, before anything is filled
  std::vector<double> missing;
  if (fit.indicator) {
    missing.resize(raw.values.size());
    for (size_t i = 0; i < raw.values.size(); ++i) missing[i] = std::isnan(raw.values[i]) ? 1.0 : 0.0;
  }
  auto no_fill = [&](int64_t r, int64_t c) {
    throw InputError(table.file, origin_place(table, origin, r) + (table.csv ? ", column \"" + in.columns[static_cast<size_t>(c)] + "\"" : ""),
                     "a missing value, and input \"" + in.name + "\" has no \"missing\" policy to fill it");
  };
  std::vector<int64_t> dims;
  std::vector<double> out;
  if (fit.categorical) {
    // 2–3. fill and encode through the category ids
    const CategoryIndex index(fit.categories);
    const std::vector<int64_t> by_code = raw.text ? code_ids(raw, index) : std::vector<int64_t>{};
    const int64_t fill_id = fit.fill.empty() ? -2 : index.of(fit.fill[0]);
    const int64_t k = static_cast<int64_t>(fit.categories.size()), width = fit.ids ? 1 : k;
    out.assign(static_cast<size_t>(rows * width), 0.0);
    for (int64_t r = 0; r < rows; ++r) {
      const double v = raw.values[static_cast<size_t>(r)];
      int64_t id;
      if (std::isnan(v)) {
        if (fill_id == -2) no_fill(r, 0);
        id = fill_id;
      } else {
        id = raw.text ? by_code[static_cast<size_t>(v)] : index.of_number(v);
      }
      if (id < 0 && !fit.unknown_zeros) {
        const std::string cell = std::isnan(v) ? category_name(fit.fill[0]) : raw.text ? raw.texts[static_cast<size_t>(v)] : format_shortest(v);
        throw InputError(table.file, origin_place(table, origin, r) + (table.csv ? ", " + what : ""),
                         "\"" + printable(cell) + "\" is not one of the " + std::to_string(k) + " categories of input \"" + in.name + "\" (" +
                             list_of(fit.categories) + "); set \"unknown\": \"zeros\" to encode it as a row of zeros");
      }
      if (fit.ids) out[static_cast<size_t>(r)] = static_cast<double>(id);
      else if (id >= 0) out[static_cast<size_t>(r * k + id)] = 1.0;
    }
    dims = {rows, width};
  } else {
    // 2. fill, in place (without a fill the reader has refused missing cells already)
    if (!fit.fill.empty()) {
      for (int64_t r = 0; r < rows; ++r)
        for (int64_t c = 0; c < w; ++c) {
          double& v = raw.values[static_cast<size_t>(r * w + c)];
          if (std::isnan(v)) v = fit.fill[static_cast<size_t>(c)].number;
        }
    }
    // 3. encode
    if (fit.has_threshold) {
      for (double& v : raw.values) v = v > fit.threshold ? 1.0 : 0.0;
      dims = {rows, 1};
      out = std::move(raw.values);
    } else if (fit.one_hot) {
      const int64_t k = fit.one_hot;
      out.assign(static_cast<size_t>(rows * k), 0.0);
      for (int64_t r = 0; r < rows; ++r) {
        const double v = raw.values[static_cast<size_t>(r)];
        if (!(v >= 0 && v < static_cast<double>(k)) || v != std::floor(v))
          throw InputError(table.file, origin_place(table, origin, r),
                           what + ": label " + std::to_string(v) + " is not an integer in [0, " + std::to_string(k) + ")");
        out[static_cast<size_t>(r * k + static_cast<int64_t>(v))] = 1.0;
      }
      dims = {rows, k};
    } else {
      dims = raw.dims;
      out = std::move(raw.values);
    }
  }
  raw.values = {};
  // 4. the indicator columns after the encoded ones
  if (fit.indicator) {
    const int64_t enc = static_cast<int64_t>(out.size()) / std::max<int64_t>(rows, 1);
    std::vector<double> both(static_cast<size_t>(rows * (enc + w)));
    for (int64_t r = 0; r < rows; ++r) {
      std::memcpy(both.data() + r * (enc + w), out.data() + r * enc, static_cast<size_t>(enc) * sizeof(double));
      std::memcpy(both.data() + r * (enc + w) + enc, missing.data() + r * w, static_cast<size_t>(w) * sizeof(double));
    }
    out = std::move(both);
    dims = {rows, enc + w};
  }
  RawInput result;
  result.dims = std::move(dims);
  result.values = std::move(out);
  return result;
}

// The accuracy metric compares argmaxes: its labels must be one-hot rows (a "one_hot" binding, or
// data that already holds one 1 per row) or one class id per row, not features.
void check_label(const Spec& spec, const InputSpec& in, const RawInput& rows_of) {
  if (!spec.metrics.accuracy || in.name != spec.metrics.labels || in.one_hot || in.categorical || in.has_threshold) return;
  const int64_t rows = rows_of.dims[0], width = rows ? width_of(rows_of) : 0;
  const std::vector<double>& y = rows_of.values;
  bool ids_input = false;  // the labels are a cross_entropy's ids (weighted or not: spec/class_weight.h)
  for (const NodeSpec& n : spec.graph) {
    const std::vector<std::string>& nin = n.weighted ? n.weighted_inputs : n.inputs;
    ids_input = ids_input || (n.kind == NodeSpec::Kind::Op && n.weighted.value_or(n.op) == Op::CrossEntropy && nin.size() == 2 && nin[1] == in.name);
  }
  for (int64_t r = 0; r < rows; ++r) {
    int64_t ones = 0;
    bool binary = true;
    for (int64_t c = 0; c < width; ++c) {
      const double v = y[static_cast<size_t>(r * width + c)];
      ones += v == 1.0, binary = binary && (v == 0.0 || v == 1.0);
    }
    // Class ids (non-negative integers), as cross_entropy takes: one column, one id per row; or,
    // when the labels feed a cross_entropy (whose second input is ids), several columns: a
    // sequence's ids [B, T] beside logits [B, T, C].
    bool class_id = width == 1 || (width > 1 && ids_input);
    for (int64_t c = 0; class_id && c < width; ++c) {
      const double id = y[static_cast<size_t>(r * width + c)];
      class_id = id >= 0.0 && id < 0x1p53 && id == static_cast<double>(static_cast<int64_t>(id));
    }
    if ((!class_id && (!binary || ones != 1)) || in.standardize)
      throw InputError(spec.path, "/metrics/accuracy/labels",
                       "\"" + in.name + "\" is not a label input (row " + std::to_string(r + 1) +
                           " is neither one-hot nor a class id" + (in.standardize ? ", and it is standardized" : "") +
                           "); bind the class column with \"one_hot\": CLASSES, or use it as class ids");
  }
}

}  // namespace

Tensor apply_fit(RawInput& raw, const InputFit& fit, std::span<const int64_t> origin, const RawTable& table, const InputSpec& in) {
  RawInput r = apply_rows(raw, fit, origin, table, in);
  return Tensor(Shape(std::span<const int64_t>(r.dims)), std::move(r.values));
}

void check_labels(const Spec& spec, const DataTable& t) {
  if (!spec.data) return;
  for (size_t i = 0; i < t.names.size(); ++i)
    for (const InputSpec& in : spec.data->inputs)
      if (in.name == t.names[i]) {
        RawInput view;
        view.dims.assign(t.tensors[i].shape().dims().begin(), t.tensors[i].shape().dims().end());
        view.values.assign(t.tensors[i].values().begin(), t.tensors[i].values().end());
        check_label(spec, in, view);
      }
}

namespace {

// Splits row-major values of `width` per row: the training rows stay in `values`, moved to the
// front in place (each keeps its order, so no row is overwritten before it moves), the validation
// rows are copied out.
std::vector<double> split_off(std::vector<double>& values, int64_t width, const std::vector<int64_t>& train,
                              const std::vector<int64_t>& val) {
  const size_t bytes = static_cast<size_t>(width) * sizeof(double);
  std::vector<double> out(val.size() * static_cast<size_t>(width));
  for (size_t i = 0; i < val.size(); ++i)
    if (bytes) std::memcpy(out.data() + static_cast<int64_t>(i) * width, values.data() + val[i] * width, bytes);
  for (size_t i = 0; i < train.size(); ++i)
    if (train[i] != static_cast<int64_t>(i) && bytes)
      std::memmove(values.data() + static_cast<int64_t>(i) * width, values.data() + train[i] * width, bytes);
  values.resize(train.size() * static_cast<size_t>(width));
  return out;
}

Tensor as_tensor(std::vector<int64_t> dims, int64_t rows, std::vector<double> values) {
  dims[0] = rows;
  return Tensor(Shape(std::span<const int64_t>(dims)), std::move(values));
}

// `fit_cols`: the leading columns to standardize; the rest (missing indicators) keep mean 0, std 1.
// Row by row over all columns at once (cache-friendly); each column's sums still add its rows in
// ascending order, so the statistics are dataset.h's to the bit.
void standardize(Tensor& train, Tensor* val, int64_t fit_cols, std::vector<double>& means, std::vector<double>& stds) {
  const int64_t rows = train.shape()[0], cols = train.numel() / rows;
  const auto k = static_cast<size_t>(fit_cols);
  std::vector<double> sum(k, 0.0), sq(k, 0.0), mean(k), sd(k);
  double* x = train.data();
  for (int64_t r = 0; r < rows; ++r)
    for (size_t c = 0; c < k; ++c) sum[c] = sum[c] + x[r * cols + static_cast<int64_t>(c)];
  for (size_t c = 0; c < k; ++c) mean[c] = sum[c] / static_cast<double>(rows);
  for (int64_t r = 0; r < rows; ++r)
    for (size_t c = 0; c < k; ++c) {
      const double d = x[r * cols + static_cast<int64_t>(c)] - mean[c];
      sq[c] = sq[c] + d * d;
    }
  for (size_t c = 0; c < k; ++c) {
    sd[c] = std::sqrt(sq[c] / static_cast<double>(rows));
    if (sd[c] == 0.0) sd[c] = 1.0;
  }
  auto apply = [&](double* v, int64_t n) {
    for (int64_t r = 0; r < n; ++r)
      for (size_t c = 0; c < k; ++c) v[r * cols + static_cast<int64_t>(c)] = (v[r * cols + static_cast<int64_t>(c)] - mean[c]) / sd[c];
  };
  apply(x, rows);
  if (val) apply(val->data(), val->shape()[0]);
  for (int64_t c = 0; c < cols; ++c) {
    means.push_back(c < fit_cols ? mean[static_cast<size_t>(c)] : 0.0);
    stds.push_back(c < fit_cols ? sd[static_cast<size_t>(c)] : 1.0);
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
  if (spec.data->source == DataSpec::Source::Text) return load_text_datasets(spec);  // windows, split by position
  RawTable raw = read_raw(spec);
  const int64_t rows = raw.rows;
  const std::vector<int64_t> fold = spec.data->cv_folds > 0 ? assign_folds(spec, raw) : std::vector<int64_t>{};
  int64_t n_val = static_cast<int64_t>(std::floor(spec.data->validation * static_cast<double>(rows)));
  for (int64_t f : fold) n_val += f == spec.data->cv_fold ? 1 : 0;
  if (spec.data->validation > 0 && (n_val == 0 || n_val == rows))
    throw InputError(spec.path, "/data/validation",
                     "a validation fraction of " + std::to_string(spec.data->validation) + " leaves an empty split of " +
                         std::to_string(rows) + " rows");
  std::vector<int64_t> val, train;  // each ascending: the permutation's first n_val entries, and the rest
  {
    std::vector<bool> held(static_cast<size_t>(rows), false);
    if (!fold.empty()) {  // data.cv: fold cv_fold is the validation rows (spec/folds.h)
      for (int64_t r = 0; r < rows; ++r) held[static_cast<size_t>(r)] = fold[static_cast<size_t>(r)] == spec.data->cv_fold;
    } else {
      const std::vector<int64_t> perm = random_permutation(rows, spec.seed, kSplitStream);
      for (int64_t i = 0; i < n_val; ++i) held[static_cast<size_t>(perm[static_cast<size_t>(i)])] = true;
    }
    val.reserve(static_cast<size_t>(n_val));
    train.reserve(static_cast<size_t>(rows - n_val));
    for (int64_t r = 0; r < rows; ++r) (held[static_cast<size_t>(r)] ? val : train).push_back(r);
  }
  out.train.names = raw.names;
  out.validation.names = raw.names;
  out.train.rows = static_cast<int64_t>(train.size());
  out.validation.rows = n_val;
  out.train.source_rows = train;
  out.validation.source_rows = val;
  const size_t n = spec.data->inputs.size();
  out.mean.resize(n);
  out.std.resize(n);
  for (size_t i = 0; i < n; ++i) {
    const InputSpec& in = spec.data->inputs[i];
    RawInput& r = raw.inputs[i];
    Tensor tr, va;
    InputFit fit;
    if (needs_training_rows(in)) {  // split the raw values, fit on the training rows, apply to both
      RawInput rt, rv;
      rt.dims = rv.dims = r.dims;
      rt.text = rv.text = r.text;
      rv.texts = r.texts;
      rt.texts = std::move(r.texts);
      rv.values = split_off(r.values, width_of(r), train, val);
      rt.values = std::move(r.values);
      rt.dims[0] = static_cast<int64_t>(train.size());
      rv.dims[0] = n_val;
      fit = fit_input(in, rt, raw, spec.path);
      tr = apply_fit(rt, fit, train, raw, in);
      if (n_val) va = apply_fit(rv, fit, val, raw, in);
    } else {  // everything row by row on all rows (errors in file order), then split in place
      fit = fit_input(in, r, raw, spec.path);
      RawInput all = apply_rows(r, fit, {}, raw, in);
      check_label(spec, in, all);
      std::vector<double> v = split_off(all.values, rows ? width_of(all) : 0, train, val);
      tr = as_tensor(all.dims, static_cast<int64_t>(train.size()), std::move(all.values));
      if (n_val) va = as_tensor(all.dims, n_val, std::move(v));
    }
    if (in.standardize) {
      const int64_t indicator_cols = fit.indicator ? width_of(r) : 0;
      const int64_t cols = tr.numel() / std::max<int64_t>(tr.shape()[0], 1);
      standardize(tr, n_val ? &va : nullptr, cols - indicator_cols, out.mean[i], out.std[i]);
    }
    if (!in.row_shape.empty()) {  // "shape": after every column-wise step (docs/spec.md)
      tr = shape_rows(tr, in, spec.path, in.pointer + "/shape");
      if (n_val) va = shape_rows(va, in, spec.path, in.pointer + "/shape");
    }
    out.fit.push_back(std::move(fit));
    out.train.tensors.push_back(std::move(tr));
    if (n_val) out.validation.tensors.push_back(std::move(va));
  }
  return out;
}

}  // namespace gr
