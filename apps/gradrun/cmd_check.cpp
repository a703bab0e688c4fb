// gradrun check SPEC --fd — compare every parameter's gradient with central differences.
#include <cstdio>
#include <memory>

#include "cli.h"
#include "train/checks.h"
#include "train/device_runner.h"
#include "train/replay_check.h"

namespace gr::cli {

namespace {

struct CheckFlags {
  std::string junit;
  int threads = 1;
  std::string spec, device, dtype;
  bool fd = false, replay = false, fuse = false;
  FdOptions fd_options;
  int64_t episodes = 40;
};

void run_check(const CheckFlags& f) {
  apply_threads(f.threads);
  if (f.fd == f.replay) throw UsageError("check needs exactly one of --fd or --replay");
  const Spec spec = load_with_overrides(f.spec, {});
  if (f.replay) {
    // The spec's engine (a cpu spec: the host backend), its dtype (the tape in the same precision)
    // and its fuse (auto: fused where the backend has launch latency to save, as in train).
    std::string device = f.device;
    if (device.empty() && spec.device.kind == DeviceKind::Cpu) device = "host";
    Engine engine = choose_engine(spec, device, f.dtype, f.fuse);
    if (!engine.on_device() && f.device.empty()) engine = choose_engine(spec, "host", f.dtype, f.fuse);  // auto found no CUDA
    if (!engine.on_device()) throw UsageError("check --replay needs a device (host or cuda)");
    Model model(spec, load_datasets(spec), engine.spec.dtype);
    const ReplayCheckResult r = check_replay(model, engine.take_backend(), f.episodes, engine.spec.fuse);
    std::printf("device: %s\n", r.device.c_str());
    if (!r.equal) {
      std::printf("REPLAY DIFFERS: %s\n", r.first_difference.c_str());
      throw CheckFailed{"REPLAY DIFFERS: " + r.first_difference};
    }
    std::printf("%lld episodes: every node value and gradient, every loss and the final parameters are bit-equal to the CPU tape\n",
                static_cast<long long>(r.episodes));
    return;
  }
  Model model(spec, load_datasets(spec));
  const std::vector<FdRow> rows = check_finite_differences(model, f.fd_options);
  std::printf("%-20s %9s %13s %13s  %s\n", "param", "elements", "max abs err", "max rel err", "verdict");
  bool all = true;
  for (const FdRow& r : rows) {
    std::printf("%-20s %9lld %13.3e %13.3e  %s\n", r.param.c_str(), static_cast<long long>(r.elements), r.max_abs, r.max_rel,
                r.pass ? "ok" : "FAIL");
    if (!r.pass)
      std::printf("  %lld of %lld elements fail; worst failing element %lld: analytic %.17g, finite difference %.17g (%.3g x its "
                  "tolerance)\n",
                  static_cast<long long>(r.failing), static_cast<long long>(r.elements), static_cast<long long>(r.worst_index),
                  r.worst_analytic, r.worst_fd, r.worst_excess);
    all = all && r.pass;
  }
  std::printf("%s (eps %g, rtol %g, atol %g)\n", all ? "all gradients agree" : "GRADIENT CHECK FAILED", f.fd_options.eps,
              f.fd_options.rtol, f.fd_options.atol);
  if (!all) {
    std::string which;
    for (const FdRow& r : rows)
      if (!r.pass) which += (which.empty() ? "" : ", ") + r.param + " (element " + std::to_string(r.worst_index) + ")";
    throw CheckFailed{"GRADIENT CHECK FAILED: " + which};
  }
}

}  // namespace

void add_check(CLI::App& app) {
  auto f = std::make_shared<CheckFlags>();
  CLI::App* c = app.add_subcommand("check", "Verify gradients (--fd) or device replay (--replay)");
  c->add_option("spec", f->spec, "The spec file")->required();
  c->add_flag("--fd", f->fd, "Compare analytic gradients with central finite differences on the first batch");
  c->add_option("--eps", f->fd_options.eps, "Finite-difference step (default 1e-6)")->check(CLI::PositiveNumber);
  c->add_option("--rtol", f->fd_options.rtol, "Relative tolerance (default 1e-4)")->check(CLI::NonNegativeNumber);
  c->add_option("--atol", f->fd_options.atol, "Absolute tolerance (default 1e-7)")->check(CLI::NonNegativeNumber);
  c->add_option("--max-elems", f->fd_options.max_elems, "Elements checked per parameter (default 16)")
      ->check(CLI::Range(int64_t(1), int64_t(1) << 40));
  c->add_flag("--replay", f->replay, "Train on the CPU tape and on a device; require bit-equal results");
  c->add_option("--device", f->device, "host | cuda | auto (for --replay; default: the spec's device.kind, host for cpu)")
      ->check(CLI::IsMember({"host", "cuda", "auto"}));
  c->add_option("--dtype", f->dtype, "f64 | f32 (for --replay; default: the spec's device.dtype)")->check(CLI::IsMember({"f64", "f32"}));
  c->add_flag("--fuse", f->fuse, "Replay with fused kernels (for --replay; default: the spec's device.fuse)");
  c->add_option("--episodes", f->episodes, "Episodes for --replay (default 40)")->check(CLI::PositiveNumber);
  add_threads_option(c, f->threads);
  c->add_option("--junit", f->junit, "Also write the verdict as JUnit XML (one test case) to this file");
  c->callback([f] { with_junit(f->junit, "check", (f->replay ? "replay " : "fd ") + f->spec, [&] { run_check(*f); }); });
}

}  // namespace gr::cli
