// spec.h — spec format v1 (docs/spec.md) parsed into plain structs.
//
// load_spec() checks everything that can be checked without the data: JSON syntax (line and
// column), every key known, every value of the right type and range, ops and attributes against
// the op table, names defined before use. Shapes are checked later, when the spec is resolved
// against its data (program.h), still before any training. Every error is an InputError whose
// place is the JSON pointer of the offending value.
#pragma once
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "grad/op_table.h"
#include "device/kind.h"
#include "tensor/dtype.h"

namespace gr {

struct InitSpec {
  enum class Kind { Zeros, Ones, Constant, Uniform, Normal, XavierUniform, XavierNormal, KaimingUniform, KaimingNormal, Values };
  Kind kind = Kind::Zeros;
  double a = 0.0, b = 0.0;     // constant: a · uniform: [a, b) · normal: mean a, std b
  std::vector<double> values;  // Kind::Values, row-major
  // {"file", "tensor", "transpose"} (tensor_file.h): load_spec reads the tensor into `values`
  // (kind Values) and keeps its shape, so resolve_program can check it against the parameter's.
  std::string file{}, tensor{}, pointer{};  // file: as written in the spec; pointer: the init's place
  bool transpose = false;
  std::vector<int64_t> file_shape{};  // the loaded tensor's shape (after transpose); empty: no file
  // > 0: the fans of xavier/kaiming instead of the shape's (a conv2d layer's W [F, C/g, kh, kw]:
  // fan_in = C/g·kh·kw, fan_out = F·kh·kw, PyTorch's); set by program.cpp, never by the spec.
  int64_t fan_in = 0, fan_out = 0;
};

struct ParamSpec {
  std::string name, pointer;
  std::vector<int64_t> shape;
  InitSpec init;
  bool trainable = true;  // false: frozen (no gradient work, no optimizer state, never updated)
};

struct ConstSpec {
  std::string name, pointer;
  std::vector<int64_t> shape;
  std::vector<double> values;
  std::string file{}, tensor{};  // {"file", "tensor", "transpose"}: values come from a tensor file
  bool transpose = false;
};

// A tensor file a spec loads weights or consts from, and the SHA-256 of its bytes (run.json's
// "init_files", and part of the run identity).
struct TensorFileRecord {
  std::string path;  // resolved against the spec's folder
  std::string sha256;
};

// A cell value of a table as the spec writes it: a number, or (CSV categories) a string.
struct DataValue {
  bool is_text = false;
  std::string text;   // is_text
  double number = 0;  // !is_text
  bool operator==(const DataValue&) const = default;
};

struct InputSpec {
  std::string name, pointer;
  std::vector<std::string> columns;  // CSV: "columns" ([B, n]) or "column" ([B, 1])
  std::string tensor;                // tensor files: the tensor's name
  int64_t one_hot = 0;               // > 0: labels → [B, one_hot]
  bool standardize = false;
  // **(addition)** tabular data (docs/spec.md "Missing values and categories"; spec/dataset.h).
  // "missing": error | mean | median | most_frequent | value (a number, or a string for categories)
  std::string missing = "error";
  DataValue missing_value;  // missing == "value"
  bool missing_indicator = false;
  // "categories": "auto" (the training rows' distinct values, sorted) or the list as given.
  bool categorical = false, categories_auto = false;
  std::vector<DataValue> categories;  // explicit: all numbers or all strings
  bool unknown_zeros = false;         // "unknown": "zeros" (default "error")
  bool encode_ids = false;            // "encode": "ids" (default "one_hot")
  bool has_threshold = false;         // "threshold": t → 1 ⇔ value > t
  double threshold = 0;
  bool is_label = false;  // the accuracy metric's labels, a regression target or a loss's data input
  // "shape": the row shape **(addition)**: each row's values (after encoding and standardization,
  // row-major) are the input's [rows, shape...] tensor, e.g. 64 pixel columns as [1, 8, 8].
  std::vector<int64_t> row_shape{};
};

struct DataSpec {
  enum class Source { Csv, Safetensors, Npy, Npz, Text };
  Source source = Source::Csv;
  // "text": FILE **(addition)** (docs/spec.md "Text data"; spec/text_data.h): the file's tokens
  // ("vocab": "chars", UTF-8 code points, or "words", split on whitespace) cut into windows of
  // `context` tokens; inputs[0] is the tokens input (ids [B, T]), inputs[1] the targets (the next
  // token's ids [B, T]).
  int64_t context = 0;
  std::string vocab;  // "chars" | "words" (Text only)
  std::map<std::string, std::string> files;  // npy: tensor name → path; others: "" → path (resolved)
  std::vector<InputSpec> inputs;
  double validation = 0.0;
  // "cv": {"folds": K, "fold": i} **(addition)**: the validation rows are fold i (1-based) of K
  // (spec/folds.h; written by `gradrun cv`). 0: no folds.
  int64_t cv_folds = 0, cv_fold = 0;
  std::string pointer = "/data";
  // CSV dialect **(addition)**: io/csv.h. delimiter 0: detected from the header line.
  char delimiter = 0, quote = '"';
  std::vector<std::string> na_values = {"", "NA", "N/A", "NaN", "nan", "null", "?"};
};

// A parameter that a layer node other than dense creates when the spec is resolved (program.cpp),
// its shape from the node's first input x: conv2d's W [filters, C/groups, kh, kw] and b
// [filters, 1, 1] (x [N, C, H, W]); batch_norm's scale and shift [C, 1, 1] (x [N, C, H, W]) or [C]
// (x [N, C]). `torch_name`: what PyTorch's module calls it (import-torch's default mapping).
struct LayerParamSpec {
  enum class Role { ConvWeight, ConvBias, ChannelScale, ChannelShift };
  Role role = Role::ConvWeight;
  std::string name, torch_name;
  InitSpec init;
  int64_t filters = 0, kh = 0, kw = 0, groups = 1;
  bool trainable = true;
};

struct NodeSpec {
  enum class Kind { Op, Mse, Dense };  // an op of the table, the mse composite, a dense layer
  Kind kind = Kind::Op;
  std::string id, pointer;
  Op op = Op::Add;  // Kind::Op
  std::vector<std::string> inputs;
  double scalar = 0.0;
  double momentum = 0.1;  // a Batch op's running-statistics momentum (batch_norm; PyTorch's default)
  std::optional<int64_t> axis;
  bool keepdims = false;
  bool causal = false;  // softmax: "causal": true masks the last two axes (query row i sees keys <= i)
  std::vector<int64_t> shape, starts, stops;
  WindowAttrs window;     // conv2d, max_pool2d, avg_pool2d: stride, padding, dilation, groups, kernel
  bool conv_bias = false;  // the [F] → [F,1,1] reshape of a lowered conv2d bias (lower_conv_bias)
  // layer nodes ("layer": "dense"): params <id>.W [in, units], <id>.b [units]
  int64_t units = 0;
  std::string activation = "none";  // none | relu | tanh | sigmoid | gelu; dense dropout: its rate in scalar
  InitSpec w_init{InitSpec::Kind::XavierUniform, 0.0, 0.0, {}}, b_init{InitSpec::Kind::Zeros, 0.0, 0.0, {}};
  bool trainable = true;  // false: <id>.W and <id>.b are frozen
  // "class_weight" **(addition)**, lowered into existing ops by the parser (spec/class_weight.h):
  // generated: a helper node of a lowering (not written in the spec); weighted: on the node that
  // replaces a weighted loss (it keeps the loss's id), the loss op it computes and its inputs.
  bool generated = false;
  std::optional<Op> weighted{};
  std::vector<std::string> weighted_inputs{};
  // Layer sugar other than dense (spec_layers.cpp) lowers into op nodes; `layer` names the layer
  // ("conv2d", "flatten", ...) on each of them (the last keeps the layer's id). The node creates
  // `layer_params` when the spec is resolved; a flatten's reshape gets its shape [-1, C·H·W] then.
  std::string layer{}, layer_id{};  // layer_id: the layer node's id (errors name it)
  std::vector<LayerParamSpec> layer_params{};
  // A node of a block instance (spec_blocks.cpp): the instance's name ("b1.0"), which errors at the
  // node's pointer (inside /blocks/NAME) add as "(in b1.0)"; empty for a node of the top-level graph.
  std::string instance{};
};

// One instance of a block (spec_blocks.cpp), in expansion order: `inspect` prints them.
struct BlockInstance {
  std::string name, block, pointer;  // "b1.0", the block's name, the instantiating node's pointer
  std::vector<std::string> inputs;   // the real names bound to the block's inputs, in order
  std::string output;                // the real name of the block's output node
  std::vector<std::string> params;   // the block's params in this instance ("b1.0.W", ...)
};

// optimizer.schedule: the learning rate of each step, computed on the host (lib/train/schedule.h).
struct ScheduleSpec {
  std::string kind = "constant";  // constant | step | cosine
  int64_t every = 1;              // step: epochs between decays
  double gamma = 0.1;             // step: the decay factor
  double min_lr = 0.0;            // cosine: the floor
  int64_t epochs = 0;             // cosine: the period in epochs (default: train.epochs as written)
  int64_t warmup_steps = 0;       // linear warmup over the first steps, with any kind
};

struct OptimizerSpec {
  std::string kind = "adam";  // adam | adamw | sgd
  double lr = 1e-3, clip = 0.0, l2_default = 0.0;
  std::map<std::string, double> l2;  // per-parameter overrides
  double beta1 = 0.9, beta2 = 0.999, eps = 1e-8;
  double weight_decay = 0.0;  // adamw: decoupled decay (default 0.01)
  double momentum = 0.0;      // sgd
  bool nesterov = false;      // sgd with momentum
  std::optional<ScheduleSpec> schedule;
};

// train.early_stopping: stop when `monitor` has not improved by more than min_delta for `patience`
// epochs, keeping the best epoch's weights (lib/train/early_stopping.h).
struct EarlyStoppingSpec {
  std::string monitor = "val_loss";  // val_loss | val_accuracy | train_loss | train_accuracy | val_f1 | val_auc
  int64_t patience = 10;
  double min_delta = 0.0;
};

struct TrainSpec {
  int64_t epochs = 1, batch_size = 32;
  bool shuffle = true, drop_last = true;
  // Data parallelism (docs/distributed.md): each step's batch is cut into `shards` equal contiguous
  // shards; the step's gradient is their per-shard gradients, each scaled by 1/shards, summed in
  // shard order. Any process count dividing shards computes the same bits. 1: the plain step.
  int64_t shards = 1;
  double diverge_factor = 1e4;  // stop when an epoch's mean train loss exceeds this × the first's
  std::optional<EarlyStoppingSpec> early_stopping;
};

struct MetricsSpec {
  bool accuracy = false;
  std::string logits, labels;
  // "regression": {"output": node, "target": input} — val_mae, val_rmse, val_r2. Without it, a
  // loss node of op mse whose inputs are (a node, a data input) is the regression (lib/train/evaluate.h).
  bool regression = false;
  std::string output, target;
};

// Megakernel fusion (lib/fuse): off, on, or auto — fuse when the backend has launch latency to save
// (a real GPU) and the plan removes launches.
enum class FuseMode { Off, On, Auto };

// The engine a command runs on (DeviceKind: device/kind.h; DType: tensor/dtype.h): the spec's
// "device" object with the command line's --device/--dtype/--fuse applied. lib/train/engine.h
// resolves it once (auto: cuda or cpu) and opens its backend.
struct DeviceSpec {
  DeviceKind kind = DeviceKind::Cpu;
  DType dtype = DType::F64;
  FuseMode fuse = FuseMode::Off;  // "fuse": false | true | "auto"
};

struct EmitSpec {
  std::map<std::string, std::string> bind;
  std::string signature = "dataset", function = "grad";
};

// "predict": what `gradrun predict` outputs. output empty: the first input of the loss node, with
// softmax when the loss is softmax_cross_entropy (resolved by train/predict.h).
struct PredictSpec {
  std::string output;
  std::string transform;  // "softmax" | "sigmoid" | "none"; empty: the default above
  std::string pointer = "/predict";
};

struct Spec {
  std::string path, dir, sha256, text;  // where it came from; dir resolves relative data paths
  // The spec file a run names (run.json, weights metadata): `path`, except for a run folder's
  // spec.json, which names the original spec file it was trained from (train/run_model.h).
  std::string source;
  std::vector<std::string> overrides;    // the --set PATH=VALUE items applied to the file's text (overrides.h)
  std::string name;
  uint64_t seed = 0;
  std::optional<DataSpec> data;
  std::vector<ParamSpec> params;
  std::vector<ConstSpec> consts;
  std::vector<NodeSpec> graph;
  std::string loss;
  std::string loss_pointer = "/loss";
  OptimizerSpec optimizer;
  TrainSpec train;
  MetricsSpec metrics;
  DeviceSpec device;
  std::string output_dir;
  EmitSpec emit;
  PredictSpec predict;
  std::vector<TensorFileRecord> tensor_files;  // every file of an init or const, first use first
  // release_tensor_values ran: the values of "values" inits and of consts are gone (a Model holds them).
  bool values_released = false;
  // Graph nodes whose "class_weight" is "balanced", not yet resolved into a list (their JSON
  // pointers): resolve_balanced_weights (spec/class_weight.h) gives the --set items that do it.
  std::vector<std::string> balanced_weights{};
  // Blocks (docs/spec.md "Blocks"): every instance, and each block node's id → the real name of
  // its last instance's output ("b1" → "b1.2.out"), resolved wherever the spec names a node.
  std::vector<BlockInstance> instances{};
  std::map<std::string, std::string> aliases{};
};

// `name`, or the node a block node's id stands for (Spec::aliases, followed to the end).
std::string resolve_alias(const Spec& spec, std::string name);

// Throws IoError (unreadable file) or InputError (everything else).
Spec load_spec(const std::string& path);
Spec parse_spec(const std::string& text, const std::string& path);
// Where a spec's text came from when that is not `path`: a run folder's spec.json (the spec as
// trained) resolves its relative data and tensor-file paths against the original spec's folder,
// and its default name is the original file's stem.
struct SpecOrigin {
  std::string dir, default_name;
  std::string source = "";  // Spec::source; empty: the path
};
Spec parse_spec(const std::string& text, const std::string& path, const SpecOrigin& origin);
// Training needs at least one parameter (params or a layer); throws a located InputError otherwise.
void require_trainable(const Spec& spec);

}  // namespace gr
