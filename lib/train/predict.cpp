#include "train/predict.h"

#include "spec/text_data.h"

#include <charconv>
#include <cmath>
#include <cstring>
#include <filesystem>

#include "io/csv.h"
#include "io/errors.h"
#include "io/number_text.h"
#include "io/seal.h"
#include "tensor/diag.h"
#include "train/run_model.h"
#include "train/device_runner.h"
#include "train/trainer.h"

namespace gr {

namespace {

bool ends_with(const std::string& s, const char* suffix) {
  const size_t n = std::strlen(suffix);
  return s.size() >= n && s.compare(s.size() - n, n, suffix) == 0;
}

std::string shape_str(const std::vector<int64_t>& dims) {
  std::string s = "[";
  for (size_t i = 0; i < dims.size(); ++i) s += (i ? ", " : "") + std::to_string(dims[i]);
  return s + "]";
}

Tensor zeros(int64_t rows, const std::vector<int64_t>& row_shape) {
  std::vector<int64_t> dims{rows};
  dims.insert(dims.end(), row_shape.begin(), row_shape.end());
  return Tensor(Shape(std::span<const int64_t>(dims)));
}

// The prediction's transform of one row x[0..w), appended to out, in the run's precision R: an f32
// run's probabilities are floats computed in float (as its exported float32 module computes them).
template <class R>
void transform_row(const std::string& transform, const double* x, int64_t w, std::vector<double>& out) {
  if (transform == "softmax") {
    R m = R(x[0]), sum = 0;
    for (int64_t j = 1; j < w; ++j) m = std::max(m, R(x[j]));
    for (int64_t j = 0; j < w; ++j) sum = sum + std::exp(R(x[j]) - m);
    for (int64_t j = 0; j < w; ++j) out.push_back(static_cast<double>(std::exp(R(x[j]) - m) / sum));
  } else if (transform == "sigmoid") {
    for (int64_t j = 0; j < w; ++j) out.push_back(static_cast<double>(R(1) / (R(1) + std::exp(-R(x[j])))));
  } else {
    for (int64_t j = 0; j < w; ++j) out.push_back(x[j]);
  }
}

void apply_transform(DType real, const std::string& transform, const double* x, int64_t w, std::vector<double>& out) {
  if (real == DType::F32) transform_row<float>(transform, x, w, out);
  else transform_row<double>(transform, x, w, out);
}

// One row of the prediction node's value: its class (classifiers), then the transformed values, in
// the data's units for a standardized regression target.
void emit_row(DType real, const PredictTarget& target, const double* x, int64_t w, Predictions& out) {
  if (target.positions > 0) {  // [T, V]: each position its own class and softmax over V
    const int64_t v = w / target.positions;
    for (int64_t t = 0; t < target.positions; ++t) {
      out.classes.push_back(predicted_class(x + t * v, v));
      apply_transform(real, target.transform, x + t * v, v, out.values);
    }
    return;
  }
  if (target.classifier) out.classes.push_back(predicted_class(x, w));
  const size_t first = out.values.size();
  apply_transform(real, target.transform, x, w, out.values);
  if (target.units.empty()) return;
  for (int64_t j = 0; j < w; ++j) {
    double& v = out.values[first + static_cast<size_t>(j)];
    const double m = target.units.mean[static_cast<size_t>(j)], s = target.units.std[static_cast<size_t>(j)];
    // An f32 run maps back in float, as its float32 export does: its predictions stay floats.
    if (real == DType::F32) v = static_cast<float>(static_cast<float>(v) * static_cast<float>(s)) + static_cast<float>(m);
    else v = to_data_units(v, m, s);
  }
}

}  // namespace

PredictTarget predict_target(const Program& p, const Preprocessing& prep) {
  const Spec& spec = *p.spec;
  PredictTarget t;
  if (!spec.predict.output.empty()) {
    t.name = spec.predict.output;
    t.transform = spec.predict.transform;
  } else {
    const NodeSpec& loss = *p.nodes[static_cast<size_t>(p.loss)].spec;
    const Op loss_op = loss.weighted.value_or(loss.op);  // a weighted loss predicts as the loss it weighs
    const std::vector<std::string>& loss_inputs = loss.weighted ? loss.weighted_inputs : loss.inputs;
    t.name = loss_inputs.empty() ? "" : loss_inputs[0];
    t.transform = loss.kind == NodeSpec::Kind::Op && (loss_op == Op::SoftmaxCrossEntropy || loss_op == Op::CrossEntropy) ? "softmax" : "none";
    // mean(bce_with_logits(z, y)) (or sum): the prediction is the probability sigmoid(z), not the per-row loss.
    const auto reduced = p.names.find(t.name);
    if (loss.kind == NodeSpec::Kind::Op && (loss.op == Op::Mean || loss.op == Op::Sum) && reduced != p.names.end() &&
        reduced->second.kind == Ref::Kind::Node) {
      const NodeSpec& inner = *p.nodes[static_cast<size_t>(reduced->second.index)].spec;
      const std::vector<std::string>& inner_inputs = inner.weighted ? inner.weighted_inputs : inner.inputs;
      if (inner.kind == NodeSpec::Kind::Op && inner.weighted.value_or(inner.op) == Op::BceWithLogits && !inner_inputs.empty()) {
        t.name = inner_inputs[0];
        t.transform = "sigmoid";
      }
    }
  }
  const auto it = p.names.find(t.name);
  if (it == p.names.end() || it->second.kind != Ref::Kind::Node)
    throw InputError(spec.path, spec.predict.output.empty() ? spec.loss_pointer : spec.predict.pointer + "/output",
                     "the prediction \"" + t.name + "\" is not a graph node; declare \"predict\": {\"output\": NODE}");
  t.node = it->second.index;
  const Shape& shape = p.nodes[static_cast<size_t>(t.node)].shape;
  if (shape.rank() < 1 || shape[0] != p.batch)
    throw InputError(spec.path, p.nodes[static_cast<size_t>(t.node)].spec->pointer,
                     "the prediction \"" + t.name + "\" has shape " + shape.str() + ", not one row per data row");
  int64_t width = shape.numel() / p.batch;
  if (shape.rank() == 3 && t.transform == "softmax") {  // a sequence's per-position distributions
    t.positions = shape[1];
    width = shape[2];
  }
  t.classifier = t.transform == "softmax" || (spec.metrics.accuracy && spec.metrics.logits == t.name) ||
                 (t.transform == "sigmoid" && width == 1);
  if (t.classifier) t.class_names = class_names(p, prep, width);
  // A regression on a standardized target: the prediction in the data's units.
  const Regression reg = regression_of(p);
  if (reg.output == t.node && (t.transform == "none" || t.transform.empty())) {
    const InputPrep* ip = prep.find(p.input_names[static_cast<size_t>(reg.target)]);
    if (ip && !ip->mean.empty() && static_cast<int64_t>(ip->mean.size()) == width) {
      t.units = {ip->name, ip->mean, ip->std};
    }
  }
  return t;
}

std::vector<std::string> class_names(const Program& p, const Preprocessing& prep, int64_t width) {
  const Spec& spec = *p.spec;
  if (!prep.vocab.empty() && width == static_cast<int64_t>(prep.vocab.tokens.size())) {  // text: the classes are the tokens
    std::vector<std::string> names;
    for (const std::string& t : prep.vocab.tokens) names.push_back(token_label(t));
    return names;
  }
  std::string label = spec.metrics.accuracy ? spec.metrics.labels : "";
  if (label.empty()) {  // the classification loss's labels: softmax_cross_entropy / cross_entropy / bce_with_logits
    for (const NodeSpec& n : spec.graph) {
      const Op op = n.weighted.value_or(n.op);  // a weighted loss: the loss it weighs (spec/class_weight.h)
      const std::vector<std::string>& in = n.weighted ? n.weighted_inputs : n.inputs;
      if (n.kind == NodeSpec::Kind::Op && !n.generated && in.size() == 2 &&
          (op == Op::SoftmaxCrossEntropy || op == Op::CrossEntropy || op == Op::BceWithLogits) && prep.find(in[1])) {
        label = in[1];
        break;
      }
    }
  }
  const InputPrep* ip = label.empty() ? nullptr : prep.find(label);
  if (!ip || !ip->fit.categorical) return {};
  const auto k = static_cast<int64_t>(ip->fit.categories.size());
  if (k != width && !(width == 1 && k == 2)) return {};
  std::vector<std::string> names;
  for (const DataValue& v : ip->fit.categories) names.push_back(category_name(v));
  return names;
}

std::vector<bool> inputs_needed(const Program& p, int node) {
  std::vector<bool> needed(p.input_names.size(), false), seen(p.nodes.size(), false);
  std::vector<int> stack{node};
  while (!stack.empty()) {
    const int n = stack.back();
    stack.pop_back();
    if (seen[static_cast<size_t>(n)]) continue;
    seen[static_cast<size_t>(n)] = true;
    for (const Ref& r : p.nodes[static_cast<size_t>(n)].inputs) {
      if (r.kind == Ref::Kind::Node) stack.push_back(r.index);
      if (r.kind == Ref::Kind::Input) needed[static_cast<size_t>(r.index)] = true;
    }
  }
  return needed;
}

TrainedWeights read_trained(const Spec& spec, const std::string& weights_or_run_dir, const std::string& which) {
  TrainedWeights w;
  std::string note;
  w.path = choose_weights(weights_or_run_dir, which, &note);
  if (!note.empty()) diag::info(note);
  w.file = read_sealed_weights(w.path);  // a gradrun weights file: one changed bit is refused before it is used
  w.prep = read_preprocessing(w.path);
  if (const auto it = w.file.metadata.find("dtype"); it != w.file.metadata.end() && it->second == "f32") w.real = DType::F32;
  // The same model, not the same bytes: epochs, optimizer, paths and descriptions may differ.
  if (const auto it = w.file.metadata.find(kModelIdentityKey); it != w.file.metadata.end()) {
    std::string pointer;
    const std::string why = model_difference(it->second, model_identity(spec), &pointer);
    if (!why.empty())
      throw InputError(spec.path, pointer,
                       "describes a different model than the one trained in " + w.path + " (" + why +
                           "); use the run folder alone, or a spec of the same graph, parameters and inputs");
  } else if (w.prep.spec_sha256 != spec.sha256) {  // weights from before the model identity: the spec's bytes
    throw InputError(w.path, "__metadata__/spec_sha256",
                     "these weights were trained from a different spec (sha256 " + w.prep.spec_sha256.substr(0, 12) +
                         "…, " + spec.path + " is " + spec.sha256.substr(0, 12) + "…) and predate model identities");
  }
  if (!spec.data) throw InputError(spec.path, "/data", "the spec has no data inputs to predict from");
  for (const InputSpec& in : spec.data->inputs)
    if (!w.prep.find(in.name)) throw InputError(w.path, "__metadata__", "no saved preprocessing for input \"" + in.name + "\"");
  return w;
}

Datasets shape_only_data(const Spec& spec, const Preprocessing& prep) {
  Datasets d;
  for (const InputSpec& in : spec.data->inputs) {
    d.train.names.push_back(in.name);
    d.train.tensors.push_back(zeros(spec.train.batch_size, prep.find(in.name)->row_shape));
    d.mean.push_back(prep.find(in.name)->mean);  // evaluate's MAE/RMSE map a standardized target back with them
    d.std.push_back(prep.find(in.name)->std);
  }
  d.train.rows = spec.train.batch_size;
  return d;
}

DataTable read_data_file(const Spec& spec, const Preprocessing& prep, const std::string& file, const std::vector<bool>& needed) {
  if (spec.data && spec.data->source == DataSpec::Source::Text) return read_text_windows(spec, prep.vocab, file);  // all windows
  Spec s = spec;
  DataSpec& d = *s.data;
  const std::string ext = std::filesystem::path(file).extension().string();
  d.files.clear();
  std::vector<InputSpec> wanted;
  for (size_t i = 0; i < d.inputs.size(); ++i) {
    if (!needed[i]) continue;
    InputSpec in = d.inputs[i];
    if (in.tensor.empty()) in.tensor = in.name;  // trained on CSV, given tensors: named like the input
    if (ext == ".csv" && in.columns.empty())
      throw InputError(file, in.name, "input \"" + in.name + "\" was trained from tensor \"" + in.tensor + "\", not CSV columns");
    wanted.push_back(in);
  }
  if (wanted.empty()) throw InputError(spec.path, "/data/inputs", "the prediction depends on no data input");
  if (ext == ".csv") d.source = DataSpec::Source::Csv, d.files[""] = file;
  else if (ext == ".npz") d.source = DataSpec::Source::Npz, d.files[""] = file;
  else if (ext == ".safetensors") d.source = DataSpec::Source::Safetensors, d.files[""] = file;
  else if (ext == ".npy") {
    if (wanted.size() != 1)
      throw InputError(file, "", "a .npy file holds one tensor, but " + std::to_string(wanted.size()) + " inputs are needed; use .npz");
    d.source = DataSpec::Source::Npy, d.files[wanted[0].tensor] = file;
  } else {
    throw InputError(file, "", "unknown data format \"" + ext + "\" (known: .csv, .npy, .npz, .safetensors)");
  }
  d.inputs = wanted;
  RawTable raw = read_raw(s);
  DataTable t, labels;
  t.rows = labels.rows = raw.rows;
  size_t k = 0;
  for (size_t i = 0; i < spec.data->inputs.size(); ++i) {
    const InputSpec& in = spec.data->inputs[i];
    const InputPrep& ip = *prep.find(in.name);
    t.names.push_back(in.name);
    if (!needed[i]) {
      t.tensors.push_back(zeros(t.rows, ip.row_shape));
      continue;
    }
    // The saved fill, categories and encodings: never refitted on new data.
    Tensor x = apply_fit(raw.inputs[k], ip.fit, {}, raw, wanted[k]);
    ++k;
    if (!in.row_shape.empty()) x = shape_rows(x, in, file, ext == ".csv" ? in.name : wanted[k - 1].tensor);  // "shape"
    const auto dims = x.shape().dims();
    const std::vector<int64_t> row(dims.begin() + 1, dims.end());
    if (row != ip.row_shape)
      throw InputError(file, ext == ".csv" ? in.name : wanted[k - 1].tensor,
                       "input \"" + in.name + "\" has rows of shape " + shape_str(row) + ", the model was trained on " +
                           shape_str(ip.row_shape));
    if (spec.metrics.accuracy && in.name == spec.metrics.labels) labels.names.push_back(in.name), labels.tensors.push_back(x);
    if (!ip.mean.empty()) {
      const int64_t cols = x.numel() / t.rows;
      if (static_cast<int64_t>(ip.mean.size()) != cols)
        throw InputError(file, in.name, "the saved statistics have " + std::to_string(ip.mean.size()) + " columns, the data " +
                                            std::to_string(cols));
      for (int64_t r = 0; r < t.rows; ++r)  // the expression of dataset.cpp's standardize
        for (int64_t c = 0; c < cols; ++c) x[r * cols + c] = (x[r * cols + c] - ip.mean[static_cast<size_t>(c)]) / ip.std[static_cast<size_t>(c)];
    }
    t.tensors.push_back(std::move(x));
  }
  check_labels(s, labels);
  return t;
}

Predictions predict_rows(Model& model, const PredictTarget& target, const DataTable& table, int64_t batch) {
  Predictions out;
  out.rows = table.rows;
  std::vector<int64_t> rows;
  for (int64_t start = 0; start < table.rows; start += batch) {
    const int64_t end = std::min(table.rows, start + batch);
    rows.clear();
    for (int64_t r = start; r < end; ++r) rows.push_back(r);
    const std::vector<Var>& nodes = model.record(table, rows);
    if (nodes.empty())
      throw InputError(model.spec().path, "/train/batch_size",
                       "the graph does not accept a batch of " + std::to_string(rows.size()) + " rows; use --batch " +
                           std::to_string(model.program().batch));
    const ConstTensorView v = model.tape().value(nodes[static_cast<size_t>(target.node)]);
    const int64_t n = static_cast<int64_t>(rows.size()), w = v.shape.numel() / n;
    out.width = target.positions > 0 ? w / target.positions : w;
    out.positions = target.positions;
    for (int64_t r = 0; r < n; ++r) emit_row(model.real(), target, v.data + r * w, w, out);
    model.reset();
  }
  return out;
}

Predictions predict_rows_device(Model& model, const PredictTarget& target, const DataTable& table,
                                std::unique_ptr<device::Backend> backend, FuseMode fuse) {
  Optimizer opt = model.make_optimizer();  // the runner captures a training episode; only its forward runs
  DeviceRunner runner(model, opt, std::move(backend), model.real(), fuse);
  const int64_t batch = model.program().batch;
  std::vector<int64_t> rows(static_cast<size_t>(batch));
  for (int64_t i = 0; i < batch; ++i) rows[static_cast<size_t>(i)] = 0;
  const Var out = model.record(model.data().train, rows)[static_cast<size_t>(target.node)];  // the captured episode's ids
  model.reset();
  runner.episode().set_dropout_key({});  // a prediction is not training: dropout is the identity
  Predictions p;
  p.rows = table.rows;
  std::vector<double> buf;
  for (int64_t start = 0; start < table.rows; start += batch) {
    const int64_t n = std::min(batch, table.rows - start);
    for (int64_t i = 0; i < batch; ++i) rows[static_cast<size_t>(i)] = start + (i < n ? i : 0);
    runner.upload_batch(table, rows);
    runner.episode().forward();
    buf.resize(static_cast<size_t>(model.program().nodes[static_cast<size_t>(target.node)].shape.numel()));
    runner.episode().value(out, buf);
    const int64_t w = static_cast<int64_t>(buf.size()) / batch;
    p.width = target.positions > 0 ? w / target.positions : w;
    p.positions = target.positions;
    for (int64_t r = 0; r < n; ++r) emit_row(model.real(), target, buf.data() + r * w, w, p);
  }
  return p;
}

std::string render_predictions(const Predictions& p, const PredictTarget& target, const std::string& path) {
  const bool named = target.classifier && !target.class_names.empty();
  if (ends_with(path, ".safetensors")) {
    std::vector<double> classes(p.classes.begin(), p.classes.end());
    const Shape vs = p.positions > 0 ? Shape{p.rows, p.positions, p.width} : Shape{p.rows, p.width};
    StTensorList list{{target.name, ConstTensorView{vs, p.values.data()}}};
    if (target.classifier)
      list.emplace_back("class", ConstTensorView{p.positions > 0 ? Shape{p.rows, p.positions} : Shape{p.rows}, classes.data()});
    std::map<std::string, std::string> meta{{"transform", target.transform}};
    if (named) {
      std::string names = "[";
      for (size_t i = 0; i < target.class_names.size(); ++i) {
        names += i ? ", \"" : "\"";
        for (char c : target.class_names[i]) {
          if (c == '"' || c == '\\') names += '\\';
          names += c;
        }
        names += '"';
      }
      meta["class_names"] = names + "]";
    }
    return encode_safetensors(list, meta, DType::F64);
  }
  if (ends_with(path, ".npy")) {
    std::string header = "{'descr': '<f8', 'fortran_order': False, 'shape': (" + std::to_string(p.rows) + ", " +
                         (p.positions > 0 ? std::to_string(p.positions) + ", " : std::string()) + std::to_string(p.width) + "), }";
    while ((10 + header.size() + 1) % 64 != 0) header += ' ';
    header += '\n';
    std::string out("\x93NUMPY\x01\x00", 8);
    out += static_cast<char>(header.size() & 0xff);
    out += static_cast<char>(header.size() >> 8);
    out += header;
    out.append(reinterpret_cast<const char*>(p.values.data()), p.values.size() * sizeof(double));
    return out;
  }
  std::string s;
  if (p.positions > 0) {  // one line per (row, position): its class probabilities and class
    s = "row,position";
    for (int64_t j = 0; j < p.width; ++j) s += "," + target.name + "_" + std::to_string(j);
    s += ",class\n";
    for (int64_t r = 0; r < p.rows; ++r)
      for (int64_t t = 0; t < p.positions; ++t) {
        const int64_t line = r * p.positions + t;
        s += std::to_string(r) + "," + std::to_string(t);
        for (int64_t j = 0; j < p.width; ++j) s += "," + format_shortest(p.values[static_cast<size_t>(line * p.width + j)]);
        const int64_t c = p.classes[static_cast<size_t>(line)];
        s += "," + (named ? csv_cell(target.class_names[static_cast<size_t>(c)]) : std::to_string(c)) + "\n";
      }
    return s;
  }
  for (int64_t j = 0; j < p.width; ++j) s += (j ? "," : "") + target.name + "_" + std::to_string(j);
  s += target.classifier ? ",class\n" : "\n";
  for (int64_t r = 0; r < p.rows; ++r) {
    for (int64_t j = 0; j < p.width; ++j) s += (j ? "," : "") + format_shortest(p.values[static_cast<size_t>(r * p.width + j)]);
    if (target.classifier) {
      const int64_t c = p.classes[static_cast<size_t>(r)];
      s += "," + (named ? csv_cell(target.class_names[static_cast<size_t>(c)]) : std::to_string(c));
    }
    s += '\n';
  }
  return s;
}

}  // namespace gr
