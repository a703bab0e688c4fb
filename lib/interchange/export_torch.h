// export_torch.h — a trained spec as a self-contained PyTorch module (docs/use-a-model.md, Export).
//
// export_torch() translates the part of the forward graph that the prediction depends on into
// Python source for an nn.Module computing in the run's precision — float64, or float32 for an
// `--dtype f32` run (whose weights are floats: F32 in the state_dict, exactly) — and gathers its
// state_dict:
//   - spec parameters → nn.Parameter attributes named as in the spec (sanitized when the name is not
//     a plain Python identifier: "p_" + the name with other characters as '_');
//   - dense layers → nn.Linear submodules named after the node ("h.weight" [units, in] = the
//     transposed W [in, units], "h.bias");
//   - consts → buffers "c_<name>"; preprocessing → buffers "<input>_mean" / "<input>_std" in the
//     input's row shape (literal values in model.py as well, so the module alone preprocesses).
// forward(*raw_inputs) takes the spec's inputs that the prediction reads, in the spec's input order,
// as read from the data file (one-hot inputs as class labels; NaN where a cell is missing; a
// categorical column as its value, or its id when the categories are strings: preprocess.h),
// applies the saved preprocessing — missing indicator (torch.isnan), fill (torch.where with the
// buffer "<input>_fill"), categories (== "<input>_categories", argmax for ids; a value in none
// raises ValueError unless "unknown" is "zeros"), threshold, the indicator columns appended, then
// (x − mean) / std —, runs the graph and returns the prediction after its transform.
// A node the export cannot express (a loss inside the prediction's graph) is refused with an
// InputError at that node's pointer.
#pragma once
#include <string>
#include <vector>

#include "grad/tape.h"
#include "io/safetensors.h"
#include "spec/program.h"
#include "interchange/preprocess.h"

namespace gr {

struct TorchExport {
  std::string model_py;                  // the module file
  std::vector<NamedTensor> state;        // the state_dict, PyTorch names and layouts
  std::vector<std::string> input_names;  // forward()'s arguments, in order
  DType real = DType::F64;                 // the module's dtype and the state_dict's
};

// `output`: the prediction node (index into program.nodes); `transform`: "softmax" | "sigmoid" |
// "none"; `units`: a standardized regression target's statistics, applied last (v·std + mean), so
// forward returns predictions in the data's units as `gradrun predict` writes them. `weights`
// holds every parameter of the program by its gradrun name.
TorchExport export_torch(const Program& program, const SafetensorsFile& weights, const Preprocessing& prep,
                         int output, const std::string& transform, DType real = DType::F64, const OutputUnits& units = {});

// Writes DIR/model.py and DIR/state_dict.safetensors (creating DIR).
void write_torch_export(const TorchExport& e, const std::string& dir, const std::string& spec_sha256);

}  // namespace gr
