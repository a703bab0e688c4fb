#include "train/device_runner.h"

#include <algorithm>
#include <vector>

#include "io/errors.h"
#include "train/batch_kernels.h"

namespace gr {

std::unique_ptr<device::Backend> open_backend(const std::string& kind, std::string* why) {
  device::Selection s;
  try {
    s = device::select_backend(kind);
  } catch (const device::DeviceUnavailable& e) {
    std::string reason = e.what();
    if (reason.rfind("unavailable: ", 0) == 0) reason = reason.substr(13);
    throw device::DeviceUnavailable("device \"" + kind + "\" is not available: " + reason);
  }
  if (why) *why = s.why;
  return std::move(s.backend);
}

namespace {

// Batch gathering and loss keeping on the device: kernels/device/gr_batch_kernels.cuh.
const std::string& kBatchKernels = batch_kernel_text();

}  // namespace

DeviceRunner::DeviceRunner(Model& model, Optimizer& opt, std::unique_ptr<device::Backend> backend, replay::DType dtype,
                           bool fuse, bool fuse_auto, unsigned block, unsigned max_grid)
    : model_(model), backend_(std::move(backend)) {
  const Spec& spec = model.spec();
  if (spec.data && !spec.train.drop_last)
    throw InputError(spec.path, "/train/drop_last", "a device program has one static batch shape; set drop_last to true");
  // Record one episode (on the first rows) so the program can mirror it, then capture it.
  std::vector<int64_t> rows(static_cast<size_t>(model.program().batch));
  for (size_t i = 0; i < rows.size(); ++i) rows[i] = static_cast<int64_t>(i);
  const std::vector<Var>& nodes = model.record(model.data().train, rows);
  const Var loss = nodes[static_cast<size_t>(model.program().loss)];
  replay::ReplayOptions ro;
  ro.dtype = dtype;
  ro.block = block;
  ro.max_grid = max_grid;
  program_ = std::make_unique<replay::Program>(*backend_, model.tape(), loss, ro);
  dopt_ = std::make_unique<replay::DeviceOptimizer>(*program_, opt);
  model.reset();
  // fuse: auto fuses where launch latency dominates (CUDA) and the plan removes launches.
  fuse::Plan plan;
  if (fuse || fuse_auto) plan = fuse::plan(*program_);
  if (fuse || (fuse_auto && fuse::worthwhile(plan, *backend_))) {  // fused episode (docs/fusion.md)
    fused_ = std::make_unique<fuse::FusedProgram>(*program_, std::move(plan));
    fused_->capture_episode(dopt_.get());
  } else {
    program_->capture_episode(dopt_.get());
  }

  // The training set goes to the device once; each step uploads only its row indices.
  device::Module* module = backend_->compile(kBatchKernels, "gradrun_batches");
  const bool f32 = dtype == replay::DType::F32;
  gather_ = backend_->kernel(module, f32 ? "gr_gather_rows_f32" : "gr_gather_rows_f64");
  store_loss_ = backend_->kernel(module, f32 ? "gr_store_loss_f32" : "gr_store_loss_f64");
  for (const Tensor& t : model.data().train.tensors) {
    data_.push_back(backend_->alloc(static_cast<size_t>(t.numel()) * sizeof(double)));
    backend_->upload(data_.back(), t.data(), static_cast<size_t>(t.numel()) * sizeof(double));
  }
  index_ = backend_->alloc(static_cast<size_t>(std::max<int64_t>(1, model.program().batch)) * sizeof(long long));
  losses_capacity_ = spec.data ? std::max<int64_t>(1, model.data().train.rows / std::max<int64_t>(1, model.program().batch)) : 1;
  losses_ = backend_->alloc(static_cast<size_t>(losses_capacity_) * sizeof(double));
}

DeviceRunner::~DeviceRunner() {
  for (device::Buffer b : data_) backend_->free(b);
  if (index_.bytes) backend_->free(index_);
  if (losses_.bytes) backend_->free(losses_);
}

void DeviceRunner::upload_batch(const DataTable& table, std::span<const int64_t> rows) {
  const std::vector<Var>& slots = model_.slots();
  for (size_t i = 0; i < slots.size(); ++i) {
    const std::span<double> dst = model_.tape().leaf_values(slots[i]);
    gather_rows(table.tensors[i], rows, dst.data());
    program_->set_input(slots[i], dst);
  }
}

void DeviceRunner::step(std::span<const int64_t> rows, int64_t step_in_epoch) {
  GR_ASSERT(step_in_epoch < losses_capacity_);
  const std::vector<Var>& slots = model_.slots();
  if (!slots.empty()) {
    const long long width_rows = static_cast<long long>(rows.size());
    backend_->upload(index_, rows.data(), rows.size() * sizeof(int64_t));
    for (size_t i = 0; i < slots.size(); ++i) {
      const Tensor& t = model_.data().train.tensors[i];
      uint64_t src = data_[i].handle, idx = index_.handle, dst = program_->value_address(slots[i].id);
      long long width = t.numel() / t.shape()[0], n = width * width_rows, count = width_rows;
      void* args[] = {&src, &idx, &dst, &width, &count};
      const unsigned block = program_->block();
      const unsigned grid = static_cast<unsigned>(std::min<long long>((n + block - 1) / block, program_->max_grid()));
      backend_->launch(gather_, std::max(1u, grid), block, args);
    }
  }
  if (fused_) fused_->run_episode(dopt_.get());
  else program_->run_episode(dopt_.get());
  uint64_t loss = program_->value_address(program_->loss_var().id), out = losses_.handle;
  long long at = step_in_epoch;
  void* args[] = {&loss, &out, &at};
  backend_->launch(store_loss_, 1, 1, args);
}

std::vector<double> DeviceRunner::epoch_losses(int64_t steps) {
  std::vector<double> out(static_cast<size_t>(steps));
  backend_->synchronize();
  backend_->download(out.data(), losses_, out.size() * sizeof(double));
  return out;
}

void DeviceRunner::sync(Optimizer& opt) {
  program_->sync_params_to(model_.tape());
  dopt_->store_state_to(opt);
}

std::string DeviceRunner::describe() const {
  if (fused_)
    return backend_->describe() + ", fused: " + std::to_string(fused_->forward_launches()) + " forward + " +
           std::to_string(fused_->backward_launches()) + " backward + " + std::to_string(dopt_->launches_per_step()) +
           " optimizer launches per episode (per-node " + std::to_string(fused_->plan().per_node_launches()) + " + " +
           std::to_string(dopt_->launches_per_step()) + "), captured as one";
  return backend_->describe() + ", " + std::to_string(program_->forward_launches()) + " forward + " +
         std::to_string(program_->backward_launches()) + " backward + " + std::to_string(dopt_->launches_per_step()) +
         " optimizer launches per episode, captured as one";
}

}  // namespace gr
