#include "train/engine.h"

#include "io/errors.h"
#include "tensor/diag.h"

namespace gr {

std::unique_ptr<device::Backend> Engine::take_backend() {
  if (!backend) throw Error(std::string("engine ") + to_string(spec.kind) + ": no device backend to run on (taken already, or the CPU tape)");
  return std::move(backend);
}

Engine open_engine(const DeviceSpec& want) {
  Engine e;
  e.spec = want;
  if (want.kind != DeviceKind::Cpu) {
    device::Selection s;
    try {
      s = device::select_backend(want.kind);
    } catch (const device::DeviceUnavailable& x) {
      std::string reason = x.what();
      if (reason.rfind("unavailable: ", 0) == 0) reason = reason.substr(13);
      throw device::DeviceUnavailable(std::string("device \"") + to_string(want.kind) + "\" is not available: " + reason);
    }
    e.backend = std::move(s.backend);
    if (want.kind == DeviceKind::Auto) {
      e.spec.kind = e.backend ? DeviceKind::Cuda : DeviceKind::Cpu;
      diag::info(e.backend ? std::string("device auto: using CUDA") : "device auto: using the CPU tape (" + s.why + ")");
    }
  }
  return e;
}

DeviceSpec engine_request(const DeviceSpec& from_spec, const std::string& device_flag, const std::string& dtype_flag, bool fuse_flag) {
  DeviceSpec d = from_spec;
  if (fuse_flag) d.fuse = FuseMode::On;
  if (!device_flag.empty() && !parse_device_kind(device_flag, d.kind)) throw Error("unknown device " + device_flag);
  if (!dtype_flag.empty() && !parse_dtype(dtype_flag, d.dtype)) throw Error("unknown dtype " + dtype_flag);
  return d;
}

}  // namespace gr
