// gradrun inspect SPEC — the resolved graph: shapes, what backward reaches, parameter counts, each
// node's tape ids and where the fusion plan puts it, and the plan.
#include <algorithm>
#include <cstdio>
#include <memory>
#include <optional>

#include "cli.h"
#include "io/limits.h"
#include "train/sharded_step.h"
#include "device/backend.h"
#include "fuse/fuse.h"
#include "spec/program.h"
#include "train/model.h"
#include "train/trainer.h"

namespace gr::cli {

namespace {

// Where the fusion plan puts a graph node: its tape nodes (ids lo..hi; a dense layer records 2-4, mse
// several) are each in a row segment, a serial segment, a row segment's backward head (forward
// per-node, backward inside the row kernel) or left per-node. The column says which, so it and
// the row-fusible count are read off the plan that inspect prints, not guessed from op classes.
struct Placement {
  int32_t lo = 0, hi = -1;  // its computing tape nodes' ids; lo > hi: it recorded nothing of its own
  std::string fusion = "-";
  bool row = false;  // every computing tape node of it is in a row segment
  bool part = false; // some are
  bool head = false; // all are row segments' backward heads
};

std::vector<Placement> place(const Program& p, const Tape& tape, const std::vector<Var>& nodes, const fuse::Plan* plan) {
  enum Where { PerNode, Row, Head, Serial };
  std::vector<Where> where(static_cast<size_t>(tape.size()), PerNode);
  if (plan)
    for (const fuse::Segment& seg : plan->segments) {
      for (int32_t k : seg.nodes) where[static_cast<size_t>(k)] = seg.kind == fuse::SegKind::Row ? Row : Serial;
      if (seg.head >= 0) where[static_cast<size_t>(seg.head)] = Head;
    }
  static const char* const kName[] = {"per-node", "row", "head", "serial"};
  std::vector<Placement> out(p.nodes.size());
  int32_t prev = -1;  // the program records its nodes in order: node i's tape nodes follow node i-1's
  for (size_t i = 0; i < p.nodes.size() && i < nodes.size(); ++i) {
    Placement& pl = out[i];
    const int32_t from = prev + 1, to = nodes[i].id;
    prev = std::max(prev, to);
    int counts[4] = {}, computing = 0;
    for (int32_t k = from; k <= to; ++k) {
      const Op op = tape.node(k).op;
      if (op == Op::Param || op == Op::Const) continue;  // leaves (the parameters, inputs, consts) compute nothing
      ++counts[where[static_cast<size_t>(k)]];
      if (computing++ == 0) pl.lo = k;
      pl.hi = k;
    }
    if (computing == 0) continue;
    pl.row = counts[Row] == computing;
    pl.part = counts[Row] > 0 && !pl.row;
    pl.head = counts[Head] == computing;
    for (int w = 0; w < 4; ++w)
      if (counts[w] == computing) pl.fusion = w == PerNode ? "-" : kName[w];
    if (pl.row && p.nodes[i].spec->kind == NodeSpec::Kind::Op) {  // the row class, as the planner reads it
      const FusionClass c = op_info(p.nodes[i].spec->op).fusion;
      if (c == FusionClass::Matmul) pl.fusion = "row(matmul)";
      if (c == FusionClass::Lane) pl.fusion = "row(lane)";
    }
    if (pl.fusion == "-" && counts[PerNode] != computing) {  // mixed: "row 3/4, per-node 1/4"
      pl.fusion.clear();
      for (int w : {Row, Head, Serial, PerNode})
        if (counts[w] > 0)
          pl.fusion += (pl.fusion.empty() ? "" : ", ") + std::string(kName[w]) + " " + std::to_string(counts[w]) + "/" +
                       std::to_string(computing);
    }
  }
  return out;
}

// train.shards: the shard layout and what one step moves per process for each process count R
// dividing S (lib/train/sharded_step.h; docs/distributed.md).
void print_shards(const Program& p, int64_t trainable) {
  std::printf("shards: %lld of %lld rows per step; run with mpirun -np R, R dividing %lld. Per step, rank 0 moves:\n",
              static_cast<long long>(p.shards), static_cast<long long>(p.batch), static_cast<long long>(p.shards));
  for (int64_t R = 1; R <= p.shards; ++R) {
    if (p.shards % R != 0) continue;
    const ShardTraffic t = shard_traffic(trainable, p.shards, R);
    std::printf("  R=%-4lld sends %12lld bytes, receives %12lld bytes\n", static_cast<long long>(R),
                static_cast<long long>(8 * t.send_doubles), static_cast<long long>(8 * t.recv_doubles));
  }
}

// One line per graph node as the spec writes it (a layer lowered into several op nodes is one line):
// its output shape at the training batch and the parameters it owns — a layer's own, and the
// "params" an op node reads first.
void print_layers(const Program& p) {
  std::printf("layers:\n  %-16s %-22s %-18s %s\n", "id", "layer", "output", "params");
  std::vector<bool> counted(p.params.size(), false);
  int64_t total = 0;
  for (size_t i = 0; i < p.nodes.size();) {
    size_t end = i + 1;
    while (end < p.nodes.size() && p.nodes[end].spec->pointer == p.nodes[i].spec->pointer &&
           p.nodes[end].spec->instance == p.nodes[i].spec->instance)  // a block's node in two instances: two lines
      ++end;
    const ProgramNode& last = p.nodes[end - 1];
    int64_t count = 0;
    std::string what;
    for (size_t k = i; k < end; ++k) {
      const ProgramNode& n = p.nodes[k];
      std::vector<int> own = n.layer_params;
      if (n.weight >= 0) own.push_back(n.weight);
      if (n.bias >= 0) own.push_back(n.bias);
      for (const Ref& r : n.inputs)
        if (r.kind == Ref::Kind::Param) own.push_back(r.index);
      for (int q : own)
        if (!counted[static_cast<size_t>(q)] && !p.params[static_cast<size_t>(q)].state)  // running statistics: not parameters
          counted[static_cast<size_t>(q)] = true, count += p.params[static_cast<size_t>(q)].shape.numel();
    }
    // What the node is: a layer (a conv2d with its activation), or the op of the node that keeps the id
    // (a weighted loss: the loss it computes).
    const NodeSpec& s = *last.spec;
    if (s.kind == NodeSpec::Kind::Dense) what = "dense(" + s.activation + ")";
    else if (s.kind == NodeSpec::Kind::Mse) what = "mse";
    else if (s.layer == "conv2d" && op_info(s.op).arity == 1) what = "conv2d(" + std::string(op_name(s.op)) + ")";
    else if (!s.layer.empty()) what = s.layer;
    else what = std::string(op_name(s.weighted ? *s.weighted : s.op));
    total += count;
    std::printf("  %-16s %-22s %-18s %lld\n", last.spec->id.c_str(), what.c_str(), last.shape.str().c_str(), static_cast<long long>(count));
    i = end;
  }
  std::printf("  total %lld parameters\n", static_cast<long long>(total));
}

// The blocks' expansion (spec_blocks.cpp): each instance, what its inputs are bound to, its output
// and its parameters, then what each block node's id stands for.
void print_blocks(const Spec& spec, const Program& p) {
  if (spec.instances.empty()) return;
  std::printf("blocks: %zu instance%s\n", spec.instances.size(), spec.instances.size() == 1 ? "" : "s");
  const auto inside = [](const std::string& name, const std::string& instance) {  // instance's own or a nested one's
    return name == instance || name.starts_with(instance + ".");
  };
  for (const BlockInstance& b : spec.instances) {
    std::string ins;
    for (const std::string& s : b.inputs) ins += (ins.empty() ? "" : ", ") + s;
    int64_t count = 0;
    size_t params = 0, nodes = 0;
    for (const ProgramParam& pp : p.params)  // its params, its layers' and its nested instances'
      if (pp.name.starts_with(b.name + ".") && !pp.state) count += pp.shape.numel(), ++params;
    for (const ProgramNode& n : p.nodes) nodes += inside(n.spec->instance, b.name);
    std::printf("  %-16s block %-12s %s  (%s) -> %s  %zu nodes, %zu params (%lld values)\n", b.name.c_str(), b.block.c_str(),
                b.pointer.c_str(), ins.c_str(), b.output.c_str(), nodes, params, static_cast<long long>(count));
  }
  for (const auto& [alias, target] : spec.aliases) {  // the spec's own block nodes (not those inside instances)
    const std::string& name = alias;  // a lambda may not capture a structured binding before C++20's P1091 (clang 14)
    if (std::none_of(spec.instances.begin(), spec.instances.end(), [&](const BlockInstance& b) { return name.starts_with(b.name + "."); }))
      std::printf("  %s = %s\n", alias.c_str(), target.c_str());
  }
}

void run_inspect(const std::string& path) {
  const Spec spec = load_with_overrides(path, {});
  Model model(spec, load_datasets(spec));
  const Datasets& data = model.data();
  const Program& p = model.program();
  std::printf("spec %s (%s), seed %llu, sha256 %.12s…\n", spec.name.c_str(), spec.path.c_str(),
              static_cast<unsigned long long>(spec.seed), spec.sha256.c_str());
  if (spec.data)
    std::printf("data: %lld training rows, %lld validation rows, batch %lld\n", static_cast<long long>(data.train.rows),
                static_cast<long long>(data.validation.rows), static_cast<long long>(p.batch * p.shards));
  if (!data.vocab.empty())  // text data: windows of the file's tokens (docs/spec.md "Text data")
    std::printf("text: %s, %zu %s, context %lld (rows are windows, the validation rows the last ones)\n",
                spec.data->files.at("").c_str(), data.vocab.tokens.size(), data.vocab.kind.c_str(),
                static_cast<long long>(data.vocab.context));
  // Rows that train and evaluate would refuse rather than leave out (trainer.h evaluate).
  if (spec.data)
    if (const int64_t unfit = unfit_last_batch(model, data.validation); unfit > 0)
      std::printf("  note: the last %lld of the %lld validation rows do not fit the graph's fixed shapes (batch %lld): train "
                  "and evaluate refuse this spec until batch_size divides %lld\n",
                  static_cast<long long>(unfit), static_cast<long long>(data.validation.rows), static_cast<long long>(p.batch),
                  static_cast<long long>(data.validation.rows));
  for (size_t i = 0; i < p.input_names.size(); ++i)
    std::printf("  input %-14s %s\n", p.input_names[i].c_str(), p.input_shapes[i].str().c_str());
  int64_t total = 0, frozen = 0, state = 0;
  std::printf("params:\n");
  for (const ProgramParam& pp : p.params) {
    if (pp.state) {  // running statistics (batch_norm): state, not parameters (PyTorch's buffers)
      std::printf("  %-16s %-14s %10lld  state (running statistics)\n", pp.name.c_str(), pp.shape.str().c_str(),
                  static_cast<long long>(pp.shape.numel()));
      state += pp.shape.numel();
      continue;
    }
    if (pp.trainable)
      std::printf("  %-16s %-14s %10lld  l2 %g\n", pp.name.c_str(), pp.shape.str().c_str(), static_cast<long long>(pp.shape.numel()), pp.l2);
    else
      std::printf("  %-16s %-14s %10lld  frozen\n", pp.name.c_str(), pp.shape.str().c_str(), static_cast<long long>(pp.shape.numel()));
    total += pp.shape.numel();
    frozen += pp.trainable ? 0 : pp.shape.numel();
  }
  std::printf("  total %lld parameters", static_cast<long long>(total));
  if (frozen > 0)  // the plain line stays as it was for specs without frozen parameters
    std::printf(": %lld trainable, %lld frozen", static_cast<long long>(total - frozen), static_cast<long long>(frozen));
  if (state > 0) std::printf("; %lld state values (running statistics)", static_cast<long long>(state));
  std::printf("\n");
  if (p.shards > 1) print_shards(p, total - frozen);
  for (const TensorFileRecord& f : spec.tensor_files) std::printf("  init file %s  sha256 %.12s…\n", f.path.c_str(), f.sha256.c_str());
  for (const ConstSpec& c : spec.consts) std::printf("  const %-10s %s\n", c.name.c_str(), Shape(std::span<const int64_t>(c.shape)).str().c_str());
  {  // what a device run drops between evaluations (DeviceRunner::release_host_copies)
    int64_t leaves = 0;
    size_t bytes = 0;
    for (const Var v : model.fixed_leaves())
      if (const size_t b = model.tape().own_pages_bytes(v); b > 0) ++leaves, bytes += b;
    if (leaves > 0)
      std::printf("  device runs keep %lld const / frozen tensor(s) of %s on the device only, between evaluations\n",
                  static_cast<long long>(leaves), human_bytes(static_cast<double>(bytes)).c_str());
  }
  // The fusion plan of one recorded episode (tape node ids), captured on the host backend.
  std::vector<int64_t> rows;
  if (spec.data)
    for (int64_t i = 0; i < p.batch; ++i) rows.push_back(i);
  const std::vector<Var> nodes = model.record(data.train, rows);
  std::optional<fuse::Plan> plan;
  if (!nodes.empty()) {
    const auto backend = device::make_host_backend();
    plan = fuse::plan_tape(*backend, model.tape(), nodes[static_cast<size_t>(p.loss)]);
  }
  const std::vector<Placement> placed = place(p, model.tape(), nodes, plan ? &*plan : nullptr);
  std::printf("graph:\n  %-4s %-16s %-22s %-24s %-14s %-9s %-9s %s\n", "#", "id", "op", "inputs", "shape", "backward", "tape",
              "fusion");
  int64_t reached = 0, fusible = 0, partly = 0, heads = 0;
  for (size_t i = 0; i < p.nodes.size(); ++i) {
    const ProgramNode& n = p.nodes[i];
    // A dense layer's own dropout (its "dropout" rate) is one of its tape nodes: the op says so.
    std::string op = n.spec->kind == NodeSpec::Kind::Mse     ? "mse"
                     : n.spec->kind == NodeSpec::Kind::Dense ? "dense(" + n.spec->activation + ")" +
                                                                   (n.spec->scalar > 0.0 ? "+dropout" : "")
                                                             : std::string(op_name(n.spec->op));
    if (n.spec->kind == NodeSpec::Kind::Op && n.spec->causal) op += "(causal)";  // keys after each query masked
    std::string inputs;
    for (const std::string& s : n.spec->inputs) inputs += (inputs.empty() ? "" : ",") + s;
    const bool backward = n.reaches_loss && n.requires_grad;
    reached += backward;
    const Placement& pl = placed[i];
    fusible += pl.row;
    partly += pl.part;
    heads += pl.head;
    const std::string tape_ids = pl.lo > pl.hi    ? "-"
                                 : pl.lo == pl.hi ? std::to_string(pl.lo)
                                                  : std::to_string(pl.lo) + ".." + std::to_string(pl.hi);
    std::printf("  %-4zu %-16s %-22s %-24s %-14s %-9s %-9s %s\n", i, n.spec->id.c_str(), op.c_str(), inputs.c_str(),
                n.shape.str().c_str(), backward ? "yes" : (n.reaches_loss ? "no(const)" : "no"), tape_ids.c_str(),
                pl.fusion.c_str());
  }
  print_layers(p);
  print_blocks(spec, p);  // after the tables of expanded nodes: how they came to be
  std::printf("loss: %s\n", spec.loss.c_str());
  std::printf("backward reaches %lld of %zu nodes; %lld are row-fusible (in a row segment of the plan)", static_cast<long long>(reached),
              p.nodes.size(), static_cast<long long>(fusible));
  if (partly > 0) std::printf(", %lld partly", static_cast<long long>(partly));
  if (heads > 0) std::printf(", %lld a row segment's backward head", static_cast<long long>(heads));
  std::printf("\n");
  if (plan) std::printf("%s", plan->describe().c_str());
}

}  // namespace

void add_inspect(CLI::App& app) {
  auto path = std::make_shared<std::string>();
  CLI::App* c = app.add_subcommand("inspect", "Print the resolved graph: shapes, backward reach, parameter counts");
  c->add_option("spec", *path, "The spec file")->required();
  c->callback([path] { run_inspect(*path); });
}

}  // namespace gr::cli
