#include "interchange/import_torch.h"

#include <map>
#include <set>

#include "io/errors.h"

namespace gr {

namespace {

std::string trim(const std::string& s) {
  const size_t b = s.find_first_not_of(" \t"), e = s.find_last_not_of(" \t");
  return b == std::string::npos ? "" : s.substr(b, e - b + 1);
}

Tensor transposed(const Tensor& t) {
  const int64_t r = t.shape()[0], c = t.shape()[1];
  Tensor out(Shape{c, r});
  for (int64_t i = 0; i < r; ++i)
    for (int64_t j = 0; j < c; ++j) out[j * r + i] = t[i * c + j];
  return out;
}

// "ID.W" / "ID.b" of a dense layer: the nn.Linear names and whether the layout is transposed.
bool linear_name(const Program& p, size_t param, std::string& name, bool& transpose) {
  for (const ProgramNode& pn : p.nodes) {
    if (pn.weight == static_cast<int>(param)) return name = pn.spec->id + ".weight", transpose = true, true;
    if (pn.bias == static_cast<int>(param)) return name = pn.spec->id + ".bias", transpose = false, true;
  }
  return false;
}

}  // namespace

std::vector<ImportMapping> parse_import_map(const std::vector<std::string>& items) {
  std::vector<ImportMapping> out;
  for (const std::string& item : items) {
    size_t start = 0;
    while (start <= item.size()) {
      const size_t comma = item.find(',', start);
      const std::string part = trim(item.substr(start, comma == std::string::npos ? std::string::npos : comma - start));
      start = comma == std::string::npos ? item.size() + 1 : comma + 1;
      if (part.empty()) continue;
      const size_t eq = part.find('=');
      ImportMapping m;
      if (eq != std::string::npos) m.torch_name = trim(part.substr(0, eq)), m.param = trim(part.substr(eq + 1));
      if (m.param.size() > 2 && m.param.compare(m.param.size() - 2, 2, ":T") == 0) m.param.resize(m.param.size() - 2), m.transpose = true;
      if (eq == std::string::npos || m.torch_name.empty() || m.param.empty())
        throw InputError("--map", part, "expected TORCH_NAME=PARAM (PARAM:T to transpose a 2-D tensor)");
      out.push_back(m);
    }
  }
  return out;
}

ImportResult import_torch(const Program& p, const StTensorList& init, const SafetensorsFile& state, const std::string& state_path,
                          const std::vector<ImportMapping>& map, const std::string& out) {
  std::map<std::string, const ImportMapping*> by_param;
  for (const ImportMapping& m : map) {
    bool known = false;
    for (const ProgramParam& pp : p.params) known = known || pp.name == m.param;
    if (!known) {
      std::string names;
      for (const ProgramParam& pp : p.params) names += (names.empty() ? "" : ", ") + pp.name;
      throw InputError("--map", m.torch_name + "=" + m.param, "the spec has no parameter \"" + m.param + "\" (parameters: " + names + ")");
    }
    if (!by_param.emplace(m.param, &m).second)
      throw InputError("--map", m.torch_name + "=" + m.param, "parameter \"" + m.param + "\" is mapped twice");
  }

  ImportResult r;
  std::set<std::string> used;
  std::vector<Tensor> values;
  for (size_t i = 0; i < p.params.size(); ++i) {
    const ProgramParam& pp = p.params[i];
    std::string name;
    bool transpose = false, explicit_map = false;
    if (const auto it = by_param.find(pp.name); it != by_param.end()) {
      name = it->second->torch_name, transpose = it->second->transpose, explicit_map = true;
    } else if (state.find(pp.name)) {
      name = pp.name;
    } else if (!pp.torch_name.empty() && state.find(pp.torch_name)) {  // a conv2d / batch_norm layer's: nn.Conv2d's names
      name = pp.torch_name;
    } else if (!linear_name(p, i, name, transpose) || !state.find(name)) {
      name.clear();
    }
    if (name.empty()) {  // the spec's own init
      const auto own = init[i].second.values();
      values.emplace_back(pp.shape, std::vector<double>(own.begin(), own.end()));
      r.from_spec.push_back(pp.name);
      continue;
    }
    const Tensor* t = state.find(name);
    if (!t) throw InputError(state_path, name, "tensor \"" + name + "\" (mapped to parameter \"" + pp.name + "\") is not in the file");
    if (transpose && t->shape().rank() != 2)
      throw InputError(state_path, name, "tensor \"" + name + "\" has shape " + t->shape().str() + ": only a 2-D tensor can be transposed");
    Tensor v = transpose ? transposed(*t) : *t;
    // PyTorch's [C] bias / scale / shift for a layer's [C, 1, 1] parameter: the same values
    if (v.shape().rank() == 1 && pp.shape.rank() > 1 && pp.shape[0] == v.shape()[0] && pp.shape.numel() == v.numel())
      v = Tensor(pp.shape, std::vector<double>(v.values().begin(), v.values().end()));
    if (!(v.shape() == pp.shape)) {
      const bool hint = !transpose && t->shape().rank() == 2 && pp.shape.rank() == 2 && t->shape()[0] == pp.shape[1] &&
                        t->shape()[1] == pp.shape[0];
      throw InputError(state_path, name,
                       "tensor \"" + name + "\" has shape " + t->shape().str() + (transpose ? " (transposed: " + v.shape().str() + ")" : "") +
                           " but parameter \"" + pp.name + "\" is " + pp.shape.str() +
                           (hint ? (explicit_map ? "; add :T to transpose it" : "; map it with --map " + name + "=" + pp.name + ":T") : ""));
    }
    used.insert(name);
    r.imported.push_back(pp.name + " <- " + name + (transpose ? " (transposed)" : ""));
    values.push_back(std::move(v));
  }
  for (const NamedTensor& t : state.tensors)
    if (!used.count(t.name)) r.unused.push_back(t.name);

  StTensorList list;
  for (size_t i = 0; i < p.params.size(); ++i) list.emplace_back(p.params[i].name, values[i].view());
  write_safetensors(out, list, {{"format", "gradrun-init"}, {"imported_from", state_path}}, DType::F64);
  return r;
}

}  // namespace gr
