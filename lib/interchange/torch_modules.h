// torch_modules.h — dotted names (a block instance's b1.0.W, a layer in a block b1.0.h) as nested
// nn.Modules in the torch export, so the state_dict keys are the gradrun names themselves (b1.0.W,
// b1.0.h.weight), as PyTorch names a ModuleList of blocks (nanoGPT's h.0.attn...), and
// import-torch reads them back by name.
//
// A module path "b1.0.h" becomes self.b1[0].h: a module whose children are all the indices
// 0..k-1 is an nn.ModuleList, any other an nn.Module (a child named by another index: getattr).
// A path nests when its first segment is a Python identifier and every other segment is an
// identifier or an index; otherwise the export keeps its flat attribute (p_b1_x_W).
#pragma once
#include <map>
#include <set>
#include <string>
#include <vector>

#include "spec/program.h"

namespace gr {

// Whether a name can be a plain attribute of the exported nn.Module: a Python identifier that is no
// keyword and shadows no nn.Module attribute (forward, training, state_dict, ...).
bool torch_identifier(const std::string& s);
// Any name as a flat attribute: "p_" and the name with every other character as '_'.
std::string torch_flat_name(const std::string& s);

class TorchModules {
 public:
  // Every dotted name the export of `p` writes (needed params and nodes): a parameter's module (its
  // name without the last segment, which must be an identifier), a dense layer's nn.Linear (its id),
  // a conv2d / batch_norm layer's module (its torch_name without the leaf), running statistics' owner.
  void scan(const Program& p, const std::vector<bool>& needed_param, const std::vector<bool>& needed_node);
  // The module path of parameter `i` and its attribute there; empty when it does not nest.
  std::string param_module(const Program& p, size_t i, std::string& leaf) const;

  // Adds the module path (and every prefix of it); false (nothing added) when it cannot nest.
  bool add(const std::string& path);
  // After every add: the module at `path` is made by `ctor` (e.g. "nn.Linear(8, 4)"), not nn.Module().
  void set_ctor(const std::string& path, const std::string& ctor) { nodes_[path].ctor = ctor; }
  // The roots (first segments), for the caller to reserve as attributes; drop() un-nests one whose
  // attribute name was taken already (its paths go back to flat attributes).
  std::vector<std::string> roots() const { return roots_; }
  void drop(const std::string& root);
  bool nested(const std::string& path) const { return nodes_.count(path) > 0; }
  // The Python expression of the module at `path` ("self.b1[0].h").
  std::string ref(const std::string& path) const;
  // The __init__ lines that make every module, parents first (8 spaces of indent).
  std::string init_lines() const;

 private:
  struct Node {
    std::vector<std::string> children;  // segment names, first-add order
    std::string ctor;                   // empty: a container
  };
  bool list(const std::string& path) const;  // children are exactly 0..k-1
  std::string make(const std::string& path) const;
  void lines(const std::string& path, std::string& out) const;

  static bool ident_(const std::string& s) { return torch_identifier(s); }
  std::map<std::string, Node> nodes_;
  std::vector<std::string> roots_;
};

}  // namespace gr
