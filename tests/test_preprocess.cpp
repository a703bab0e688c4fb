// test_preprocess.cpp — the preprocessing saved with the weights (interchange/preprocess.h) reads back
// exactly: every double bit for bit, every string and shape as written.
#include <catch2/catch.hpp>
#include <cstring>
#include <limits>

#include "io/errors.h"
#include "interchange/preprocess.h"

using namespace gr;

namespace {
bool same_bits(const std::vector<double>& a, const std::vector<double>& b) {
  return a.size() == b.size() && (a.empty() || std::memcmp(a.data(), b.data(), a.size() * sizeof(double)) == 0);
}
}  // namespace

TEST_CASE("preprocessing JSON round-trips every double exactly", "[preprocess]") {
  Preprocessing p;
  p.spec_sha256 = "ab12";
  InputPrep x{"x", "csv", {"a", "b \"quoted\"", "c", "d", "e", "f"}, "", {}, {}, {}, "f64", {6}, {}};
  x.mean = {0.1, 1.0 / 3.0, -0.0, 5e-324, std::numeric_limits<double>::max(), 5.904166666666669};
  x.std = {1.0, 0.8490578929351965, 2.2250738585072014e-308, 1e300, 7.0, 0.43734044709661457};
  InputPrep y{"y", "npz", {}, "labels", {}, {}, {"0", "1", "2"}, "f64", {3}, {}};
  p.inputs = {x, y};
  const Preprocessing q = preprocessing_from_json(to_json(p));
  REQUIRE(q.spec_sha256 == "ab12");
  REQUIRE(q.inputs.size() == 2);
  CHECK(same_bits(q.inputs[0].mean, x.mean));
  CHECK(same_bits(q.inputs[0].std, x.std));
  CHECK(q.inputs[0].columns == x.columns);
  CHECK(q.inputs[0].row_shape == std::vector<int64_t>{6});
  CHECK(q.inputs[1].tensor == "labels");
  CHECK(q.inputs[1].source_kind == "npz");
  CHECK(q.inputs[1].one_hot_classes == y.one_hot_classes);
  CHECK(q.inputs[1].mean.empty());
  CHECK(q.find("y") == &q.inputs[1]);
  CHECK(to_json(q) == to_json(p));
}

TEST_CASE("tabular transforms round-trip: fills, indicator, categories, threshold", "[preprocess]") {
  Preprocessing p;
  p.spec_sha256 = "cd34";
  InputPrep x{"x", "csv", {"a", "b"}, "", {0.5, 1.0 / 3.0, 0.0, 0.0}, {2.0, 0.1, 1.0, 1.0}, {}, "f64", {4}, {}};
  x.fit.missing = "median";
  x.fit.fill = {DataValue{false, "", 0.1}, DataValue{false, "", -5e-324}};
  x.fit.indicator = true;
  InputPrep c{"c", "csv", {"make"}, "", {}, {}, {}, "f64", {3}, {}};
  c.fit.categorical = true;
  c.fit.categories = {DataValue{true, "General Motors", 0}, DataValue{true, "ford", 0}, DataValue{true, "\"q\"", 0}};
  c.fit.missing = "most_frequent";
  c.fit.fill = {DataValue{true, "ford", 0}};
  c.fit.unknown_zeros = true;
  InputPrep n{"n", "csv", {"code"}, "", {}, {}, {}, "f64", {1}, {}};
  n.fit.categorical = true;
  n.fit.ids = true;
  n.fit.categories = {DataValue{false, "", 1}, DataValue{false, "", 2.5}};
  InputPrep t{"t", "csv", {"v"}, "", {}, {}, {}, "f64", {1}, {}};
  t.fit.has_threshold = true;
  t.fit.threshold = 0.30000000000000004;
  p.inputs = {x, c, n, t};
  const Preprocessing q = preprocessing_from_json(to_json(p));
  REQUIRE(q.inputs.size() == 4);
  CHECK(q.inputs[0].fit.missing == "median");
  CHECK(q.inputs[0].fit.fill == x.fit.fill);
  CHECK(std::signbit(q.inputs[0].fit.fill[1].number));
  CHECK(q.inputs[0].fit.indicator);
  CHECK(!q.inputs[0].fit.categorical);
  CHECK(q.inputs[1].fit.categories == c.fit.categories);
  CHECK(q.inputs[1].fit.fill == c.fit.fill);
  CHECK((q.inputs[1].fit.unknown_zeros && !q.inputs[1].fit.ids));
  CHECK((q.inputs[2].fit.ids && !q.inputs[2].fit.unknown_zeros));
  CHECK(q.inputs[2].fit.categories == n.fit.categories);
  CHECK((q.inputs[3].fit.has_threshold && q.inputs[3].fit.threshold == 0.30000000000000004));
  CHECK(to_json(q) == to_json(p));
  // Without tabular transforms nothing new is written: earlier runs' preprocessing reads the same.
  InputPrep plain{"p", "csv", {"a"}, "", {}, {}, {}, "f64", {1}, {}};
  p.inputs = {plain};
  CHECK(to_json(p) == R"({"spec_sha256":"cd34","inputs":[{"name":"p","source_kind":"csv","columns":["a"],"tensor":"","mean":[],"std":[],"one_hot_classes":[],"dtype":"f64","row_shape":[1]}]})");
}

TEST_CASE("malformed preprocessing is a located InputError", "[preprocess]") {
  CHECK_THROWS_AS(preprocessing_from_json("{"), InputError);
  CHECK_THROWS_AS(preprocessing_from_json(R"({"spec_sha256": "x"})"), InputError);
  CHECK_THROWS_AS(preprocessing_from_json(R"({"spec_sha256": "x", "inputs": [{"name": "x"}]})"), InputError);
}
