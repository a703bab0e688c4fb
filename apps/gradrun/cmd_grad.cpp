// gradrun grad SPEC — the loss and every parameter's gradient on the first batch, as safetensors.
#include <cmath>
#include <cstdio>
#include <memory>

#include "cli.h"
#include "io/safetensors.h"
#include "io/seal.h"
#include "train/checks.h"
#include "train/device_runner.h"

namespace gr::cli {

namespace {

struct GradFlags {
  int threads = 1;
  std::string spec, init, out = "grad.safetensors", device;
};

void run_grad(const GradFlags& f) {
  apply_threads(f.threads);
  const Spec spec = load_with_overrides(f.spec, {});
  const DeviceChoice d = choose_device(spec, f.device.empty() ? "cpu" : f.device, "f64", false);
  Model model(spec, load_datasets(spec));
  if (!f.init.empty()) model.load_params(read_sealed_weights(f.init), f.init);
  GradResult r;
  if (d.kind == DeviceKind::Cpu) {
    r = evaluate_gradients(model);
  } else {  // the same first batch through the device engine: forward and backward per node
    Optimizer opt = model.make_optimizer();
    std::string why;
    DeviceRunner runner(model, opt, open_backend(d.kind, &why), DType::F64);
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
                    {{"spec", spec.path}, {"spec_sha256", spec.sha256}, {"device", to_string(d.kind)}, {"dtype", "f64"}},
                    DType::F64);
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
  c->add_option("--device", f->device, "cpu | host | cuda")->check(CLI::IsMember({"cpu", "host", "cuda"}));
  add_threads_option(c, f->threads);
  c->callback([f] { run_grad(*f); });
}

}  // namespace gr::cli
