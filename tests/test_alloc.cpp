// test_alloc.cpp — a steady-state training episode performs zero heap allocations.
// This executable replaces the global operator new to count every allocation in the process.
#include <atomic>
#include <catch2/catch.hpp>
#include <cstdlib>
#include <new>
#include <vector>

#include "grad/optimizer.h"
#include "support/rng.h"

namespace {
std::atomic<long> g_allocations{0};
}

// GCC 12 at -O1 (test code's level, tests/CMakeLists.txt) inlines std::vector's deallocation into
// this free() and warns that it pairs with operator new: a false positive for a replaced global new.
#pragma GCC diagnostic ignored "-Wmismatched-new-delete"
void* operator new(std::size_t n) {
  g_allocations.fetch_add(1, std::memory_order_relaxed);
  if (void* p = std::malloc(n ? n : 1)) return p;
  throw std::bad_alloc();
}
void operator delete(void* p) noexcept { std::free(p); }
void operator delete(void* p, std::size_t) noexcept { std::free(p); }

using namespace gr;

TEST_CASE("steady-state episodes allocate nothing (f64 and f32 tapes, with and without clipping)", "[alloc]") {
  const DType real = GENERATE(DType::F64, DType::F32);  // f32: its float working copies are kept too
  const double clip = GENERATE(0.0, 1.0);           // 0: the norm is summed in the update's pass
  test::Rng rng(7);
  Tape t(real);
  const Var w1 = t.param(Shape{6, 16}, rng.uniform_vec(96, -0.5, 0.5));
  const Var b1 = t.param(Shape{16}, std::vector<double>(16, 0.0));
  const Var w2 = t.param(Shape{16, 3}, rng.uniform_vec(48, -0.5, 0.5));
  const Var x = t.constant(Shape{8, 6}, rng.uniform_vec(48, -1, 1));  // input slots, refreshed per batch
  const Var y = t.constant(Shape{8, 3}, std::vector<double>(24, 0.0));
  Optimizer opt = Optimizer::adam(0.01);
  opt.add(t, w1, 1e-4);
  opt.add(t, b1);
  opt.add(t, w2, 1e-4);
  opt.set_clip(clip);
  std::vector<double> xs(48), ys(24);
  const int32_t mark = t.mark();
  bool all_ok = true;  // no Catch assertions inside the measured loop: they may allocate
  auto episode = [&](int step) {
    for (size_t i = 0; i < xs.size(); ++i) xs[i] = static_cast<double>((step * 7 + static_cast<int>(i)) % 11) / 11.0;
    for (size_t r = 0; r < 8; ++r)
      for (size_t c = 0; c < 3; ++c) ys[r * 3 + c] = (r + static_cast<size_t>(step)) % 3 == c ? 1.0 : 0.0;
    t.set_value(x, xs);
    t.set_value(y, ys);
    const Var h = t.relu(t.add(t.matmul(x, w1), b1));
    const Var z = t.matmul(h, w2);
    const Var loss = t.add(t.softmax_cross_entropy(z, y), t.muls(t.mse(t.softmax(z, -1), y), 0.1));
    all_ok = t.backward(loss) && all_ok;
    opt.step(t);
    t.reset_to(mark);
  };
  episode(0);
  episode(1);
  const long before = g_allocations.load();
  for (int s = 2; s < 12; ++s) episode(s);
  const long during = g_allocations.load() - before;
  REQUIRE(all_ok);
  INFO("allocations in 10 steady-state episodes: " << during);
  REQUIRE(during == 0);
}
