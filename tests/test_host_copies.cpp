// test_host_copies.cpp — host copies of the leaves a device run never changes (issue 18 item 4,
// docs/use-a-model.md "Host copies on devices"): big consts and frozen parameters live in pages of
// their own, Tape::drop_value gives those pages back to the system (the process's resident set
// shrinks by their size), and a DeviceRunner drops them after the capture and downloads them back
// for evaluation and files — the same bytes, and training that is the CPU tape's bit for bit.
#include <unistd.h>

#include <catch2/catch.hpp>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

#include "device/backend.h"
#include "grad/optimizer.h"
#include "grad/tape.h"
#include "spec/dataset.h"
#include "spec/spec.h"
#include "support/skip.h"
#include "support/temp_dir.h"
#include "train/device_runner.h"
#include "train/model.h"

using namespace gr;

namespace {

// Resident bytes of this process (Linux /proc/self/statm), or -1.
long resident_bytes() {
  std::ifstream f("/proc/self/statm");
  long pages = 0, resident = -1;
  if (!(f >> pages >> resident)) return -1;
  return resident * sysconf(_SC_PAGESIZE);
}

std::vector<double> ramp(size_t n, double scale) {
  std::vector<double> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = scale * (static_cast<double>((i * 7919) % 1009) - 504.0) / 1009.0;
  return v;
}

std::string json_array(const std::vector<double>& v) {
  std::string s = "[";
  for (size_t i = 0; i < v.size(); ++i) s += (i ? "," : "") + std::to_string(v[i]);
  return s + "]";
}

// x [8,256] (small const, in the arena) · C [256,256] (big const, own pages) → a frozen dense trunk
// of 256 units (W [256,256] own pages, b [256] small) → a trainable head of 4 → mse against y.
std::string trunk_spec() {
  return R"({"gradrun": 1, "seed": 5,
    "consts": {"x": {"shape": [8, 256], "values": )" + json_array(ramp(8 * 256, 1.0)) + R"(},
               "C": {"shape": [256, 256], "values": )" + json_array(ramp(256 * 256, 0.1)) + R"(},
               "y": {"shape": [8, 4], "values": )" + json_array(ramp(32, 2.0)) + R"(}},
    "graph": [
      {"id": "h", "op": "matmul", "inputs": ["x", "C"]},
      {"id": "t", "layer": "dense", "inputs": ["h"], "units": 256, "activation": "tanh", "trainable": false},
      {"id": "z", "layer": "dense", "inputs": ["t"], "units": 4},
      {"id": "loss", "op": "mse", "inputs": ["z", "y"]}],
    "loss": "loss",
    "optimizer": {"kind": "adam", "lr": 0.01, "clip": 1.0}})";
}

std::vector<double> copy_of(Tape& t, Var v) {
  const ConstTensorView view = t.value(v);
  return std::vector<double>(view.data, view.data + view.shape.numel());
}

bool same_bytes(const std::vector<double>& a, const std::vector<double>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(double)) == 0;
}

std::unique_ptr<device::Backend> host_backend() {
  static test::TempDir cache("gr_test_host_copies");
  device::HostOptions o;
  o.cache_dir = cache.path;
  return device::make_host_backend(o);
}

}  // namespace

TEST_CASE("host copies: a big frozen parameter has its own pages; dropping them shrinks the resident set", "[host_copies]") {
  if (resident_bytes() < 0) GR_SKIP("procfs", "no /proc/self/statm to read the resident set from");
  Tape t;
  const std::vector<double> big = ramp(1024 * 1024, 3.0);  // 8 MiB
  const Var w = t.frozen_param(Shape{1024, 1024}, big);
  const Var small = t.frozen_param(Shape{4}, std::vector<double>{1, 2, 3, 4});
  const Var trained = t.param(Shape{4}, std::vector<double>{1, 2, 3, 4});
  CHECK_FALSE(t.node(w).requires_grad);
  CHECK(t.node(w).grad == nullptr);  // a frozen parameter never gets a gradient buffer

  const long before = resident_bytes();
  CHECK(t.drop_value(w) == big.size() * sizeof(double));
  const long after = resident_bytes();
  // munmap returns the pages at once: at least 90% of the 8 MiB leave the resident set.
  CHECK(before - after >= static_cast<long>(0.9 * static_cast<double>(big.size() * sizeof(double))));
  CHECK(t.dropped(w));
  CHECK_THROWS_AS(t.value(w), Error);
  CHECK(t.drop_value(w) == 0);  // already dropped

  CHECK(t.drop_value(small) == 0);  // in the arena: kept
  CHECK_FALSE(t.dropped(small));
  CHECK_THROWS_AS(t.drop_value(trained), Error);  // its value changes: never dropped

  // Ops on a dropped leaf record no values (as on a lazy const) rather than read freed memory.
  const Var r = t.sum(t.matmul(t.reshape(t.adds(t.frozen_param(Shape{1024}, ramp(1024, 1.0)), 0.0),
                                         std::vector<int64_t>{1, 1024}), w));
  CHECK_THROWS_AS(t.value(r), Error);

  const std::span<double> back = t.restore_value(w);
  std::memcpy(back.data(), big.data(), big.size() * sizeof(double));
  CHECK_FALSE(t.dropped(w));
  CHECK(same_bytes(copy_of(t, w), big));
}

TEST_CASE("host copies: a device run (f64 or f32) drops consts and frozen parameters after capture and restores "
          "them bit for bit", "[host_copies]") {
  const Spec spec = parse_spec(trunk_spec(), "trunk.json");
  constexpr int kSteps = 6;
  const DType dtype = GENERATE(DType::F64, DType::F32);
  const DType real = dtype;
  INFO("dtype " << to_string(dtype));

  // The CPU tape in the same precision: the reference bytes.
  Model cpu(spec, load_datasets(spec), real);
  Optimizer cpu_opt = cpu.make_optimizer();
  for (int s = 0; s < kSteps; ++s) {
    const std::vector<Var>& nodes = cpu.record(cpu.data().train, {}, cpu.dropout_key(s + 1));
    REQUIRE(cpu.tape().backward(nodes[static_cast<size_t>(cpu.program().loss)]));
    cpu_opt.step(cpu.tape());
    cpu.reset();
  }

  for (const FuseMode fuse : {FuseMode::Off, FuseMode::On}) {
    DYNAMIC_SECTION((fuse == FuseMode::On ? "fused" : "per node")) {
      Model m(spec, load_datasets(spec), real);
      std::vector<std::vector<double>> fixed_before;
      for (const Var v : m.fixed_leaves()) fixed_before.push_back(copy_of(m.tape(), v));
      Optimizer opt = m.make_optimizer();
      DeviceRunner runner(m, opt, host_backend(), dtype, fuse);
      // C [256,256] and the trunk's W [256,256] have own pages; x, y and the trunk's b are small.
      CHECK(runner.release_host_copies() == 2 * 256 * 256 * sizeof(double));
      CHECK(runner.release_host_copies() == 0);  // idempotent
      int dropped = 0;
      for (const Var v : m.fixed_leaves()) dropped += m.tape().dropped(v) ? 1 : 0;
      CHECK(dropped == 2);
      for (int s = 0; s < kSteps; ++s) {
        runner.step({}, s + 1);
        if (s == 2) {  // a mid-run evaluation: restored, then dropped again
          runner.sync();
          for (const Var v : m.fixed_leaves()) CHECK_FALSE(m.tape().dropped(v));
          CHECK(runner.release_host_copies() == 2 * 256 * 256 * sizeof(double));
        }
      }
      runner.sync();
      for (size_t i = 0; i < m.fixed_leaves().size(); ++i) CHECK(same_bytes(copy_of(m.tape(), m.fixed_leaves()[i]), fixed_before[i]));
      for (size_t k = 0; k < m.params().size(); ++k)
        CHECK(same_bytes(copy_of(m.tape(), m.params()[k]), copy_of(cpu.tape(), cpu.params()[k])));
      // The tape records again after the restore: the loss of the trained model is the CPU tape's.
      const double dev_loss = m.tape().scalar(m.record(m.data().train, {})[static_cast<size_t>(m.program().loss)]);
      m.reset();
      const double cpu_loss = cpu.tape().scalar(cpu.record(cpu.data().train, {})[static_cast<size_t>(cpu.program().loss)]);
      cpu.reset();
      CHECK(std::memcmp(&dev_loss, &cpu_loss, sizeof(double)) == 0);
    }
  }
}

TEST_CASE("host copies: an f32 device program needs an f32 tape (whose values it holds exactly)", "[host_copies]") {
  const Spec spec = parse_spec(trunk_spec(), "trunk.json");
  Model m(spec, load_datasets(spec));
  Optimizer opt = m.make_optimizer();
  CHECK_THROWS_AS(DeviceRunner(m, opt, host_backend(), DType::F32, FuseMode::Off), Error);
  for (const Var v : m.fixed_leaves()) CHECK_FALSE(m.tape().dropped(v));
}
