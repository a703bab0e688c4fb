// test_replay_f32_matmul.cpp — the CPU's f32 matmul (gr::matmul_exact on MatmulArgsF32) gives the
// bytes an f32 device program computes (--device host --dtype f32: the per-node kernels, gr_dot<float>)
// for matmul and bmm forward and for their backward's dA and dB: the first piece of issue 15 item 2
// (an f32 CPU tape bitwise equal to the f32 device), checked across odd shapes and broadcasts.
#include <catch2/catch.hpp>
#include <cstring>
#include <random>
#include <vector>

#include "support/replay_support.h"
#include "tensor/matmul.h"

using namespace gr;
using namespace gr::replaytest;

namespace {

// Float-representable values in doubles, so the device's f32 upload is exact.
std::vector<double> floats(std::mt19937_64& rng, int64_t n) {
  std::uniform_real_distribution<float> u(-2.0f, 2.0f);
  std::vector<double> v(static_cast<size_t>(n));
  for (double& x : v) x = static_cast<double>(u(rng));
  return v;
}
std::vector<float> narrow(const std::vector<double>& v) { return std::vector<float>(v.begin(), v.end()); }
bool same(const std::vector<float>& a, const std::vector<double>& widened) {
  const std::vector<float> b = narrow(widened);  // exact: the device's f32 values come back widened
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

}  // namespace

TEST_CASE("f32: the CPU matmul gives the f32 device's bytes for matmul forward and backward", "[replay][f32]") {
  std::mt19937_64 rng(17);
  auto be = host();
  for (const auto [m, k, n] : {std::array<int64_t, 3>{1, 1, 1}, {3, 5, 7}, {17, 33, 9}, {64, 100, 40}, {200, 64, 6}}) {
    Tape t;
    const std::vector<double> av = floats(rng, m * k), bv = floats(rng, k * n);
    const Var a = t.param(Shape{m, k}, av), b = t.param(Shape{k, n}, bv);
    const Var c = t.matmul(a, b);
    const Var loss = t.sum(t.mul(c, t.constant(Shape{m, n}, floats(rng, m * n))));  // a non-uniform dC
    replay::ReplayOptions o;
    o.dtype = DType::F32;
    replay::Program prog(*be, t, loss, o);
    prog.forward();
    prog.backward();
    std::vector<double> c_dev(static_cast<size_t>(m * n)), ga(av.size()), gb(bv.size()), gc(c_dev.size());
    prog.value(c, c_dev);
    prog.grad(a, ga);
    prog.grad(b, gb);
    prog.grad(c, gc);

    const std::vector<float> af = narrow(av), bf = narrow(bv), gcf = narrow(gc);
    std::vector<float> c_cpu(c_dev.size()), ga_cpu(ga.size(), 0.0f), gb_cpu(gb.size(), 0.0f);
    matmul_exact(MatmulArgsF32{af.data(), k, 1, bf.data(), n, 1, c_cpu.data(), m, k, n, MatmulStore::Overwrite});
    // dA = dC·Bᵀ and dB = Aᵀ·dC, accumulated into zeroed gradients (backward.cpp's layouts).
    matmul_exact(MatmulArgsF32{gcf.data(), n, 1, bf.data(), 1, n, ga_cpu.data(), m, n, k, MatmulStore::Accumulate});
    matmul_exact(MatmulArgsF32{af.data(), 1, k, gcf.data(), n, 1, gb_cpu.data(), k, m, n, MatmulStore::Accumulate});
    INFO("M=" << m << " K=" << k << " N=" << n);
    CHECK(same(c_cpu, c_dev));
    CHECK(same(ga_cpu, ga));
    CHECK(same(gb_cpu, gb));
  }
}

TEST_CASE("f32: the CPU matmul gives the f32 device's bytes for bmm, a batch of one broadcast", "[replay][f32]") {
  std::mt19937_64 rng(23);
  auto be = host();
  const int64_t B = 3, M = 5, K = 9, N = 4;
  for (const bool broadcast_b : {false, true}) {
    Tape t;
    const int64_t bb = broadcast_b ? 1 : B;
    const std::vector<double> av = floats(rng, B * M * K), bv = floats(rng, bb * K * N);
    const Var a = t.param(Shape{B, M, K}, av), b = t.param(Shape{bb, K, N}, bv);
    const Var c = t.bmm(a, b);
    replay::ReplayOptions o;
    o.dtype = DType::F32;
    replay::Program prog(*be, t, t.sum(c), o);
    prog.forward();
    std::vector<double> c_dev(static_cast<size_t>(B * M * N));
    prog.value(c, c_dev);
    const std::vector<float> af = narrow(av), bf = narrow(bv);
    std::vector<float> c_cpu(c_dev.size());
    for (int64_t i = 0; i < B; ++i)
      matmul_exact(MatmulArgsF32{af.data() + i * M * K, K, 1, bf.data() + (broadcast_b ? 0 : i) * K * N, N, 1,
                                 c_cpu.data() + i * M * N, M, K, N, MatmulStore::Overwrite});
    INFO("broadcast b: " << broadcast_b);
    CHECK(same(c_cpu, c_dev));
  }
}
