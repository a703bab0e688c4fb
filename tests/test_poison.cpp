// test_poison.cpp — a bad op poisons the tape: ok() false, the first message kept (naming the op
// and both shapes), later ops are no-ops, backward refuses.
#include <catch2/catch.hpp>
#include <vector>

#include "grad/tape.h"

using namespace gr;

TEST_CASE("a shape mismatch poisons the tape and keeps the first message", "[poison]") {
  Tape t;
  const Var a = t.param(Shape{2, 3}, std::vector<double>(6, 1.0));
  const Var b = t.constant(Shape{4}, std::vector<double>(4, 2.0));
  const Var ok_node = t.relu(a);
  REQUIRE(t.ok());
  const Var bad = t.add(a, b);
  REQUIRE_FALSE(bad.valid());
  REQUIRE_FALSE(t.ok());
  const std::string first = t.error();
  CHECK(first.find("add") == 0);
  CHECK(first.find("[2, 3]") != std::string::npos);
  CHECK(first.find("[4]") != std::string::npos);
  const int32_t size = t.size();
  // Later ops return without touching memory or the tape; a second error does not replace the first.
  CHECK_FALSE(t.relu(ok_node).valid());
  CHECK_FALSE(t.matmul(a, b).valid());
  CHECK(t.size() == size);
  CHECK(t.error() == first);
  CHECK_FALSE(t.backward(ok_node));
  CHECK(t.error() == first);
}

TEST_CASE("each kind of invalid argument names the op and the shapes", "[poison]") {
  struct Bad {
    const char* op;
    std::function<Var(Tape&, Var, Var)> make;
    const char* needle;
  };
  const int64_t starts[] = {0, 5}, stops[] = {1, 9};
  const int64_t too_big[] = {7, -1};
  const std::vector<Bad> cases = {
      {"matmul", [](Tape& t, Var x, Var y) { return t.matmul(x, y); }, "[2, 3] and [2, 3]"},
      {"bmm", [](Tape& t, Var x, Var y) { return t.bmm(x, y); }, "[2, 3]"},
      {"softmax", [](Tape& t, Var x, Var) { return t.softmax(x, 2); }, "axis 2"},
      {"sum", [](Tape& t, Var x, Var) { return t.sum(x, -3); }, "axis -3"},
      {"slice", [&](Tape& t, Var x, Var) { return t.slice(x, starts, stops); }, "[2, 3]"},
      {"reshape", [&](Tape& t, Var x, Var) { return t.reshape(x, too_big); }, "[2, 3]"},
      {"concat", [](Tape& t, Var x, Var) { return t.concat(x, t.transpose(x), 0); }, "[2, 3] and [3, 2]"},
      {"softmax_cross_entropy", [](Tape& t, Var x, Var) { return t.softmax_cross_entropy(x, t.transpose(x)); },
       "[2, 3] and [3, 2]"},
      {"transpose", [](Tape& t, Var, Var) { return t.transpose(t.constant(Shape{3}, std::vector<double>(3))); },
       "[3]"},
      {"add", [](Tape& t, Var x, Var) { return t.add(x, Var{99}); }, "not a variable"},
  };
  for (const Bad& c : cases) {
    Tape t;
    const Var x = t.param(Shape{2, 3}, std::vector<double>(6, 0.5));
    const Var y = t.param(Shape{2, 3}, std::vector<double>(6, 0.5));
    INFO(c.op);
    CHECK_FALSE(c.make(t, x, y).valid());
    CHECK_FALSE(t.ok());
    INFO(t.error());
    CHECK(t.error().find(c.op) == 0);
    CHECK(t.error().find(c.needle) != std::string::npos);
  }
}

TEST_CASE("accessors reject a poisoned result with an error, not a crash", "[poison]") {
  Tape t;
  const Var bad = t.matmul(t.constant(Shape{2, 2}, std::vector<double>(4)), t.constant(Shape{3, 2}, std::vector<double>(6)));
  REQUIRE_THROWS_AS(t.value(bad), Error);
  REQUIRE_THROWS_WITH(t.value(bad), Catch::Contains("poisoned") && Catch::Contains("matmul"));
}

TEST_CASE("leaves check their value counts", "[poison]") {
  Tape t;
  CHECK_FALSE(t.param(Shape{2, 2}, std::vector<double>(3)).valid());
  CHECK(t.error().find("needs 4 values, got 3") != std::string::npos);
}

TEST_CASE("recover abandons a failed episode; reset_to alone does not", "[poison]") {
  Tape t;
  const Var a = t.param(Shape{2}, std::vector<double>{1, 2});
  const int32_t mark = t.mark();
  CHECK_FALSE(t.add(a, t.constant(Shape{3}, std::vector<double>(3))).valid());
  REQUIRE_FALSE(t.ok());
  t.recover(mark);
  CHECK(t.ok());
  CHECK(t.error().empty());
  CHECK(t.size() == mark);
  CHECK(t.add(a, a).valid());

  Tape u;
  const Var b = u.param(Shape{2}, std::vector<double>{1, 2});
  CHECK_FALSE(u.add(b, u.constant(Shape{3}, std::vector<double>(3))).valid());
  u.reset_to(1);
  CHECK_FALSE(u.ok());  // reset_to alone never clears poisoning
}
