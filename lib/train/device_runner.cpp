#include "train/device_runner.h"

#include <vector>

#include "spec/errors.h"

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

DeviceRunner::DeviceRunner(Model& model, Optimizer& opt, std::unique_ptr<device::Backend> backend, replay::DType dtype)
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
  program_ = std::make_unique<replay::Program>(*backend_, model.tape(), loss, ro);
  dopt_ = std::make_unique<replay::DeviceOptimizer>(*program_, opt);
  model.reset();
  program_->capture_episode(dopt_.get());
}

DeviceRunner::~DeviceRunner() = default;

void DeviceRunner::upload_batch(const DataTable& table, std::span<const int64_t> rows) {
  const std::vector<Var>& slots = model_.slots();
  for (size_t i = 0; i < slots.size(); ++i) {
    const std::span<double> dst = model_.tape().leaf_values(slots[i]);
    gather_rows(table.tensors[i], rows, dst.data());
    program_->set_input(slots[i], dst);
  }
}

double DeviceRunner::step(std::span<const int64_t> rows) {
  upload_batch(model_.data().train, rows);
  program_->run_episode(dopt_.get());
  return program_->loss();
}

void DeviceRunner::sync(Optimizer& opt) {
  program_->sync_params_to(model_.tape());
  dopt_->store_state_to(opt);
}

std::string DeviceRunner::describe() const {
  return backend_->describe() + ", " + std::to_string(program_->forward_launches()) + " forward + " +
         std::to_string(program_->backward_launches()) + " backward + " + std::to_string(dopt_->launches_per_step()) +
         " optimizer launches per episode, captured as one";
}

}  // namespace gr
