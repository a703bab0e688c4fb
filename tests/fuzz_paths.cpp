// fuzz_paths.cpp — the paths a fuzz case runs (support/fuzz_graph.h, Path): each loads the case's spec
// through lib/spec and drives the library code the CLI uses (lib/train's check_replay for
// `check --replay`, DeviceRunner, SpecEmitter::verify for `emit-cuda --verify`, check_finite_differences
// for `check --fd`), on backends built here: host with the adversarial schedule, or CUDA.
#include <cmath>
#include <cstdio>
#include <cstring>
#include <map>

#include "device/backend.h"
#include "spec/dataset.h"
#include "io/errors.h"
#include "support/fuzz_graph.h"
#include "train/checks.h"
#include "train/device_runner.h"
#include "train/emit_spec.h"
#include "train/replay_check.h"
#include "tensor/same_bits.h"

namespace gr::fuzz {

std::string Path::describe() const {
  std::string s = kind == Replay ? (fuse ? "f64 fused replay vs CPU tape" : "f64 per-node replay vs CPU tape")
                  : kind == F32  ? "f32 fused vs f32 per-node replay vs f32 CPU tape"
                  : kind == Emit ? "emitted code vs CPU tape"
                                 : "finite differences vs CPU tape";
  if (kind == Replay || kind == F32)
    s += ", blockDim " + std::to_string(block) + (max_grid < 65535 ? ", grid <= " + std::to_string(max_grid) : "") +
         (adversarial ? ", adversarial schedule " + std::to_string(schedule_seed) : ", in order");
  return s;
}

namespace {

std::unique_ptr<device::Backend> make_backend(const Path& p, const RunOptions& ro) {
  if (ro.backend == "cuda") {
    device::CudaOptions c;
    c.cache_dir = ro.cache_dir;
    return device::make_cuda_backend(c);
  }
  device::HostOptions h;
  h.threads = ro.threads;
  h.fiber_block = true;
  h.schedule = p.adversarial ? device::HostSchedule::adversarial : device::HostSchedule::in_order;
  h.schedule_seed = p.schedule_seed;
  h.schedule_from_env = false;
  h.cache_dir = ro.cache_dir;
  return device::make_host_backend(h);
}

std::string show(double v) {
  uint64_t b;
  std::memcpy(&b, &v, 8);
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.17g (0x%016llx)", v, static_cast<unsigned long long>(b));
  return buf;
}

// Per-node f32 vs fused f32 vs the f32 CPU tape, lockstep: every node value and gradient after
// each backward (the runners replay the episode they captured: its rows and dropout key).
std::string f32_compare(const Spec& spec, const Path& p, const RunOptions& ro) {
  Model model(spec, load_datasets(spec), DType::F32);  // an f32 program from an f32 tape, as gradrun does
  Optimizer o1 = model.make_optimizer(), o2 = model.make_optimizer();
  DeviceRunner ref(model, o1, make_backend(p, ro), DType::F32, FuseMode::Off, p.block, p.max_grid);
  DeviceRunner fu(model, o2, make_backend(p, ro), DType::F32, FuseMode::On, p.block, p.max_grid);
  Model cpu(spec, load_datasets(spec), DType::F32);
  Optimizer oc = cpu.make_optimizer();
  std::vector<int64_t> rows(static_cast<size_t>(cpu.program().batch));
  for (size_t i = 0; i < rows.size(); ++i) rows[i] = static_cast<int64_t>(i);
  std::map<int32_t, std::string> names;
  const std::vector<Var> nodes = model.record(model.data().train, {});
  for (size_t i = 0; i < nodes.size(); ++i) names[nodes[i].id] = model.program().nodes[i].spec->id;
  model.reset();
  replay::Episode &a = ref.episode(), &b = fu.episode();
  std::vector<double> x, y;
  for (int e = 0; e <= ro.episodes; ++e) {
    const std::vector<Var>& cn = cpu.record(cpu.data().train, rows, cpu.dropout_key(1));
    if (e < ro.episodes) {
      for (replay::Episode* ep : {&a, &b}) {
        ep->forward();
        ep->backward();
      }
      if (!cpu.tape().backward(cn[static_cast<size_t>(cpu.program().loss)])) return "the f32 CPU tape: " + cpu.tape().error();
      cpu.update_running_stats();  // the devices' forwards took the step's running-statistics update (batch_norm)
    }
    for (int32_t id = 0; id < a.program().size(); ++id) {
      const replay::Program::NodeView n = a.program().node_view(id);
      x.resize(static_cast<size_t>(n.numel));
      y.resize(x.size());
      for (int pass = 0; pass < (e < ro.episodes && n.active ? 2 : 1); ++pass) {
        if (pass) a.grad(Var{id}, x), b.grad(Var{id}, y);
        else a.value(Var{id}, x), b.value(Var{id}, y);
        // After the last step the devices ran no forward: only their leaves are current. grad():
        // zeros where backward never went.
        const bool leaf = n.op == Op::Param || n.op == Op::Const;
        const bool on_cpu = (e < ro.episodes || leaf) && (pass || cpu.tape().node(Var{id}).val != nullptr);
        const std::span<const double> z = !on_cpu ? std::span<const double>() : pass ? cpu.tape().grad(Var{id}).values() : cpu.tape().value(Var{id}).values();
        const auto where = [&](size_t i) {
          return (e < ro.episodes ? "episode " + std::to_string(e + 1) : "after " + std::to_string(e) + " steps") +
                 ": node " + std::to_string(id) + " (" + std::string(op_name(n.op)) + " " + n.shape.str() +
                 (names.count(id) ? ", spec node \"" + names[id] + "\"" : "") + ") " + (pass ? "gradient" : "value") +
                 " element " + std::to_string(i) + ": per-node f32 " + show(x[i]);
        };
        for (size_t i = 0; i < x.size(); ++i) {
          if (!same_bits(x[i], y[i])) return where(i) + ", fused f32 " + show(y[i]);
          if (on_cpu && !same_bits(x[i], z[i])) return where(i) + ", f32 CPU tape " + show(z[i]);
        }
      }
    }
    if (e < ro.episodes) {
      ref.optimizer().step();
      fu.optimizer().step();
      oc.step(cpu.tape());
    }
    cpu.reset();
  }
  return "";
}

std::string fd_check(const Spec& spec, const Graph& g) {
  Model model(spec, load_datasets(spec));
  const GradResult gr = evaluate_gradients(model);
  if (!std::isfinite(gr.loss)) return "the loss is not finite (" + show(gr.loss) + "): a generator defect";
  FdOptions o;
  o.eps = kFdEps;
  o.rtol = fd_rtol(g);
  o.atol = kFdAtol;
  o.max_elems = 8;
  for (const FdRow& r : check_finite_differences(model, o))
    if (!r.pass) {
      char buf[256];
      std::snprintf(buf, sizeof buf, " element %lld: analytic %.17g, finite difference %.17g (eps %g, rtol %g, atol %g)",
                    static_cast<long long>(r.worst_index), r.worst_analytic, r.worst_fd, o.eps, o.rtol, o.atol);
      return "gradient of parameter \"" + r.param + "\"" + buf;
    }
  return "";
}

}  // namespace

std::string run_path(const Path& p, const Graph& g, const OptimizerChoice& opt, const RunOptions& ro) {
  const Spec spec = parse_spec(spec_json(g, "fuzz", opt, true).dump(1), "fuzz.json");
  switch (p.kind) {
    case Path::Replay: {
      Model model(spec, load_datasets(spec));
      const ReplayCheckResult r = check_replay(model, make_backend(p, ro), ro.episodes, p.fuse ? FuseMode::On : FuseMode::Off, p.block, p.max_grid);
      return r.equal ? "" : r.first_difference;
    }
    case Path::F32: return f32_compare(spec, p, ro);
    case Path::Emit: {
      SpecEmitter em(spec);
      const EmitVerifyResult r = em.verify();
      return r.ok ? "" : r.difference;
    }
    case Path::Fd: return fd_check(spec, g);
  }
  return "";
}

}  // namespace gr::fuzz
