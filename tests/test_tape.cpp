// test_tape.cpp — tape semantics: values, requires-grad propagation, lazy and dropped constants,
// mark/reset_to, repeated backward, set_value, and the same bytes on any thread count.
#include <catch2/catch.hpp>
#include <cmath>
#include <cstring>
#include <vector>

#include "grad/optimizer.h"
#include "grad/owned.h"
#include "grad/tape.h"
#include "tensor/parallel.h"

using namespace gr;

TEST_CASE("forward values of a few ops", "[tape]") {
  Tape t;
  const Var x = t.constant(Shape{2, 3}, std::vector<double>{1, 2, 3, 4, 5, 6});
  CHECK(t.value(t.transpose(x)).values()[1] == 4.0);
  const int64_t starts[] = {1, 1}, stops[] = {2, 3};
  const auto s = t.value(t.slice(x, starts, stops));
  CHECK(s.shape == Shape{1, 2});
  CHECK(s[0] == 5.0);
  CHECK(s[1] == 6.0);
  const auto c = t.value(t.concat(x, x, 1));
  CHECK(c.shape == Shape{2, 6});
  CHECK(c[3] == 1.0);
  CHECK(c[6] == 4.0);
  const auto sm = t.value(t.softmax(x, 0));
  CHECK(sm[0] + sm[3] == Approx(1.0));
  CHECK(t.value(t.relu(t.constant(Shape{3}, std::vector<double>{-1.0, 0.0, NAN}))).values()[0] == 0.0);
  CHECK(std::isnan(t.value(t.relu(t.constant(Shape{1}, std::vector<double>{NAN})))[0]));
  CHECK(t.value(t.mean(x, 1, true)).shape == Shape{2, 1});
  CHECK(t.value(t.sum(x, 0)).shape == Shape{3});
  const int64_t flat[] = {-1};
  CHECK(t.value(t.reshape(x, flat)).shape == Shape{6});
}

TEST_CASE("softmax cross-entropy is stable for huge logits", "[tape]") {
  Tape t;
  const Var x = t.param(Shape{2, 3}, std::vector<double>{1000, 0, -1000, -5e300, 5e300, 0});
  const Var y = t.constant(Shape{2, 3}, std::vector<double>{1, 0, 0, 0, 1, 0});
  const Var loss = t.softmax_cross_entropy(x, y);
  CHECK(t.scalar(loss) == 0.0);
  REQUIRE(t.backward(loss));
  for (double g : t.grad(x).values()) CHECK(std::isfinite(g));
}

TEST_CASE("const-only branches get no gradient memory and report zeros", "[tape]") {
  Tape t;
  const Var w = t.param(Shape{3}, std::vector<double>{1, 2, 3});
  const Var c = t.constant(Shape{3}, std::vector<double>{4, 5, 6});
  const Var frozen = t.exp(t.muls(c, 0.5));  // no parameter upstream
  const Var loss = t.sum(t.mul(w, frozen));
  REQUIRE(t.backward(loss));
  CHECK_FALSE(t.node(frozen).requires_grad);
  CHECK(t.node(frozen).grad == nullptr);
  CHECK(t.node(c).grad == nullptr);
  for (double g : t.grad(frozen).values()) CHECK(g == 0.0);
  CHECK(t.grad(w)[2] == t.value(frozen)[2]);
}

TEST_CASE("backward twice accumulates parameter gradients, not intermediates", "[tape]") {
  Tape t;
  const Var w = t.param(Shape{2}, std::vector<double>{1.5, -2});
  const Var loss = t.sum(t.mul(t.tanh(w), t.adds(w, 1.0)));
  REQUIRE(t.backward(loss));
  const std::vector<double> once(t.grad(w).values().begin(), t.grad(w).values().end());
  REQUIRE(t.backward(loss));
  CHECK(t.grad(w)[0] == once[0] + once[0]);
  CHECK(t.grad(w)[1] == once[1] + once[1]);
}

TEST_CASE("reset_to drops nodes, zeroes the remaining gradients and rejects bad marks", "[tape]") {
  Tape t;
  const Var w = t.param(Shape{2}, std::vector<double>{1, 2});
  const int32_t mark = t.mark();
  REQUIRE(t.backward(t.sum(t.mul(w, w))));
  CHECK(t.grad(w)[1] == 4.0);
  CHECK(t.node(w).touched);
  t.reset_to(mark);
  CHECK(t.size() == mark);
  CHECK(t.grad(w)[1] == 0.0);
  CHECK_FALSE(t.node(w).touched);
  CHECK_THROWS_AS(t.reset_to(5), Error);
}

TEST_CASE("lazy constants record shapes but the CPU tape refuses to evaluate them", "[tape]") {
  Tape t;
  const Var w = t.param(Shape{3, 2}, std::vector<double>(6, 0.1));
  const Var x = t.constant_lazy(Shape{4, 3});
  const Var y = t.matmul(x, w);
  REQUIRE(t.ok());
  CHECK(t.node(y).shape == Shape{4, 2});
  CHECK(t.node(y).val == nullptr);
  CHECK_THROWS_WITH(t.value(y), Catch::Contains("lazy"));
  CHECK_FALSE(t.backward(t.sum(y)));
  CHECK(t.error().find("cannot evaluate") != std::string::npos);
}

TEST_CASE("drop_consts frees constant values; later ops record without values", "[tape]") {
  Tape t;
  const Var big = t.constant(Shape{300, 300}, std::vector<double>(90000, 1.0));
  const Var small = t.constant(Shape{2}, std::vector<double>{1, 2});
  const Var w = t.param(Shape{2}, std::vector<double>{3, 4});
  t.drop_consts();
  CHECK(t.node(big).val == nullptr);
  CHECK(t.node(small).val == nullptr);
  CHECK(t.value(w)[0] == 3.0);
  const Var y = t.mul(w, small);
  REQUIRE(t.ok());
  CHECK(t.node(y).val == nullptr);
}

TEST_CASE("set_value refreshes an input slot in place", "[tape]") {
  Tape t;
  const Var x = t.constant(Shape{2}, std::vector<double>{1, 2});
  const int32_t mark = t.mark();
  CHECK(t.scalar(t.sum(x)) == 3.0);
  t.reset_to(mark);
  t.set_value(x, std::vector<double>{10, 20});
  CHECK(t.scalar(t.sum(x)) == 30.0);
  CHECK_THROWS_AS(t.set_value(x, std::vector<double>{1}), Error);
}

TEST_CASE("the op table names every op once", "[tape]") {
  for (size_t i = 0; i < kOpCount; ++i) {
    CHECK(static_cast<size_t>(kOps[i].op) == i);
    CHECK(op_by_name(kOps[i].name) == kOps[i].op);
  }
  CHECK_FALSE(op_by_name("conv3d").has_value());
}

// Every loop the threads split (grad/owned.h, tensor/matmul.h): products split by columns ([64,512])
// and by rows ([512,64]), bias adds with a [N] and a [1,N] bias (the bias gradient inside the column
// blocks and after row blocks), activations, x·x (both sides into one slot), the zeroing of
// gradients by reset_to, and an Adam step. 1 to 4 threads must give the same bytes.
namespace {

std::vector<double> filled(int64_t n, uint64_t seed) {
  std::vector<double> v(static_cast<size_t>(n));
  for (double& x : v) {
    seed = seed * 6364136223846793005ull + 1442695040888963407ull;
    const int64_t r = static_cast<int64_t>(seed >> 33) % 2001 - 1000;  // zeros and both signs
    x = std::ldexp(static_cast<double>(r), -static_cast<int>(seed >> 60) - 9);
  }
  return v;
}

// The elementwise loops split only tensors of at least kOwnedMinElems elements.
static_assert(64 * 512 >= kOwnedMinElems && 512 * 64 >= kOwnedMinElems, "the test's tensors must be split");

std::vector<std::vector<double>> split_episodes(int threads, DType real) {
  set_num_threads(threads);
  Tape t(real);
  const Var x = t.constant(Shape{64, 300}, filled(64 * 300, 1));
  const Var u = t.constant(Shape{512, 40}, filled(512 * 40, 2));
  const Var w1 = t.param(Shape{300, 512}, filled(300 * 512, 3)), b1 = t.param(Shape{512}, filled(512, 4));
  const Var w2 = t.param(Shape{40, 64}, filled(40 * 64, 5)), b2 = t.param(Shape{1, 64}, filled(64, 6));
  Optimizer opt = Optimizer::adam(1e-2);
  for (const Var p : {w1, b1, w2, b2}) opt.add(t, p);
  const int32_t mark = t.mark();
  std::vector<std::vector<double>> out;
  const auto keep = [&](ConstTensorView v) { out.emplace_back(v.values().begin(), v.values().end()); };
  for (int episode = 0; episode < 2; ++episode) {
    const Var h = t.relu(t.add(t.matmul(x, w1), b1));       // [64,512]: columns split
    const Var s = t.sub(t.sigmoid(h), t.mul(h, h));         // equal shapes, x·x
    const Var k = t.tanh(t.add(t.matmul(u, w2), b2));       // [512,64]: rows split
    const Var loss = t.add(t.mean(s), t.mean(t.mul(k, k)));
    REQUIRE(t.backward(loss));
    for (int32_t id = 0; id < t.size(); ++id) {
      keep(t.value(Var{id}));
      keep(t.grad(Var{id}));
    }
    opt.step(t);
    t.reset_to(mark);
    for (const Var p : {w1, b1, w2, b2}) {
      keep(t.value(p));
      keep(t.grad(p));  // zeroed by reset_to
    }
  }
  set_num_threads(1);
  return out;
}

}  // namespace

TEST_CASE("1, 2, 3 and 4 threads give identical bytes in every split loop (f64 and f32 tapes)", "[tape][threads]") {
  const DType real = GENERATE(DType::F64, DType::F32);  // f32: its conversions split too (tape_real.cpp)
  INFO((real == DType::F32 ? "f32" : "f64"));
  const std::vector<std::vector<double>> one = split_episodes(1, real);
  for (int threads = 2; threads <= 4; ++threads) {
    INFO(threads << " threads");
    const std::vector<std::vector<double>> many = split_episodes(threads, real);
    REQUIRE(many.size() == one.size());
    for (size_t i = 0; i < one.size(); ++i) {
      INFO("tensor " << i);
      REQUIRE(many[i].size() == one[i].size());
      CHECK(std::memcmp(many[i].data(), one[i].data(), one[i].size() * sizeof(double)) == 0);
    }
  }
}
