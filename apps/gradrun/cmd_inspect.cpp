// gradrun inspect SPEC — the resolved graph: shapes, what backward reaches, parameter counts.
#include <cstdio>
#include <memory>

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

const char* fusion_class(const ProgramNode& n) {
  if (n.spec->kind != NodeSpec::Kind::Op) return "-";
  switch (op_info(n.spec->op).fusion) {
    case FusionClass::Opaque:
    case FusionClass::Reduce:
    case FusionClass::LaneLoss:
    case FusionClass::Copy: return "-";
    case FusionClass::Elementwise: return "row";
    case FusionClass::Matmul: return "row(matmul)";
    case FusionClass::Lane: return "row(lane)";
  }
  return "-";
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
  // Rows that train and evaluate would refuse rather than leave out (trainer.h evaluate).
  if (spec.data)
    if (const int64_t unfit = unfit_last_batch(model, data.validation); unfit > 0)
      std::printf("  note: the last %lld of the %lld validation rows do not fit the graph's fixed shapes (batch %lld): train "
                  "and evaluate refuse this spec until batch_size divides %lld\n",
                  static_cast<long long>(unfit), static_cast<long long>(data.validation.rows), static_cast<long long>(p.batch),
                  static_cast<long long>(data.validation.rows));
  for (size_t i = 0; i < p.input_names.size(); ++i)
    std::printf("  input %-14s %s\n", p.input_names[i].c_str(), p.input_shapes[i].str().c_str());
  int64_t total = 0, frozen = 0;
  std::printf("params:\n");
  for (const ProgramParam& pp : p.params) {
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
  std::printf("graph:\n  %-4s %-16s %-22s %-24s %-14s %-9s %s\n", "#", "id", "op", "inputs", "shape", "backward", "fusion");
  int64_t reached = 0, fusible = 0;
  for (size_t i = 0; i < p.nodes.size(); ++i) {
    const ProgramNode& n = p.nodes[i];
    std::string op = n.spec->kind == NodeSpec::Kind::Mse     ? "mse"
                     : n.spec->kind == NodeSpec::Kind::Dense ? "dense(" + n.spec->activation + ")"
                                                             : std::string(op_name(n.spec->op));
    std::string inputs;
    for (const std::string& s : n.spec->inputs) inputs += (inputs.empty() ? "" : ",") + s;
    const bool backward = n.reaches_loss && n.requires_grad;
    reached += backward;
    fusible += std::string(fusion_class(n)) != "-";
    std::printf("  %-4zu %-16s %-22s %-24s %-14s %-9s %s\n", i, n.spec->id.c_str(), op.c_str(), inputs.c_str(),
                n.shape.str().c_str(), backward ? "yes" : (n.reaches_loss ? "no(const)" : "no"), fusion_class(n));
  }
  std::printf("loss: %s\n", spec.loss.c_str());
  std::printf("backward reaches %lld of %zu nodes; %lld are row-fusible\n", static_cast<long long>(reached), p.nodes.size(),
              static_cast<long long>(fusible));
  // The fusion plan of one recorded episode (tape node ids), captured on the host backend.
  std::vector<int64_t> rows;
  if (spec.data)
    for (int64_t i = 0; i < p.batch; ++i) rows.push_back(i);
  const std::vector<Var>& nodes = model.record(data.train, rows);
  if (!nodes.empty()) {
    const auto backend = device::make_host_backend();
    const fuse::Plan plan = fuse::plan_tape(*backend, model.tape(), nodes[static_cast<size_t>(p.loss)]);
    std::printf("%s", plan.describe().c_str());
  }
}

}  // namespace

void add_inspect(CLI::App& app) {
  auto path = std::make_shared<std::string>();
  CLI::App* c = app.add_subcommand("inspect", "Print the resolved graph: shapes, backward reach, parameter counts");
  c->add_option("spec", *path, "The spec file")->required();
  c->callback([path] { run_inspect(*path); });
}

}  // namespace gr::cli
