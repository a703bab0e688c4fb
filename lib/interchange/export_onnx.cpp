#include "interchange/export_onnx.h"

#include <algorithm>
#include <filesystem>
#include <limits>
#include <set>
#include <string_view>
#include <utility>

#include "io/atomic_file.h"
#include "io/errors.h"
#include "interchange/graph_walk.h"
#include "interchange/onnx_decompose.h"
#include "interchange/onnx_writer.h"

namespace gr {

namespace {

// The ONNX operators the export emits whose opset-13 definitions (onnx/defs) allow tensor(double)
// for every floating-point input and output — all of them today. A --dtype f64 export refuses an
// operator missing here (a new mapping) naming its node instead of writing an invalid model;
// tests/test_export_onnx.py checks each f64 model's operators against onnx.defs.get_schema(op, 13).
bool onnx_has_double(std::string_view op) {
  static constexpr std::string_view kOps[] = {
      "Abs",      "Add",       "ArgMax",     "AveragePool", "Cast",    "Concat",    "Conv",  "Cos",  "Div",     "Equal",
      "Exp",      "Gather",    "Greater",   "Identity",   "IsNaN",     "Log",       "LogSoftmax", "MatMul", "Mul",
      "MaxPool",  "Neg",      "Pow",       "ReduceMax",  "ReduceMean", "ReduceSum", "Relu", "Reshape", "Sigmoid",
      "Sin",      "Slice",     "Softmax",    "Sqrt",      "Sub",       "Tanh", "Transpose", "Where"};
  return std::find(std::begin(kOps), std::end(kOps), op) != std::end(kOps);
}

// Valid in float64, but onnxruntime's CPU provider (onnxruntime-node 1.22.0, tools/onnxrt) has no
// double kernel for it: the model is written, and the export warns that onnxruntime cannot load it.
bool onnxruntime_lacks_double(std::string_view op) { return op == "Cos" || op == "Conv" || op == "AveragePool"; }

using onnx::attr_int;
using onnx::attr_ints;
using onnx::NodeProto;

std::vector<int64_t> dims_of(const Shape& s) { return {s.dims().begin(), s.dims().end()}; }

struct Builder : GraphWalk {
  onnx::ModelProto model;
  UniqueNames names;  // ONNX values are single-assignment
  std::vector<std::string> node_val, param_val, const_val, input_val;
  bool symbolic = true;
  int counter = 0;
  onnx::DataType elem = onnx::DataType::Float;  // every real tensor: Float, or Double (--dtype f64)
  std::string at_pointer, at_what;               // what is being translated, for a dtype refusal
  std::vector<std::string> warnings;             // float64 operators some runtime cannot run (OnnxExport)
  std::set<std::string> transposed, noted;       // outputs of Transpose nodes; operators warned about

  onnx::GraphProto& g() { return model.graph; }

  // --dtype f64: what onnxruntime (tools/onnxrt) cannot run as written, said once per operator.
  void note_runtime(const std::string& op, const std::vector<std::string>& in) {
    if (elem != onnx::DataType::Double || noted.contains(op)) return;
    const auto from_transpose = [&](const std::string& v) { return transposed.contains(v); };
    if (onnxruntime_lacks_double(op))
      warnings.push_back(at_what + " uses " + op + " in float64, which onnxruntime's CPU provider does not implement: "
                         "onnxruntime cannot load this model (other runtimes may); --dtype f32 runs everywhere");
    else if (op == "MatMul" && std::any_of(in.begin(), in.end(), from_transpose))
      warnings.push_back("a Transpose feeds a MatMul (" + at_what + "): onnxruntime's extended graph optimizations fuse "
                         "them into a float-only FusedMatMul, so run this float64 model with graph optimization level "
                         "basic (tools/onnxrt/run.js does)");
    else
      return;
    noted.insert(op);
  }

  // --dtype f64: the operator must take tensor(double) at opset 13 (onnx_has_double).
  void check_dtype(const std::string& op) const {
    if (elem == onnx::DataType::Double && !onnx_has_double(op))
      throw InputError(p.spec->path, at_pointer,
                       "export onnx --dtype f64: " + at_what + " needs the ONNX operator " + op +
                           ", which has no tensor(double) at opset 13; export it as float32 (--dtype f32)");
  }

  [[noreturn]] void refuse(const NodeSpec& n, const std::string& why) const {
    throw InputError(p.spec->path, n.pointer, "export onnx: node \"" + n.id + "\" " + why);
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

  std::string ref(const Ref& r) const { return pick(r, input_val, param_val, const_val, node_val); }

  std::string initializer_f(const std::string& wanted, std::vector<int64_t> dims, std::span<const double> v) {
    const std::string name = names.take(wanted);
    g().initializers.push_back(elem == onnx::DataType::Double ? onnx::double_tensor(name, std::move(dims), v)
                                                              : onnx::float_tensor(name, std::move(dims), v));
    return name;
  }
  std::string initializer_i(const std::string& wanted, std::vector<int64_t> dims, std::span<const int64_t> v) {
    const std::string name = names.take(wanted);
    g().initializers.push_back(onnx::int64_tensor(name, std::move(dims), v));
    return name;
  }

  // Appends a node; returns its (single) output's name.
  std::string emit(const std::string& op, std::vector<std::string> in, const std::string& out_wanted,
                   std::vector<onnx::AttributeProto> attrs = {}) {
    check_dtype(op);
    note_runtime(op, in);
    const std::string out = names.take(out_wanted);
    if (op == "Transpose") transposed.insert(out);
    NodeProto n;
    n.op_type = op;
    n.name = op + "_" + std::to_string(counter++);
    n.inputs = std::move(in);
    n.outputs = {out};
    n.attributes = std::move(attrs);
    g().nodes.push_back(std::move(n));
    return out;
  }

  // Does node pn keep rows independent, with the batch as dimension 0 (so "batch" can be symbolic)?
  bool row_wise(const ProgramNode& pn) const {
    const NodeSpec& n = *pn.spec;
    if (n.kind != NodeSpec::Kind::Op) return true;  // dense (mse is refused anyway)
    const Shape in = pn.inputs.empty() ? Shape{1} : shape_of(pn.inputs[0]);
    const auto axis0 = [&](const Shape& s) { return s.normalize_axis(n.axis.value_or(-1)) == 0; };
    switch (n.op) {
      case Op::Param:
      case Op::Const:
      case Op::SoftmaxCrossEntropy:
      case Op::CrossEntropy: return true;
#define GR_ONNX_ROWWISE(E, name, arity, cls, ...) GR_OP_IF_UNARY_##cls(case Op::E:) GR_OP_IF_BINARY_##cls(case Op::E:)
        GR_OP_TABLE(GR_ONNX_ROWWISE)
#undef GR_ONNX_ROWWISE
        return true;
#define GR_ONNX_ROWWISE_ROW(E, name, arity, cls, ...) GR_OP_IF_ROW_##cls(case Op::E:)
        GR_OP_TABLE(GR_ONNX_ROWWISE_ROW)  // over the last axis
#undef GR_ONNX_ROWWISE_ROW
        return in.rank() >= 2;
      case Op::Matmul:
      case Op::Bmm: return true;
#define GR_ONNX_ROWWISE_FOLD(E, name, arity, cls, attrs, stem, fwd, ...) GR_OP_IF_FOLD(cls, fwd, case Op::E:)
        GR_OP_TABLE(GR_ONNX_ROWWISE_FOLD)  // fold reductions (max, ...)
#undef GR_ONNX_ROWWISE_FOLD
      case Op::Sum:
      case Op::Mean: return n.axis.has_value() && !axis0(in);
      case Op::Dropout:
      case Op::Embedding:  // a row of ids in, the same row of vectors out
      case Op::BatchNorm: return true;  // inference: the running statistics, per element
#define GR_ONNX_ROWWISE_WIN(E, name, arity, cls, ...) GR_OP_IF_WINDOW_##cls(case Op::E:)
        GR_OP_TABLE(GR_ONNX_ROWWISE_WIN)  // window ops: each sample of the batch on its own
#undef GR_ONNX_ROWWISE_WIN
        return true;
      case Op::Softmax:
      case Op::LogSoftmax:
      case Op::Concat: return !axis0(in);
      case Op::Transpose: return in.rank() > 2;
      case Op::Reshape: return !n.shape.empty() && n.shape[0] == -1 && in[0] == p.batch && pn.shape[0] == p.batch;
      case Op::Slice: return !n.starts.empty() && n.starts[0] == 0 && n.stops[0] >= in[0];
    }
    return false;
  }

  void leaves(const Preprocessing& prep) {
    param_val.assign(p.params.size(), "");
    for (size_t i = 0; i < p.params.size(); ++i) {
      if (!needed_param[i]) continue;
      const Tensor& t = weight(static_cast<int>(i));
      param_val[i] = initializer_f(p.params[i].name, dims_of(p.params[i].shape), t.values());
    }
    const_val.assign(p.spec->consts.size(), "");
    for (size_t i = 0; i < p.spec->consts.size(); ++i) {
      if (!needed_const[i]) continue;
      const ConstSpec& c = p.spec->consts[i];
      const_val[i] = initializer_f(c.name, c.shape, c.values);
    }
    input_val.assign(p.input_names.size(), "");
    for (size_t i = 0; i < p.input_names.size(); ++i) {
      if (!needed_input[i]) continue;
      const std::string& name = p.input_names[i];
      const InputPrep* ip = prep.find(name);
      if (!ip)
        throw InputError(p.spec->path, "/data/inputs/" + name, "the saved preprocessing has no input \"" + name + "\"");
      const std::vector<int64_t> declared = declared_rows(i);  // "shape": flat columns in, reshaped last
      const Shape s = declared.empty() ? p.input_shapes[i] : Shape{p.input_shapes[i][0], p.input_shapes[i].numel() / p.input_shapes[i][0]};
      at_pointer = "/data/inputs/" + name;
      at_what = "input \"" + name + "\"";
      onnx::ValueInfoProto vi;
      vi.type = elem;
      vi.name = names.take(name);
      const onnx::Dim batch_dim = symbolic ? onnx::Dim{-1, "batch"} : onnx::Dim{s[0], ""};
      vi.dims.push_back(batch_dim);
      std::string v = vi.name;
      // The tabular transforms (spec/dataset.h): indicator, fill, encoding, indicator columns appended.
      const InputFit& f = ip->fit;
      const int64_t row_numel = s.numel() / std::max<int64_t>(s[0], 1);
      const int64_t raw_w = export_raw_width(*ip, row_numel);
      const bool single = f.categorical || f.has_threshold || !ip->one_hot_classes.empty();
      if (single) vi.dims.push_back({1, ""});  // one raw value per row: a class label, a category, a number to threshold
      else if (f.indicator) vi.dims.push_back({raw_w, ""});
      else
        for (int d = 1; d < s.rank(); ++d) vi.dims.push_back({s[d], ""});
      std::string mask;
      if (f.indicator) mask = emit("Cast", {emit("IsNaN", {v}, name + "_isnan")}, name + "_missing", {attr_int("to", static_cast<int64_t>(elem))});
      if (!f.fill.empty()) {
        const std::vector<double> fill = export_fill(f);
        std::vector<int64_t> fill_dims;
        if (single) fill_dims = {1};
        else if (f.indicator) fill_dims = {raw_w};
        else fill_dims.assign(s.dims().begin() + 1, s.dims().end());
        const std::string fb = initializer_f(name + "_fill", fill_dims, fill);
        v = emit("Where", {emit("IsNaN", {v}, name + "_is_missing"), fb, v}, name + "_filled");
      }
      if (f.categorical) {
        const std::vector<double> cats = export_category_values(f);
        const auto k = static_cast<int64_t>(cats.size());
        const std::string cb = initializer_f(name + "_categories", {k}, cats);
        const std::string eq = emit("Equal", {v, cb}, name + "_is_category");  // [batch, 1] vs [k] → [batch, k]
        v = emit("Cast", {eq}, name + "_one_hot", {attr_int("to", static_cast<int64_t>(elem))});
        if (f.ids)
          v = emit("Cast", {emit("ArgMax", {v}, name + "_argmax", {attr_int("axis", 1), attr_int("keepdims", 1)})}, name + "_id",
                   {attr_int("to", static_cast<int64_t>(elem))});
      } else if (f.has_threshold) {
        const std::string t = initializer_f(name + "_threshold", {}, std::span<const double>(&f.threshold, 1));
        v = emit("Cast", {emit("Greater", {v, t}, name + "_above")}, name + "_binary", {attr_int("to", static_cast<int64_t>(elem))});
      } else if (!ip->one_hot_classes.empty()) {
        const auto k = static_cast<int64_t>(ip->one_hot_classes.size());
        std::vector<double> classes(static_cast<size_t>(k));
        for (int64_t c = 0; c < k; ++c) classes[static_cast<size_t>(c)] = static_cast<double>(c);
        const std::string cls = initializer_f(name + "_classes", {k}, classes);
        const std::string eq = emit("Equal", {v, cls}, name + "_is_class");  // [batch, 1] vs [k] → [batch, k]
        v = emit("Cast", {eq}, name + "_one_hot", {attr_int("to", static_cast<int64_t>(elem))});
      }
      if (f.indicator) v = emit("Concat", {v, mask}, name + "_with_indicator", {attr_int("axis", 1)});
      g().inputs.push_back(vi);
      if (!ip->mean.empty()) {
        std::vector<int64_t> row(s.dims().begin() + 1, s.dims().end());
        if (row.empty()) row.push_back(1);
        const Shape rs{std::span<const int64_t>(row)};
        if (static_cast<int64_t>(ip->mean.size()) != rs.numel() || ip->std.size() != ip->mean.size())
          throw InputError(p.spec->path, "/data/inputs/" + name,
                           "the saved standardization has " + std::to_string(ip->mean.size()) +
                               " columns; the input's row " + rs.str() + " needs " + std::to_string(rs.numel()));
        const std::string m = initializer_f(name + "_mean", row, ip->mean);
        const std::string sd = initializer_f(name + "_std", row, ip->std);
        v = emit("Div", {emit("Sub", {v, m}, name + "_centered"), sd}, name + "_standardized");
      }
      if (!declared.empty()) {
        std::vector<int64_t> dims{-1};
        dims.insert(dims.end(), declared.begin(), declared.end());
        v = emit("Reshape", {v, ints(name + "_row_shape", dims)}, name + "_rows");
      }
      input_val[i] = v;
    }
  }

  std::string scalar(double v) { return initializer_f("scalar", {}, std::span<const double>(&v, 1)); }
  std::string ints(const std::string& wanted, std::vector<int64_t> v) {
    return initializer_i(wanted, {static_cast<int64_t>(v.size())}, v);
  }

  // The node's value; `out` is the wanted name of its result.
  std::string node(const ProgramNode& pn, const std::string& out) {
    const NodeSpec& n = *pn.spec;
    at_pointer = n.pointer;
    at_what = "node \"" + n.id + "\"";
    const std::string a = pn.inputs.empty() ? "" : ref(pn.inputs[0]);
    const std::string b = pn.inputs.size() > 1 ? ref(pn.inputs[1]) : "";
    switch (n.kind) {
      case NodeSpec::Kind::Mse: refuse(n, "(mse) is a loss; the exported model computes the prediction only");
      case NodeSpec::Kind::Dense: {
        const std::string act = n.activation;
        if (act != "relu" && act != "tanh" && act != "sigmoid" && act != "gelu" && act != "none")
          refuse(n, "has activation \"" + act + "\", which the export does not know");
        const std::string mm = emit("MatMul", {a, param_val[static_cast<size_t>(pn.weight)]}, out + "_matmul");
        const std::string z =
            emit("Add", {mm, param_val[static_cast<size_t>(pn.bias)]}, act == "none" ? out : out + "_linear");
        if (act == "relu") return emit("Relu", {z}, out);
        if (act == "tanh") return emit("Tanh", {z}, out);
        if (act == "sigmoid") return emit("Sigmoid", {z}, out);
        if (act == "gelu") return onnx_gelu(*this, z, out);
        return z;
      }
      case NodeSpec::Kind::Op: break;
    }
    const int64_t axis = n.axis.value_or(-1);
    switch (n.op) {
      case Op::Param:
      case Op::Const: refuse(n, "is a leaf op, never a graph node");
#define GR_ONNX_EW(E, name, arity, cls, ...) GR_OP_IF_UNARY_##cls(case Op::E:) GR_OP_IF_BINARY_##cls(case Op::E:)
        GR_OP_TABLE(GR_ONNX_EW)
#undef GR_ONNX_EW
        {  // elementwise rows: the ONNX operator of the same meaning; a scalar attribute becomes an initializer
          const std::string onnx(op_info(n.op).onnx);  // the row's ONNX column
          if (n.op == Op::Gelu) return onnx_gelu(*this, a, out);      // no GELU operator before opset 20
          if (onnx.empty()) refuse(n, "(" + std::string(op_name(n.op)) + ") has no opset-13 ONNX operator in the op table");
          if (op_info(n.op).attrs & kAttrScalar) return emit(onnx, {a, scalar(n.scalar)}, out);
          if (op_info(n.op).cls == OpClass::Binary) return emit(onnx, {a, b}, out);
          return emit(onnx, {a}, out);
        }
      case Op::Sum:
        if (n.axis)  // opset 13: ReduceSum takes its axes as an input
          return emit("ReduceSum", {a, ints("axes", {axis})}, out, {attr_int("keepdims", n.keepdims ? 1 : 0)});
        return emit("Reshape", {emit("ReduceSum", {a}, out + "_all", {attr_int("keepdims", 0)}), ints("shape", {1})}, out);
      case Op::Mean:
        if (n.axis) return emit("ReduceMean", {a}, out, {attr_ints("axes", {axis}), attr_int("keepdims", n.keepdims ? 1 : 0)});
        return emit("Reshape", {emit("ReduceMean", {a}, out + "_all", {attr_int("keepdims", 0)}), ints("shape", {1})},
                    out);
#define GR_ONNX_FOLD(E, name, arity, cls, attrs, stem, fwd, ...) GR_OP_IF_FOLD(cls, fwd, case Op::E:)
        GR_OP_TABLE(GR_ONNX_FOLD)
#undef GR_ONNX_FOLD
        {  // fold reductions (max, ...): the row's ONNX column, its axes an attribute (opset 13 ReduceMax/Min)
          const std::string onnx(op_info(n.op).onnx);
          if (onnx.empty()) refuse(n, "(" + std::string(op_name(n.op)) + ") has no opset-13 ONNX operator in the op table");
          if (n.axis) return emit(onnx, {a}, out, {attr_ints("axes", {axis}), attr_int("keepdims", n.keepdims ? 1 : 0)});
          return emit("Reshape", {emit(onnx, {a}, out + "_all", {attr_int("keepdims", 0)}), ints("shape", {1})}, out);
        }
      case Op::Matmul:
      case Op::Bmm: return emit("MatMul", {a, b}, out);
      case Op::Transpose: {
        const int rank = shape_of(pn.inputs[0]).rank();
        if (rank < 2) refuse(n, "transposes a tensor of rank " + std::to_string(rank));
        std::vector<int64_t> perm(static_cast<size_t>(rank));
        for (int d = 0; d < rank; ++d) perm[static_cast<size_t>(d)] = d;
        std::swap(perm[static_cast<size_t>(rank - 2)], perm[static_cast<size_t>(rank - 1)]);
        return emit("Transpose", {a}, out, {attr_ints("perm", perm)});
      }
      case Op::Reshape: return emit("Reshape", {a, ints("shape", n.shape)}, out);
      case Op::Slice: {
        std::vector<int64_t> axes(n.starts.size()), ends = n.stops;
        for (size_t d = 0; d < axes.size(); ++d) axes[d] = static_cast<int64_t>(d);
        // A slice keeping every row runs on any batch size.
        if (symbolic && !ends.empty() && n.starts[0] == 0 && ends[0] >= shape_of(pn.inputs[0])[0])
          ends[0] = std::numeric_limits<int64_t>::max();
        return emit("Slice", {a, ints("starts", n.starts), ints("ends", ends), ints("axes", axes)}, out);
      }
      case Op::Concat: return emit("Concat", {a, b}, out, {attr_int("axis", axis)});
      case Op::Softmax: {
        if (!n.causal) return emit("Softmax", {a}, out, {attr_int("axis", axis)});
        // causal: an initializer [Tq, Tk] of 0 (key <= query) and -inf (masked) added before Softmax,
        // so a masked score is -inf and its exp exactly 0 (the broadcast covers the leading axes).
        const Shape s = shape_of(pn.inputs[0]);
        const int64_t tq = s[s.rank() - 2], tk = s[s.rank() - 1];
        std::vector<double> mask(static_cast<size_t>(tq * tk), 0.0);
        for (int64_t q = 0; q < tq; ++q)
          for (int64_t k = q + 1; k < tk; ++k) mask[static_cast<size_t>(q * tk + k)] = -std::numeric_limits<double>::infinity();
        const std::string m = initializer_f(out + "_causal_mask", {tq, tk}, mask);
        return emit("Softmax", {emit("Add", {a, m}, out + "_masked")}, out, {attr_int("axis", -1)});
      }
      case Op::LogSoftmax: return emit("LogSoftmax", {a}, out, {attr_int("axis", axis)});
      case Op::SoftmaxCrossEntropy:
      case Op::CrossEntropy:
        refuse(n, "(" + std::string(op_name(n.op)) + ") is a loss; the exported model computes the prediction only");
#define GR_ONNX_ROW(E, name, arity, cls, ...) GR_OP_IF_ROW_##cls(case Op::E:)
        GR_OP_TABLE(GR_ONNX_ROW)
#undef GR_ONNX_ROW
        if (n.op == Op::LayerNorm) return onnx_layer_norm(*this, a, n.scalar, out);
        refuse(n, "(" + std::string(op_name(n.op)) + ") is a row op with no opset-13 ONNX operator (LayerNormalization and "
                  "RMSNormalization are opset 17 and 23)");
      case Op::Dropout: return emit("Identity", {a}, out);  // a prediction is inference: dropout is the identity
      case Op::Embedding:  // Gather(table, ids as int64) along axis 0: ids S → S + [D] (the ids arrive as reals)
        return emit("Gather", {b, emit("Cast", {a}, out + "_ids", {attr_int("to", static_cast<int64_t>(onnx::DataType::Int64))})}, out,
                    {attr_int("axis", 0)});
      case Op::BatchNorm: {  // inference mode: the running statistics as initializers, scale 1 and bias 0 (no affine)
        const int64_t C = p.params[static_cast<size_t>(pn.weight)].shape[0];
        const std::vector<double> ones(static_cast<size_t>(C), 1.0), zeros(static_cast<size_t>(C), 0.0);
        onnx::AttributeProto eps;
        eps.name = "epsilon";
        eps.kind = onnx::AttributeProto::Kind::Float;
        eps.f = static_cast<float>(n.scalar);
        return emit("BatchNormalization",
                    {a, initializer_f(n.id + ".scale", {C}, ones), initializer_f(n.id + ".bias", {C}, zeros),
                     param_val[static_cast<size_t>(pn.weight)], param_val[static_cast<size_t>(pn.bias)]},
                    out, {eps});
      }
#define GR_ONNX_WIN(E, name, arity, cls, ...) GR_OP_IF_WINDOW_##cls(case Op::E:)
        GR_OP_TABLE(GR_ONNX_WIN)
#undef GR_ONNX_WIN
        {  // Conv, MaxPool, AveragePool (count_include_pad = 1) with pads [top, left, bottom, right]
          const WindowGeometry g =
              window_geometry(n, shape_of(pn.inputs[0]), n.op == Op::Conv2d ? shape_of(pn.inputs[1]) : Shape{1});
          std::vector<onnx::AttributeProto> at{attr_ints("kernel_shape", {g.kh, g.kw}), attr_ints("strides", {g.sh, g.sw}),
                                               attr_ints("pads", {g.pt, g.pl, g.pb, g.pr})};
          if (n.op == Op::Conv2d) {
            at.push_back(attr_ints("dilations", {g.dh, g.dw}));
            at.push_back(attr_int("group", g.groups));
            return emit("Conv", {a, b}, out, at);
          }
          if (n.op == Op::MaxPool2d) return emit("MaxPool", {a}, out, at);
          at.push_back(attr_int("count_include_pad", 1));
          return emit("AveragePool", {a}, out, at);
        }
    }
    refuse(n, "has an op the export does not know");
  }
};

}  // namespace

OnnxExport export_onnx(const Program& program, const SafetensorsFile& weights, const Preprocessing& prep, int output,
                       const std::string& transform, DType real, const OutputUnits& units) {
  const Spec& spec = *program.spec;
  if (output < 0 || output >= static_cast<int>(program.nodes.size()))
    throw InputError(spec.path, spec.loss_pointer, "no prediction node to export");
  if (transform != "softmax" && transform != "sigmoid" && transform != "none" && !transform.empty())
    throw InputError(spec.path, "/predict/transform", "unknown transform \"" + transform + "\"");
  Builder b{{program, weights, {}, {}, {}, {}}, {}, {}, {}, {}, {}, {}, true, 0,
            real == DType::F64 ? onnx::DataType::Double : onnx::DataType::Float, {}, {}, {}, {}, {}};
  b.mark(output);
  const ProgramNode& out_node = program.nodes[static_cast<size_t>(output)];
  for (size_t i = 0; i < program.nodes.size(); ++i)
    if (b.needed_node[i] && !b.row_wise(program.nodes[i])) b.symbolic = false;
  if (transform == "softmax" && out_node.shape.rank() < 2) b.symbolic = false;
  if (out_node.shape.rank() == 0 || out_node.shape[0] != program.batch) b.symbolic = false;
  // The graph output is named after the prediction node: reserve that name first.
  const std::string out_name = b.names.take(out_node.spec->id);
  b.leaves(prep);
  b.node_val.assign(program.nodes.size(), "");
  const bool transformed = transform == "softmax" || transform == "sigmoid" || !units.empty();
  for (size_t i = 0; i < program.nodes.size(); ++i) {
    if (!b.needed_node[i]) continue;
    const ProgramNode& pn = program.nodes[i];
    if (static_cast<int>(i) == output && !transformed) {
      // The output value must carry the reserved name: build under a temporary name, then Identity.
      b.node_val[i] = b.node(pn, pn.spec->id + "_value");
      NodeProto id;
      id.op_type = "Identity";
      b.check_dtype(id.op_type);
      id.name = "Identity_" + std::to_string(b.counter++);
      id.inputs = {b.node_val[i]};
      id.outputs = {out_name};
      b.g().nodes.push_back(std::move(id));
    } else {
      b.node_val[i] = b.node(pn, pn.spec->id);
    }
  }
  if (!units.empty()) {  // a standardized target: y·std + mean, back in the data's units
    std::vector<int64_t> row(out_node.shape.dims().begin() + 1, out_node.shape.dims().end());
    if (row.empty()) row.push_back(1);
    if (static_cast<int64_t>(units.mean.size()) != Shape(std::span<const int64_t>(row)).numel() || units.std.size() != units.mean.size())
      throw InputError(spec.path, "/data/inputs/" + units.input,
                       "the saved target statistics have " + std::to_string(units.mean.size()) +
                           " columns; the prediction's row needs " + std::to_string(Shape(std::span<const int64_t>(row)).numel()));
    const std::string sd = b.initializer_f("y_std", row, units.std), m = b.initializer_f("y_mean", row, units.mean);
    const std::string scaled = b.emit("Mul", {b.node_val[static_cast<size_t>(output)], sd}, out_node.spec->id + "_scaled");
    NodeProto add;
    add.op_type = "Add";
    add.name = "Add_" + std::to_string(b.counter++);
    add.inputs = {scaled, m};
    add.outputs = {out_name};
    b.g().nodes.push_back(std::move(add));
  } else if (transformed) {
    NodeProto t;
    t.op_type = transform == "softmax" ? "Softmax" : "Sigmoid";
    b.at_pointer = out_node.spec->pointer;
    b.at_what = "the prediction's transform";
    b.check_dtype(t.op_type);
    t.name = t.op_type + "_" + std::to_string(b.counter++);
    t.inputs = {b.node_val[static_cast<size_t>(output)]};
    t.outputs = {out_name};
    if (transform == "softmax") t.attributes.push_back(attr_int("axis", -1));
    b.g().nodes.push_back(std::move(t));
  }
  onnx::ValueInfoProto vo;
  vo.type = b.elem;
  vo.name = out_name;
  for (int d = 0; d < out_node.shape.rank(); ++d)
    vo.dims.push_back(d == 0 && b.symbolic ? onnx::Dim{-1, "batch"} : onnx::Dim{out_node.shape[d], ""});
  b.g().outputs.push_back(vo);
  b.g().name = spec.name.empty() ? "gradrun" : spec.name;
  b.g().doc = "the forward graph of " + spec.path + " with its preprocessing; output " + out_name + " (transform " +
              (transform.empty() ? "none" : transform) + ")";
  b.model.producer_version = "0.1.0";
  b.model.metadata = {{"spec_sha256", spec.sha256}, {"prediction", out_name},
                      {"transform", transform.empty() ? "none" : transform}};
  if (!units.empty()) b.model.metadata.emplace_back("units", "data units of " + units.input);

  OnnxExport e;
  e.bytes = onnx::serialize(b.model);
  for (const onnx::ValueInfoProto& v : b.g().inputs) e.input_names.push_back(v.name);
  e.output_name = out_name;
  e.symbolic_batch = b.symbolic;
  e.real = real;
  e.warnings = b.warnings;
  e.batch = program.batch;
  e.nodes = b.g().nodes.size();
  e.initializers = b.g().initializers.size();
  return e;
}

void write_onnx_export(const OnnxExport& e, const std::string& path) {
  const std::filesystem::path parent = std::filesystem::path(path).parent_path();
  if (!parent.empty()) {
    std::error_code ec;
    std::filesystem::create_directories(parent, ec);
    if (ec) throw IoError(parent.string(), "cannot create the directory: " + ec.message());
  }
  write_file_atomic(path, e.bytes);
}

}  // namespace gr
