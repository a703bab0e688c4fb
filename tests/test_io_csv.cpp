// test_io_csv.cpp — the CSV reader: shipped data sets, quoting, exact double round trips, every error
// naming the file and the line.
#include "support/io_support.h"

#include <charconv>

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

TEST_CASE("csv: dialects detected from the header and given") {
  struct Case {
    std::string text;
    char delimiter;  // expected
  };
  const Case cases[] = {
      {"a,b;c\n1,2\n", ','},       {"a;b;c\n1;2;3\n", ';'},     {"a\tb\n1\t2\n", '\t'},
      {"a|b\n1|2\n", '|'},         {"  a   b \n 1  2\n", ' '},  {"\"x;y\",b\n1,2\n", ','},
      {"single\n1\n", ','},        {"\n\n a ; b\n1;2\n", ';'},
  };
  for (const Case& c : cases) {
    INFO("csv text: " << c.text);
    CsvReader r = CsvReader::over(c.text, "d.csv", {});
    CHECK(r.delimiter() == c.delimiter);
    CHECK(r.delimiter_detected());
  }
  CsvDialect given;
  given.delimiter = ';';
  CsvReader r = CsvReader::over("a,b;c\n1,2;3\n", "d.csv", given);
  CHECK((!r.delimiter_detected() && r.header() == std::vector<std::string>{"a,b", "c"}));
}

TEST_CASE("csv: RFC 4180 quoting, spaces, BOM and na_values") {
  // Quoted header names, doubled quotes, delimiters and a line break inside quotes; a \r\n end.
  const std::string text = "\xEF\xBB\xBF\"a b\",\"say \"\"hi\"\"\"\r\n\"x,\ny\",1\r\nNA,\"2\"\r\n  \r\n\"\",?\n";
  CsvReader r = CsvReader::over(text, "q.csv", {});
  CHECK(r.header() == std::vector<std::string>{"a b", "say \"hi\""});
  CsvField text_field{0, true, true, ""}, number_field{1, false, true, ""};
  const CsvData d = r.read({{text_field, number_field}});
  REQUIRE(d.rows == 3);
  CHECK(d.texts[0][0] == std::vector<std::string>{"x,\ny"});
  CHECK(d.groups[0][0] == 0.0);
  CHECK(d.groups[0][1] == 1.0);
  CHECK((std::isnan(d.groups[0][2]) && d.groups[0][3] == 2.0));     // NA text; a quoted number
  CHECK((std::isnan(d.groups[0][4]) && std::isnan(d.groups[0][5])));  // "" and ? are missing
  CHECK((d.lines.line(0) == 2 && d.lines.line(1) == 4 && d.lines.line(2) == 6));
  // Runs of spaces: leading and trailing blanks are no cells; a quoted cell may hold spaces.
  CsvDialect spaces;
  spaces.delimiter = ' ';
  CsvReader s = CsvReader::over(" name   v \n \"General Motors\"  1.5 \nford\t2\n", "s.csv", spaces);
  const CsvData ds = s.read({{CsvField{0, true, false, ""}, CsvField{1, false, false, ""}}});
  CHECK(ds.texts[0][0] == std::vector<std::string>{"General Motors", "ford"});
  CHECK((ds.groups[0][1] == 1.5 && ds.groups[0][3] == 2.0));
  // The single quote; custom na_values (then an empty cell is a plain empty text).
  CsvDialect q;
  q.quote = '\'';
  q.na_values = {"-"};
  CsvReader t = CsvReader::over("k;v\n'a;b';-\n;3\n", "t.csv", q);
  const CsvData dt = t.read({{CsvField{0, true, false, ""}, CsvField{1, false, true, ""}}});
  CHECK(dt.texts[0][0] == std::vector<std::string>{"a;b", ""});
  CHECK((std::isnan(dt.groups[0][1]) && dt.groups[0][3] == 3.0));
}

TEST_CASE("csv: missing cells where none is allowed, and the fast decimal path") {
  TempDir t;
  CsvField strict{0, false, false, "set \"missing\" on input \"x\" to fill it"};
  CsvReader r = CsvReader::over("x\n1\nNA\n", "m.csv", {});
  expect_input_error([&] { r.read({{strict}}); }, "m.csv", "line 3, column \"x\"",
                     "cell \"NA\" is not a number (a missing value: set \"missing\" on input \"x\" to fill it)");
  // Decimal text of up to 19 digits reads to from_chars' double (Clinger's fast path, and beyond it).
  const char* numbers[] = {"0.1",    "-0.00123015", "123456789012345678.9", "0.30000000000000004", "9007199254740993",
                           "+2.5",   "-0",          "1234567890123456789",  "0.0000000000000000000001", "5."};
  for (const char* n : numbers) {
    const CsvTable c = parse_csv(std::string("v\n") + n + "\n", "n.csv");
    double want = 0;
    std::string_view sv(n);
    if (sv.front() == '+') sv.remove_prefix(1);
    std::from_chars(sv.data(), sv.data() + sv.size(), want);
    INFO(n);
    check_same_bits(c.values, {want});
  }
}

// ---- safetensors ---------------------------------------------------------------------------

