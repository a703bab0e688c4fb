// spec.cpp — JSON text → Spec, checking keys, types, ranges, ops, attributes and names.
#include "spec/spec.h"

#include "emit/bind_expr.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <filesystem>
#include <set>

#include "emit/bind_expr.h"
#include "io/atomic_file.h"
#include "spec/json_reader.h"
#include "spec/schedule_spec.h"
#include "spec/class_weight.h"
#include "spec/spec_graph.h"
#include "spec/suggest.h"
#include "spec/tensor_file.h"
#include "tensor/sha256.h"
#include "tensor/shape.h"

namespace gr {

using Json = nlohmann::ordered_json;

namespace {

constexpr size_t kMaxNameLength = 256;

// Names travel into messages, file names and generated comments: printable, bounded.
bool printable_name(const std::string& name) {
  return !name.empty() && name.size() <= kMaxNameLength &&
         std::none_of(name.begin(), name.end(), [](char c) { return static_cast<unsigned char>(c) < 0x20 || c == 0x7f; });
}

std::vector<int64_t> read_shape(const JsonAt& j) {
  std::vector<int64_t> dims = j.integers(std::numeric_limits<int64_t>::min(), std::numeric_limits<int64_t>::max());
  try {
    Shape{std::span<const int64_t>(dims)};
  } catch (const Error& e) {
    j.fail(e.what());
  }
  return dims;
}

}  // namespace

bool printable_spec_name(const std::string& name) { return printable_name(name); }

ParamSpec read_param(const JsonAt& p, const std::string& name) {
  p.only_keys({"shape", "init", "trainable"});
  ParamSpec param{name, p.pointer(), read_shape(p.at("shape")), {}};
  if (p.has("init")) param.init = read_init(p.at("init"));
  if (p.has("trainable")) param.trainable = p.at("trainable").boolean();
  return param;
}

InitSpec read_init(const JsonAt& j) {
  using K = InitSpec::Kind;
  static const std::pair<const char*, K> kNamed[] = {{"zeros", K::Zeros},
                                                     {"ones", K::Ones},
                                                     {"xavier_uniform", K::XavierUniform},
                                                     {"xavier_normal", K::XavierNormal},
                                                     {"kaiming_uniform", K::KaimingUniform},
                                                     {"kaiming_normal", K::KaimingNormal}};
  InitSpec init;
  auto named = [&](const std::string& s, const JsonAt& at) {
    for (const auto& [n, k] : kNamed)
      if (s == n) return k;
    at.fail("unknown init \"" + s +
            "\" (known: zeros, ones, constant, uniform, normal, xavier_uniform, xavier_normal, kaiming_uniform, "
            "kaiming_normal, values)");
  };
  if (j.is_string()) {
    init.kind = named(j.str(), j);
    return init;
  }
  if (!j.is_object()) j.fail("expected an init name or object, got " + j.type_name());
  if (j.has("file")) return read_file_init(j);  // tensor_file.h: loaded by load_tensor_files
  if (j.has("values")) {
    j.only_keys({"values"});
    init.kind = K::Values;
    j.at("values").flatten_numbers(init.values);
    return init;
  }
  const JsonAt kind = j.at("kind");
  const std::string k = kind.str();
  if (k == "constant") {
    j.only_keys({"kind", "value"});
    init.kind = K::Constant;
    init.a = j.at("value").number();
  } else if (k == "uniform") {
    j.only_keys({"kind", "low", "high"});
    init.kind = K::Uniform;
    init.a = j.has("low") ? j.at("low").number() : -1.0;
    init.b = j.has("high") ? j.at("high").number() : 1.0;
    if (!(init.a < init.b)) j.fail("uniform init needs low < high");
  } else if (k == "normal") {
    j.only_keys({"kind", "mean", "std"});
    init.kind = K::Normal;
    init.a = j.has("mean") ? j.at("mean").number() : 0.0;
    init.b = j.has("std") ? j.at("std").number() : 1.0;
    if (!(init.b >= 0)) j.at("std").fail("std must be >= 0");
  } else {
    j.only_keys({"kind"});
    init.kind = named(k, kind);
  }
  return init;
}

namespace {

// Labels: inputs read only as the target of a loss (the second input of softmax_cross_entropy,
// cross_entropy or bce_with_logits, either input of mse) or named by a metric as labels or target.
// A row without its label cannot be filled in: "missing" other than "error" is refused on them.
void mark_labels(Spec& s) {
  if (!s.data) return;
  for (InputSpec& in : s.data->inputs) {
    bool target = in.name == s.metrics.labels || (s.metrics.regression && in.name == s.metrics.target), other = false;
    for (const NodeSpec& n : s.graph)
      for (size_t k = 0; k < (n.generated ? 0 : n.weighted ? n.weighted_inputs.size() : n.inputs.size()); ++k) {
        // a weighted loss (spec/class_weight.h) counts as the loss it weighs; its helper nodes not at all
        if ((n.weighted ? n.weighted_inputs[k] : n.inputs[k]) != in.name) continue;
        const Op op = n.weighted.value_or(n.op);
        const bool loss_target =
            n.kind == NodeSpec::Kind::Mse ||
            (n.kind == NodeSpec::Kind::Op && k == 1 &&
             (op == Op::SoftmaxCrossEntropy || op == Op::CrossEntropy || op == Op::BceWithLogits));
        (loss_target ? target : other) = true;
      }
    in.is_label = target && !other;
    if (in.is_label && in.missing != "error")
      throw InputError(s.path, in.pointer + "/missing",
                       "\"" + in.name + "\" is a label: a row without its label cannot be filled in (leave \"missing\" at \"error\")");
  }
}

}  // namespace

Spec parse_spec(const std::string& text, const std::string& path) {
  return parse_spec(text, path, SpecOrigin{std::filesystem::path(path).parent_path().string(), std::filesystem::path(path).stem().string()});
}

Spec parse_spec(const std::string& text, const std::string& path, const SpecOrigin& origin) {
  const Json doc = parse_json(text, path);
  const JsonAt root(doc, "", path);
  if (!root.is_object()) root.fail("a spec is a JSON object, got " + root.type_name());
  root.only_keys({"gradrun", "name", "description", "seed", "data", "params", "consts", "graph", "loss", "optimizer",
                  "train", "metrics", "device", "output", "emit", "predict", "blocks"});
  Spec s;
  s.path = path;
  s.dir = origin.dir;
  s.source = origin.source.empty() ? path : origin.source;
  s.text = text;
  s.sha256 = sha256_hex(text);
  if (root.at("gradrun").integer() != 1) root.at("gradrun").fail("unsupported format version (this gradrun reads 1)");
  s.name = root.has("name") ? root.at("name").str() : origin.default_name;
  if (root.has("name") && !printable_name(s.name))
    root.at("name").fail("name \"" + printable(s.name) + "\" must be 1 to " + std::to_string(kMaxNameLength) +
                         " characters without control characters");
  if (root.has("description")) root.at("description").str();
  if (root.has("seed")) s.seed = static_cast<uint64_t>(root.at("seed").integer(0));
  if (root.has("data")) s.data = read_data(root.at("data"), s.dir);

  std::set<std::string> names;  // one name space: inputs, params, consts, node ids
  auto define = [&](const std::string& name, const JsonAt& at) {
    if (!printable_name(name))
      at.fail("name \"" + printable(name) + "\" must be 1 to " + std::to_string(kMaxNameLength) +
              " characters without control characters");
    if (!names.insert(name).second) at.fail("name \"" + name + "\" is already defined");
  };
  if (s.data)
    for (const InputSpec& in : s.data->inputs)  // text data names its two inputs in /data/tokens, /data/targets
      define(in.name, s.data->source == DataSpec::Source::Text ? JsonAt(doc["data"], in.pointer, path)
                                                               : JsonAt(doc["data"]["inputs"][in.name], in.pointer, path));
  if (root.has("params")) {
    const JsonAt ps = root.at("params");
    if (!ps.is_object()) ps.fail("expected an object {name: {shape, init}}");
    for (auto it = ps.json().begin(); it != ps.json().end(); ++it) {
      const JsonAt p = ps.at(it.key());
      ParamSpec param = read_param(p, it.key());
      define(param.name, p);
      s.params.push_back(std::move(param));
    }
  }
  if (root.has("consts")) {
    const JsonAt cs = root.at("consts");
    if (!cs.is_object()) cs.fail("expected an object {name: {shape, values} or {value}}");
    for (auto it = cs.json().begin(); it != cs.json().end(); ++it) {
      const JsonAt c = cs.at(it.key());
      ConstSpec k{it.key(), c.pointer(), {1}, {}};
      if (c.has("file")) {
        read_file_const(c, k);  // values and shape: load_tensor_files
      } else if (c.has("value")) {
        c.only_keys({"value"});
        k.values.push_back(c.at("value").number());
      } else {
        c.only_keys({"shape", "values"});
        k.shape = read_shape(c.at("shape"));
        c.at("values").flatten_numbers(k.values);
        const int64_t want = Shape(std::span<const int64_t>(k.shape)).numel();
        if (static_cast<int64_t>(k.values.size()) != want)
          c.at("values").fail("shape " + Shape(std::span<const int64_t>(k.shape)).str() + " needs " +
                              std::to_string(want) + " values, got " + std::to_string(k.values.size()));
      }
      define(k.name, c);
      s.consts.push_back(std::move(k));
    }
  }
  read_graph(root, s, names);  // the graph, its blocks expanded (spec_blocks.cpp)
  s.loss = resolve_alias(s, root.at("loss").str());  // a block node's id: its last instance's output
  if (std::none_of(s.graph.begin(), s.graph.end(), [&](const NodeSpec& n) { return n.id == s.loss; }))
    root.at("loss").fail("loss \"" + s.loss + "\" is not a node of the graph");

  if (root.has("optimizer")) {
    const JsonAt o = root.at("optimizer");
    o.only_keys({"kind", "lr", "l2", "clip", "beta1", "beta2", "eps", "schedule", "momentum", "nesterov", "weight_decay"});
    OptimizerSpec& opt = s.optimizer;
    if (o.has("kind")) {
      opt.kind = o.at("kind").str();
      if (opt.kind != "adam" && opt.kind != "adamw" && opt.kind != "sgd")
        o.at("kind").fail("unknown optimizer \"" + opt.kind + "\" (known: adam, adamw, sgd)");
    }
    if (o.has("lr")) opt.lr = o.at("lr").positive();
    if (o.has("schedule")) opt.schedule = read_schedule(o.at("schedule"));
    if (o.has("clip")) {
      opt.clip = o.at("clip").number();
      if (opt.clip < 0) o.at("clip").fail("clip must be >= 0 (0 = off)");
    }
    if (o.has("l2")) {
      const JsonAt l2 = o.at("l2");
      if (l2.is_number()) {
        opt.l2_default = l2.number();
      } else {
        if (!l2.is_object()) l2.fail("expected a number or an object {param: coefficient}");
        for (auto it = l2.json().begin(); it != l2.json().end(); ++it) opt.l2[it.key()] = l2.at(it.key()).number();
      }
    }
    for (const char* k : {"beta1", "beta2"})
      if (o.has(k)) {
        const double b = o.at(k).number();
        if (b < 0 || b >= 1) o.at(k).fail(std::string(k) + " must be in [0, 1)");
        (k[4] == '1' ? opt.beta1 : opt.beta2) = b;
      }
    if (o.has("eps")) opt.eps = o.at("eps").positive();
    if (opt.kind == "sgd")
      for (const char* k : {"beta1", "beta2", "eps"})
        if (o.has(k)) o.at(k).fail(std::string("\"") + k + "\" applies to adam and adamw only");
    if (opt.kind == "adamw") opt.weight_decay = 0.01;  // PyTorch's default
    if (o.has("weight_decay")) {
      if (opt.kind != "adamw") o.at("weight_decay").fail("\"weight_decay\" (decoupled) applies to adamw only; l2 is the coupled penalty");
      opt.weight_decay = o.at("weight_decay").number();
      if (!(opt.weight_decay >= 0)) o.at("weight_decay").fail("weight_decay must be >= 0");
    }
    for (const char* k : {"momentum", "nesterov"})
      if (o.has(k) && opt.kind != "sgd") o.at(k).fail(std::string("\"") + k + "\" applies to sgd only");
    if (o.has("momentum")) {
      opt.momentum = o.at("momentum").number();
      if (!(opt.momentum >= 0 && opt.momentum < 1)) o.at("momentum").fail("momentum must be in [0, 1)");
    }
    if (o.has("nesterov")) {
      opt.nesterov = o.at("nesterov").boolean();
      if (opt.nesterov && opt.momentum == 0) o.at("nesterov").fail("nesterov needs a momentum > 0");
    }
  }
  if (root.has("train")) {
    const JsonAt t = root.at("train");
    t.only_keys({"epochs", "batch_size", "shuffle", "drop_last", "diverge_factor", "early_stopping", "shards"});
    if (t.has("epochs")) s.train.epochs = t.at("epochs").integer(1, 100000000);
    if (t.has("batch_size")) s.train.batch_size = t.at("batch_size").integer(1, kMaxElems);
    if (t.has("shuffle")) s.train.shuffle = t.at("shuffle").boolean();
    if (t.has("drop_last")) s.train.drop_last = t.at("drop_last").boolean();
    if (t.has("shards")) {
      s.train.shards = t.at("shards").integer(1, 1 << 20);
      if (s.train.batch_size % s.train.shards != 0)
        t.at("shards").fail("batch_size " + std::to_string(s.train.batch_size) + " does not split into " +
                            std::to_string(s.train.shards) + " equal shards (pick shards dividing the batch size)");
    }
    if (t.has("diverge_factor")) s.train.diverge_factor = t.at("diverge_factor").positive();
    if (t.has("early_stopping")) {
      const JsonAt e = t.at("early_stopping");
      e.only_keys({"monitor", "patience", "min_delta"});
      EarlyStoppingSpec es;
      if (e.has("monitor")) {
        es.monitor = e.at("monitor").str();
        if (es.monitor != "val_loss" && es.monitor != "val_accuracy" && es.monitor != "train_loss" && es.monitor != "train_accuracy" &&
            es.monitor != "val_f1" && es.monitor != "val_auc")
          e.at("monitor").fail("unknown monitor \"" + es.monitor +
                               "\" (known: val_loss, val_accuracy, train_loss, train_accuracy, val_f1, val_auc)");
      }
      if (e.has("patience")) es.patience = e.at("patience").integer(1, 100000000);
      if (e.has("min_delta")) {
        es.min_delta = e.at("min_delta").number();
        if (!(es.min_delta >= 0)) e.at("min_delta").fail("min_delta must be >= 0");
      }
      s.train.early_stopping = es;
    }
  }
  if (root.has("metrics")) {
    const JsonAt m = root.at("metrics");
    m.only_keys({"accuracy", "regression"});
    if (m.has("accuracy")) {
      const JsonAt a = m.at("accuracy");
      a.only_keys({"logits", "labels"});
      s.metrics.accuracy = true;
      s.metrics.logits = a.at("logits").str();
      s.metrics.labels = a.at("labels").str();
      for (const char* k : {"logits", "labels"})
        if (!names.count(a.at(k).str())) a.at(k).fail("unknown name \"" + a.at(k).str() + "\"");
      s.metrics.logits = resolve_alias(s, s.metrics.logits);
    }
    if (m.has("regression")) {  // kinds and shapes are checked against the program (lib/train/evaluate.cpp)
      const JsonAt a = m.at("regression");
      a.only_keys({"output", "target"});
      s.metrics.regression = true;
      s.metrics.output = a.at("output").str();
      s.metrics.target = a.at("target").str();
      for (const char* k : {"output", "target"})
        if (!names.count(a.at(k).str())) a.at(k).fail("unknown name \"" + a.at(k).str() + "\"");
      s.metrics.output = resolve_alias(s, s.metrics.output);
    }
  }
  if (s.optimizer.schedule && s.optimizer.schedule->kind == "cosine" && s.optimizer.schedule->epochs == 0)
    s.optimizer.schedule->epochs = s.train.epochs;  // the period as written, not a later --epochs
  mark_labels(s);
  if (s.train.early_stopping && !s.metrics.accuracy &&
      (s.train.early_stopping->monitor == "val_accuracy" || s.train.early_stopping->monitor == "train_accuracy" ||
       s.train.early_stopping->monitor == "val_f1" || s.train.early_stopping->monitor == "val_auc"))
    root.at("train").at("early_stopping").at("monitor").fail(s.train.early_stopping->monitor + " needs an accuracy metric (metrics.accuracy)");
  if (root.has("device")) {
    const JsonAt d = root.at("device");
    d.only_keys({"kind", "dtype", "fuse"});
    const std::string kind = d.has("kind") ? d.at("kind").str() : to_string(s.device.kind);
    const std::string dtype = d.has("dtype") ? d.at("dtype").str() : to_string(s.device.dtype);
    if (d.has("fuse")) {
      const JsonAt f = d.at("fuse");
      if (f.is_string() && f.str() == "auto") s.device.fuse = FuseMode::Auto;
      else if (f.is_string()) f.fail("expected true, false or \"auto\"");
      else s.device.fuse = f.boolean() ? FuseMode::On : FuseMode::Off;
    }
    if (!parse_device_kind(kind, s.device.kind))
      d.at("kind").fail("unknown device \"" + kind + "\" (known: cpu, host, cuda, auto)");
    if (!parse_dtype(dtype, s.device.dtype)) d.at("dtype").fail("unknown dtype \"" + dtype + "\" (known: f64, f32)");
  }
  if (root.has("predict")) {
    const JsonAt pr = root.at("predict");
    pr.only_keys({"output", "transform"});
    s.predict.output = pr.at("output").str();
    if (!names.count(s.predict.output)) pr.at("output").fail("unknown name \"" + s.predict.output + "\"");
    s.predict.output = resolve_alias(s, s.predict.output);
    s.predict.transform = pr.has("transform") ? pr.at("transform").str() : "none";
    if (s.predict.transform != "softmax" && s.predict.transform != "sigmoid" && s.predict.transform != "none")
      pr.at("transform").fail("unknown transform \"" + s.predict.transform + "\" (known: softmax, sigmoid, none)");
  }
  s.output_dir = "runs/" + s.name;
  if (root.has("output")) {
    const JsonAt o = root.at("output");
    o.only_keys({"dir"});
    if (o.has("dir")) s.output_dir = o.at("dir").str();
  }
  if (root.has("emit")) {
    const JsonAt e = root.at("emit");
    e.only_keys({"bind", "signature", "function"});
    if (e.has("signature")) {
      s.emit.signature = e.at("signature").str();
      if (s.emit.signature != "dataset" && s.emit.signature != "params")
        e.at("signature").fail("unknown signature \"" + s.emit.signature + "\" (known: dataset, params)");
    }
    if (e.has("bind")) {
      const JsonAt b = e.at("bind");
      if (!b.is_object()) b.fail("expected an object {leaf: \"C expression\"}");
      // A bind reaches a compiler (emit-cuda --verify): every spec that holds one is checked against
      // the bind grammar when it is read, whatever the command (docs/security.md).
      const EmitSignature sig = s.emit.signature == "params" ? EmitSignature::Params : EmitSignature::Dataset;
      for (auto it = b.json().begin(); it != b.json().end(); ++it) {
        const JsonAt one = b.at(it.key());
        s.emit.bind[it.key()] = one.str();
        try {
          parse_bind(s.emit.bind[it.key()], sig, -1);
        } catch (const BindError& err) {
          one.fail(err.what());
        }
      }
    }
    if (e.has("function")) {
      s.emit.function = e.at("function").str();
      // It is pasted into source as the function's name: a C identifier, nothing else.
      if (const std::string why = function_name_problem(s.emit.function); !why.empty()) e.at("function").fail(why);
    }
  }
  load_tensor_files(s);  // inits and consts from files: read once, each file's sha256 recorded
  return s;
}

Spec load_spec(const std::string& path) { return parse_spec(read_file(path), path); }

// Nothing to train is a mistake (a "params" key misspelled, or left out), not a no-op run. Only
// training refuses it: checking or emitting the gradients of a constant graph is still well defined.
void require_trainable(const Spec& s) {
  if (s.params.empty() && std::none_of(s.graph.begin(), s.graph.end(), [](const NodeSpec& n) {
        return n.kind == NodeSpec::Kind::Dense || !n.layer_params.empty();
      }))
    throw InputError(s.path, "/params", "the spec has no parameters to train: declare \"params\" or use a \"layer\" in the graph");
  if (std::none_of(s.params.begin(), s.params.end(), [](const ParamSpec& p) { return p.trainable; }) &&
      std::none_of(s.graph.begin(), s.graph.end(), [](const NodeSpec& n) {
        return (n.kind == NodeSpec::Kind::Dense && n.trainable) ||
               std::any_of(n.layer_params.begin(), n.layer_params.end(), [](const LayerParamSpec& lp) { return lp.trainable; });
      }))
    throw InputError(s.path, "/params", "every parameter is frozen (\"trainable\": false): nothing to train");
}

}  // namespace gr
