// test_tensor.cpp — checked shapes, tensors, broadcasting maps.
#include <catch2/catch.hpp>
#include <vector>
#if defined(__x86_64__)
#include <xmmintrin.h>
#endif

#include "tensor/broadcast.h"
#include "tensor/fpenv.h"
#include "tensor/tensor.h"

using namespace gr;

TEST_CASE("shapes are checked at construction", "[tensor]") {
  CHECK(Shape{2, 3}.numel() == 6);
  CHECK(Shape{2, 3}.str() == "[2, 3]");
  CHECK_THROWS_WITH(Shape({2, -1}), Catch::Contains("dim 1 is -1"));
  CHECK_THROWS_WITH(Shape({0}), Catch::Contains("dim 0 is 0"));
  CHECK_THROWS_WITH(Shape({1 << 30, 1 << 30, 1 << 30}), Catch::Contains("more than 2^40"));
  CHECK_THROWS_WITH(Shape({INT64_MAX, 2}), Catch::Contains("more than 2^40"));
  CHECK_THROWS_WITH(Shape(std::span<const int64_t>()), Catch::Contains("rank 0"));
  const std::vector<int64_t> nine(9, 1);
  CHECK_THROWS_WITH(Shape(std::span<const int64_t>(nine)), Catch::Contains("at most 8"));
  CHECK(Shape{2, 3, 4}.normalize_axis(-1) == 2);
  CHECK_THROWS_AS((Shape{2, 3}.normalize_axis(2)), Error);
}

TEST_CASE("tensors hold exactly numel values", "[tensor]") {
  CHECK(Tensor(Shape{2, 2}).values().size() == 4);
  CHECK_THROWS_WITH(Tensor(Shape{2, 2}, {1, 2, 3}), Catch::Contains("needs 4 values, got 3"));
}

TEST_CASE("numpy broadcasting", "[tensor]") {
  const BroadcastMap m = broadcast_map(Shape{3, 1}, Shape{4});
  CHECK(m.out == Shape{3, 4});
  std::vector<int64_t> ia, ib;
  for_each_broadcast(m, [&](int64_t, int64_t a, int64_t b) {
    ia.push_back(a);
    ib.push_back(b);
  });
  CHECK(ia == std::vector<int64_t>{0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2});
  CHECK(ib == std::vector<int64_t>{0, 1, 2, 3, 0, 1, 2, 3, 0, 1, 2, 3});
  CHECK(broadcast_map(Shape{2, 3}, Shape{2, 3}).same);
  CHECK(broadcast_map(Shape{5, 1, 3}, Shape{4, 1}).out == Shape{5, 4, 3});
  CHECK_THROWS_WITH(broadcast_map(Shape{2, 3}, Shape{2}), Catch::Contains("[2, 3] and [2]"));
}

TEST_CASE("the floating-point environment check catches FTZ/DAZ", "[tensor]") {
  CHECK(fp_environment_problem().empty());
#if defined(__x86_64__)
  const unsigned saved = _mm_getcsr();
  _mm_setcsr(saved | 0x8040u);  // what a -ffast-math library's constructor does
  const std::string why = fp_environment_problem();
  _mm_setcsr(saved);
  CHECK(why.find("flush-to-zero") != std::string::npos);
  CHECK(why.find("denormals-are-zero") != std::string::npos);
#endif
}
