#include "train/model.h"

#include <unistd.h>

#include <cstring>
#include <new>

#include "grad/owned.h"
#include "io/errors.h"
#include "spec/init.h"
#include "train/run_model.h"
#include "io/limits.h"

namespace gr {

Model::Model(const Spec& spec, Datasets data, DType real)
    : spec_(spec), identity_(model_identity(spec)), data_(std::move(data)), tape_(real) {
  GR_ASSERT(!spec.values_released);  // release_tensor_values: only after the one Model of a run
  if (!spec.balanced_weights.empty())  // the CLI resolves them (spec/class_weight.h resolve_balanced_weights)
    throw InputError(spec.path, spec.balanced_weights[0] + "/class_weight", "\"balanced\" class weights were not resolved from the training rows");
  program_ = resolve_program(spec_, data_.train);
  check_class_ids(program_, data_.train, "the training rows");
  check_class_ids(program_, data_.validation, "the validation rows");
  // Refuse parameters that cannot fit before touching memory: a failed allocation is not always
  // an exception (sanitizers, overcommit), and a clear error beats an out-of-memory kill.
  // The budget is resource_limits() (io/limits.h): physical memory, ulimit -v, GRADRUN_MAX_MEMORY.
  double total = 0;
  for (const ProgramParam& pp : program_.params) {
    // Trainable: value, gradient, Adam's m and v. Frozen: the value alone (Tape::frozen_param).
    const double need = static_cast<double>(pp.shape.numel()) * (pp.trainable ? 4.0 : 1.0) * sizeof(double);
    check_memory(need, spec_.path, pp.pointer,
                 "parameter \"" + pp.name + "\" of shape " + pp.shape.str() +
                     (pp.trainable ? " with its gradient and optimizer state" : " (frozen)"));
    total += need;
  }
  // One step's tape: every node's value and gradient at the training batch size.
  for (const ProgramNode& n : program_.nodes) {
    total += static_cast<double>(n.shape.numel()) * 2.0 * sizeof(double);
    check_memory(total, spec_.path, n.spec->pointer,
                 "the graph up to \"" + n.spec->id + "\" (shape " + n.shape.str() + ") with the parameters");
  }
  for (size_t i = 0; i < program_.params.size(); ++i) {
    const ProgramParam& pp = program_.params[i];
    try {
      const std::vector<double> values = init_values(pp.init, pp.shape, spec_.seed, i);
      // Frozen: no gradient work on the tape and every device, no gradient buffer, own pages.
      params_.push_back(pp.trainable ? tape_.param(pp.shape, values) : tape_.frozen_param(pp.shape, values));
      std::vector<double>().swap(program_.params[i].init.values);  // the tape holds them now
    } catch (const std::bad_alloc&) {
      throw InputError(spec_.path, pp.pointer,
                       "cannot allocate parameter \"" + pp.name + "\" of shape " + pp.shape.str() + " (" +
                           std::to_string(static_cast<double>(pp.shape.numel()) * 8.0 / (1 << 30)) + " GiB)");
    }
  }
  for (size_t i = 0; i < params_.size(); ++i)  // running statistics change every training step: not fixed
    if (!program_.params[i].trainable && !program_.params[i].state) fixed_.push_back(params_[i]);
  for (const ConstSpec& c : spec_.consts) consts_.push_back(tape_.constant(Shape(std::span<const int64_t>(c.shape)), c.values));
  for (const Shape& s : program_.input_shapes) slots_.push_back(tape_.constant(s, std::vector<double>(static_cast<size_t>(s.numel()), 0.0)));
  fixed_.insert(fixed_.end(), consts_.begin(), consts_.end());
  GR_ASSERT(tape_.ok());
  mark_ = tape_.mark();
  scratch_inputs_.reserve(slots_.size());
  nodes_.reserve(program_.nodes.size());
}

void Model::load_params(const SafetensorsFile& file, const std::string& path, const std::string& prefix) {
  for (size_t i = 0; i < program_.params.size(); ++i) {
    const ProgramParam& pp = program_.params[i];
    const Tensor* t = file.find(prefix + pp.name);
    if (!t) throw InputError(path, prefix + pp.name, "parameter \"" + pp.name + "\" is missing from the file");
    if (!(t->shape() == pp.shape))
      throw InputError(path, prefix + pp.name,
                       "parameter \"" + pp.name + "\" has shape " + t->shape().str() + " in the file but " + pp.shape.str() +
                           " in the spec");
    tape_.set_value(params_[i], t->values());
  }
}

Optimizer Model::make_optimizer() {
  const OptimizerSpec& o = spec_.optimizer;
  Optimizer opt = o.kind == "sgd" ? Optimizer::sgd(o.lr, {o.momentum, o.nesterov})
                                  : Optimizer::adam(o.lr, {o.beta1, o.beta2, o.eps, o.kind == "adamw" ? o.weight_decay : 0.0});
  opt.set_clip(o.clip);
  for (size_t i = 0; i < params_.size(); ++i)  // frozen parameters get no moments, no L2, no clip share
    if (program_.params[i].trainable) opt.add(tape_, params_[i], program_.params[i].l2);
  return opt;
}

size_t Model::param_index(Var p) const {
  for (size_t i = 0; i < params_.size(); ++i)
    if (params_[i] == p) return i;
  throw Error("model: node " + std::to_string(p.id) + " is not one of its parameters");
}

const std::vector<Var>& Model::record(const DataTable& table, std::span<const int64_t> rows, const DropoutKey& key) {
  tape_.set_dropout_key(key);
  scratch_inputs_.clear();
  const bool full = static_cast<int64_t>(rows.size()) == program_.batch;
  for (size_t i = 0; i < slots_.size(); ++i) {
    const Tensor& src = table.tensors[i];
    if (full) {
      // In the slot's owner blocks (grad/owned.h): each thread copies its own rows and columns.
      double* dst = tape_.leaf_values(slots_[i]).data();
      const int64_t width = src.numel() / src.shape()[0];
      const bool f32 = tape_.real() == DType::F32;  // each value to float on the way, as the device's gather does
      for_each_output_block(static_cast<int64_t>(rows.size()), width, kOwnedMinElems, [&](const OutputBlock& b) {
        for (int64_t r = b.r0; r < b.r1; ++r) {
          double* to = dst + r * width + b.c0;
          const double* from = src.data() + rows[static_cast<size_t>(r)] * width + b.c0;
          // The rows are random, so no prefetcher can guess the next one: ask for it while this
          // one is copied (MLP-784's 6 KiB rows from a 12 MiB table: 2-3% of the step).
          if (r + 1 < b.r1) {
            const double* next = src.data() + rows[static_cast<size_t>(r + 1)] * width + b.c0;
            for (int64_t c = 0; c < b.c1 - b.c0; c += 8) __builtin_prefetch(next + c);
          }
          if (f32)
            for (int64_t c = 0; c < b.c1 - b.c0; ++c) to[c] = static_cast<double>(static_cast<float>(from[c]));
          else
            std::memcpy(to, from, static_cast<size_t>(b.c1 - b.c0) * sizeof(double));
        }
      });
      scratch_inputs_.push_back(slots_[i]);
    } else {  // an odd-sized batch (validation remainder, drop_last false): temporary constants
      std::vector<int64_t> dims(src.shape().dims().begin(), src.shape().dims().end());
      dims[0] = static_cast<int64_t>(rows.size());
      std::vector<double> buf(static_cast<size_t>(src.numel() / src.shape()[0]) * rows.size());
      gather_rows(src, rows, buf.data());
      scratch_inputs_.push_back(tape_.constant(Shape(std::span<const int64_t>(dims)), buf));
    }
  }
  record_program(tape_, program_, scratch_inputs_, params_, consts_, nodes_);
  if (!tape_.ok()) {
    GR_ASSERT(!full);  // full batches were shape-checked by resolve_program
    nodes_.clear();
    tape_.recover(mark_);  // the poisoning belongs to this episode and goes with it
  }
  return nodes_;
}

void Model::update_running_stats() {
  for (size_t i = 0; i < program_.nodes.size() && i < nodes_.size(); ++i) {
    const NodeSpec& n = *program_.nodes[i].spec;
    if (n.kind == NodeSpec::Kind::Op && op_info(n.op).batch()) tape_.update_running_stats(nodes_[i]);
  }
}

std::vector<std::pair<std::string, ConstTensorView>> Model::param_views() const {
  std::vector<std::pair<std::string, ConstTensorView>> out;
  for (size_t i = 0; i < params_.size(); ++i) out.emplace_back(program_.params[i].name, tape_.value(params_[i]));
  return out;
}

}  // namespace gr
