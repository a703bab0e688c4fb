#include "interchange/preprocess.h"

#include <filesystem>
#include <limits>
#include <nlohmann/json.hpp>

#include "io/errors.h"
#include "io/safetensors.h"
#include "spec/dataset.h"
#include "spec/json_reader.h"
#include "spec/spec.h"
#include "spec/text_data.h"

namespace gr {

namespace {

using Json = nlohmann::ordered_json;

const char* source_word(DataSpec::Source s) {
  switch (s) {
    case DataSpec::Source::Csv: return "csv";
    case DataSpec::Source::Safetensors: return "safetensors";
    case DataSpec::Source::Npy: return "npy";
    case DataSpec::Source::Npz: return "npz";
    case DataSpec::Source::Text: return "text";
  }
  return "?";
}

template <class T>
Json array_of(const std::vector<T>& v) {
  Json a = Json::array();
  for (const T& x : v) a.push_back(x);
  return a;
}

std::vector<std::string> strings_at(const JsonAt& a) {
  if (!a.json().is_array()) a.fail("expected an array of strings");
  std::vector<std::string> out;
  for (size_t i = 0; i < a.json().size(); ++i) out.push_back(a.at(i).str());
  return out;
}

// Doubles: nlohmann writes the shortest form that reads back to the same double (Grisu2 with a
// round-trip guarantee) and reads with strtod, so every value survives exactly.
std::vector<double> numbers_at(const JsonAt& a) {
  if (!a.json().is_array()) a.fail("expected an array of numbers");
  std::vector<double> out;
  for (size_t i = 0; i < a.json().size(); ++i) {
    const JsonAt x = a.at(i);
    if (!x.is_number()) x.fail("expected a number");
    out.push_back(x.json().get<double>());
  }
  return out;
}

}  // namespace

int64_t export_raw_width(const InputPrep& ip, int64_t row_numel) {
  const InputFit& f = ip.fit;
  if (f.categorical || f.has_threshold || !ip.one_hot_classes.empty()) return 1;
  return f.indicator ? row_numel / 2 : row_numel;
}

std::vector<double> export_category_values(const InputFit& fit) {
  std::vector<double> v;
  for (size_t i = 0; i < fit.categories.size(); ++i)
    v.push_back(fit.categories[i].is_text ? static_cast<double>(i) : fit.categories[i].number);
  return v;
}

std::vector<double> export_fill(const InputFit& fit) {
  std::vector<double> v;
  for (const DataValue& x : fit.fill) {
    if (!x.is_text && !(fit.categorical && !fit.categories.empty() && fit.categories[0].is_text)) {
      v.push_back(x.number);
      continue;
    }
    double id = -1;  // a string fill (or a number among string categories): its position in the list
    for (size_t i = 0; i < fit.categories.size(); ++i)
      if (category_name(fit.categories[i]) == category_name(x)) id = static_cast<double>(i);
    v.push_back(id);
  }
  return v;
}

const InputPrep* Preprocessing::find(const std::string& name) const {
  for (const InputPrep& in : inputs)
    if (in.name == name) return &in;
  return nullptr;
}

Preprocessing make_preprocessing(const Spec& spec, const Datasets& data) {
  Preprocessing p;
  p.spec_sha256 = spec.sha256;
  if (!spec.data) return p;
  p.vocab = data.vocab;
  for (size_t i = 0; i < spec.data->inputs.size(); ++i) {
    const InputSpec& in = spec.data->inputs[i];
    InputPrep ip;
    ip.name = in.name;
    ip.source_kind = source_word(spec.data->source);
    if (spec.data->source == DataSpec::Source::Csv) ip.columns = in.columns;
    else ip.tensor = in.tensor;
    if (i < data.mean.size()) ip.mean = data.mean[i], ip.std = data.std[i];
    if (i < data.fit.size()) ip.fit = data.fit[i];
    ip.fit.one_hot = in.one_hot;
    for (int64_t k = 0; k < in.one_hot; ++k) ip.one_hot_classes.push_back(std::to_string(k));
    ip.dtype = "f64";
    if (i < data.train.tensors.size()) {
      const auto dims = data.train.tensors[i].shape().dims();
      ip.row_shape.assign(dims.begin() + 1, dims.end());
    }
    p.inputs.push_back(std::move(ip));
  }
  return p;
}

namespace {

Json values_json(const std::vector<DataValue>& v) {
  Json a = Json::array();
  for (const DataValue& x : v) {
    if (x.is_text) a.push_back(x.text);
    else a.push_back(x.number);
  }
  return a;
}

std::vector<DataValue> values_at(const JsonAt& a) {
  if (!a.json().is_array()) a.fail("expected an array of numbers and strings");
  std::vector<DataValue> out;
  for (size_t i = 0; i < a.json().size(); ++i) {
    const JsonAt x = a.at(i);
    if (x.is_string()) out.push_back(DataValue{true, x.str(), 0});
    else if (x.is_number()) out.push_back(DataValue{false, "", x.json().get<double>()});
    else x.fail("expected a number or a string");
  }
  return out;
}

}  // namespace

std::string to_json(const Preprocessing& p) {
  Json inputs = Json::array();
  for (const InputPrep& in : p.inputs) {
    Json j{{"name", in.name},
           {"source_kind", in.source_kind},
           {"columns", array_of(in.columns)},
           {"tensor", in.tensor},
           {"mean", array_of(in.mean)},
           {"std", array_of(in.std)},
           {"one_hot_classes", array_of(in.one_hot_classes)},
           {"dtype", in.dtype},
           {"row_shape", array_of(in.row_shape)}};
    // The tabular transforms, only where they apply: a run without them saves what it always did.
    const InputFit& f = in.fit;
    if (f.missing != "error") j["missing"] = f.missing, j["fill"] = values_json(f.fill);
    if (f.indicator) j["missing_indicator"] = true;
    if (f.categorical) {
      j["categories"] = values_json(f.categories);
      j["encode"] = f.ids ? "ids" : "one_hot";
      j["unknown"] = f.unknown_zeros ? "zeros" : "error";
    }
    if (f.has_threshold) j["threshold"] = f.threshold;
    inputs.push_back(std::move(j));
  }
  Json doc{{"spec_sha256", p.spec_sha256}, {"inputs", inputs}};
  if (!p.vocab.empty()) doc["text"] = Json{{"kind", p.vocab.kind}, {"context", p.vocab.context}, {"tokens", p.vocab.tokens}};
  return doc.dump();
}

Preprocessing preprocessing_from_json(const std::string& text) {
  const std::string file = "preprocessing";
  Json doc;
  try {
    doc = Json::parse(text);
  } catch (const Json::exception& e) {
    throw InputError(file, "", std::string("malformed JSON: ") + e.what());
  }
  const JsonAt root(doc, "", file);
  Preprocessing p;
  p.spec_sha256 = root.at("spec_sha256").str();
  const JsonAt inputs = root.at("inputs");
  if (!inputs.json().is_array()) inputs.fail("expected an array");
  for (size_t i = 0; i < inputs.json().size(); ++i) {
    const JsonAt j = inputs.at(i);
    InputPrep in;
    in.name = j.at("name").str();
    in.source_kind = j.at("source_kind").str();
    in.columns = strings_at(j.at("columns"));
    in.tensor = j.at("tensor").str();
    in.mean = numbers_at(j.at("mean"));
    in.std = numbers_at(j.at("std"));
    if (in.mean.size() != in.std.size()) j.at("std").fail("mean and std differ in length");
    in.one_hot_classes = strings_at(j.at("one_hot_classes"));
    in.dtype = j.at("dtype").str();
    if (j.has("row_shape")) in.row_shape = j.at("row_shape").integers(1, std::numeric_limits<int64_t>::max());
    InputFit& f = in.fit;
    f.one_hot = static_cast<int64_t>(in.one_hot_classes.size());
    if (j.has("missing")) {
      f.missing = j.at("missing").str();
      f.fill = values_at(j.at("fill"));
    }
    if (j.has("missing_indicator")) f.indicator = j.at("missing_indicator").boolean();
    if (j.has("categories")) {
      f.categorical = true;
      f.categories = values_at(j.at("categories"));
      if (f.categories.empty()) j.at("categories").fail("expected at least one category");
      f.ids = j.has("encode") && j.at("encode").str() == "ids";
      f.unknown_zeros = j.has("unknown") && j.at("unknown").str() == "zeros";
    }
    if (j.has("threshold")) {
      f.has_threshold = true;
      if (!j.at("threshold").is_number()) j.at("threshold").fail("expected a number");
      f.threshold = j.at("threshold").json().get<double>();
    }
    p.inputs.push_back(std::move(in));
  }
  if (root.has("text")) {  // text data: the vocabulary, checked as vocab.json is
    p.vocab = vocab_from_json(root.at("text").json().dump(), file + " (text)");
  }
  return p;
}

std::string weights_path(const std::string& weights_or_run_dir) {
  if (std::filesystem::is_directory(weights_or_run_dir)) return weights_or_run_dir + "/weights.safetensors";
  return weights_or_run_dir;
}

Preprocessing read_preprocessing(const std::string& weights_or_run_dir) {
  const std::string path = weights_path(weights_or_run_dir);
  const SafetensorsFile f = read_safetensors(path);
  const auto it = f.metadata.find(kPreprocessingKey);
  if (it == f.metadata.end())
    throw InputError(path, "__metadata__",
                     std::string("no \"") + kPreprocessingKey + "\" entry: these weights were written before gradrun saved "
                     "the preprocessing; train again");
  try {
    return preprocessing_from_json(it->second);
  } catch (const InputError& e) {
    throw InputError(path, std::string("__metadata__/") + kPreprocessingKey + e.place(), e.what());
  }
}

}  // namespace gr
