#include "spec/init.h"

#include <cmath>

#include "spec/random.h"

namespace gr {

std::vector<int64_t> random_permutation(int64_t n, uint64_t seed, uint64_t stream) {
  std::vector<int64_t> a(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) a[static_cast<size_t>(i)] = i;
  for (int64_t i = n - 1; i >= 1; --i) {
    const int64_t j = static_cast<int64_t>(random_bits(seed, stream, static_cast<uint64_t>(i)) % static_cast<uint64_t>(i + 1));
    std::swap(a[static_cast<size_t>(i)], a[static_cast<size_t>(j)]);
  }
  return a;
}

std::vector<double> init_values(const InitSpec& init, const Shape& shape, uint64_t seed, uint64_t p) {
  using K = InitSpec::Kind;
  const int64_t n = shape.numel();
  const int r = shape.rank();
  const double fan_in = static_cast<double>(init.fan_in > 0 ? init.fan_in : r >= 2 ? shape[r - 2] : shape[0]);
  const double fan_out = static_cast<double>(init.fan_out > 0 ? init.fan_out : r >= 2 ? shape[r - 1] : shape[0]);
  std::vector<double> v(static_cast<size_t>(n), 0.0);
  auto uniform = [&](double lo, double hi) {
    for (int64_t i = 0; i < n; ++i) v[static_cast<size_t>(i)] = lo + (hi - lo) * random_unit(seed, p, static_cast<uint64_t>(i));
  };
  auto normal = [&](double mean, double std) {
    for (int64_t i = 0; i < n; ++i) {
      double z = 0.0;
      for (uint64_t j = 0; j < 12; ++j) z = z + random_unit(seed, p, 12 * static_cast<uint64_t>(i) + j);
      v[static_cast<size_t>(i)] = mean + std * (z - 6.0);
    }
  };
  switch (init.kind) {
    case K::Zeros: break;
    case K::Ones: std::fill(v.begin(), v.end(), 1.0); break;
    case K::Constant: std::fill(v.begin(), v.end(), init.a); break;
    case K::Uniform: uniform(init.a, init.b); break;
    case K::Normal: normal(init.a, init.b); break;
    case K::XavierUniform: {
      const double a = std::sqrt(6.0 / (fan_in + fan_out));
      uniform(-a, a);
      break;
    }
    case K::XavierNormal: normal(0.0, std::sqrt(2.0 / (fan_in + fan_out))); break;
    case K::KaimingUniform: {
      const double a = std::sqrt(6.0 / fan_in);
      uniform(-a, a);
      break;
    }
    case K::KaimingNormal: normal(0.0, std::sqrt(2.0 / fan_in)); break;
    case K::Values: v = init.values; break;
  }
  return v;
}

}  // namespace gr
