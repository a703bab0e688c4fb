// replay_check.h — `gradrun check --replay`: N training episodes on the CPU tape and on a device,
// in lockstep, requiring bit-equal node values, gradients, losses and parameters.
#pragma once
#include <cstdint>
#include <memory>
#include <string>

#include "device/backend.h"
#include "spec/spec.h"
#include "train/model.h"

namespace gr {

struct ReplayCheckResult {
  bool equal = true;
  int64_t episodes = 0;
  std::string first_difference;  // "episode 3: node 5 (\"h2\", add [30, 16]) value element 17: cpu X, device Y"
  std::string device;
};

// Runs `episodes` steps of the spec's training loop on both paths (per-node launches, so each
// node can be compared), comparing everything after each backward; stops at the first difference.
// The comparison runs over a replay::Episode, so the per-node and fused schedules share it.
// fuse: the device side runs the fused kernels (lib/fuse, docs/fusion.md) instead of per-node launches
// (Auto: where the backend has launch latency to save, as in train). The precision is the model's.
// block / max_grid: the launch geometry (0 = the backend's default block; tests/fuzz_diff.cpp sweeps it).
ReplayCheckResult check_replay(Model& model, std::unique_ptr<device::Backend> backend, int64_t episodes,
                               FuseMode fuse = FuseMode::Off, unsigned block = 0, unsigned max_grid = 65535);

}  // namespace gr
