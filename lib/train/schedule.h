// schedule.h — optimizer.schedule: the learning rate of each optimizer step (issue 16 item 2).
//
// Computed on the host, once per step, and handed to the optimizer before the step (the CPU tape's
// Optimizer and the device optimizer's control block alike, as Adam's lr_t already is), so every
// path uses the same number. With t the 1-based step, e its 0-based epoch, lr the spec's rate:
//   constant   lr
//   step       lr · gamma^⌊e / every⌋           (gamma^k as k rounded multiplications from 1)
//   cosine     min_lr + (lr − min_lr) · (1 + cos(π · p)) / 2,  p = min(1, (t − 1) / (T − 1)),
//              T = schedule.epochs × steps per epoch (T = 1: p = 0); cos is kernels' gr_cos
//   warmup W   for t ≤ W the rate above times t / W
// Only correctly rounded operations and gr_cos, so the value is the same on every machine.
#pragma once
#include <cstdint>

#include "spec/spec.h"

namespace gr {

double scheduled_lr(const OptimizerSpec& opt, int64_t step, int64_t epoch, int64_t steps_per_epoch);

}  // namespace gr
