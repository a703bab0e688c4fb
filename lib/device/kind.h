// kind.h — where a command runs: the CPU tape, or a device engine (lib/replay) on the host or CUDA
// backend; auto: CUDA when usable, else the CPU tape. The spec's "device": {"kind": ...}, the
// command line's --device and device::select_backend all take this enum (no strings in between).
#pragma once
#include <string>

namespace gr {

enum class DeviceKind { Cpu, Host, Cuda, Auto };

// The spelling of the spec and the command line: cpu | host | cuda | auto.
inline const char* to_string(DeviceKind kind) {
  switch (kind) {
    case DeviceKind::Cpu: return "cpu";
    case DeviceKind::Host: return "host";
    case DeviceKind::Cuda: return "cuda";
    case DeviceKind::Auto: return "auto";
  }
  return "?";
}

// false for an unknown word (out unchanged).
inline bool parse_device_kind(const std::string& word, DeviceKind& out) {
  for (DeviceKind k : {DeviceKind::Cpu, DeviceKind::Host, DeviceKind::Cuda, DeviceKind::Auto})
    if (word == to_string(k)) {
      out = k;
      return true;
    }
  return false;
}

}  // namespace gr
