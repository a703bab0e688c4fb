#include "train/device_runner.h"

#include <malloc.h>

#include <algorithm>
#include <chrono>
#include <vector>

#include "fuse/fuse.h"
#include "io/errors.h"
#include "tensor/diag.h"
#include "train/batch_kernels.h"

namespace gr {

namespace {

// Batch gathering and loss keeping on the device: kernels/device/gr_batch_kernels.cuh.
const std::string& kBatchKernels = batch_kernel_text();

}  // namespace

std::unique_ptr<replay::Episode> make_episode(std::unique_ptr<replay::Program> prog, FuseMode mode) {
  switch (mode) {
    case FuseMode::Off: return prog;
    case FuseMode::On: {
      fuse::Plan plan = fuse::plan(*prog);
      return std::make_unique<fuse::FusedProgram>(std::move(prog), std::move(plan));
    }
    case FuseMode::Auto: {  // fuse where launch latency dominates (CUDA) and the plan removes launches
      fuse::Plan plan = fuse::plan(*prog);
      if (!fuse::worthwhile(plan, prog->backend())) return prog;
      return std::make_unique<fuse::FusedProgram>(std::move(prog), std::move(plan));
    }
  }
  return prog;
}

DeviceRunner::DeviceRunner(Model& model, Optimizer& opt, std::unique_ptr<device::Backend> backend, DType dtype, FuseMode fuse,
                           unsigned block, unsigned max_grid)
    : model_(model), backend_(std::move(backend)) {
  const Spec& spec = model.spec();
  // The program's values are the tape's: an f32 program from an f32 tape (every value a float
  // already), so downloads give the tape's bytes back.
  if (dtype != model.real())
    throw Error(std::string("device: a ") + to_string(dtype) + " program needs a Model of that precision (Model(spec, data, DType))");
  if (spec.data && !spec.train.drop_last)
    throw InputError(spec.path, "/train/drop_last", "a device program has one static batch shape; set drop_last to true");
  // Record one episode (on the first rows) so the program can mirror it, then capture it.
  const auto t0 = std::chrono::steady_clock::now();
  std::vector<int64_t> rows(static_cast<size_t>(model.program().batch));
  for (size_t i = 0; i < rows.size(); ++i) rows[i] = static_cast<int64_t>(i);
  const std::vector<Var>& nodes = model.record(model.data().train, rows, model.dropout_key(1));
  const Var loss = nodes[static_cast<size_t>(model.program().loss)];
  replay::ReplayOptions ro;
  ro.dtype = dtype;
  ro.block = block;
  ro.max_grid = max_grid;
  auto program = std::make_unique<replay::Program>(*backend_, model.tape(), loss, ro);
  dopt_ = std::make_unique<replay::DeviceOptimizer>(*program, opt, /*track_norm=*/true);  // metrics.csv grad_norm
  model.reset();
  episode_ = make_episode(std::move(program), fuse);  // fused: docs/fusion.md
  episode_->capture_episode(dopt_.get());
  diag::debug("device: episode captured in " +
              std::to_string(std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - t0).count()) +
              " ms (kernel compilation included)");

  // The training set goes to the device once; each step uploads only its row indices.
  device::Module* module = backend_->compile(kBatchKernels, "gradrun_batches");
  const bool f32 = ro.dtype == DType::F32;
  gather_ = backend_->kernel(module, f32 ? "gr_gather_rows_f32" : "gr_gather_rows_f64");
  gather_block_ = device::fit_block(*backend_, gather_, episode_->program().block());
  store_loss_ = backend_->kernel(module, f32 ? "gr_store_loss_f32" : "gr_store_loss_f64");
  store_norm_ = backend_->kernel(module, "gr_store_loss_f64");  // the norm lives in the optimizer's double control buffer
  for (const Tensor& t : model.data().train.tensors) {
    data_.push_back(backend_->alloc(static_cast<size_t>(t.numel()) * sizeof(double)));
    backend_->upload(data_.back(), t.data(), static_cast<size_t>(t.numel()) * sizeof(double));
  }
  index_ = backend_->alloc(static_cast<size_t>(std::max<int64_t>(1, model.program().batch)) * sizeof(long long));
  report_ = backend_->alloc(2 * sizeof(double));
}

DeviceRunner::~DeviceRunner() {
  for (device::Buffer b : data_) backend_->free(b);
  if (index_.bytes) backend_->free(index_);
  if (report_.bytes) backend_->free(report_);
}

void DeviceRunner::upload_batch(const DataTable& table, std::span<const int64_t> rows) {
  const std::vector<Var>& slots = model_.slots();
  for (size_t i = 0; i < slots.size(); ++i) {
    const std::span<double> dst = model_.tape().leaf_values(slots[i]);
    gather_rows(table.tensors[i], rows, dst.data());
    episode_->set_input(slots[i], dst);
  }
}

DeviceRunner::StepLoss DeviceRunner::step(std::span<const int64_t> rows, int64_t run_step) {
  const std::vector<Var>& slots = model_.slots();
  const replay::Program& prog = episode_->program();
  if (!slots.empty()) {
    const long long width_rows = static_cast<long long>(rows.size());
    backend_->upload(index_, rows.data(), rows.size() * sizeof(int64_t));
    for (size_t i = 0; i < slots.size(); ++i) {
      const Tensor& t = model_.data().train.tensors[i];
      uint64_t src = data_[i].handle, idx = index_.handle, dst = prog.value_address(slots[i].id);
      long long width = t.numel() / t.shape()[0], n = width * width_rows, count = width_rows;
      void* args[] = {&src, &idx, &dst, &width, &count};
      const unsigned block = gather_block_;
      const unsigned grid = static_cast<unsigned>(std::min<long long>((n + block - 1) / block, prog.max_grid()));
      backend_->launch(gather_, std::max(1u, grid), block, args);
    }
  }
  episode_->set_dropout_key(model_.dropout_key(run_step));
  episode_->run_episode(dopt_.get());
  // The loss (f32 programs: widened to double, exactly) and the norm, side by side: one download.
  uint64_t loss = prog.value_address(prog.loss_var().id), out = report_.handle;
  long long at = 0;
  void* args[] = {&loss, &out, &at};
  backend_->launch(store_loss_, 1, 1, args);
  uint64_t norm = dopt_->norm_address();
  long long norm_at = 1;
  void* norm_args[] = {&norm, &out, &norm_at};
  backend_->launch(store_norm_, 1, 1, norm_args);
  double report[2];
  backend_->synchronize();
  backend_->download(report, report_, sizeof report);
  return StepLoss{report[0], report[1]};
}

void DeviceRunner::sync() {
  restore_host_copies();
  episode_->sync_params_to(model_.tape());
  dopt_->store_moments();
}

size_t HostCopies::release() {
  if (!released_.empty()) return 0;
  size_t bytes = 0;
  for (Var leaf : model_.fixed_leaves()) {
    const size_t freed = model_.tape().drop_value(leaf);
    if (freed > 0) released_.push_back(leaf);
    bytes += freed;
  }
#ifdef __GLIBC__
  // The temporaries that built these values (inits, file loads: the same sizes) sit freed in
  // malloc's heap, which keeps them resident; hand them back too.
  if (bytes > 0) malloc_trim(0);
#endif
  return bytes;
}

void HostCopies::restore(replay::Episode& episode) {
  for (Var leaf : released_) episode.value(leaf, model_.tape().restore_value(leaf));  // f64: the uploaded bytes
  released_.clear();
}

std::string DeviceRunner::describe() const {
  return backend_->describe() + ", " + episode_->launch_summary(dopt_->launches_per_step()) + ", captured as one";
}

}  // namespace gr
