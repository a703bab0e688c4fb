#include "spec/program.h"

#include <algorithm>
#include <cstdio>

#include "io/errors.h"
#include "spec/tensor_file.h"

namespace gr {

namespace {

Var leaf_var(const Ref& r, const std::vector<Var>& inputs, const std::vector<Var>& params,
             const std::vector<Var>& consts, const std::vector<Var>& nodes) {
  switch (r.kind) {
    case Ref::Kind::Input: return inputs[r.index];
    case Ref::Kind::Param: return params[r.index];
    case Ref::Kind::Const: return consts[r.index];
    case Ref::Kind::Node: return nodes[r.index];
  }
  return Var{};
}

Var record_node(Tape& t, const ProgramNode& pn, std::span<const Var> in, const std::vector<Var>& params) {
  const NodeSpec& n = *pn.spec;
  switch (n.kind) {
    case NodeSpec::Kind::Mse: return t.mse(in[0], in[1]);
    case NodeSpec::Kind::Dense: {
      const Var z = t.add(t.matmul(in[0], params[pn.weight]), params[pn.bias]);
      Var y = z;
      if (n.activation == "relu") y = t.relu(z);
      if (n.activation == "tanh") y = t.tanh(z);
      if (n.activation == "sigmoid") y = t.sigmoid(z);
      if (n.activation == "gelu") y = t.unary_op(Op::Gelu, z);
      return n.scalar > 0.0 ? t.dropout(y, n.scalar) : y;
    }
    case NodeSpec::Kind::Op: break;
  }
  const Var a = in.empty() ? Var{} : in[0];
  const Var b = in.size() > 1 ? in[1] : Var{};
  switch (n.op) {
    case Op::Param:
    case Op::Const: return Var{};  // the parser never makes a leaf a graph node
#define GR_RECORD_EW(E, name, arity, cls, attrs, stem, fwd, ...)     \
  GR_OP_IF_UNARY_##cls(case Op::E: return t.unary_op(Op::E, a, n.scalar);) \
  GR_OP_IF_BINARY_##cls(case Op::E: return t.binary_op(Op::E, a, b);) \
  GR_OP_IF_ROW_##cls(case Op::E: return t.row_op(Op::E, a, n.scalar);) \
  GR_OP_IF_FOLD(cls, fwd, case Op::E: return n.axis ? t.fold_op(Op::E, a, *n.axis, n.keepdims) : t.fold_op(Op::E, a);) \
  GR_OP_IF_BATCH_##cls(case Op::E: return t.batch_op(Op::E, a, params[pn.weight], params[pn.bias], n.scalar, n.momentum);) \
  GR_OP_IF_WINDOW_##cls(case Op::E: return t.window_op(Op::E, a, b, n.window);)
    GR_OP_TABLE(GR_RECORD_EW)
#undef GR_RECORD_EW
    case Op::Sum: return n.axis ? t.sum(a, *n.axis, n.keepdims) : t.sum(a);
    case Op::Mean: return n.axis ? t.mean(a, *n.axis, n.keepdims) : t.mean(a);
    case Op::Matmul: return t.matmul(a, b);
    case Op::Bmm: return t.bmm(a, b);
    case Op::Transpose: return t.transpose(a);
    case Op::Reshape: return t.reshape(a, n.shape);
    case Op::Slice: return t.slice(a, n.starts, n.stops);
    case Op::Concat: return t.concat(a, b, *n.axis);
    case Op::Softmax: return t.softmax(a, n.axis.value_or(-1), n.causal);
    case Op::LogSoftmax: return t.log_softmax(a, n.axis.value_or(-1));
    case Op::SoftmaxCrossEntropy: return t.softmax_cross_entropy(a, b);
    case Op::CrossEntropy: return t.cross_entropy(a, b);
    case Op::Dropout: return t.dropout(a, n.scalar);
    case Op::Embedding: return t.embedding(a, b);
  }
  return Var{};
}

// The shapes a loss needs, checked when the spec is resolved (before any training), so that a
// mistake that broadcasting would hide (a [B,2] prediction against a [B,1] target, logits [B,1]
// against labels [B]) or a loss that cannot change (softmax over one column) is one located line
// naming both shapes. Ordinary arithmetic keeps broadcasting.
void check_loss_shapes(const Spec& spec, const NodeSpec& n, const Shape& a, const Shape& b) {
  const auto both = [&] { return a.str() + " and " + b.str(); };
  const bool mse = n.kind == NodeSpec::Kind::Mse;
  if (mse || (n.kind == NodeSpec::Kind::Op && n.op == Op::BceWithLogits)) {
    // A single-element side is one number for every element: that broadcast cannot be a mistake.
    if (a == b || a.numel() == 1 || b.numel() == 1) return;
    throw InputError(spec.path, n.pointer,
                     std::string(mse ? "mse needs a prediction and a target" : "bce_with_logits needs logits and targets") +
                         " of the same shape, got " + both() + " (they would broadcast" +
                         (a.rank() >= 1 && b.rank() >= 1 ? " to another shape" : "") + "); reshape one of them");
  }
  // The ops whose Shape rule is Loss: logits [N, C] and targets or class ids (kernels/gr_op_table.h).
  if (n.kind != NodeSpec::Kind::Op || op_info(n.op).shape != ShapeRule::Loss) return;
  if (a.rank() == 2 && a[1] == 1)
    throw InputError(spec.path, n.pointer,
                     std::string(op_name(n.op)) + " over logits with one column is always 0 (softmax of one value is 1), got " +
                         both() + "; for a binary classifier with one logit use bce_with_logits, or give the logits 2 columns");
}

}  // namespace

void record_program(Tape& t, const Program& p, const std::vector<Var>& inputs, const std::vector<Var>& params,
                    const std::vector<Var>& consts, std::vector<Var>& nodes) {
  nodes.clear();
  Var in[2];
  for (const ProgramNode& pn : p.nodes) {
    for (size_t i = 0; i < pn.inputs.size(); ++i) in[i] = leaf_var(pn.inputs[i], inputs, params, consts, nodes);
    nodes.push_back(record_node(t, pn, std::span<const Var>(in, pn.inputs.size()), params));
  }
}

namespace {

// The shape of a lowered layer's parameter from its node's first input x (spec.h, LayerParamSpec).
Shape layer_param_shape(const Spec& spec, const NodeSpec& n, const LayerParamSpec& lp, const Shape& x) {
  const std::string layer = "a " + n.layer + " layer (\"" + n.layer_id + "\")";
  using R = LayerParamSpec::Role;
  if (lp.role == R::ConvWeight || lp.role == R::ConvBias) {
    if (x.rank() != 4) throw InputError(spec.path, n.pointer, layer + " needs an [N, C, H, W] input, got " + x.str());
    if (lp.role == R::ConvBias) return Shape{lp.filters, 1, 1};
    if (x[1] % lp.groups)
      throw InputError(spec.path, n.pointer,
                       layer + ": the input's " + std::to_string(x[1]) + " channels are not divisible by groups " + std::to_string(lp.groups));
    return Shape{lp.filters, x[1] / lp.groups, lp.kh, lp.kw};
  }
  if (x.rank() == 4) return Shape{x[1], 1, 1};
  if (x.rank() == 2) return Shape{x[1]};
  throw InputError(spec.path, n.pointer, layer + " needs an [N, C, H, W] or [N, C] input, got " + x.str());
}

}  // namespace

namespace {

// resolve_program's work; `current` is the graph node being resolved (null outside the node loop).
Program resolve_nodes(const Spec& spec, const DataTable& train, const NodeSpec*& current) {
  Program p;
  p.spec = &spec;
  if (!spec.data && spec.train.shards > 1)
    throw InputError(spec.path, "/train/shards", "shards split the data rows of a step, and this spec has no data");
  if (spec.data) {
    p.batch = spec.train.batch_size / spec.train.shards;  // the graph sees one shard (docs/distributed.md)
    p.shards = spec.train.shards;
    if (spec.train.batch_size > train.rows)
      throw InputError(spec.path, "/train/batch_size",
                       "batch size " + std::to_string(spec.train.batch_size) + " is larger than the " + std::to_string(train.rows) +
                           " training rows");
    for (size_t i = 0; i < train.names.size(); ++i) {
      std::vector<int64_t> dims(train.tensors[i].shape().dims().begin(), train.tensors[i].shape().dims().end());
      dims[0] = p.batch;
      p.input_names.push_back(train.names[i]);
      p.input_shapes.emplace_back(std::span<const int64_t>(dims));
      p.names[train.names[i]] = {Ref::Kind::Input, static_cast<int>(i)};
    }
  }
  for (const ParamSpec& ps : spec.params) {
    const Shape shape{std::span<const int64_t>(ps.shape)};
    check_file_init(spec, ps.init, shape, ps.name);
    if (ps.init.kind == InitSpec::Kind::Values && static_cast<int64_t>(ps.init.values.size()) != shape.numel())
      throw InputError(spec.path, ps.pointer + "/init/values",
                       "shape " + shape.str() + " needs " + std::to_string(shape.numel()) + " values, got " +
                           std::to_string(ps.init.values.size()));
    p.names[ps.name] = {Ref::Kind::Param, static_cast<int>(p.params.size())};
    p.params.push_back({ps.name, ps.pointer, shape, ps.init, 0.0, false, ps.trainable});
  }
  for (size_t i = 0; i < spec.consts.size(); ++i) p.names[spec.consts[i].name] = {Ref::Kind::Const, static_cast<int>(i)};

  // Shape inference: record every node on a tape whose leaves are lazy (shape only, no values).
  Tape t;
  std::vector<Var> inputs, params, consts, nodes;
  for (const Shape& s : p.input_shapes) inputs.push_back(t.constant_lazy(s));
  for (const ProgramParam& pp : p.params) params.push_back(t.constant_lazy(pp.shape));
  for (const ConstSpec& c : spec.consts) consts.push_back(t.constant_lazy(Shape(std::span<const int64_t>(c.shape))));
  for (const NodeSpec& n : spec.graph) {
    current = &n;
    ProgramNode pn{&n, {}, -1, -1, Shape{1}, false, n.kind == NodeSpec::Kind::Dense && n.trainable};
    for (const std::string& name : n.inputs) {
      if (!n.layer_params.empty() && !p.names.count(name)) continue;  // the layer's own parameters: created below
      const Ref r = p.names.at(name);
      pn.inputs.push_back(r);
      pn.requires_grad = pn.requires_grad || (r.kind == Ref::Kind::Param && p.params[r.index].trainable) ||
                         (r.kind == Ref::Kind::Node && p.nodes[r.index].requires_grad);
    }
    if (!n.layer_params.empty() || (!n.layer.empty() && n.op == Op::Reshape)) {  // a lowered layer (spec_layers.cpp)
      const Ref r = p.names.at(n.inputs[0]);
      const Var x = r.kind == Ref::Kind::Node ? nodes[r.index]
                    : r.kind == Ref::Kind::Input ? inputs[r.index]
                    : r.kind == Ref::Kind::Param ? params[r.index]
                                                 : consts[r.index];
      const Shape xs = t.node(x).shape;
      if (n.op == Op::Reshape) {  // flatten: [N, -1] as [-1, C·H·W], so any batch size runs
        if (xs.rank() < 2) throw InputError(spec.path, n.pointer, "a flatten layer needs an [N, ...] input, got " + xs.str());
        auto flat = std::make_shared<NodeSpec>(n);
        flat->shape = {-1, xs.numel() / xs[0]};
        pn.spec = flat.get();
        p.resolved_specs.push_back(std::move(flat));
      }
      for (const LayerParamSpec& lp : n.layer_params) {
        const Shape shape = layer_param_shape(spec, n, lp, xs);
        InitSpec init = lp.init;
        if (lp.role == LayerParamSpec::Role::ConvWeight) init.fan_in = shape.numel() / shape[0], init.fan_out = lp.filters * lp.kh * lp.kw;
        check_file_init(spec, init, shape, lp.name);
        const int index = static_cast<int>(p.params.size());
        p.params.push_back({lp.name, n.pointer, shape, init, 0.0, lp.role != LayerParamSpec::Role::ConvWeight, lp.trainable, false,
                            lp.torch_name});
        params.push_back(t.constant_lazy(shape));
        p.names[lp.name] = {Ref::Kind::Param, index};
        pn.layer_params.push_back(index);
      }
      pn.inputs.clear();
      pn.requires_grad = false;
      for (const std::string& name : n.inputs) {
        const Ref ri = p.names.at(name);
        pn.inputs.push_back(ri);
        pn.requires_grad = pn.requires_grad || (ri.kind == Ref::Kind::Param && p.params[ri.index].trainable) ||
                           (ri.kind == Ref::Kind::Node && p.nodes[ri.index].requires_grad);
      }
    }
    if (n.kind == NodeSpec::Kind::Dense) {
      const Ref r = pn.inputs[0];
      const Var x = r.kind == Ref::Kind::Node ? nodes[r.index]
                    : r.kind == Ref::Kind::Input ? inputs[r.index]
                    : r.kind == Ref::Kind::Param ? params[r.index]
                                                 : consts[r.index];
      const Shape& xs = t.node(x).shape;
      // [B, in], or [..., in] as nn.Linear: matmul's batched left input (a sequence [N, T, in]).
      if (xs.rank() < 2)
        throw InputError(spec.path, n.pointer, "a dense layer needs a [B, in] or [B, ..., in] input, got " + xs.str());
      pn.weight = static_cast<int>(p.params.size());
      p.params.push_back({n.id + ".W", n.pointer, Shape{xs[xs.rank() - 1], n.units}, n.w_init, 0.0, false, n.trainable});
      pn.bias = static_cast<int>(p.params.size());
      p.params.push_back({n.id + ".b", n.pointer, Shape{n.units}, n.b_init, 0.0, true, n.trainable});
      check_file_init(spec, n.w_init, p.params[pn.weight].shape, n.id + ".W");
      check_file_init(spec, n.b_init, p.params[pn.bias].shape, n.id + ".b");
      params.push_back(t.constant_lazy(p.params[pn.weight].shape));
      params.push_back(t.constant_lazy(p.params[pn.bias].shape));
      p.names[n.id + ".W"] = {Ref::Kind::Param, pn.weight};
      p.names[n.id + ".b"] = {Ref::Kind::Param, pn.bias};
    }
    if (n.kind == NodeSpec::Kind::Op && op_info(n.op).batch()) {
      // The running statistics: two non-trainable state leaves [C], as PyTorch's buffers (init 0 and 1).
      if (p.shards > 1)
        throw InputError(spec.path, n.pointer,
                         std::string(op_name(n.op)) + "'s batch statistics are over the whole batch; train.shards " +
                             std::to_string(p.shards) + " would split it (set train.shards to 1)");
      const Ref r = pn.inputs[0];
      const Var x = leaf_var(r, inputs, params, consts, nodes);
      const Shape& xs = t.node(x).shape;
      if (xs.rank() != 2 && xs.rank() != 4)
        throw InputError(spec.path, n.pointer, std::string(op_name(n.op)) + " needs x [N,C] or [N,C,H,W], got " + xs.str());
      if (xs.numel() / xs[1] < 2)
        throw InputError(spec.path, n.pointer,
                         std::string(op_name(n.op)) + " needs more than one value per channel in a training batch, got x " + xs.str());
      const Shape cs{xs[1]};
      const char* names[2] = {".running_mean", ".running_var"};
      // A batch_norm layer's statistics carry the layer's id (its node is ID.norm), as nn.BatchNorm2d
      // names its buffers beside its weight and bias: ID.running_mean, the state_dict key too.
      const std::string owner = n.layer == "batch_norm" && !n.layer_id.empty() ? n.layer_id : n.id;
      for (int k = 0; k < 2; ++k) {
        const int idx = static_cast<int>(p.params.size());
        InitSpec init;
        init.kind = k == 0 ? InitSpec::Kind::Zeros : InitSpec::Kind::Ones;
        ProgramParam sp{owner + names[k], n.pointer, cs, init, 0.0, false, false};
        sp.state = true;
        sp.torch_name = sp.name;
        p.params.push_back(sp);
        params.push_back(t.constant_lazy(cs));
        p.names[owner + names[k]] = {Ref::Kind::Param, idx};
        (k == 0 ? pn.weight : pn.bias) = idx;
      }
    }
    std::vector<Var> in;
    for (const Ref& r : pn.inputs) in.push_back(leaf_var(r, inputs, params, consts, nodes));
    if (in.size() == 2) check_loss_shapes(spec, n, t.node(in[0]).shape, t.node(in[1]).shape);
    if (n.conv_bias) {  // a conv2d's bias (spec_graph.cpp lower_conv_bias): one value per filter
      const Shape& bs = t.node(in[0]).shape;
      const Shape& cs = t.node(nodes.back()).shape;  // the conv2d, recorded just before
      if (bs.rank() != 1 || bs[0] != cs[1])
        throw InputError(spec.path, n.pointer, "a conv2d bias needs one value per filter, [" + std::to_string(cs[1]) + "], got " + bs.str());
    }
    if (n.kind == NodeSpec::Kind::Op && n.op == Op::Embedding && !pn.inputs.empty() &&
        pn.inputs[0].kind != Ref::Kind::Input && pn.inputs[0].kind != Ref::Kind::Const) {
      // Integer ids come from the data (checked when loaded: check_class_ids) or a const; a computed
      // or trained value is not an id and would get no gradient.
      const bool param = pn.inputs[0].kind == Ref::Kind::Param;
      throw InputError(spec.path, n.pointer + "/inputs/0",
                       "embedding's ids \"" + n.inputs[0] + "\" are " + (param ? "a parameter" : "a computed node") +
                           "; they must be integer ids from a data input or a const (the table, the second input, is what trains)");
    }
    const Var v = record_node(t, pn, in, params);
    if (!t.ok())
      throw InputError(spec.path, n.pointer, (n.layer.empty() ? "" : n.layer + " layer \"" + n.layer_id + "\": ") + t.error());
    pn.shape = t.node(v).shape;
    p.names[n.id] = {Ref::Kind::Node, static_cast<int>(p.nodes.size())};
    nodes.push_back(v);
    p.nodes.push_back(pn);
  }
  current = nullptr;
  // A block node's id names its last instance's output (spec_blocks.cpp).
  for (const auto& [alias, target] : spec.aliases) p.names[alias] = p.names.at(resolve_alias(spec, target));

  p.loss = p.names.at(spec.loss).index;
  const Shape& ls = p.nodes[p.loss].shape;
  if (ls.numel() != 1)
    throw InputError(spec.path, spec.loss_pointer,
                     "loss \"" + spec.loss + "\" has shape " + ls.str() + "; a loss must hold exactly one element");
  // Which nodes the loss depends on (for inspect): walk inputs back from the loss.
  p.nodes[p.loss].reaches_loss = true;
  for (int i = p.loss; i >= 0; --i)
    if (p.nodes[i].reaches_loss)
      for (const Ref& r : p.nodes[i].inputs)
        if (r.kind == Ref::Kind::Node) p.nodes[r.index].reaches_loss = true;

  // L2 coefficients: the scalar for every parameter but dense-layer biases (what users of Keras and
  // PyTorch weight decay expect), then per-name overrides, which can set any parameter.
  for (ProgramParam& pp : p.params) pp.l2 = pp.dense_bias || !pp.trainable ? 0.0 : spec.optimizer.l2_default;
  for (const auto& [name, alpha] : spec.optimizer.l2) {
    auto it = p.names.find(name);
    if (it == p.names.end() || it->second.kind != Ref::Kind::Param) {
      std::string known;
      for (const ProgramParam& pp : p.params) known += (known.empty() ? "" : ", ") + pp.name;
      throw InputError(spec.path, "/optimizer/l2/" + name, "\"" + name + "\" is not a parameter (parameters: " + known + ")");
    }
    ProgramParam& pp = p.params[it->second.index];
    if (!pp.trainable && alpha != 0.0)  // the optimizer never sees a frozen parameter
      throw InputError(spec.path, "/optimizer/l2/" + name,
                       "\"" + name + "\" is frozen (\"trainable\": false), so an L2 penalty cannot change it; remove it "
                       "here or make the parameter trainable");
    pp.l2 = alpha;
  }

  if (spec.metrics.accuracy) {
    const Ref lo = p.names.at(spec.metrics.logits), la = p.names.at(spec.metrics.labels);
    if (lo.kind != Ref::Kind::Node)
      throw InputError(spec.path, "/metrics/accuracy/logits", "\"" + spec.metrics.logits + "\" is not a graph node");
    if (la.kind != Ref::Kind::Input)
      throw InputError(spec.path, "/metrics/accuracy/labels", "\"" + spec.metrics.labels + "\" is not a data input");
    const Shape &sl = p.nodes[lo.index].shape, &sy = p.input_shapes[la.index];
    // Labels are one-hot rows like the logits, or one class id per row ([B] or [B, 1]); one logit
    // per row ([B, 1]) is a binary classifier: class 1 ⇔ logit > 0, labels 0/1 as [B] or [B, 1].
    const bool one_per_row = sy.rank() >= 1 && sy[0] == sl[0] && (sy.rank() == 1 || (sy.rank() == 2 && sy[1] == 1));
    p.metric_binary = sl.rank() == 2 && sl[1] == 1 && one_per_row;
    p.metric_label_ids = sl.rank() == 2 && sl[1] > 1 && one_per_row;
    if (sl.rank() != 2 || (!(sl == sy) && !p.metric_label_ids && !p.metric_binary))
      throw InputError(spec.path, "/metrics/accuracy",
                       "accuracy needs logits [B, C] and one-hot labels of the same shape or class ids [B] / [B, 1] (or one "
                       "logit [B, 1] and 0/1 labels [B] / [B, 1]), got " +
                           sl.str() + " and " + sy.str());
    if (p.metric_binary) {  // one column of probabilities is always > 0: the threshold would be meaningless
      const NodeSpec& ln = *p.nodes[lo.index].spec;
      const bool squashed = (ln.kind == NodeSpec::Kind::Op && (ln.op == Op::Sigmoid || ln.op == Op::Softmax)) ||
                            (ln.kind == NodeSpec::Kind::Dense && ln.activation == "sigmoid");
      if (squashed)
        throw InputError(spec.path, "/metrics/accuracy/logits",
                         "binary accuracy reads one logit per row (class 1 ⇔ logit > 0), but \"" + spec.metrics.logits +
                             "\" is a probability (its " + (ln.kind == NodeSpec::Kind::Dense ? "activation" : "op") +
                             " is " + (ln.kind == NodeSpec::Kind::Dense ? ln.activation : std::string(op_name(ln.op))) +
                             "); name the node before it");
    }
    p.metric_logits = lo.index;
    p.metric_labels = la.index;
  }
  return p;
}

}  // namespace

Program resolve_program(const Spec& spec, const DataTable& train) {
  const NodeSpec* current = nullptr;
  try {
    return resolve_nodes(spec, train, current);
  } catch (const InputError& e) {
    if (!current || current->instance.empty()) throw;
    // A node of a block instance: its pointer is inside the block's JSON, shared by every instance.
    throw InputError(e.file(), e.place() + " (in " + current->instance + ")",
                     std::string(e.what()).substr(located(e.file(), e.place(), "").size()));
  }
}

namespace {
std::string number_text(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.17g", v);
  return buf;
}
}  // namespace

namespace {
// An embedding's data ids: integers in [0, V), V the table's rows; the error names the data file,
// the row and the column within it (ids [B, T]: row b, column t).
void check_node_token_ids(const Program& p, const ProgramNode& pn, const DataTable& table, const std::string& whose) {
  const Ref ids = pn.inputs[0], tab = pn.inputs[1];
  if (ids.kind != Ref::Kind::Input || static_cast<size_t>(ids.index) >= table.tensors.size()) return;
  Shape st;
  if (tab.kind == Ref::Kind::Node) st = p.nodes[static_cast<size_t>(tab.index)].shape;
  else if (tab.kind == Ref::Kind::Input) st = p.input_shapes[static_cast<size_t>(tab.index)];
  else if (tab.kind == Ref::Kind::Param) st = p.params[static_cast<size_t>(tab.index)].shape;
  if (st.rank() != 2) return;  // a const's table: the recording checked the shapes already
  const int64_t V = st[0];
  const Tensor& t = table.tensors[static_cast<size_t>(ids.index)];
  const std::string& name = p.input_names[static_cast<size_t>(ids.index)];
  std::string file;  // the spec's data file, when the rows are its split (predict/evaluate name their own file)
  if (p.spec->data && !table.source_rows.empty())
    for (const auto& [key, path] : p.spec->data->files)
      if (key.empty() || key == name) file = path;
  // The file's row of table row r (the training and validation rows are a split of the file's).
  const auto source_row = [&](int64_t r) {
    return static_cast<size_t>(r) < table.source_rows.size() ? table.source_rows[static_cast<size_t>(r)] : r;
  };
  const int64_t cols = t.shape().rank() >= 1 && t.shape()[0] > 0 ? t.numel() / t.shape()[0] : 1;
  // Text data's ids are the vocabulary's: the usual cause is a table sized for another text.
  const std::string text_hint = p.spec->data && p.spec->data->source == DataSpec::Source::Text
                                    ? "; the text has more distinct tokens than that: `gradrun inspect` shows how many, size "
                                      "the table and the logits to match"
                                    : "";
  for (int64_t e = 0; e < t.numel(); ++e) {
    const double v = t.data()[e];
    if (v >= 0.0 && v < static_cast<double>(V) && v == static_cast<double>(static_cast<int64_t>(v))) continue;
    throw InputError(p.spec->path, pn.spec->pointer + "/inputs/0",
                     "row " + std::to_string(source_row(e / cols)) + ", column " + std::to_string(e % cols) + " of " +
                         (file.empty() ? whose : file + " (" + whose + ")") + " has id " + number_text(v) + " in \"" + name +
                         "\", not an integer in [0, " + std::to_string(V) + ") (embedding's table has " + std::to_string(V) +
                         " rows" + text_hint + ")");
  }
}
}  // namespace

void check_token_ids(const Program& p, const DataTable& table, const std::string& whose) {
  for (const ProgramNode& pn : p.nodes)
    if (pn.spec->kind == NodeSpec::Kind::Op && pn.spec->op == Op::Embedding) check_node_token_ids(p, pn, table, whose);
}

void check_class_ids(const Program& p, const DataTable& table, const std::string& whose) {
  // A binary accuracy's labels: 0 or 1 (any other value would count as neither class).
  if (p.metric_binary && static_cast<size_t>(p.metric_labels) < table.tensors.size()) {
    const Tensor& t = table.tensors[static_cast<size_t>(p.metric_labels)];
    for (int64_t e = 0; e < t.numel(); ++e) {
      const double v = t.data()[e];
      if (v == 0.0 || v == 1.0) continue;
      throw InputError(p.spec->path, "/metrics/accuracy/labels",
                       "row " + std::to_string(e) + " of " + whose + " has label " + number_text(v) + " in \"" +
                           p.input_names[static_cast<size_t>(p.metric_labels)] +
                           "\", not 0 or 1 (a one-logit classifier's labels are 0/1; for more classes give the logits one "
                           "column per class)");
    }
  }
  for (const ProgramNode& pn : p.nodes) {
    if (pn.spec->kind == NodeSpec::Kind::Op && pn.spec->op == Op::Embedding) check_node_token_ids(p, pn, table, whose);
    if (pn.spec->kind != NodeSpec::Kind::Op || pn.spec->op != Op::CrossEntropy) continue;
    const Ref ids = pn.inputs[1], logits = pn.inputs[0];
    if (ids.kind != Ref::Kind::Input || static_cast<size_t>(ids.index) >= table.tensors.size()) continue;
    Shape sx;
    if (logits.kind == Ref::Kind::Node) sx = p.nodes[static_cast<size_t>(logits.index)].shape;
    else if (logits.kind == Ref::Kind::Input) sx = p.input_shapes[static_cast<size_t>(logits.index)];
    else if (logits.kind == Ref::Kind::Param) sx = p.params[static_cast<size_t>(logits.index)].shape;
    if (sx.rank() != 2 && sx.rank() != 3) continue;  // a const's logits: the recording checked the shapes already
    const int64_t C = sx[sx.rank() - 1];  // [N,C] or [N,T,C] (ids [N,T])
    const Tensor& t = table.tensors[static_cast<size_t>(ids.index)];
    for (int64_t e = 0; e < t.numel(); ++e) {
      const double v = t.data()[e];
      if (v >= 0.0 && v < static_cast<double>(C) && v == static_cast<double>(static_cast<int64_t>(v))) continue;
      throw InputError(p.spec->path, pn.spec->pointer + "/inputs/1",
                       "row " + std::to_string(e) + " of " + whose + " has class id " + number_text(v) + " in \"" +
                           p.input_names[static_cast<size_t>(ids.index)] + "\", not an integer in [0, " + std::to_string(C) +
                           ") (cross_entropy takes class ids; one-hot rows go to softmax_cross_entropy)");
    }
  }
}

}  // namespace gr
