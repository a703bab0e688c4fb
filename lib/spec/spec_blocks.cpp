// spec_blocks.cpp — the spec's graph, read node by node, with blocks (docs/spec.md "Blocks"):
// top-level "blocks": {NAME: {"inputs", "params", "graph", "output"}} and graph nodes
// {"id": "b1", "block": NAME, "inputs": [...], "repeat": N} that instantiate a block N times in a
// chain. An instance is expanded into ordinary nodes and parameters when the spec is read, so
// every later stage (the tape, replay, fusion, the exports, checkpoints) sees plain names:
//
//   instance b1.k (k = 0..N-1; plain b1 without "repeat"): a block name NAME local to it is
//   b1.k.NAME — params (b1.0.W), nodes (b1.0.h), what layer sugar creates (b1.0.h.W) — and the
//   block's inputs are bound to the outer names; instance k > 0 gets the output of instance k-1 as
//   its first input, the other inputs unchanged. The block node's id (b1) is an alias of the last
//   instance's output (Spec::aliases), resolved here wherever the spec names a node.
//
// A block sees only its inputs, its params and its own nodes (no outer names), so one definition
// means the same thing in every instance; blocks may instantiate other blocks (not themselves).
// Errors inside a block are located in the block's JSON (/blocks/NAME/graph/K) and name the
// instance: "/blocks/mlp/graph/1 (in b1.0): ...".
#include <algorithm>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "emit/bind_expr.h"
#include "spec/class_weight.h"
#include "spec/spec_graph.h"
#include "spec/suggest.h"

namespace gr {

namespace {

constexpr int64_t kMaxRepeat = 4096;
constexpr size_t kMaxExpandedNodes = size_t(1) << 18;  // every instance's nodes together

// "(in b1.0)" after the place of an error raised inside an instance (the innermost instance only).
[[noreturn]] void rethrow_in(const InputError& e, const std::string& instance) {
  const std::string& place = e.place();
  if (instance.empty() || place.find(" (in ") != std::string::npos) throw e;
  const std::string what = std::string(e.what()).substr(located(e.file(), place, "").size());
  throw InputError(e.file(), place + " (in " + instance + ")", what);
}

struct Scope {
  std::string prefix, instance;              // "" at the top level; "b1.0." and "b1.0" in an instance
  std::map<std::string, std::string> bound;  // a block input → the outer (real) name
  std::set<std::string> local;               // names defined in the instance, as the block spells them
  std::set<std::string> node_ids;            // the block's own node ids (its output must be one)
  std::vector<JsonAt> nodes;                 // the graph being read ("used before its definition")
  bool top = true;
};

class GraphReader {
 public:
  GraphReader(const JsonAt& root, Spec& s, std::set<std::string>& names) : root_(root), s_(s), names_(names) {}

  void read() {
    if (root_.has("blocks")) read_blocks(root_.at("blocks"));
    const JsonAt graph = root_.at("graph");
    Scope top;
    top.nodes = graph.array();
    if (top.nodes.empty()) graph.fail("the graph needs at least one node");
    for (const JsonAt& j : top.nodes) node(j, top);
  }

 private:
  const JsonAt& root_;
  Spec& s_;
  std::set<std::string>& names_;  // every real name of the spec (one name space)
  std::map<std::string, JsonAt> blocks_;
  std::vector<std::string> stack_;  // the blocks being expanded, outermost first

  std::string resolve(std::string name) const {
    for (auto it = s_.aliases.find(name); it != s_.aliases.end(); it = s_.aliases.find(name)) name = it->second;
    return name;
  }
  std::string real(const Scope& sc, const std::string& name) const {
    const auto b = sc.bound.find(name);
    return b != sc.bound.end() ? b->second : resolve(sc.prefix + name);
  }
  bool known(const Scope& sc, const std::string& name) const { return sc.top ? names_.count(name) > 0 : sc.local.count(name) > 0; }

  void define_global(const std::string& name, const JsonAt& at, const Scope& sc) {
    if (!printable_spec_name(name))
      at.fail("name \"" + printable(name) + "\" must be 1 to 256 characters without control characters");
    if (!names_.insert(name).second)
      at.fail("name \"" + name + "\"" + (sc.top ? "" : " (\"" + name.substr(sc.prefix.size()) + "\" of " + sc.instance + ")") +
              " is already defined");
  }
  void define(Scope& sc, const std::string& name, const JsonAt& at) {
    if (!sc.top) {
      if (!printable_spec_name(name))
        at.fail("name \"" + printable(name) + "\" must be 1 to 256 characters without control characters");
      if (!sc.local.insert(name).second) at.fail("name \"" + name + "\" is already defined in the block");
    }
    define_global(sc.prefix + name, at, sc);
  }
  // Names a layer creates beside its id (a dense layer's ID.W, ID.b): reserved, not checked.
  void reserve(Scope& sc, const std::string& name) {
    if (!sc.top) sc.local.insert(name);
    names_.insert(sc.prefix + name);
  }

  void unknown(const Scope& sc, const JsonAt& at, const std::string& name) const {
    for (const JsonAt& later : sc.nodes)
      if (later.has("id") && later.at("id").json() == name)
        at.fail("name \"" + name + "\" is used before its definition at " + later.pointer());
    const std::set<std::string>& pool = sc.top ? names_ : sc.local;
    std::string list;
    for (const std::string& k : pool) list += (list.empty() ? "" : ", ") + k;
    at.fail("unknown name \"" + name + "\"" + did_you_mean(name, pool) + (sc.top ? " (known: " : " (a block sees its inputs, params and nodes: ") +
            list + ")");
  }

  void read_blocks(const JsonAt& bs) {
    if (!bs.is_object()) bs.fail("expected an object {NAME: {\"inputs\", \"params\", \"graph\", \"output\"}}");
    for (auto it = bs.json().begin(); it != bs.json().end(); ++it) {
      const JsonAt b = bs.at(it.key());
      if (!printable_spec_name(it.key()))
        b.fail("block name \"" + printable(it.key()) + "\" must be 1 to 256 characters without control characters");
      if (!b.is_object()) b.fail("expected a block object {\"inputs\", \"params\", \"graph\", \"output\"}, got " + b.type_name());
      b.only_keys({"inputs", "params", "graph", "output", "description"});
      std::set<std::string> ins;
      const auto inputs = b.at("inputs").array();
      if (inputs.empty()) b.at("inputs").fail("a block takes at least one input");
      for (const JsonAt& in : inputs)
        if (!ins.insert(in.str()).second) in.fail("input \"" + in.str() + "\" is listed twice");
      if (b.has("params") && !b.at("params").is_object()) b.at("params").fail("expected an object {name: {shape, init}}");
      if (b.at("graph").array().empty()) b.at("graph").fail("a block's graph needs at least one node");
      b.at("output").str();
      if (b.has("description")) b.at("description").str();
      blocks_.emplace(it.key(), b);
    }
  }

  // One graph node (an op, a layer, or a block instance) read in scope `sc`.
  void node(const JsonAt& j, Scope& sc) {
    if (j.is_object() && j.has("block")) return instantiate(j, sc);
    if (!sc.top && j.is_object())
      for (const char* k : {"class_weight", "pos_weight"})
        if (j.has(k)) j.at(k).fail(std::string("\"") + k + "\" is not supported inside a block; weigh the loss outside it");
    LoweredLayer layer;  // conv2d, pools, batch_norm, flatten: op nodes (spec_layers.cpp)
    NodeSpec n;
    if (lower_layer(j, layer)) n.id = layer.nodes.back().id, n.inputs = layer.inputs;
    else n = read_node(j);
    for (size_t i = 0; i < n.inputs.size(); ++i)
      if (!known(sc, n.inputs[i])) unknown(sc, j.at("inputs").at(i), n.inputs[i]);
    define(sc, n.id, j.at("id"));
    sc.node_ids.insert(n.id);
    std::vector<NodeSpec> out;
    if (!layer.nodes.empty()) {
      for (const std::string& p : layer.params) define(sc, p, j.at("id"));
      for (NodeSpec& g : layer.nodes) {
        if (g.id != n.id) define(sc, g.id, j.at("id"));
        out.push_back(std::move(g));
      }
    } else {
      if (n.kind == NodeSpec::Kind::Dense) reserve(sc, n.id + ".W"), reserve(sc, n.id + ".b");
      const size_t consts_before = s_.consts.size();
      if (lower_conv_bias(n, out)) {  // conv2d [x, W, b]: conv2d(x, W) + reshape(b, [F,1,1])
        for (NodeSpec& g : out)
          if (g.id != n.id) define(sc, g.id, j.at("id"));
      } else if (sc.top && lower_class_weight(j, n, s_, out)) {  // a weighted loss (spec/class_weight.h)
        for (size_t c = consts_before; c < s_.consts.size(); ++c) define(sc, s_.consts[c].name, j.at("id"));
        for (NodeSpec& g : out)
          if (g.id != n.id) define(sc, g.id, j.at("id"));
      } else {
        out.push_back(std::move(n));
      }
    }
    for (NodeSpec& g : out) {
      rename(g, sc);
      if (s_.graph.size() >= kMaxExpandedNodes)
        j.fail("the graph expands to more than " + std::to_string(kMaxExpandedNodes) + " nodes");
      s_.graph.push_back(std::move(g));
    }
  }

  // A node read as the block spells it → the instance's real names (at the top level: only the
  // block nodes' aliases are resolved).
  void rename(NodeSpec& g, const Scope& sc) const {
    for (std::string& in : g.inputs) in = real(sc, in);
    for (std::string& in : g.weighted_inputs) in = real(sc, in);
    if (sc.top) return;
    g.id = sc.prefix + g.id;
    if (!g.layer_id.empty()) g.layer_id = sc.prefix + g.layer_id;
    for (LayerParamSpec& lp : g.layer_params) {
      lp.name = sc.prefix + lp.name;
      if (!lp.torch_name.empty()) lp.torch_name = sc.prefix + lp.torch_name;
    }
    g.instance = sc.instance;
  }

  void instantiate(const JsonAt& j, Scope& sc) {
    j.only_keys({"id", "block", "inputs", "repeat"});
    const std::string id = j.at("id").str();
    if (id.empty()) j.at("id").fail("an id cannot be empty");
    const JsonAt name_at = j.at("block");
    const std::string name = name_at.str();
    const auto found = blocks_.find(name);
    if (found == blocks_.end()) {
      std::vector<std::string> words;
      std::string list;
      for (const auto& [k, v] : blocks_) words.push_back(k), list += (list.empty() ? "" : ", ") + k;
      name_at.fail("unknown block \"" + name + "\"" + did_you_mean(name, words) +
                   (list.empty() ? " (the spec has no \"blocks\")" : " (known: " + list + ")"));
    }
    const JsonAt b = found->second;
    if (std::find(stack_.begin(), stack_.end(), name) != stack_.end()) {
      std::string chain;
      for (const std::string& k : stack_) chain += k + " → ";
      name_at.fail("block \"" + name + "\" instantiates itself (" + chain + name + ")");
    }
    std::vector<std::string> inputs;
    const auto ins = j.at("inputs").array();
    for (size_t i = 0; i < ins.size(); ++i) {
      inputs.push_back(ins[i].str());
      if (!known(sc, inputs.back())) unknown(sc, ins[i], inputs.back());
    }
    const auto formal = b.at("inputs").array();
    if (inputs.size() != formal.size()) {
      std::string list;
      for (const JsonAt& f : formal) list += (list.empty() ? "" : ", ") + f.str();
      j.at("inputs").fail("block \"" + name + "\" takes " + std::to_string(formal.size()) + " input" + (formal.size() == 1 ? "" : "s") +
                          " (" + list + "), got " + std::to_string(inputs.size()));
    }
    const bool indexed = j.has("repeat");
    const int64_t repeat = indexed ? j.at("repeat").integer(1, kMaxRepeat) : 1;
    define(sc, id, j.at("id"));
    sc.node_ids.insert(id);
    for (std::string& in : inputs) in = real(sc, in);
    const std::string base = sc.prefix + id;
    stack_.push_back(name);
    std::string prev;
    for (int64_t k = 0; k < repeat; ++k) {
      Scope inst;
      inst.top = false;
      inst.instance = indexed ? base + "." + std::to_string(k) : base;
      inst.prefix = inst.instance + ".";
      BlockInstance record{inst.instance, name, j.pointer(), {}, "", {}};
      for (size_t i = 0; i < formal.size(); ++i) {
        const std::string actual = (k > 0 && i == 0) ? prev : inputs[i];
        inst.bound[formal[i].str()] = actual;
        inst.local.insert(formal[i].str());
        record.inputs.push_back(actual);
      }
      const size_t slot = s_.instances.size();  // outer instances before the ones inside them
      s_.instances.push_back(record);
      try {
        prev = expand(b, inst, record);
      } catch (const InputError& e) {
        rethrow_in(e, inst.instance);
      }
      s_.instances[slot] = std::move(record);
    }
    stack_.pop_back();
    s_.aliases[base] = prev;
  }

  // The block's params and graph in instance `inst`; returns the real name of its output.
  std::string expand(const JsonAt& b, Scope& inst, BlockInstance& record) {
    if (b.has("params")) {
      const JsonAt ps = b.at("params");
      for (auto it = ps.json().begin(); it != ps.json().end(); ++it) {
        const JsonAt p = ps.at(it.key());
        if (inst.bound.count(it.key())) p.fail("param \"" + it.key() + "\" has the name of one of the block's inputs");
        ParamSpec param = read_param(p, inst.prefix + it.key());
        define(inst, it.key(), p);
        record.params.push_back(param.name);
        s_.params.push_back(std::move(param));
      }
    }
    inst.nodes = b.at("graph").array();
    for (const JsonAt& j : inst.nodes) node(j, inst);
    const JsonAt out = b.at("output");
    if (!inst.node_ids.count(out.str())) {
      std::string list;
      for (const std::string& k : inst.node_ids) list += (list.empty() ? "" : ", ") + k;
      out.fail("output \"" + out.str() + "\" is not a node of the block's graph (nodes: " + list + ")");
    }
    record.output = real(inst, out.str());
    return record.output;
  }
};

}  // namespace

void read_graph(const JsonAt& root, Spec& s, std::set<std::string>& names) { GraphReader(root, s, names).read(); }

std::string resolve_alias(const Spec& s, std::string name) {
  for (auto it = s.aliases.find(name); it != s.aliases.end(); it = s.aliases.find(name)) name = it->second;
  return name;
}

}  // namespace gr
