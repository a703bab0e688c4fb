// gradrun import-torch STATE_DICT.safetensors --spec SPEC [--map TORCH=PARAM[:T],...] --out FILE —
// a PyTorch state_dict as a gradrun --init file for SPEC (interchange/import_torch.h has the rules).
#include <cstdio>
#include <memory>

#include "cli.h"
#include "io/safetensors.h"
#include "interchange/import_torch.h"
#include "train/model.h"

namespace gr::cli {

namespace {

struct ImportFlags {
  std::string state, spec, out;
  std::vector<std::string> map;
  bool quiet = false;
};

void run_import(const ImportFlags& f) {
  const std::vector<ImportMapping> map = parse_import_map(f.map);  // bad --map: before any file is read
  const Spec spec = load_with_overrides(f.spec, {});
  Model model(spec, load_datasets(spec));
  const SafetensorsFile state = read_safetensors(f.state);
  const ImportResult r = import_torch(model.program(), model.param_views(), state, f.state, map, f.out);
  if (f.quiet) return;
  std::printf("wrote %s: %zu parameters imported, %zu from the spec's init\n", f.out.c_str(), r.imported.size(),
              r.from_spec.size());
  for (const std::string& s : r.imported) std::printf("  %s\n", s.c_str());
  for (const std::string& s : r.from_spec) std::printf("  %s <- the spec's init\n", s.c_str());
  if (!r.unused.empty()) {
    std::printf("unused tensors of %s:", f.state.c_str());
    for (const std::string& s : r.unused) std::printf(" %s", s.c_str());
    std::printf("\n");
  }
  std::printf("start a run from it: gradrun train %s --init %s\n", f.spec.c_str(), f.out.c_str());
}

}  // namespace

void add_import(CLI::App& app) {
  auto f = std::make_shared<ImportFlags>();
  CLI::App* c = app.add_subcommand("import-torch", "A PyTorch state_dict (.safetensors) as a --init file for a spec");
  c->add_option("state_dict", f->state, "The state_dict, e.g. safetensors.torch.save_file(model.state_dict(), PATH)")->required();
  c->add_option("--spec", f->spec, "The spec whose parameters the file initializes")->required();
  c->add_option("--map", f->map,
                "TORCH_NAME=PARAM[:T],... (:T transposes a 2-D tensor); unmapped parameters take the tensor of their own "
                "name, a dense layer's ID.weight (transposed) / ID.bias, a conv2d / batch_norm layer's ID.weight / "
                "ID.bias (nn.Conv2d, nn.BatchNorm2d), or else the spec's init");
  c->add_option("--out", f->out, "The --init file to write (safetensors, f64)")->required();
  c->add_flag("-q,--quiet", f->quiet, "Print only errors");
  c->callback([f] { run_import(*f); });
}

}  // namespace gr::cli
