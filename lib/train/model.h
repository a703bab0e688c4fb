// model.h — a resolved spec on a live tape: parameters registered (in registration order) and
// initialized, constants and input slots created before the episode mark, so a training step is
// "fill the slots, record the graph, backward, step, reset_to(mark)" with no allocation.
#pragma once
#include <span>
#include <string>
#include <vector>

#include "grad/optimizer.h"
#include "grad/tape.h"
#include "spec/dataset.h"
#include "spec/program.h"
#include "io/safetensors.h"

namespace gr {

class Model {
 public:
  // Resolves the program (all shape checks) and initializes parameters from spec.seed. `real`:
  // the tape's precision (DType::F32 for --dtype f32 on every engine: values rounded to float as
  // they enter, every op and the optimizer in float, evaluation too).
  Model(const Spec& spec, Datasets data, DType real = DType::F64);

  const Spec& spec() const { return spec_; }
  // The model identity of the spec (train/run_model.h), computed while the consts' values are there.
  const std::string& identity() const { return identity_; }
  const Program& program() const { return program_; }
  const Datasets& data() const { return data_; }
  Tape& tape() { return tape_; }
  DType real() const { return tape_.real(); }
  const std::vector<Var>& params() const { return params_; }
  const std::vector<Var>& slots() const { return slots_; }  // input slots, in program input order
  // The leaves no step changes: frozen parameters, then the spec's consts. A device run drops their
  // host copies between evaluations (DeviceRunner::release_host_copies).
  const std::vector<Var>& fixed_leaves() const { return fixed_; }

  // Parameters from a safetensors file with the parameters' names and shapes (--init, --resume).
  // `prefix` selects tensors named prefix + name. Throws InputError on a missing name or bad shape.
  void load_params(const SafetensorsFile& file, const std::string& path, const std::string& prefix = "");
  // The optimizer of the spec with every trainable parameter registered (frozen ones are not:
  // optimizer index i is parameter param_index(opt.param(i))).
  Optimizer make_optimizer();
  size_t param_index(Var param) const;

  // Records one episode on the given rows of `table` (all of them when rows is empty and the spec
  // has no data). Returns the node Vars; the loss is nodes[program().loss]. Full batches use the
  // preallocated input slots; other sizes get constants after the mark (and may not fit the
  // graph: then the result is empty and the tape is healthy again). Valid until the next record.
  // `key`: the dropout key of this recording (default: not training — dropout is the identity, as
  // evaluate and predict want); training steps pass dropout_key(t).
  const std::vector<Var>& record(const DataTable& table, std::span<const int64_t> rows, const DropoutKey& key = {});
  // Training step t's (1-based) dropout key: the spec's seed, t, training. Shard s of a sharded
  // step (train.shards) draws with step key t + s·2^40, so shards get their own masks and shard 0's
  // are the unsharded step's (docs/distributed.md).
  DropoutKey dropout_key(int64_t t, int64_t shard = 0) const {
    return {spec_.seed, static_cast<uint64_t>(t) + (static_cast<uint64_t>(shard) << 40), true};
  }
  void reset() { tape_.reset_to(mark_); }
  // After a training step's forward (the last record, with a training key): every Batch node's
  // running statistics take their one update of the step (Tape::update_running_stats).
  void update_running_stats();

  // Parameter views in registration order, for weight files.
  std::vector<std::pair<std::string, ConstTensorView>> param_views() const;

 private:
  const Spec& spec_;
  std::string identity_;
  Datasets data_;
  Program program_;
  Tape tape_;
  std::vector<Var> params_, consts_, slots_, fixed_;
  int32_t mark_ = 0;
  std::vector<Var> scratch_inputs_, nodes_;
};

}  // namespace gr
