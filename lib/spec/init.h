// init.h — parameter initialization (every INIT kind of the spec), from random.h's generator.
//
// Element i of parameter p (registration order) draws from stream p:
//   uniform(lo, hi): lo + (hi − lo) · unit(seed, p, i)
//   normal(mean, std): z = Σ_{j=0..11, ascending} unit(seed, p, 12i + j) − 6   (Irwin–Hall: mean 0,
//                      variance 1, tails cut at ±6σ — only + and −, so numpy matches bit for bit);
//                      mean + std · z
//   fans: rank ≥ 2 → fan_in = shape[-2], fan_out = shape[-1] (matmul weights are [in, out]);
//         rank 1 → fan_in = fan_out = shape[0]; InitSpec::fan_in/fan_out > 0 replace them (conv2d
//         layers: C/g·kh·kw and F·kh·kw)
//   xavier_uniform  a = sqrt(6 / (fan_in + fan_out)), uniform(−a, a)
//   xavier_normal   std = sqrt(2 / (fan_in + fan_out))
//   kaiming_uniform a = sqrt(6 / fan_in)          (torch's default gain for relu, √2)
//   kaiming_normal  std = sqrt(2 / fan_in)
#pragma once
#include <cstdint>
#include <vector>

#include "spec/spec.h"
#include "tensor/shape.h"

namespace gr {

std::vector<double> init_values(const InitSpec& init, const Shape& shape, uint64_t seed, uint64_t param_index);

}  // namespace gr
