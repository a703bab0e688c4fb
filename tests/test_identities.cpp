// test_identities.cpp — exact identities, compared bitwise (memcmp), never with a tolerance.
#include <catch2/catch.hpp>
#include <cstring>
#include <vector>

#include "grad/tape.h"
#include "support/rng.h"
#include "tensor/reduce.h"

using namespace gr;
using gr::test::Rng;

namespace {
bool same_bits(std::span<const double> a, std::span<const double> b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size_bytes()) == 0;
}
std::vector<double> copy(std::span<const double> s) { return {s.begin(), s.end()}; }
}  // namespace

TEST_CASE("d/dx sum(x*x) is exactly 2x", "[identity]") {
  Rng rng(1);
  Tape t;
  const std::vector<double> xs = rng.uniform_vec(1000, -1e3, 1e3);
  const Var x = t.param(Shape{1000}, xs);
  REQUIRE(t.backward(t.sum(t.mul(x, x))));
  std::vector<double> two_x(xs.size());
  for (size_t i = 0; i < xs.size(); ++i) two_x[i] = 2.0 * xs[i];
  REQUIRE(same_bits(t.grad(x).values(), two_x));
}

TEST_CASE("an episode after reset_to equals the one before it, bit for bit", "[identity]") {
  Rng rng(2);
  Tape t;
  const Var w1 = t.param(Shape{5, 8}, rng.uniform_vec(40, -1, 1));
  const Var b1 = t.param(Shape{8}, rng.uniform_vec(8, -1, 1));
  const Var w2 = t.param(Shape{8, 3}, rng.uniform_vec(24, -1, 1));
  const std::vector<double> xs = rng.uniform_vec(20, -2, 2), ys = {1, 0, 0, 0, 1, 0, 0, 0, 1, 0, 1, 0};
  const int32_t mark = t.mark();
  auto episode = [&] {
    const Var x = t.constant(Shape{4, 5}, xs);
    const Var y = t.constant(Shape{4, 3}, ys);
    const Var h = t.tanh(t.add(t.matmul(x, w1), b1));
    const Var loss = t.softmax_cross_entropy(t.matmul(h, w2), y);
    REQUIRE(t.backward(loss));
    std::vector<double> out = copy(t.value(loss).values());
    for (const Var p : {w1, b1, w2}) {
      const auto g = t.grad(p).values();
      out.insert(out.end(), g.begin(), g.end());
    }
    for (int32_t id = 0; id < t.size(); ++id) {
      const auto v = t.value(Var{id}).values();
      out.insert(out.end(), v.begin(), v.end());
    }
    return out;
  };
  const std::vector<double> first = episode();
  t.reset_to(mark);
  const std::vector<double> second = episode();
  REQUIRE(same_bits(first, second));
}

// The contract (docs/numerics.md): one std::fma per k step, ascending. tests/test_fma_contract.py checks
// the same against exact rational arithmetic, without the C library's fma.
TEST_CASE("the tape's matmul equals a plain serial-k fma loop", "[identity]") {
  Rng rng(3);
  const int64_t M = 37, K = 53, N = 29;
  std::vector<double> a(M * K), b(K * N);
  for (double& v : a) v = rng.uniform(-1, 1) * std::ldexp(1.0, static_cast<int>(rng.next() % 40) - 20);
  for (double& v : b) v = rng.uniform(-1, 1) * std::ldexp(1.0, static_cast<int>(rng.next() % 40) - 20);
  Tape t;
  const Var c = t.matmul(t.constant(Shape{M, K}, a), t.constant(Shape{K, N}, b));
  std::vector<double> want(M * N);
  for (int64_t i = 0; i < M; ++i)
    for (int64_t j = 0; j < N; ++j) {
      double acc = 0.0;
      for (int64_t k = 0; k < K; ++k) acc = std::fma(a[i * K + k], b[k * N + j], acc);
      want[i * N + j] = acc;
    }
  REQUIRE(same_bits(t.value(c).values(), want));
}

TEST_CASE("sum equals a plain ascending loop; mean is that sum over n", "[identity]") {
  Rng rng(4);
  std::vector<double> xs(4099);
  for (double& v : xs) v = rng.uniform(-1, 1) * std::ldexp(1.0, static_cast<int>(rng.next() % 60) - 30);
  Tape t;
  const Var x = t.constant(Shape{4099}, xs);
  double acc = 0.0;
  for (double v : xs) acc = acc + v;
  const double mean = acc / 4099.0;
  REQUIRE(std::memcmp(&t.value(t.sum(x)).data[0], &acc, sizeof acc) == 0);
  REQUIRE(std::memcmp(&t.value(t.mean(x)).data[0], &mean, sizeof mean) == 0);
}

TEST_CASE("axis sums equal per-lane ascending loops", "[identity]") {
  Rng rng(5);
  const std::vector<double> xs = rng.uniform_vec(3 * 7 * 5, -1e6, 1e6);
  Tape t;
  const Var s = t.sum(t.constant(Shape{3, 7, 5}, xs), 1);
  std::vector<double> want(15);
  for (int o = 0; o < 3; ++o)
    for (int i = 0; i < 5; ++i) {
      double acc = 0.0;
      for (int k = 0; k < 7; ++k) acc = acc + xs[(o * 7 + k) * 5 + i];
      want[o * 5 + i] = acc;
    }
  REQUIRE(t.node(s).shape == Shape{3, 5});
  REQUIRE(same_bits(t.value(s).values(), want));
}

TEST_CASE("a broadcast input's gradient sums in row-major subsequence order", "[identity]") {
  // b [3] broadcast over a [4,3]: slot_b[j] = ((((0 + g0j) + g1j) + g2j) + g3j) with g = R.
  Rng rng(6);
  const std::vector<double> rs = rng.uniform_vec(12, -1e8, 1e8);
  Tape t;
  const Var a = t.constant(Shape{4, 3}, rng.uniform_vec(12, -1, 1));
  const Var b = t.param(Shape{3}, rng.uniform_vec(3, -1, 1));
  REQUIRE(t.backward(t.sum(t.mul(t.add(a, b), t.constant(Shape{4, 3}, rs)))));
  std::vector<double> want(3, 0.0);
  for (int i = 0; i < 4; ++i)
    for (int j = 0; j < 3; ++j) want[j] = want[j] + rs[i * 3 + j];
  REQUIRE(same_bits(t.grad(b).values(), want));
}

TEST_CASE("fan-out sums contributions in descending consumer order", "[identity]") {
  // y = 3x (muls), z = x·x; L = Σ y + Σ z. Consumers of x by descending id: mul (b then a side), muls.
  Tape t;
  const std::vector<double> xs = {0.1, -2.5, 7.0};
  const Var x = t.param(Shape{3}, xs);
  const Var y = t.muls(x, 3.0);
  const Var z = t.mul(x, x);
  REQUIRE(t.backward(t.add(t.sum(y), t.sum(z))));
  std::vector<double> want(3);
  for (int i = 0; i < 3; ++i) want[i] = ((0.0 + xs[i]) + xs[i]) + 3.0;
  REQUIRE(same_bits(t.grad(x).values(), want));
}
