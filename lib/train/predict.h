// predict.h — a trained model applied to new data (`gradrun predict` and `gradrun evaluate`).
//
// The weights file carries the preprocessing of training (interchange/preprocess.h); new data is read
// with the spec's bindings and transformed with those SAVED statistics (never recomputed). The
// model is resolved against an all-zero table of the training batch size and the saved row
// shapes, so its program is the one training ran. Rows are recorded in batches on the tape (the
// last one partial); every kernel splits work over output rows only, so a row's result does not
// depend on how the rows are batched.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "device/backend.h"
#include "io/safetensors.h"
#include "spec/dataset.h"
#include "spec/program.h"
#include "train/model.h"
#include "interchange/preprocess.h"

namespace gr {

// What predict outputs: the spec's "predict", else the first input of the loss node (softmax for
// softmax_cross_entropy and cross_entropy; for a loss that reduces bce_with_logits, that node's
// logits with sigmoid). classifier: softmax, the node the accuracy metric reads, or one column with
// sigmoid; its class is predicted_class (train/evaluate.h) of the untransformed row — for one
// logit, 1 ⇔ logit > 0 ⇔ probability > 0.5, as binary accuracy counts it.
// A regression output whose target was standardized comes back in the data's units: with
// transform none, each value v of column c becomes to_data_units(v, units.mean[c], units.std[c]),
// with the training rows' statistics saved in the weights (`prep`).
struct PredictTarget {
  int node = -1;
  std::string name, transform;  // transform: softmax | sigmoid | none
  bool classifier = false;
  // A classifier whose label input has categories (spec/dataset.h): the class names in id order
  // (predict writes them in its class column); empty: classes are written as ids.
  std::vector<std::string> class_names;
  OutputUnits units;  // a standardized regression target's statistics; empty: no mapping
  // A softmax prediction of shape [B, T, V] (a sequence model's next-token logits): T positions per
  // row, each its own distribution over V classes (its own softmax and class); 0: one per row.
  int64_t positions = 0;
};
PredictTarget predict_target(const Program& program, const Preprocessing& prep);
// The class names of a classifier's label input (the accuracy metric's labels, else the data input
// its classification loss compares with), in id order, when that input has categories; else empty.
std::vector<std::string> class_names(const Program& program, const Preprocessing& prep, int64_t width);
// Per program input: does the node depend on it (inputs that only feed the loss do not).
std::vector<bool> inputs_needed(const Program& program, int node);

// A run folder or weights file checked against the spec: the weights' model identity
// (train/run_model.h) must be the spec's (weights from before it: the spec's sha256). A folder
// gives its weights.best.safetensors when early stopping wrote one and `which` is "best", else its
// weights.safetensors (choose_weights; the choice is logged at info level).
struct TrainedWeights {
  std::string path;
  SafetensorsFile file;
  Preprocessing prep;
  DType real = DType::F64;  // what the run computed in (its __metadata__ dtype): predict and evaluate do too
};
TrainedWeights read_trained(const Spec& spec, const std::string& weights_or_run_dir, const std::string& which = "best");

// Zero rows shaped like the training data (batch_size rows, the saved row shapes): Model's
// constructor resolves the training program from it.
Datasets shape_only_data(const Spec& spec, const Preprocessing& prep);

// Reads `file` (.csv, .npy, .npz, .safetensors) with the spec's bindings for the needed inputs,
// checks every row shape against the saved one and applies the saved one-hot and standardization;
// inputs not needed become zeros. InputError (located) on a missing column/tensor or a wrong width.
DataTable read_data_file(const Spec& spec, const Preprocessing& prep, const std::string& file, const std::vector<bool>& needed);

struct Predictions {
  int64_t rows = 0, width = 0;
  int64_t positions = 0;         // per-position predictions ([B, T, V]): T; values [rows, T, width], classes [rows, T]
  std::vector<double> values;    // [rows, width], after the transform
  std::vector<int64_t> classes;  // argmax of the untransformed row (classifiers only)
};
// Throws InputError when a batch size does not fit the graph.
Predictions predict_rows(Model& model, const PredictTarget& target, const DataTable& table, int64_t batch);

// The same on the device replay engine (f64, per-node launches): the forward half of the training
// episode replayed per batch of the spec's batch size, the last batch padded with copies of its
// first row (rows are independent, so the padding changes no kept row). Same bytes as the tape.
// `backend`: an open Host or Cuda backend. The model must hold the trained weights already.
Predictions predict_rows_device(Model& model, const PredictTarget& target, const DataTable& table,
                                std::unique_ptr<device::Backend> backend, FuseMode fuse = FuseMode::Off);

// CSV (NAME_j columns, then class: the class name when the label has categories, CSV-quoted when
// it needs it, else the id), .npy ([rows, width] f8) or .safetensors (NAME, class ids; the names in
// the metadata "class_names" as a JSON array) by the extension of `path`; numbers in shortest
// round-trip form.
std::string render_predictions(const Predictions& p, const PredictTarget& target, const std::string& path);

}  // namespace gr
