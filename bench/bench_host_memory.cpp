// bench_host_memory — host memory of a fine-tune whose frozen base dominates, on a device run
// (issue 18 item 4, docs/use-a-model.md "Host copies on devices"): a W-W-W tanh trunk (two frozen
// dense layers, W×W each) over a const batch x [B, W], under a small trainable 10-way head.
//
//   bench_host_memory [--backend host|cuda] [--width W] [--batch B] [--steps N] [--keep]
//
// Prints the process's resident set (/proc/self/statm) at each stage — before the model, after
// building it, after the capture, after DeviceRunner::release_host_copies (skipped with --keep),
// after N steps, after the restore — with the bytes the device holds (counted by a wrapper around
// the backend's alloc/free: on the host backend they are in this process, on CUDA in the GPU's
// memory) and the trainable state (value, gradient, Adam m and v of every trainable parameter).
// "host side" = resident set − the device's bytes when the backend is the host one.
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "device/backend.h"
#include "spec/dataset.h"
#include "spec/spec.h"
#include "spec/tensor_file.h"
#include "train/device_runner.h"
#include "train/model.h"

using namespace gr;

namespace {

double resident_mib() {
  std::ifstream f("/proc/self/statm");
  long pages = 0, resident = 0;
  f >> pages >> resident;
  return static_cast<double>(resident) * static_cast<double>(sysconf(_SC_PAGESIZE)) / (1 << 20);
}

// Forwards every call to `inner`, counting the bytes allocated and not yet freed.
class CountingBackend final : public device::Backend {
 public:
  explicit CountingBackend(std::unique_ptr<device::Backend> inner) : in_(std::move(inner)) {}
  size_t live_bytes() const { return live_; }
  std::string name() const override { return in_->name(); }
  device::Capabilities capabilities() const override { return in_->capabilities(); }
  std::string describe() const override { return in_->describe(); }
  device::Module* compile(const std::string& s, const std::string& n) override { return in_->compile(s, n); }
  device::Kernel* kernel(device::Module* m, const std::string& n) override { return in_->kernel(m, n); }
  device::Buffer alloc(size_t bytes) override {
    const device::Buffer b = in_->alloc(bytes);
    live_ += b.bytes;
    return b;
  }
  void free(device::Buffer b) override {
    in_->free(b);
    live_ -= b.bytes;
  }
  void upload(device::Buffer d, const void* s, size_t n, size_t o) override { in_->upload(d, s, n, o); }
  void download(void* d, device::Buffer s, size_t n, size_t o) override { in_->download(d, s, n, o); }
  void launch(device::Kernel* k, unsigned g, unsigned b, void** a) override { in_->launch(k, g, b, a); }
  unsigned max_block(device::Kernel* k) const override { return in_->max_block(k); }
  void synchronize() override { in_->synchronize(); }
  void begin_capture() override { in_->begin_capture(); }
  void end_capture() override { in_->end_capture(); }
  void replay() override { in_->replay(); }
  bool has_capture() const override { return in_->has_capture(); }
  uint64_t capture_id() const override { return in_->capture_id(); }
  void abort_capture() noexcept override { in_->abort_capture(); }
  void clear_capture() noexcept override { in_->clear_capture(); }

 private:
  std::unique_ptr<device::Backend> in_;
  size_t live_ = 0;
};

std::string spec_text(int width, int batch) {
  std::string x = "[", y = "[";
  for (int i = 0; i < batch * width; ++i) x += (i ? "," : "") + std::to_string(((i * 7919) % 1009 - 504) / 1009.0);
  for (int i = 0; i < batch * 10; ++i) y += std::string(i ? "," : "") + (i % 10 == (i / 10) % 10 ? "1" : "0");
  const std::string w = std::to_string(width);
  return R"({"gradrun": 1, "seed": 1,
    "consts": {"x": {"shape": [)" + std::to_string(batch) + "," + w + R"(], "values": )" + x + R"(]},
               "y": {"shape": [)" + std::to_string(batch) + R"(, 10], "values": )" + y + R"(]}},
    "graph": [
      {"id": "t1", "layer": "dense", "inputs": ["x"], "units": )" + w + R"(, "activation": "tanh", "trainable": false},
      {"id": "t2", "layer": "dense", "inputs": ["t1"], "units": )" + w + R"(, "activation": "tanh", "trainable": false},
      {"id": "logits", "layer": "dense", "inputs": ["t2"], "units": 10},
      {"id": "loss", "op": "softmax_cross_entropy", "inputs": ["logits", "y"]}],
    "loss": "loss", "optimizer": {"kind": "adam", "lr": 0.001}})";
}

}  // namespace

int main(int argc, char** argv) {
  std::string backend_kind = "host";
  int width = 1024, batch = 64, steps = 20;
  bool keep = false;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto next = [&] { return i + 1 < argc ? std::string(argv[++i]) : std::string(); };
    if (a == "--backend") backend_kind = next();
    else if (a == "--width") width = std::atoi(next().c_str());
    else if (a == "--batch") batch = std::atoi(next().c_str());
    else if (a == "--steps") steps = std::atoi(next().c_str());
    else if (a == "--keep") keep = true;
    else {
      std::fprintf(stderr, "usage: bench_host_memory [--backend host|cuda] [--width W] [--batch B] [--steps N] [--keep]\n");
      return 2;
    }
  }
  try {
    DeviceKind kind = DeviceKind::Cpu;
    if (!parse_device_kind(backend_kind, kind) || kind == DeviceKind::Cpu) throw Error("--backend: expected host, cuda or auto");
    auto counting = std::make_unique<CountingBackend>(device::select_backend(kind).backend);
    CountingBackend* dev = counting.get();
    const bool in_process = backend_kind == "host";
    double host_side = 0;
    auto row = [&](const char* stage) {
      const double rss = resident_mib(), d = static_cast<double>(dev->live_bytes()) / (1 << 20);
      host_side = in_process ? rss - d : rss;
      std::printf("%-28s resident %8.1f MiB   device %8.1f MiB   host side %8.1f MiB\n", stage, rss, d, in_process ? rss - d : rss);
    };
    Spec spec = parse_spec(spec_text(width, batch), "bench_host_memory.json");
    row("before the model");
    const double baseline = host_side;
    Model model(spec, load_datasets(spec));
    release_tensor_values(spec);  // the spec's copy of x goes, as in gradrun train
    Optimizer opt = model.make_optimizer();
    row("model built");
    DeviceRunner runner(model, opt, std::move(counting), DType::F64, FuseMode::Off);
    row("captured");
    size_t dropped = 0;
    if (!keep) {
      dropped = runner.release_host_copies();
      row("host copies released");
    }
    for (int s = 0; s < steps; ++s) runner.step({}, s + 1);
    row(("after " + std::to_string(steps) + " steps").c_str());
    const double training_growth = host_side - baseline;
    runner.sync();
    row("restored (sync)");
    double trainable = 0, frozen = 0;
    for (size_t i = 0; i < model.params().size(); ++i)
      (model.program().params[i].trainable ? trainable : frozen) += static_cast<double>(model.program().params[i].shape.numel());
    std::printf("trunk %d-%d-%d frozen (%.1f MiB of values), batch %d, head 10 trainable: trainable state %.2f MiB "
                "(value, gradient, m, v); dropped %.1f MiB of host copies\n",
                width, width, width, frozen * 8 / (1 << 20), batch, trainable * 8 * 4 / (1 << 20),
                static_cast<double>(dropped) / (1 << 20));
    std::printf("while training, the host side is %.1f MiB above the process before the model: the trainable state, "
                "one batch's activations on the CPU tape (for evaluation) and the compiled kernels\n",
                training_growth);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_host_memory: %s\n", e.what());
    return 3;
  }
  return 0;
}
