#include "interchange/torch_modules.h"

#include <algorithm>
#include <cctype>
#include <set>

namespace gr {

namespace {

std::vector<std::string> split(const std::string& path) {
  std::vector<std::string> out;
  size_t start = 0;
  for (size_t dot = path.find('.'); dot != std::string::npos; dot = path.find('.', start)) {
    out.push_back(path.substr(start, dot - start));
    start = dot + 1;
  }
  out.push_back(path.substr(start));
  return out;
}

bool index(const std::string& s) {  // "0", "12": no sign, no leading zero
  if (s.empty() || s.size() > 9 || (s.size() > 1 && s[0] == '0')) return false;
  return std::all_of(s.begin(), s.end(), [](char c) { return std::isdigit(static_cast<unsigned char>(c)); });
}

}  // namespace

bool torch_identifier(const std::string& s) {
  static const std::set<std::string> reserved = {
      "False", "None", "True", "and", "as", "assert", "async", "await", "break", "class", "continue", "def", "del",
      "elif", "else", "except", "finally", "for", "from", "global", "if", "import", "in", "is", "lambda", "nonlocal",
      "not", "or", "pass", "raise", "return", "try", "while", "with", "yield",
      // nn.Module attributes an attribute of ours must not shadow
      "forward", "training", "to", "cpu", "cuda", "double", "float", "half", "eval", "train", "apply", "state_dict",
      "load_state_dict", "parameters", "buffers", "children", "modules", "named_parameters", "named_buffers",
      "register_buffer", "register_parameter", "add_module", "type", "zero_grad", "requires_grad_", "dump_patches",
      "call_super_init", "input_names", "self", "torch", "nn"};
  if (s.empty() || s[0] == '_' || std::isdigit(static_cast<unsigned char>(s[0]))) return false;
  for (unsigned char c : s)
    if (!(std::isalnum(c) || c == '_')) return false;
  return !reserved.contains(s);
}

std::string torch_flat_name(const std::string& s) {
  std::string out = "p_";
  for (unsigned char c : s) out += (std::isalnum(c) && c < 0x80) ? static_cast<char>(c) : '_';
  return out;
}

std::string TorchModules::param_module(const Program& p, size_t i, std::string& leaf) const {
  const ProgramParam& pp = p.params[i];
  const std::string& name = pp.torch_name.empty() ? pp.name : pp.torch_name;  // a layer's: "b1.0.c.weight"
  const size_t dot = name.rfind('.');
  if (dot == std::string::npos || pp.state) return "";
  const std::string mod = name.substr(0, dot);
  leaf = name.substr(dot + 1);
  // a layer's top-level module ("c1.weight") keeps the caller's own handling
  if (!pp.torch_name.empty() && mod.find('.') == std::string::npos) return "";
  return nested(mod) && ident_(leaf) ? mod : "";
}

void TorchModules::scan(const Program& p, const std::vector<bool>& needed_param, const std::vector<bool>& needed_node) {
  std::set<size_t> dense;
  for (size_t k = 0; k < p.nodes.size(); ++k) {
    const ProgramNode& pn = p.nodes[k];
    if (!needed_node[k] || pn.weight < 0) continue;
    dense.insert(static_cast<size_t>(pn.weight)), dense.insert(static_cast<size_t>(pn.bias));
    if (pn.spec->kind == NodeSpec::Kind::Dense) {
      if (pn.spec->id.find('.') != std::string::npos) add(pn.spec->id);
      continue;
    }
    const std::string& rm = p.params[static_cast<size_t>(pn.weight)].name;  // a Batch op's running statistics
    const std::string owner = rm.substr(0, rm.rfind('.'));
    if (owner.find('.') != std::string::npos) add(owner);
  }
  for (size_t i = 0; i < p.params.size(); ++i) {
    if (!needed_param[i] || dense.count(i)) continue;
    const ProgramParam& pp = p.params[i];
    const std::string& name = pp.torch_name.empty() ? pp.name : pp.torch_name;
    const size_t dot = name.rfind('.');
    if (dot == std::string::npos || !ident_(name.substr(dot + 1))) continue;
    const std::string mod = name.substr(0, dot);
    if (pp.torch_name.empty() || mod.find('.') != std::string::npos) add(mod);
  }
}

bool TorchModules::add(const std::string& path) {
  const std::vector<std::string> seg = split(path);
  if (!ident_(seg[0])) return false;
  for (size_t i = 1; i < seg.size(); ++i)
    if (!ident_(seg[i]) && !index(seg[i])) return false;
  std::string at = seg[0];
  if (!nodes_.count(at)) nodes_[at], roots_.push_back(at);
  for (size_t i = 1; i < seg.size(); ++i) {
    const std::string child = at + "." + seg[i];
    if (!nodes_.count(child)) nodes_[child], nodes_[at].children.push_back(seg[i]);
    at = child;
  }
  return true;
}

void TorchModules::drop(const std::string& root) {
  for (auto it = nodes_.begin(); it != nodes_.end();)
    it = it->first == root || it->first.starts_with(root + ".") ? nodes_.erase(it) : std::next(it);
  roots_.erase(std::remove(roots_.begin(), roots_.end(), root), roots_.end());
}

bool TorchModules::list(const std::string& path) const {
  const Node& n = nodes_.at(path);
  if (n.children.empty() || !n.ctor.empty()) return false;
  std::vector<std::string> want;
  for (size_t i = 0; i < n.children.size(); ++i) want.push_back(std::to_string(i));
  std::vector<std::string> have = n.children;
  std::sort(have.begin(), have.end());
  std::sort(want.begin(), want.end());
  return have == want;
}

std::string TorchModules::ref(const std::string& path) const {
  const size_t dot = path.rfind('.');
  if (dot == std::string::npos) return "self." + path;
  const std::string parent = path.substr(0, dot), seg = path.substr(dot + 1);
  if (list(parent)) return ref(parent) + "[" + seg + "]";
  if (ident_(seg)) return ref(parent) + "." + seg;
  return "getattr(" + ref(parent) + ", '" + seg + "')";
}

std::string TorchModules::make(const std::string& path) const {
  const Node& n = nodes_.at(path);
  if (!n.ctor.empty()) return n.ctor;
  if (!list(path)) return "nn.Module()";
  return "nn.ModuleList([nn.Module() for _ in range(" + std::to_string(n.children.size()) + ")])";
}

void TorchModules::lines(const std::string& path, std::string& out) const {
  const Node& n = nodes_.at(path);
  const bool is_list = list(path);
  std::vector<std::string> order = n.children;
  if (is_list) std::sort(order.begin(), order.end(), [](const std::string& a, const std::string& b) { return std::stoi(a) < std::stoi(b); });
  for (const std::string& c : order) {
    const std::string child = path + "." + c;
    const Node& cn = nodes_.at(child);
    // A ModuleList made its elements as plain modules: one that is something else is assigned.
    if (is_list && cn.ctor.empty() && list(child)) out += "        " + ref(path) + "[" + c + "] = " + make(child) + "\n";
    else if (is_list && !cn.ctor.empty()) out += "        " + ref(path) + "[" + c + "] = " + make(child) + "\n";
    else if (!is_list && ident_(c)) out += "        " + ref(path) + "." + c + " = " + make(child) + "\n";
    else if (!is_list) out += "        " + ref(path) + ".add_module('" + c + "', " + make(child) + ")\n";
    lines(child, out);
  }
}

std::string TorchModules::init_lines() const {
  std::string out;
  for (const std::string& r : roots_) {
    out += "        self." + r + " = " + make(r) + "  # block modules\n";
    lines(r, out);
  }
  return out;
}

}  // namespace gr
