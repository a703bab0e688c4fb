// spec_data.cpp — the spec's "data" object (docs/spec.md: sources, CSV dialect, input bindings
// with their tabular keys, validation, cv), for spec.cpp.
#include <filesystem>
#include <string>
#include <vector>

#include "spec/spec_graph.h"

namespace gr {

namespace {

DataValue read_value(const JsonAt& v) {
  DataValue out;
  if (v.is_string()) {
    out.is_text = true;
    out.text = v.str();
  } else if (v.is_number()) {
    out.number = v.number();
  } else {
    v.fail("expected a number or a string, got " + v.type_name());
  }
  return out;
}

// The tabular keys of a binding (docs/spec.md, "Missing values and categories").
void read_tabular(const JsonAt& b, InputSpec& in, bool single_column) {
  if (b.has("categories")) {
    const JsonAt c = b.at("categories");
    in.categorical = true;
    if (c.is_string()) {
      if (c.str() != "auto") c.fail("expected \"auto\" or a list of categories, got \"" + c.str() + "\"");
      in.categories_auto = true;
    } else {
      const auto list = c.array();
      if (list.empty()) c.fail("expected at least one category");
      if (list.size() > (size_t{1} << 20)) c.fail("more than 1048576 categories");
      for (const JsonAt& v : list) {
        DataValue d = read_value(v);
        if (d.is_text != read_value(list[0]).is_text) v.fail("categories must be all numbers or all strings");
        for (const DataValue& seen : in.categories)
          if (seen == d) v.fail("category " + v.json().dump() + " is listed twice");
        in.categories.push_back(std::move(d));
      }
    }
    if (!single_column) b.fail("categories need a single column (\"column\")");
    if (in.one_hot) b.at("one_hot").fail("a binding has either \"one_hot\" (class ids) or \"categories\", not both");
    if (in.standardize) b.at("standardize").fail("a categorical input cannot also be standardized");
  }
  if (b.has("encode")) {
    const JsonAt e = b.at("encode");
    if (!in.categorical) e.fail("\"encode\" applies to an input with \"categories\"");
    if (e.str() != "one_hot" && e.str() != "ids") e.fail("unknown encoding \"" + e.str() + "\" (known: one_hot, ids)");
    in.encode_ids = e.str() == "ids";
  }
  if (b.has("unknown")) {
    const JsonAt u = b.at("unknown");
    if (!in.categorical) u.fail("\"unknown\" applies to an input with \"categories\"");
    if (u.str() != "error" && u.str() != "zeros") u.fail("unknown policy \"" + u.str() + "\" (known: error, zeros)");
    in.unknown_zeros = u.str() == "zeros";
    if (in.unknown_zeros && in.encode_ids) u.fail("\"unknown\": \"zeros\" needs the one-hot encoding (an id has no zero row)");
  }
  if (b.has("threshold")) {
    const JsonAt t = b.at("threshold");
    in.has_threshold = true;
    in.threshold = t.number();
    if (!single_column) b.fail("a threshold needs a single column (\"column\")");
    if (in.one_hot || in.categorical) t.fail("\"threshold\" binarizes a numeric column: not with \"one_hot\" or \"categories\"");
    if (in.standardize) b.at("standardize").fail("a thresholded (0/1) input cannot also be standardized");
  }
  if (b.has("missing")) {
    const JsonAt m = b.at("missing");
    if (m.is_number()) {
      in.missing = "value";
      in.missing_value = read_value(m);
    } else {
      const std::string w = m.str();
      if (w == "error" || w == "most_frequent" || ((w == "mean" || w == "median") && !in.categorical)) {
        in.missing = w;
      } else if (in.categorical && (w == "mean" || w == "median")) {
        m.fail("\"" + w + "\" needs numbers; a categorical input takes \"most_frequent\" or a value");
      } else if (in.categorical) {
        in.missing = "value";
        in.missing_value = read_value(m);
      } else {
        m.fail("unknown policy \"" + w + "\" (known: error, mean, median, most_frequent, or a number)");
      }
    }
  }
  if (b.has("missing_indicator")) {
    in.missing_indicator = b.at("missing_indicator").boolean();
    if (in.missing_indicator && in.missing == "error")
      b.at("missing_indicator").fail("a missing indicator needs \"missing\" to fill the cells (mean, median, most_frequent or a value)");
  }
}

// "shape": the row shape of a plain numeric input (the encodings change a row's width). A CSV
// binding's column count is known here; a tensor's row size is checked when the data is loaded.
void read_row_shape(const JsonAt& b, InputSpec& in) {
  const JsonAt s = b.at("shape");
  in.row_shape = s.integers(1, int64_t{1} << 40);
  if (in.row_shape.empty()) s.fail("expected at least one dim (the row shape, without the batch dim)");
  int64_t n = 1;
  for (int64_t d : in.row_shape) {
    if (n > (int64_t{1} << 40) / d) s.fail("the row shape holds too many elements");
    n *= d;
  }
  if (in.one_hot || in.categorical || in.has_threshold || in.missing_indicator)
    s.fail("\"shape\" applies to numeric columns as they are (not with one_hot, categories, threshold or missing_indicator)");
  if (!in.columns.empty() && static_cast<int64_t>(in.columns.size()) != n) {
    std::string dims;
    for (int64_t d : in.row_shape) dims += (dims.empty() ? "" : ", ") + std::to_string(d);
    s.fail("row shape [" + dims + "] holds " + std::to_string(n) + " values, but the input has " +
           std::to_string(in.columns.size()) + " column" + (in.columns.size() == 1 ? "" : "s"));
  }
}

char read_delimiter(const JsonAt& j) {
  const std::string d = j.str();
  if (d == "," || d == ";" || d == "\t" || d == "|" || d == " ") return d[0];
  j.fail("unknown delimiter " + j.json().dump() + R"( (known: ",", ";", "\t", "|", and " " for runs of spaces))");
}

// "text": FILE with "context", "vocab", "tokens", "targets", "validation" (docs/spec.md "Text data").
DataSpec read_text_data(const JsonAt& j, const std::string& dir) {
  j.only_keys({"text", "context", "vocab", "tokens", "targets", "validation"});
  for (const char* k : {"csv", "safetensors", "npy", "npz"})
    if (j.has(k)) j.at(k).fail("data needs exactly one source: csv, safetensors, npy, npz or text");
  DataSpec d;
  d.source = DataSpec::Source::Text;
  d.files[""] = (std::filesystem::path(dir) / j.at("text").str()).lexically_normal().string();
  d.context = j.at("context").integer(1, 1 << 20);
  d.vocab = j.has("vocab") ? j.at("vocab").str() : "chars";
  if (d.vocab != "chars" && d.vocab != "words")
    j.at("vocab").fail("unknown vocabulary \"" + d.vocab + "\" (known: chars, words)");
  InputSpec x, y;
  x.name = j.has("tokens") ? j.at("tokens").str() : "x";
  x.pointer = j.has("tokens") ? "/data/tokens" : "/data";
  y.name = j.has("targets") ? j.at("targets").str() : "y";
  y.pointer = j.has("targets") ? "/data/targets" : "/data";
  if (x.name == y.name) j.at(j.has("targets") ? "targets" : "tokens").fail("the tokens and the targets need two different names");
  x.tensor = "tokens", y.tensor = "targets";
  x.row_shape = y.row_shape = {d.context};
  d.inputs = {x, y};
  if (j.has("validation")) {
    d.validation = j.at("validation").number();
    if (d.validation < 0 || d.validation >= 1) j.at("validation").fail("validation must be a fraction in [0, 1)");
  }
  return d;
}

}  // namespace

DataSpec read_data(const JsonAt& j, const std::string& dir) {
  if (j.has("text")) return read_text_data(j, dir);
  j.only_keys({"csv", "safetensors", "npy", "npz", "text", "inputs", "validation", "delimiter", "quote", "na_values", "cv"});
  DataSpec d;
  int sources = 0;
  auto path_of = [&](const JsonAt& p) { return (std::filesystem::path(dir) / p.str()).lexically_normal().string(); };
  if (j.has("csv")) sources++, d.source = DataSpec::Source::Csv, d.files[""] = path_of(j.at("csv"));
  if (j.has("safetensors")) sources++, d.source = DataSpec::Source::Safetensors, d.files[""] = path_of(j.at("safetensors"));
  if (j.has("npz")) sources++, d.source = DataSpec::Source::Npz, d.files[""] = path_of(j.at("npz"));
  if (j.has("npy")) {
    sources++;
    d.source = DataSpec::Source::Npy;
    const JsonAt npy = j.at("npy");
    if (npy.is_string()) {  // one file: its tensor is named after the file's stem
      d.files[std::filesystem::path(npy.str()).stem().string()] = path_of(npy);
    } else {
      if (!npy.is_object()) npy.fail("expected a path or an object {tensor name: path}");
      for (auto it = npy.json().begin(); it != npy.json().end(); ++it)
        d.files[it.key()] = path_of(npy.at(it.key()));
    }
  }
  if (sources != 1) j.fail("data needs exactly one source: csv, safetensors, npy, npz or text");
  for (const char* k : {"delimiter", "quote", "na_values"})
    if (j.has(k) && d.source != DataSpec::Source::Csv) j.at(k).fail(std::string("\"") + k + "\" applies to CSV data only");
  if (j.has("delimiter")) d.delimiter = read_delimiter(j.at("delimiter"));
  if (j.has("quote")) {
    const std::string q = j.at("quote").str();
    if (q != "\"" && q != "'") j.at("quote").fail(R"(the quote is "\"" (the default) or "'")");
    d.quote = q[0];
  }
  if (j.has("na_values")) {
    d.na_values.clear();
    for (const JsonAt& v : j.at("na_values").array()) d.na_values.push_back(v.str());
  }
  const JsonAt inputs = j.at("inputs");
  if (!inputs.is_object() || inputs.json().empty()) inputs.fail("expected a non-empty object {name: binding}");
  for (auto it = inputs.json().begin(); it != inputs.json().end(); ++it) {
    const JsonAt b = inputs.at(it.key());
    InputSpec in;
    in.name = it.key();
    in.pointer = b.pointer();
    if (d.source == DataSpec::Source::Csv) {
      b.only_keys({"columns", "column", "one_hot", "standardize", "missing", "missing_indicator", "categories", "unknown",
                   "encode", "threshold", "shape"});
      if (b.has("columns") == b.has("column")) b.fail("a CSV binding needs exactly one of \"columns\" or \"column\"");
      if (b.has("columns")) {
        for (const JsonAt& c : b.at("columns").array()) in.columns.push_back(c.str());
        if (in.columns.empty()) b.at("columns").fail("expected at least one column");
      } else {
        in.columns.push_back(b.at("column").str());
      }
    } else {
      b.only_keys({"tensor", "one_hot", "standardize", "missing", "missing_indicator", "categories", "unknown", "encode",
                   "threshold", "shape"});
      in.tensor = b.at("tensor").str();
    }
    if (b.has("one_hot")) {
      in.one_hot = b.at("one_hot").integer(2, 1 << 20);
      if (in.columns.size() > 1) b.fail("one_hot needs a single label column (\"column\")");
    }
    if (b.has("standardize")) in.standardize = b.at("standardize").boolean();
    if (in.one_hot && in.standardize) b.fail("a one-hot input cannot also be standardized");
    read_tabular(b, in, d.source != DataSpec::Source::Csv || in.columns.size() == 1);
    if (b.has("shape")) read_row_shape(b, in);
    d.inputs.push_back(in);
  }
  if (j.has("validation")) {
    d.validation = j.at("validation").number();
    if (d.validation < 0 || d.validation >= 1) j.at("validation").fail("validation must be a fraction in [0, 1)");
  }
  if (j.has("cv")) {  // the validation rows are one fold of K (gradrun cv writes this)
    const JsonAt cv = j.at("cv");
    cv.only_keys({"folds", "fold"});
    d.cv_folds = cv.at("folds").integer(2, 1 << 30);
    d.cv_fold = cv.at("fold").integer(1, d.cv_folds);
    if (d.validation > 0) cv.fail("\"cv\" chooses the validation rows itself: remove \"validation\" (or set it to 0)");
  }
  return d;
}

}  // namespace gr
