// test_preprocess.cpp — the preprocessing saved with the weights (train/preprocess.h) reads back
// exactly: every double bit for bit, every string and shape as written.
#include <catch2/catch.hpp>
#include <cstring>
#include <limits>

#include "io/errors.h"
#include "train/preprocess.h"

using namespace gr;

namespace {
bool same_bits(const std::vector<double>& a, const std::vector<double>& b) {
  return a.size() == b.size() && (a.empty() || std::memcmp(a.data(), b.data(), a.size() * sizeof(double)) == 0);
}
}  // namespace

TEST_CASE("preprocessing JSON round-trips every double exactly", "[preprocess]") {
  Preprocessing p;
  p.spec_sha256 = "ab12";
  InputPrep x{"x", "csv", {"a", "b \"quoted\"", "c", "d", "e", "f"}, "", {}, {}, {}, "f64", {6}};
  x.mean = {0.1, 1.0 / 3.0, -0.0, 5e-324, std::numeric_limits<double>::max(), 5.904166666666669};
  x.std = {1.0, 0.8490578929351965, 2.2250738585072014e-308, 1e300, 7.0, 0.43734044709661457};
  InputPrep y{"y", "npz", {}, "labels", {}, {}, {"0", "1", "2"}, "f64", {3}};
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

TEST_CASE("malformed preprocessing is a located InputError", "[preprocess]") {
  CHECK_THROWS_AS(preprocessing_from_json("{"), InputError);
  CHECK_THROWS_AS(preprocessing_from_json(R"({"spec_sha256": "x"})"), InputError);
  CHECK_THROWS_AS(preprocessing_from_json(R"({"spec_sha256": "x", "inputs": [{"name": "x"}]})"), InputError);
}
