#include "interchange/export_torch.h"

#include <cctype>
#include <cstdio>
#include <filesystem>
#include <map>
#include <set>
#include <sstream>

#include "io/atomic_file.h"
#include "interchange/graph_walk.h"
#include "interchange/torch_modules.h"
#include "io/errors.h"

namespace gr {

namespace {

// A double as a Python float literal that reads back to the same bits.
std::string py_num(double v) {
  char buf[40];
  std::snprintf(buf, sizeof buf, "%.17g", v);
  std::string s = buf;
  if (s == "inf") return "float('inf')";
  if (s == "-inf") return "float('-inf')";
  if (s == "nan" || s == "-nan") return "float('nan')";
  if (s.find_first_of(".en") == std::string::npos) s += ".0";
  return s;
}

std::string py_ints(std::span<const int64_t> v) {
  std::string s = "[";
  for (size_t i = 0; i < v.size(); ++i) s += (i ? ", " : "") + std::to_string(v[i]);
  return s + "]";
}

// A Python string literal (names from the spec only ever appear in comments and strings).
std::string py_str(const std::string& s) {
  std::string out = "'";
  for (unsigned char c : s) {
    if (c == '\\' || c == '\'') {
      out += '\\';
      out += static_cast<char>(c);
    } else if (c < 0x20 || c >= 0x7f) {
      char hex[8];
      std::snprintf(hex, sizeof hex, "\\x%02x", c);
      out += hex;
    } else {
      out += static_cast<char>(c);
    }
  }
  return out + "'";
}

// Comments carry spec names: keep them printable and on one line.
std::string comment_safe(const std::string& s) {
  std::string out;
  for (unsigned char c : s) out += (c < 0x20 || c >= 0x7f) ? '?' : static_cast<char>(c);
  return out;
}

// The row's torch expression with its operands a, b, s (and a fold reduction's dim d and keepdim k)
// substituted (whole identifiers not after '.').
std::string substitute(std::string_view expr, const std::string& a, const std::string& b, const std::string& s,
                       const std::string& d = "d", const std::string& k = "k") {
  std::string out;
  for (size_t i = 0; i < expr.size();) {
    const char c = expr[i];
    if (std::isalpha(static_cast<unsigned char>(c)) || c == '_') {
      size_t j = i;
      while (j < expr.size() && (std::isalnum(static_cast<unsigned char>(expr[j])) || expr[j] == '_')) ++j;
      const std::string_view word = expr.substr(i, j - i);
      const bool attr = i > 0 && expr[i - 1] == '.';
      if (!attr && word == "a") out += a;
      else if (!attr && word == "b") out += b;
      else if (!attr && word == "s") out += "(" + s + ")";
      else if (!attr && word == "d") out += d;
      else if (!attr && word == "k") out += k;
      else out += word;
      i = j;
    } else {
      out += c;
      ++i;
    }
  }
  return out;
}

std::string slice_expr(const std::string& a, const NodeSpec& n) {
  std::string s = a + "[";
  for (size_t d = 0; d < n.starts.size(); ++d)
    s += (d ? ", " : "") + std::to_string(n.starts[d]) + ":" + std::to_string(n.stops[d]);
  return s + "]";
}

struct Emitter : GraphWalk {
  std::vector<std::string> node_var, param_ref, const_ref, input_var;
  std::ostringstream init, fwd;
  TorchExport out;
  UniqueNames names;  // attribute names, unique within the module
  std::map<std::string, std::string> submodules{};  // a layer's id → its submodule's attribute (layer_param)
  TorchModules modules{};           // dotted names as nested modules (torch_modules.h)
  // The module's dtype: the run's precision (out.real).
  const char* dtype() const { return out.real == DType::F32 ? "torch.float32" : "torch.float64"; }

  std::string ref(const Ref& r) const { return pick(r, input_var, param_ref, const_ref, node_var); }

  // A buffer: registered with literal values in __init__ and written to the state_dict.
  void buffer(const std::string& attr, const Tensor& t) {
    init << "        self.register_buffer(" << py_str(attr) << ", torch.tensor([";
    for (int64_t i = 0; i < t.numel(); ++i) init << (i ? ", " : "") << py_num(t[i]);
    init << "], dtype=" << dtype() << ").reshape(" << py_ints(t.shape().dims()) << "))\n";
    out.state.push_back({attr, t});
  }

  // A conv2d / batch_norm layer's parameter (ProgramParam::torch_name "ID.weight", "ID.bias"): an
  // attribute of a submodule ID, as nn.Conv2d / nn.BatchNorm2d name it, so the state_dict keys are
  // PyTorch's; a bias, scale or shift is saved as PyTorch's [C] and viewed as [C, 1, 1] in forward.
  bool layer_param(size_t i) {
    const ProgramParam& pp = p.params[i];
    const size_t dot = pp.torch_name.rfind('.');
    if (pp.torch_name.empty() || dot == std::string::npos) return false;
    const std::string mod = pp.torch_name.substr(0, dot), leaf = pp.torch_name.substr(dot + 1);
    if (!torch_identifier(mod)) return false;
    auto it = submodules.find(mod);
    if (it == submodules.end()) {
      const std::string attr = names.take(mod);
      init << "        self." << attr << " = nn.Module()  # layer " << comment_safe(mod) << "\n";
      it = submodules.emplace(mod, attr).first;
    }
    module_param(i, "self." + it->second, it->second, leaf);
    return true;
  }

  // Parameter i as attribute `leaf` of the module `expr` (state_dict key `key.leaf`).
  void module_param(size_t i, const std::string& expr, const std::string& key, const std::string& leaf) {
    const ProgramParam& pp = p.params[i];
    const bool flat = !pp.torch_name.empty() && pp.shape.rank() > 1 && pp.shape.numel() == pp.shape[0];  // a layer's [C, 1, 1]
    const Shape saved = flat ? Shape{pp.shape[0]} : pp.shape;
    init << "        " << expr << "." << leaf << " = nn.Parameter(torch.zeros(" << py_ints(saved.dims()) << ", dtype=" << dtype()
         << "))  # " << comment_safe(pp.name) << "\n";
    param_ref[i] = expr + "." + leaf + (flat ? ".reshape(" + py_ints(pp.shape.dims()) + ")" : "");
    const Tensor& w = weight(static_cast<int>(i));
    out.state.push_back({key + "." + leaf, Tensor(saved, std::vector<double>(w.values().begin(), w.values().end()))});
  }

  void leaves(const Preprocessing& prep) {
    param_ref.assign(p.params.size(), "");
    modules.scan(p, needed_param, needed_node);  // the module roots first: their attribute names are the keys
    for (const std::string& r : modules.roots())
      if (names.take(r) != r) modules.drop(r);
    for (size_t i = 0; i < p.params.size(); ++i) {
      const ProgramParam& pp = p.params[i];
      if (!needed_param[i]) continue;
      bool dense = false;
      for (const ProgramNode& pn : p.nodes) dense = dense || pn.weight == static_cast<int>(i) || pn.bias == static_cast<int>(i);
      if (dense) continue;
      std::string leaf;
      if (const std::string mod = modules.param_module(p, i, leaf); !mod.empty()) {
        module_param(i, modules.ref(mod), mod, leaf);
        continue;
      }
      if (layer_param(i)) continue;
      const std::string attr = names.take(torch_identifier(pp.name) ? pp.name : torch_flat_name(pp.name));
      init << "        self." << attr << " = nn.Parameter(torch.zeros(" << py_ints(pp.shape.dims())
           << ", dtype=" << dtype() << "))  # " << comment_safe(pp.name) << "\n";
      param_ref[i] = "self." + attr;
      out.state.push_back({attr, weight(static_cast<int>(i))});
    }
    for (size_t i = 0; i < p.nodes.size(); ++i) {
      const ProgramNode& pn = p.nodes[i];
      if (!needed_node[i] || pn.weight < 0) continue;
      const NodeSpec& n = *pn.spec;
      if (n.kind == NodeSpec::Kind::Op && op_info(n.op).batch()) {
        // The running statistics as buffers of a submodule, named as PyTorch's BatchNorm names them: a
        // batch_norm layer's go into the layer's submodule beside its weight and bias (nn.BatchNorm2d's
        // state_dict keys), a bare op's into a submodule of the node's id.
        const std::string& rm_name = p.params[static_cast<size_t>(pn.weight)].name;
        const std::string owner = rm_name.substr(0, rm_name.size() - std::string(".running_mean").size());
        const auto sub = submodules.find(owner);
        const bool nested = modules.nested(owner), shared = nested || sub != submodules.end();
        const std::string attr = nested ? owner : shared ? sub->second : names.take(torch_identifier(owner) ? owner : torch_flat_name(owner));
        const std::string expr = nested ? modules.ref(owner) : "self." + attr;
        const Tensor &rm = weight(pn.weight), &rv = weight(pn.bias);
        if (!shared)
          init << "        self." << attr << " = nn.Module()  # " << op_name(n.op) << " " << comment_safe(n.id)
               << ": its running statistics\n";
        init << "        " << expr << ".register_buffer('running_mean', torch.zeros(" << rm.numel() << ", dtype=" << dtype() << "))\n"
             << "        " << expr << ".register_buffer('running_var', torch.ones(" << rv.numel() << ", dtype=" << dtype() << "))\n";
        out.state.push_back({attr + ".running_mean", rm});
        out.state.push_back({attr + ".running_var", rv});
        param_ref[static_cast<size_t>(pn.weight)] = expr;
        continue;
      }
      const bool nested = modules.nested(n.id);  // a dense layer in a block: made with the block's modules
      const std::string attr = nested ? n.id : names.take(torch_identifier(n.id) ? n.id : torch_flat_name(n.id));
      const Tensor& w = weight(pn.weight);  // [in, units]
      const int64_t in = w.shape()[0], units = w.shape()[1];
      const std::string linear = "nn.Linear(" + std::to_string(in) + ", " + std::to_string(units) + ", dtype=" + dtype() + ")";
      if (nested) modules.set_ctor(n.id, linear);
      else init << "        self." << attr << " = " << linear << "  # dense layer " << comment_safe(n.id) << "\n";
      Tensor wt(Shape{units, in});
      for (int64_t r = 0; r < in; ++r)
        for (int64_t c = 0; c < units; ++c) wt[c * in + r] = w[r * units + c];
      out.state.push_back({attr + ".weight", std::move(wt)});
      out.state.push_back({attr + ".bias", weight(pn.bias)});
      param_ref[static_cast<size_t>(pn.weight)] = nested ? modules.ref(n.id) : "self." + attr;
    }
    const_ref.assign(p.spec->consts.size(), "");
    for (size_t i = 0; i < p.spec->consts.size(); ++i) {
      if (!needed_const[i]) continue;
      const ConstSpec& c = p.spec->consts[i];
      const std::string attr = names.take(torch_flat_name(c.name).replace(0, 2, "c_"));
      buffer(attr, Tensor(Shape(std::span<const int64_t>(c.shape)), c.values));
      const_ref[i] = "self." + attr;
    }
    input_var.assign(p.input_names.size(), "");
    for (size_t i = 0; i < p.input_names.size(); ++i) {
      if (!needed_input[i]) continue;
      const std::string& name = p.input_names[i];
      const InputPrep* ip = prep.find(name);
      if (!ip)
        throw InputError(p.spec->path, "/data/inputs/" + name, "the saved preprocessing has no input \"" + name + "\"");
      const std::string arg = names.take(torch_identifier(name) ? name : torch_flat_name(name));
      out.input_names.push_back(name);
      input_var[i] = arg;
      fwd << "        " << arg << " = torch.as_tensor(" << arg << ", dtype=" << dtype() << ")\n";
      std::vector<int64_t> row(p.input_shapes[i].dims().begin() + 1, p.input_shapes[i].dims().end());
      if (row.empty()) row.push_back(1);
      const std::vector<int64_t> declared = declared_rows(i);
      if (!declared.empty()) {  // "shape": flat columns in, the declared row shape out (after standardize)
        fwd << "        " << arg << " = " << arg << ".reshape(" << arg << ".shape[0], -1)\n";
        row = {Shape(std::span<const int64_t>(row)).numel()};
      }
      const auto shape_rows = [&] {
        if (declared.empty()) return;
        std::vector<int64_t> dims{-1};
        dims.insert(dims.end(), declared.begin(), declared.end());
        fwd << "        " << arg << " = " << arg << ".reshape(" << py_ints(dims) << ")\n";
      };
      const Shape rs{std::span<const int64_t>(row)};
      // The tabular transforms (spec/dataset.h): indicator, fill, encoding, indicator columns appended.
      const InputFit& f = ip->fit;
      const int64_t raw_w = export_raw_width(*ip, rs.numel());
      std::string mask;
      if (f.indicator) {
        mask = names.take(arg + "_missing");
        fwd << "        " << mask << " = torch.isnan(" << arg << ").to(" << dtype() << ").reshape(" << arg << ".shape[0], -1)\n";
      }
      if (!f.fill.empty()) {
        const std::vector<double> fill = export_fill(f);
        std::vector<int64_t> fill_shape = f.categorical || f.has_threshold || f.one_hot ? std::vector<int64_t>{1} : row;
        if (f.indicator) fill_shape = {raw_w};
        const std::string fb = names.take(arg + "_fill");
        buffer(fb, Tensor(Shape(std::span<const int64_t>(fill_shape)), fill));
        fwd << "        " << arg << " = torch.where(torch.isnan(" << arg << "), self." << fb << ", " << arg << ")\n";
      }
      if (f.categorical) {
        const std::vector<double> cats = export_category_values(f);
        const std::string cb = names.take(arg + "_categories");
        buffer(cb, Tensor(Shape{static_cast<int64_t>(cats.size())}, cats));
        fwd << "        " << arg << " = (" << arg << ".reshape(-1, 1) == self." << cb << ").to(" << dtype() << ")\n";
        if (!f.unknown_zeros)
          fwd << "        if not bool(torch.all(" << arg << ".sum(dim=1) == 1)):\n"
              << "            raise ValueError(" << py_str("input " + name + ": a value that is not one of its " +
                                                           std::to_string(cats.size()) + " categories") << ")\n";
        if (f.ids) fwd << "        " << arg << " = torch.argmax(" << arg << ", dim=1, keepdim=True).to(" << dtype() << ")\n";
      } else if (f.has_threshold) {
        fwd << "        " << arg << " = (" << arg << ".reshape(-1, 1) > " << py_num(f.threshold) << ").to(" << dtype() << ")\n";
      } else if (!ip->one_hot_classes.empty()) {
        fwd << "        " << arg << " = torch.nn.functional.one_hot(" << arg << ".reshape(-1).long(), "
            << ip->one_hot_classes.size() << ").to(" << dtype() << ")\n";
      }
      if (f.indicator)
        fwd << "        " << arg << " = torch.cat((" << arg << ".reshape(" << arg << ".shape[0], -1), " << mask << "), dim=1)\n";
      if (ip->mean.empty()) {
        shape_rows();
        continue;
      }
      if (static_cast<int64_t>(ip->mean.size()) != rs.numel() || ip->std.size() != ip->mean.size())
        throw InputError(p.spec->path, "/data/inputs/" + name,
                         "the saved standardization has " + std::to_string(ip->mean.size()) + " columns; the input's row " +
                             rs.str() + " needs " + std::to_string(rs.numel()));
      const std::string m = names.take(arg + "_mean"), s = names.take(arg + "_std");
      buffer(m, Tensor(rs, ip->mean));
      buffer(s, Tensor(rs, ip->std));
      fwd << "        " << arg << " = (" << arg << " - self." << m << ") / self." << s << "\n";
      shape_rows();
    }
  }

  Shape shape_of(const Ref& r) const {
    const auto k = static_cast<size_t>(r.index);
    switch (r.kind) {
      case Ref::Kind::Input: return p.input_shapes[k];
      case Ref::Kind::Param: return p.params[k].shape;
      case Ref::Kind::Const: return Shape(std::span<const int64_t>(p.spec->consts[k].shape));
      case Ref::Kind::Node: return p.nodes[k].shape;
    }
    return Shape{1};
  }

  // conv2d, max_pool2d, avg_pool2d as torch.nn.functional calls; pads that are not the same on both
  // sides ("same" with an even total) go through F.pad first (-inf for max: padding never wins).
  std::string window_expr(const ProgramNode& pn, const std::string& a, const std::string& b) const {
    const NodeSpec& n = *pn.spec;
    const WindowGeometry g = window_geometry(n, shape_of(pn.inputs[0]), n.op == Op::Conv2d ? shape_of(pn.inputs[1]) : Shape{1});
    const auto pair = [](int64_t x, int64_t y) { return "(" + std::to_string(x) + ", " + std::to_string(y) + ")"; };
    std::string x = a, pad = pair(g.pt, g.pl);
    if (!g.symmetric()) {
      x = "torch.nn.functional.pad(" + a + ", (" + std::to_string(g.pl) + ", " + std::to_string(g.pr) + ", " + std::to_string(g.pt) +
          ", " + std::to_string(g.pb) + ")" + (n.op == Op::MaxPool2d ? ", value=float('-inf')" : "") + ")";
      pad = "0";
    }
    const std::string kernel = pair(g.kh, g.kw), stride = pair(g.sh, g.sw);
    if (n.op == Op::Conv2d)
      return "torch.nn.functional.conv2d(" + x + ", " + b + ", stride=" + stride + ", padding=" + pad + ", dilation=" + pair(g.dh, g.dw) +
             ", groups=" + std::to_string(g.groups) + ")";
    if (n.op == Op::MaxPool2d) return "torch.nn.functional.max_pool2d(" + x + ", " + kernel + ", stride=" + stride + ", padding=" + pad + ")";
    return "torch.nn.functional.avg_pool2d(" + x + ", " + kernel + ", stride=" + stride + ", padding=" + pad + ", count_include_pad=True)";
  }

  std::string expr(const ProgramNode& pn) const {
    const NodeSpec& n = *pn.spec;
    const std::string a = pn.inputs.empty() ? "" : ref(pn.inputs[0]);
    const std::string b = pn.inputs.size() > 1 ? ref(pn.inputs[1]) : "";
    const auto refuse = [&](const std::string& why) -> std::string {
      throw InputError(p.spec->path, n.pointer, "export torch: node \"" + n.id + "\" " + why);
    };
    switch (n.kind) {
      case NodeSpec::Kind::Mse: return refuse("(mse) is a loss; the exported module computes the prediction only");
      case NodeSpec::Kind::Dense: {
        const std::string z = param_ref[static_cast<size_t>(pn.weight)] + "(" + a + ")";
        if (n.activation == "relu") return "torch.relu(" + z + ")";
        if (n.activation == "tanh") return "torch.tanh(" + z + ")";
        if (n.activation == "sigmoid") return "torch.sigmoid(" + z + ")";
        if (n.activation == "gelu") return "torch.nn.functional.gelu(" + z + ", approximate='tanh')";
        if (n.activation == "none") return z;
        return refuse("has activation \"" + n.activation + "\", which the export does not know");
      }
      case NodeSpec::Kind::Op: break;
    }
    const std::string axis = n.axis ? std::to_string(*n.axis) : "-1";
    const std::string keep = n.keepdims ? "True" : "False";
    switch (n.op) {
      case Op::Param:
      case Op::Const: return refuse("is a leaf op, never a graph node");
#define GR_EXPORT_EW(E, name, arity, cls, ...) \
  GR_OP_IF_UNARY_##cls(case Op::E:) GR_OP_IF_BINARY_##cls(case Op::E:) GR_OP_IF_ROW_##cls(case Op::E:)
        GR_OP_TABLE(GR_EXPORT_EW)
#undef GR_EXPORT_EW
        {
          const std::string_view t = op_info(n.op).torch;
          if (t.empty()) return refuse("(" + std::string(op_name(n.op)) + ") has no torch expression in the op table");
          return substitute(t, a, b, py_num(n.scalar));  // a, b: plain names
        }
      case Op::Sum:
        return n.axis ? "torch.sum(" + a + ", dim=" + axis + ", keepdim=" + keep + ")" : "torch.sum(" + a + ").reshape(1)";
      case Op::Mean:
        return n.axis ? "torch.mean(" + a + ", dim=" + axis + ", keepdim=" + keep + ")" : "torch.mean(" + a + ").reshape(1)";
#define GR_EXPORT_FOLD(E, name, arity, cls, attrs, stem, fwd, ...) GR_OP_IF_FOLD(cls, fwd, case Op::E:)
        GR_OP_TABLE(GR_EXPORT_FOLD)
#undef GR_EXPORT_FOLD
        {  // fold reductions (max, ...): the row's torch expression over a, dim d and keepdim k
          const std::string_view t = op_info(n.op).torch;
          if (t.empty()) return refuse("(" + std::string(op_name(n.op)) + ") has no torch expression in the op table");
          if (n.axis) return substitute(t, a, "", "", axis, keep);
          return "(" + substitute(t, a + ".reshape(-1)", "", "", "0", "False") + ").reshape(1)";
        }
      case Op::Dropout: return a;  // the exported module predicts: dropout is the identity
      case Op::Embedding: return substitute(op_info(n.op).torch, a, b, "");  // F.embedding(ids.long(), table)
      case Op::BatchNorm:  // the exported module predicts: the running statistics (eval mode)
        return "torch.nn.functional.batch_norm(" + a + ", " + param_ref[static_cast<size_t>(pn.weight)] + ".running_mean, " +
               param_ref[static_cast<size_t>(pn.weight)] + ".running_var, training=False, eps=" + py_num(n.scalar) + ")";
#define GR_EXPORT_WIN(E, name, arity, cls, ...) GR_OP_IF_WINDOW_##cls(case Op::E:)
        GR_OP_TABLE(GR_EXPORT_WIN)
#undef GR_EXPORT_WIN
        return window_expr(pn, a, b);
      case Op::Matmul:
      case Op::Bmm: return "torch.matmul(" + a + ", " + b + ")";
      case Op::Transpose: return a + ".transpose(-2, -1)";
      case Op::Reshape: return a + ".reshape(" + py_ints(n.shape) + ")";
      case Op::Slice: return slice_expr(a, n);
      case Op::Concat: return "torch.cat((" + a + ", " + b + "), dim=" + axis + ")";
      case Op::Softmax:
        if (n.causal)  // the keys after each query filled with -inf: their probabilities are exactly 0
          return "torch.softmax(" + a + ".masked_fill(torch.ones(" + a + ".shape[-2], " + a + ".shape[-1], dtype=torch.bool, device=" +
                 a + ".device).triu(1), float('-inf')), dim=-1)";
        return "torch.softmax(" + a + ", dim=" + axis + ")";
      case Op::LogSoftmax: return "torch.log_softmax(" + a + ", dim=" + axis + ")";
      case Op::SoftmaxCrossEntropy:
      case Op::CrossEntropy:
        return refuse("(" + std::string(op_name(n.op)) + ") is a loss; the exported module computes the prediction only");
    }
    return refuse("has an op the export does not know");
  }
};

}  // namespace

TorchExport export_torch(const Program& program, const SafetensorsFile& weights, const Preprocessing& prep, int output,
                         const std::string& transform, DType real, const OutputUnits& units) {
  const Spec& spec = *program.spec;
  if (output < 0 || output >= static_cast<int>(program.nodes.size()))
    throw InputError(spec.path, spec.loss_pointer, "no prediction node to export");
  Emitter e{{program, weights, {}, {}, {}, {}}, {}, {}, {}, {}, {}, {}, {}, {}};
  e.out.real = real;
  e.mark(output);
  e.leaves(prep);
  e.node_var.assign(program.nodes.size(), "");
  for (size_t i = 0; i < program.nodes.size(); ++i) {
    if (!e.needed_node[i]) continue;
    const ProgramNode& pn = program.nodes[i];
    e.node_var[i] = e.names.take("t" + std::to_string(i));
    const std::string what = pn.spec->kind == NodeSpec::Kind::Dense ? std::string("dense")
                             : pn.spec->kind == NodeSpec::Kind::Mse ? std::string("mse")
                                                                     : std::string(op_name(pn.spec->op));
    e.fwd << "        " << e.node_var[i] << " = " << e.expr(pn) << "  # " << comment_safe(pn.spec->id) << " (" << what
          << ")\n";
  }
  std::string y = e.node_var[static_cast<size_t>(output)];
  if (!units.empty()) {  // a standardized target: back to the data's units, as `gradrun predict` writes them
    const Shape& os = program.nodes[static_cast<size_t>(output)].shape;
    std::vector<int64_t> row(os.dims().begin() + 1, os.dims().end());
    if (row.empty()) row.push_back(1);
    const Shape rs{std::span<const int64_t>(row)};
    if (static_cast<int64_t>(units.mean.size()) != rs.numel() || units.std.size() != units.mean.size())
      throw InputError(spec.path, "/data/inputs/" + units.input,
                       "the saved target statistics have " + std::to_string(units.mean.size()) + " columns; the prediction's row " +
                           rs.str() + " needs " + std::to_string(rs.numel()));
    const std::string m = e.names.take("y_mean"), s = e.names.take("y_std");
    e.buffer(m, Tensor(rs, units.mean));
    e.buffer(s, Tensor(rs, units.std));
    e.fwd << "        " << y << " = " << y << " * self." << s << " + self." << m << "  # in the data's units of "
          << comment_safe(units.input) << "\n";
  }
  if (transform == "softmax") e.fwd << "        return torch.softmax(" << y << ", dim=-1)\n";
  else if (transform == "sigmoid") e.fwd << "        return torch.sigmoid(" << y << ")\n";
  else if (transform == "none" || transform.empty()) e.fwd << "        return " << y << "\n";
  else throw InputError(spec.path, "/predict/transform", "unknown transform \"" + transform + "\"");

  std::ostringstream py;
  py << "# model.py — written by `gradrun export --format torch` from the spec " << comment_safe(spec.name) << " ("
     << comment_safe(spec.path) << ", sha256 " << spec.sha256 << ").\n"
     << "# Load: m = Model(); m.load_state_dict(load_safetensors('state_dict.safetensors'))\n"
     << "#   (or safetensors.torch.load_file); Model.from_dir(DIR) does both.\n"
     << "# forward(" << [&] {
          std::string s;
          for (size_t i = 0; i < e.out.input_names.size(); ++i) s += (i ? ", " : "") + comment_safe(e.out.input_names[i]);
          return s;
        }()
     << "): the raw inputs, as read from the data file, in the spec's input order; returns the prediction ("
     << comment_safe(program.nodes[static_cast<size_t>(output)].spec->id) << ", transform "
     << (transform.empty() ? "none" : transform) << (units.empty() ? "" : ", in the data's units of " + comment_safe(units.input))
     << ").\n"
     << "import json\nimport os\nimport struct\n\nimport torch\nfrom torch import nn\n\n\n"
     << "def load_safetensors(path):\n"
     << "    \"\"\"A safetensors file of F64 or F32 tensors (what gradrun writes) as a dict of tensors.\"\"\"\n"
     << "    with open(path, 'rb') as f:\n"
     << "        data = f.read()\n"
     << "    (n,) = struct.unpack('<Q', data[:8])\n"
     << "    header = json.loads(data[8:8 + n].decode('utf-8'))\n"
     << "    out = {}\n"
     << "    for name, t in header.items():\n"
     << "        if name == '__metadata__':\n"
     << "            continue\n"
     << "        dtypes = {'F64': torch.float64, 'F32': torch.float32}\n"
     << "        if t['dtype'] not in dtypes:\n"
     << "            raise ValueError(name + ': dtype ' + t['dtype'] + ', expected F64 or F32')\n"
     << "        b, e = t['data_offsets']\n"
     << "        raw = bytearray(data[8 + n + b:8 + n + e])\n"
     << "        out[name] = torch.frombuffer(raw, dtype=dtypes[t['dtype']]).reshape(t['shape']).clone()\n"
     << "    return out\n\n\n"
     << "class Model(nn.Module):\n"
     << "    input_names = [";
  for (size_t i = 0; i < e.out.input_names.size(); ++i) py << (i ? ", " : "") << py_str(e.out.input_names[i]);
  py << "]\n\n    @classmethod\n    def from_dir(cls, path):\n"
     << "        m = cls()\n"
     << "        m.load_state_dict(load_safetensors(os.path.join(path, 'state_dict.safetensors')))\n"
     << "        return m.eval()\n"
     << "\n    def __init__(self):\n        super().__init__()\n" << e.modules.init_lines() << e.init.str() << "\n    def forward(self";
  for (size_t i = 0; i < program.input_names.size(); ++i)
    if (e.needed_input[i]) py << ", " << e.input_var[i];
  py << "):\n" << e.fwd.str();
  e.out.model_py = py.str();
  return std::move(e.out);
}

void write_torch_export(const TorchExport& e, const std::string& dir, const std::string& spec_sha256) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) throw IoError(dir, "cannot create the directory: " + ec.message());
  StTensorList list;
  for (const NamedTensor& t : e.state) list.emplace_back(t.name, t.tensor.view());
  write_safetensors((std::filesystem::path(dir) / "state_dict.safetensors").string(), list,
                    {{"format", "pt"}, {"spec_sha256", spec_sha256}}, e.real);
  write_file_atomic((std::filesystem::path(dir) / "model.py").string(), e.model_py);
}

}  // namespace gr
