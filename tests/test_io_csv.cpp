// test_io_csv.cpp — the CSV reader: shipped data sets, quoting, exact double round trips, every error
// naming the file and the line.
#include "support/io_support.h"

using namespace gr;
using namespace gr::iotest;

// ---- CSV -----------------------------------------------------------------------------------

TEST_CASE("csv: shipped datasets load") {
  const std::string root = GR_SOURCE_DIR;
  const CsvTable iris = read_csv(root + "/datasets/iris.csv");
  CHECK(iris.rows == 150);
  CHECK(iris.cols == 5);
  CHECK(iris.column("species") == 4);
  CHECK(iris.column("nope") == -1);
  CHECK(iris.values.size() == 150 * 5);
  CHECK(iris.lines.front() == 2);
  CHECK(iris.at(0, 0) == 5.1);
  const CsvTable digits = read_csv(root + "/datasets/digits.csv");
  CHECK((digits.rows == 1797 && digits.cols == 65));
  const CsvTable diabetes = read_csv(root + "/datasets/diabetes.csv");
  CHECK((diabetes.rows == 442 && diabetes.cols == 11));
  CHECK(diabetes.column("progression") == 10);
}

TEST_CASE("csv: quotes and spaces and CRLF and blank lines and BOM") {
  TempDir t;
  const std::string p =
      t.put("a.csv", "\xEF\xBB\xBF a , \"b,\"\"c\" ,d\r\n\r\n1, \"2.5\" ,+3\r\n   \n-4,5e-1,\t6  \r\n\n\n");
  const CsvTable c = read_csv(p);
  CHECK(c.header == std::vector<std::string>{"a", "b,\"c", "d"});
  CHECK(c.rows == 2);
  CHECK(c.lines == std::vector<int64_t>{3, 5});
  check_same_bits(c.values, {1, 2.5, 3, -4, 0.5, 6});
  CHECK(c.column("b,\"c") == 1);
  CHECK(c.path == p);
}

TEST_CASE("csv: doubles round-trip exactly through 17-digit text") {
  TempDir t;
  std::string text = "v\n";
  for (double d : kSpecial) {
    char buf[64];
    std::snprintf(buf, sizeof buf, "%.17g\n", d);
    text += buf;
  }
  const CsvTable c = read_csv(t.put("r.csv", text));
  check_same_bits(c.values, kSpecial);
  CHECK(std::signbit(c.values[4]));
}

TEST_CASE("csv: errors name the file and the line") {
  TempDir t;
  REQUIRE_THROWS_AS(read_csv(t.file("missing.csv")), IoError);
  REQUIRE_THROWS_WITH(read_csv(t.file("missing.csv")), Catch::Contains("missing.csv"));

  struct Case {
    const char* text;
    const char* place;
    const char* part;
  };
  const Case cases[] = {
      {"", "line 1", "empty"},
      {"\n  \n\r\n", "line 1", "empty"},
      {"a,b\n", "line 1", "no data rows"},
      {"\n\na,b\n\n", "line 3", "no data rows"},
      {"a,b,a\n1,2,3\n", "line 1, column \"a\"", "duplicate column name (columns 1 and 3)"},
      {"a,,b\n1,2,3\n", "line 1", "header cell 2 is empty"},
      {"a,b,c\n1,2,3\n4,5\n", "line 3", "row has 2 cells but the header has 3"},
      {"a,b\n1,2,3\n", "line 2", "row has 3 cells but the header has 2"},
      {"a,b\n1,2\n\n3,abc\n", "line 4, column \"b\"", "cell \"abc\" is not a number"},
      {"a,b\n1,\n", "line 2, column \"b\"", "empty cell"},
      {"a\n1\nnan\n", "line 3, column \"a\"", "NaN/inf values are not allowed in data"},
      {"a\nNaN\n", "line 2, column \"a\"", "NaN/inf values are not allowed in data"},
      {"a\n-inf\n", "line 2, column \"a\"", "NaN/inf values are not allowed in data"},
      {"a\nInfinity\n", "line 2, column \"a\"", "NaN/inf values are not allowed in data"},
      {"a\n1e400\n", "line 2, column \"a\"", "out of the range of a double"},
      {"a\n1e-400\n", "line 2, column \"a\"", "out of the range of a double"},
      {"a\n0x10\n", "line 2, column \"a\"", "is not a number"},
      {"a\n1,5\n", "line 2", "row has 2 cells"},
      {"a\n\"1\n", "line 2", "unterminated quote"},
      {"a\n\"1\"x\n", "line 2", "after the closing quote"},
      {"a\n1\x01\n", "line 2, column \"a\"", "\"1\\x01\" is not a number"},
  };
  for (const Case& c : cases) {
    INFO("csv text: " << c.text);
    const std::string p = t.put("e.csv", c.text);
    expect_input_error([&] { read_csv(p); }, p, c.place, c.part);
  }
  // A long bad cell is quoted truncated.
  const std::string p = t.put("long.csv", "a\n" + std::string(500, 'x') + "\n");
  expect_input_error([&] { read_csv(p); }, p, "line 2, column \"a\"", "xxx...\" is not a number");
  try {
    read_csv(p);
  } catch (const InputError& e) {
    CHECK(std::string(e.what()).size() < 200);
  }
}

// ---- safetensors ---------------------------------------------------------------------------

