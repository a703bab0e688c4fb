// import_torch.h — `gradrun import-torch`: a PyTorch state_dict (safetensors) → a gradrun --init
// file for a spec, so weights trained in PyTorch (or exported by `gradrun export --format torch`)
// start a gradrun run (docs/use-a-model.md, "Weights from PyTorch").
//
// Each parameter of the spec, in registration order, takes its values from:
//   1. a --map item "TORCH_NAME=PARAM" (":T" after PARAM transposes a 2-D tensor);
//   2. else the state_dict tensor of the same name (no transpose);
//   3. else, for a dense layer's "ID.W" / "ID.b", nn.Linear's "ID.weight" (transposed: PyTorch keeps
//      [out, in]) / "ID.bias" — the names `export --format torch` writes;
//   3b. else, for a conv2d layer's "ID.W" / "ID.b" and a batch_norm layer's "ID.scale" / "ID.shift",
//      nn.Conv2d's / nn.BatchNorm2d's "ID.weight" / "ID.bias" (a [C] tensor fills a [C, 1, 1] parameter);
//   4. else the spec's own init (reported, so a new head on an imported trunk is one command).
// Shapes must match exactly after the transpose; F32 tensors widen to f64 exactly. A mapping to a
// parameter the spec lacks, a missing tensor or a shape mismatch is an InputError naming both.
#pragma once
#include <string>
#include <vector>

#include "io/safetensors.h"
#include "spec/program.h"

namespace gr {

struct ImportMapping {
  std::string torch_name, param;
  bool transpose = false;
};

struct ImportResult {
  std::vector<std::string> imported;   // "param <- torch_name[ (transposed)]"
  std::vector<std::string> from_spec;  // parameters that kept the spec's init
  std::vector<std::string> unused;     // state_dict tensors no parameter took
};

// "a=b[:T],c=d" items (each --map value may hold several, comma-separated). Throws InputError
// (place "--map") on an item without '=' or with an empty side.
std::vector<ImportMapping> parse_import_map(const std::vector<std::string>& items);

// Builds every parameter's values and writes them (f64, registration order) to `out` atomically.
// `init`: the spec's own initial values of p.params, in registration order (Model::param_views).
ImportResult import_torch(const Program& p, const StTensorList& init, const SafetensorsFile& state, const std::string& state_path,
                          const std::vector<ImportMapping>& map, const std::string& out);

}  // namespace gr
