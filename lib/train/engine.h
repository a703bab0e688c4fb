// engine.h — the engine a command runs on, chosen once: the spec's "device" object (DeviceSpec:
// kind, dtype, fuse) with the command line's flags applied, auto resolved (CUDA when usable, else
// the CPU tape) and the device's backend opened. open_engine is the one place a backend is opened;
// train, check, grad and predict each take the Engine it returns.
#pragma once
#include <memory>
#include <string>

#include "device/backend.h"
#include "spec/spec.h"

namespace gr {

struct Engine {
  DeviceSpec spec;                           // kind is Cpu, Host or Cuda (never Auto)
  std::unique_ptr<device::Backend> backend;  // the device's; null on the CPU tape
  bool on_device() const { return spec.kind != DeviceKind::Cpu; }
  // The backend, handed to the one engine that runs on it (Error when there is none).
  std::unique_ptr<device::Backend> take_backend();
};

// Host | Cuda: opened (device::DeviceUnavailable, saying which device, when it cannot be had);
// Auto: CUDA when usable, else the CPU tape (the choice logged at info level); Cpu: no backend.
// The CPU tape ignores fuse (the CLI refuses fuse on without a device).
Engine open_engine(const DeviceSpec& want);

// The command line over the spec's "device" object: a non-empty flag replaces the spec's value
// (flags are words CLI11 checked; UsageError-worthy ones throw Error); fuse_flag forces fuse On.
DeviceSpec engine_request(const DeviceSpec& from_spec, const std::string& device_flag, const std::string& dtype_flag, bool fuse_flag);

}  // namespace gr
