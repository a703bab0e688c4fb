// gradrun grad SPEC — the loss and every parameter's gradient on the first batch, as safetensors, on
// the spec's engine (its "device": kind, dtype, fuse; --device/--dtype/--fuse override it, as in train).
#include <cmath>
#include <cstdio>
#include <memory>

#include "cli.h"
#include "io/safetensors.h"
#include "io/seal.h"
#include "tensor/diag.h"
#include "train/checks.h"
#include "train/device_runner.h"

namespace gr::cli {

namespace {

struct GradFlags {
  int threads = 1;
  std::string spec, init, out = "grad.safetensors", device, dtype;
  bool fuse = false;
};

void run_grad(const GradFlags& f) {
  apply_threads(f.threads);
  const Spec spec = load_with_overrides(f.spec, {});
  Engine engine = choose_engine(spec, f.device, f.dtype, f.fuse);
  const DType dtype = engine.spec.dtype;
  Model model(spec, load_datasets(spec), dtype);  // f32: every value rounded to float, as an f32 run
  if (!f.init.empty()) model.load_params(read_sealed_weights(f.init), f.init);
  GradResult r;
  bool fused = false;
  if (!engine.on_device()) {
    r = evaluate_gradients(model);
  } else {  // the same first batch through the device engine: forward and backward (per node, or fused)
    Optimizer opt = model.make_optimizer();
    DeviceRunner runner(model, opt, engine.take_backend(), dtype, engine.spec.fuse);
    fused = runner.fused();
    diag::info("device: " + runner.describe());
    runner.upload_batch(model.data().train, first_batch_rows(model));
    runner.episode().forward();
    runner.episode().backward();
    r.loss = runner.episode().loss();
    for (const Var p : model.params()) {
      r.grads.emplace_back(static_cast<size_t>(model.tape().node(p).numel()));
      runner.episode().grad(p, r.grads.back());
    }
  }
  std::vector<std::pair<std::string, ConstTensorView>> tensors;
  const double loss = r.loss;
  tensors.emplace_back("loss", ConstTensorView{Shape{1}, &loss});
  for (size_t i = 0; i < r.grads.size(); ++i)
    tensors.emplace_back(model.program().params[i].name, ConstTensorView{model.program().params[i].shape, r.grads[i].data()});
  write_safetensors(f.out, tensors,
                    {{"spec", spec.path}, {"spec_sha256", spec.sha256}, {"device", to_string(engine.spec.kind)},
                     {"dtype", to_string(dtype)}, {"fused", fused ? "true" : "false"}},
                    dtype);  // f32: the values are floats already, so the F32 file holds them exactly
  std::printf("loss %.17g\n", loss);
  for (size_t i = 0; i < r.grads.size(); ++i) {
    double sq = 0.0;
    for (double g : r.grads[i]) sq += g * g;
    std::printf("  d/d%-16s |grad| %.6g\n", model.program().params[i].name.c_str(), std::sqrt(sq));
  }
  std::printf("wrote %s\n", f.out.c_str());
}

}  // namespace

void add_grad(CLI::App& app) {
  auto f = std::make_shared<GradFlags>();
  CLI::App* c = app.add_subcommand("grad", "Write the loss and every parameter's gradient on the first batch (safetensors)");
  c->add_option("spec", f->spec, "The spec file")->required();
  c->add_option("--init", f->init, "Evaluate at the parameters in this safetensors file instead of the spec's init");
  c->add_option("--out", f->out, "Output safetensors file (default grad.safetensors)");
  c->add_option("--device", f->device, "cpu | host | cuda | auto (default: the spec's device.kind)")
      ->check(CLI::IsMember({"cpu", "host", "cuda", "auto"}));
  c->add_option("--dtype", f->dtype, "f64 | f32 (default: the spec's device.dtype)")->check(CLI::IsMember({"f64", "f32"}));
  c->add_flag("--fuse", f->fuse, "Run the device's forward and backward as fused kernels (default: the spec's device.fuse)");
  add_threads_option(c, f->threads);
  c->callback([f] { run_grad(*f); });
}

}  // namespace gr::cli
