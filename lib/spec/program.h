// program.h — a spec resolved against its data: every name bound to a leaf or node, every shape
// inferred and checked (by recording the graph once on a tape whose leaves are lazy constants),
// dense layers expanded into their parameters, and the parameters of other layers' nodes created. Errors are InputErrors at the node's JSON pointer.
//
// Registration order of parameters (init streams, optimizer, weight files): the spec's "params"
// in file order, then each layer's parameters (dense: <id>.W, <id>.b; conv2d: <id>.W, <id>.b;
// batch_norm: <id>.scale, <id>.shift) in graph order.
#pragma once
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "grad/tape.h"
#include "spec/dataset.h"
#include "spec/spec.h"

namespace gr {

struct Ref {
  enum class Kind { Input, Param, Const, Node };
  Kind kind;
  int index;
};

struct ProgramParam {
  std::string name, pointer;
  Shape shape;
  InitSpec init;
  double l2 = 0.0;
  bool dense_bias = false;  // a dense layer's b (and a layer's bias, scale, shift): a scalar optimizer.l2 leaves it undecayed
  bool trainable = true;    // false: frozen — a tape leaf without requires_grad, outside the optimizer
  bool state = false;       // a Batch op's running statistics (<id>.running_mean / <id>.running_var): not
                            // trainable, yet changed by every training step (never a fixed leaf)
  std::string torch_name{};  // a layer's parameter: PyTorch's name for it (import-torch), e.g. "c1.weight"
};

struct ProgramNode {
  const NodeSpec* spec;
  std::vector<Ref> inputs;
  int weight = -1, bias = -1;  // dense layers: parameter indices; a Batch op: its running mean, variance
  Shape shape;                 // at the training batch size
  bool reaches_loss = false;   // the loss depends on it
  bool requires_grad = false;  // a parameter lies upstream (with reaches_loss: backward visits it)
  std::vector<int> layer_params{};  // the parameters a lowered layer's node created (NodeSpec::layer_params)
};

struct Program {
  const Spec* spec = nullptr;
  std::vector<std::string> input_names;
  std::vector<Shape> input_shapes;  // at the training batch size: [batch, ...]
  int64_t batch = 0;                // rows per recorded episode: one shard of the step (0: no data)
  int64_t shards = 1;               // train.shards: a step's batch is shards × batch rows
  std::vector<ProgramParam> params;
  std::vector<ProgramNode> nodes;
  std::map<std::string, Ref> names;
  // Node specs completed from the shapes (a flatten's reshape): nodes[i].spec points here.
  std::vector<std::shared_ptr<const NodeSpec>> resolved_specs;
  int loss = -1;
  int metric_logits = -1;  // node index, -1 without an accuracy metric
  int metric_labels = -1;  // input index
  bool metric_label_ids = false;  // the labels are class ids (one per row), not one-hot rows
  bool metric_binary = false;     // one logit per row ([B, 1]): class 1 ⇔ logit > 0, labels 0/1
  // A sequence's logits [B, T, C] (labels: ids [B, T] or one-hot [B, T, C]): every one of a row's T
  // positions is a classification (next-token accuracy), so metrics count B·T of them; 1 otherwise.
  int64_t metric_positions = 1;
};

// `train` provides the input shapes (its row count bounds the batch size); it may be empty when
// the spec has no data.
Program resolve_program(const Spec& spec, const DataTable& train);

// Refuses (InputError at the node's second input) data rows whose class ids, fed to a
// cross_entropy node, are not integers in [0, C): the op would make the loss NaN mid-run; and a
// binary accuracy's labels that are not 0 or 1 (InputError at /metrics/accuracy/labels).
// `whose` names the rows ("the training rows", a file).
void check_class_ids(const Program& p, const DataTable& table, const std::string& whose);
// Refuses (InputError at the node's first input, naming the file, row and column) data ids fed to an
// embedding that are not integers in [0, V), V the table's rows (check_class_ids does this too;
// predict, which reads no labels, calls this alone).
void check_token_ids(const Program& p, const DataTable& table, const std::string& whose);

// Records the graph on `tape` given a Var for every input, param and const; fills `nodes` with one
// Var per program node (its capacity is reused: no allocation in steady state). The tape must be healthy afterwards for a resolved program (shapes were checked),
// except when inputs carry another batch size that the graph cannot take (then tape.ok() is false).
void record_program(Tape& tape, const Program& program, const std::vector<Var>& inputs, const std::vector<Var>& params,
                    const std::vector<Var>& consts, std::vector<Var>& nodes);

}  // namespace gr
