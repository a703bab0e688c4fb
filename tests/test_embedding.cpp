// test_embedding.cpp — embedding on the CPU tape against hand-derived values (kernels/gr_ops_gather.h):
// the forward is an exact copy of the selected rows; the table's gradient is, per element, slot + g
// over the positions with that id in ASCENDING order (checked byte for byte against a plain loop,
// with values whose sums round differently in another order); an id outside [0, V) (a const's) gives
// a NaN row and no gradient; ids that depend on a parameter and a table that is not [V,D] are refused.
#include <catch2/catch.hpp>
#include <cmath>
#include <cstring>
#include <vector>

#include "gr_ops_gather.h"
#include "grad/tape.h"

using namespace gr;

TEST_CASE("embedding: forward rows and the ascending-position backward, byte for byte", "[tape][embedding]") {
  for (const DType dt : {DType::F64, DType::F32}) {
    Tape t(dt);
    // 6 positions over V = 3, D = 2; id 1 three times, id 2 never. The upstream gradient comes from
    // a const weight w: loss = Σ y·w, so g = w exactly.
    const std::vector<double> ids{1, 0, 1, 0, 1, 0};
    const std::vector<double> table{0.5, -1.25, 3.0, 0.75, -2.0, 4.5};
    const std::vector<double> w{1e16, 1.0, 1.0, -1e16, -1e16, 3.0, 1.0, 1.0, 3.0, 7.0, 1.0, -1.0};
    const Var I = t.constant(Shape{2, 3}, ids), T = t.param(Shape{3, 2}, table), W = t.constant(Shape{2, 3, 2}, w);
    const Var y = t.embedding(I, T);
    REQUIRE(t.ok());
    CHECK(t.node(y).shape == Shape{2, 3, 2});
    const auto yv = t.value(y);
    for (int p = 0; p < 6; ++p)
      for (int d = 0; d < 2; ++d) CHECK(yv[p * 2 + d] == table[static_cast<size_t>(ids[static_cast<size_t>(p)] * 2 + d)]);
    REQUIRE(t.backward(t.sum(t.mul(y, W))));
    // The contract: slot = slot + g[p, d], p ascending, in the tape's type (f32: floats).
    std::vector<double> want(6, 0.0);
    for (int p = 0; p < 6; ++p)
      for (int d = 0; d < 2; ++d) {
        double& s = want[static_cast<size_t>(ids[static_cast<size_t>(p)] * 2 + d)];
        const double g = w[static_cast<size_t>(p * 2 + d)];
        s = dt == DType::F64 ? s + g : static_cast<double>(static_cast<float>(s) + static_cast<float>(g));
      }
    const auto gv = t.grad(T);
    CHECK(std::memcmp(gv.data, want.data(), sizeof(double) * 6) == 0);
    // Table element [1, 0]: positions 0, 2, 4 bring 1e16, -1e16, 3; ascending (0 + 1e16) − 1e16 + 3 = 3,
    // descending (0 + 3) − 1e16 + 1e16 = 4 (3 is lost in the big sum): the order shows in the bits.
    CHECK(gv[2] == 3.0);
    CHECK(gv[4] == 0.0);  // id 2 is selected nowhere
    CHECK(gv[5] == 0.0);
  }
}

TEST_CASE("embedding: a const id that selects no row (negative, too large, a fraction, NaN) gives a NaN row and no gradient", "[tape][embedding]") {
  Tape t;
  const Var I = t.constant(Shape{5}, std::vector<double>{0, 3, -1, 0.5, NAN});
  const Var T = t.param(Shape{3, 2}, std::vector<double>{1, 2, 3, 4, 5, 6});
  const Var y = t.embedding(I, T);
  REQUIRE(t.ok());
  const auto yv = t.value(y);
  CHECK(yv[0] == 1.0);
  CHECK(yv[1] == 2.0);
  for (int e = 2; e < 10; ++e) CHECK(std::isnan(yv[e]));
  // a second gather with ids 2 (once) and 7 (outside [0, 3)): only row 2 gets a gradient
  REQUIRE(t.backward(t.sum(t.embedding(t.constant(Shape{2}, std::vector<double>{2, 7}), T))));
  const auto gv = t.grad(T);
  const double want[] = {0, 0, 0, 0, 1, 1};  // id 2 once, id 7 nothing
  for (int e = 0; e < 6; ++e) CHECK(gv[e] == want[e]);
  CHECK(gr_embedding_row(2.0, 3) == 2);
  CHECK(gr_embedding_row(3.0, 3) == -1);
  CHECK(gr_embedding_row(-0.0, 3) == 0);
  CHECK(gr_embedding_row(1.5f, 3) == -1);
  CHECK(gr_embedding_row(static_cast<double>(INFINITY), 3) == -1);
}

TEST_CASE("embedding: ids that depend on a parameter and a table that is not V x D are refused", "[tape][embedding]") {
  {
    Tape t;
    const Var P = t.param(Shape{4}, std::vector<double>{0, 1, 0, 1});
    const Var T = t.param(Shape{2, 3}, std::vector<double>(6, 1.0));
    t.embedding(P, T);
    CHECK(!t.ok());
    CHECK(t.error().find("embedding") != std::string::npos);
    CHECK(t.error().find("ids") != std::string::npos);
  }
  {
    Tape t;
    const Var I = t.constant(Shape{4}, std::vector<double>{0, 1, 0, 1});
    const Var T = t.param(Shape{6}, std::vector<double>(6, 1.0));
    t.embedding(I, T);
    CHECK(!t.ok());
    CHECK(t.error().find("table [V,D]") != std::string::npos);
  }
}
