// test_io.cpp — CSV, safetensors, .npy and .npz readers/writers: formats, every error path (each
// message names the file and the place, on one line), exact double round trips, and interop with
// numpy through /usr/bin/python3 (skipped with a WARN when numpy is missing there).
#include <unistd.h>

#include <bit>
#include <catch2/catch.hpp>
#include <cfloat>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>

#include "spec/csv.h"
#include "spec/errors.h"
#include "spec/npy.h"
#include "spec/safetensors.h"

namespace fs = std::filesystem;
using namespace gr;

namespace {

// A fresh folder under the system temp dir, removed with everything in it at scope exit.
struct TempDir {
  fs::path dir;
  TempDir() {
    static int counter = 0;
    dir = fs::temp_directory_path() / ("gr_test_io_" + std::to_string(::getpid()) + "_" + std::to_string(counter++));
    fs::remove_all(dir);
    fs::create_directories(dir);
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(dir, ec);
  }
  std::string file(const std::string& name) const { return (dir / name).string(); }
  std::string put(const std::string& name, std::string_view bytes) const {
    std::ofstream(file(name), std::ios::binary).write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
    return file(name);
  }
};

uint64_t bits(double d) { return std::bit_cast<uint64_t>(d); }

void check_same_bits(std::span<const double> got, const std::vector<double>& want) {
  REQUIRE(got.size() == want.size());
  for (size_t i = 0; i < want.size(); ++i) {
    INFO("element " << i << ": got " << got[i] << ", want " << want[i]);
    CHECK(bits(got[i]) == bits(want[i]));
  }
}

// Runs f, which must throw InputError for `file` at `place` with `part` in its one-line message.
template <class F>
void expect_input_error(F&& f, const std::string& file, const std::string& place, const std::string& part) {
  try {
    f();
    FAIL("no InputError thrown; expected \"" << part << "\" at " << place);
  } catch (const InputError& e) {
    const std::string m = e.what();
    INFO("message: " << m);
    CHECK(e.file() == file);
    CHECK(e.place() == place);
    CHECK(m.rfind(file + ": " + place + ": ", 0) == 0);
    CHECK(m.find(part) != std::string::npos);
    CHECK(m.find('\n') == std::string::npos);
  }
}

template <class T>
std::string raw(std::initializer_list<T> v) {
  std::string s(v.size() * sizeof(T), '\0');
  std::memcpy(s.data(), std::data(v), s.size());
  return s;
}
void le(std::string& s, uint64_t v, int n) {
  for (int i = 0; i < n; ++i) s += static_cast<char>((v >> (8 * i)) & 0xff);
}

bool have_numpy() {
  static const bool ok = std::system("/usr/bin/python3 -c 'import numpy' >/dev/null 2>&1") == 0;
  return ok;
}
#define NEED_NUMPY()                                                                  \
  if (!have_numpy()) {                                                                \
    WARN("/usr/bin/python3 with numpy is not available: numpy interop test skipped"); \
    return;                                                                           \
  }

// Runs `code` with /usr/bin/python3 -c (the code must not contain single quotes) and returns
// its stdout; requires exit status 0.
std::string python(const std::string& code, const std::string& args) {
  REQUIRE(code.find('\'') == std::string::npos);
  const std::string cmd = "/usr/bin/python3 -c '" + code + "' " + args;
  FILE* p = ::popen(cmd.c_str(), "r");
  REQUIRE(p != nullptr);
  std::string out;
  char buf[4096];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, p)) > 0) out.append(buf, n);
  const int status = ::pclose(p);
  INFO("python output: " << out);
  REQUIRE(status == 0);
  return out;
}

const std::vector<double> kSpecial = {0.1,
                                      1e-300,
                                      std::numeric_limits<double>::denorm_min(),
                                      2.2250738585072009e-308,
                                      -0.0,
                                      1.0 / 3.0,
                                      DBL_MAX,
                                      -DBL_MIN,
                                      123456789.123456789,
                                      -7.0,
                                      1e22,
                                      0.0};

}  // namespace

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

namespace {
// A safetensors file from a header text (padded to 8) and a data buffer.
std::string st_bytes(std::string header, std::string_view data) {
  while (header.size() % 8) header += ' ';
  std::string out;
  le(out, header.size(), 8);
  return out + header + std::string(data);
}
}  // namespace

TEST_CASE("safetensors: reference byte layouts") {
  // The reference implementation's own deserialization test vector (I32, 2x2 zeros).
  const std::string ref(
      "<\x00\x00\x00\x00\x00\x00\x00{\"test\":{\"dtype\":\"I32\",\"shape\":[2,2],\"data_offsets\":[0,16]}}"
      "\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00",
      8 + 60 + 16);
  SafetensorsFile f = parse_safetensors(ref, "ref.safetensors");
  REQUIRE(f.tensors.size() == 1);
  CHECK(f.tensors[0].name == "test");
  CHECK(f.tensors[0].tensor.shape() == Shape{2, 2});
  check_same_bits(f.tensors[0].tensor.values(), {0, 0, 0, 0});

  // Keys in another order than the data, metadata last, a rank-0 scalar, F32/I64 conversions.
  const std::string h =
      "{\"b\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[16,24]},"
      "\"a\":{\"dtype\":\"F64\",\"shape\":[2],\"data_offsets\":[0,16]},"
      "\"s\":{\"shape\":[],\"dtype\":\"I64\",\"data_offsets\":[24,32]},\"__metadata__\":{\"k\":\"v\"}}";
  f = parse_safetensors(st_bytes(h, raw<double>({1.5, -2.25}) + raw<float>({0.1f, -0.0f}) + raw<int64_t>({-42})),
                        "x.safetensors");
  REQUIRE(f.tensors.size() == 3);
  CHECK(f.tensors[0].name == "a");  // data order
  CHECK(f.tensors[1].name == "b");
  check_same_bits(f.find("a")->values(), {1.5, -2.25});
  check_same_bits(f.find("b")->values(), {static_cast<double>(0.1f), -0.0});
  CHECK(f.find("s")->shape() == Shape{1});
  check_same_bits(f.find("s")->values(), {-42});
  CHECK(f.find("nope") == nullptr);
  CHECK(f.metadata == std::map<std::string, std::string>{{"k", "v"}});
}

TEST_CASE("safetensors: writer byte layout is the documented one") {
  const Tensor t(Shape{2}, {1.5, -2.25});
  const std::string got = encode_safetensors({{"test", t.view()}}, {}, StDtype::F64);
  CHECK(got ==
        st_bytes("{\"test\":{\"dtype\":\"F64\",\"shape\":[2],\"data_offsets\":[0,16]}}", raw<double>({1.5, -2.25})));
  // Metadata first (sorted keys), then tensors in the given order; F32 rounds to nearest.
  const Tensor s = Tensor::scalar(0.1);
  const std::string got2 =
      encode_safetensors({{"z", s.view()}, {"a", t.view()}}, {{"spec", "x.json"}, {"dtype", "f32"}}, StDtype::F32);
  CHECK(got2 == st_bytes("{\"__metadata__\":{\"dtype\":\"f32\",\"spec\":\"x.json\"},"
                         "\"z\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},"
                         "\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[4,12]}}",
                         raw<float>({0.1f, 1.5f, -2.25f})));
  CHECK((got2.size() - 8 - 12) % 8 == 0);
  CHECK(encode_safetensors({{"z", s.view()}, {"a", t.view()}}, {{"spec", "x.json"}}, StDtype::F32) ==
        encode_safetensors({{"z", s.view()}, {"a", t.view()}}, {{"spec", "x.json"}}, StDtype::F32));

  CHECK_THROWS_AS(encode_safetensors({{"a", t.view()}, {"a", t.view()}}, {}, StDtype::F64), Error);
  CHECK_THROWS_AS(encode_safetensors({{"", t.view()}}, {}, StDtype::F64), Error);
  CHECK_THROWS_AS(encode_safetensors({{"__metadata__", t.view()}}, {}, StDtype::F64), Error);
  CHECK_THROWS_AS(encode_safetensors({{"bad\xff", t.view()}}, {}, StDtype::F64), Error);
}

TEST_CASE("safetensors: exact round trip through a file") {
  TempDir d;
  const Tensor w(Shape{3, 4}, kSpecial);
  const Tensor s = Tensor::scalar(-0.0);
  const std::map<std::string, std::string> meta = {{"steps", "12"}, {"spec", "a b \"c\""}};
  const std::string p = d.file("w.safetensors");
  write_safetensors(p, {{"W1", w.view()}, {"loss", s.view()}}, meta, StDtype::F64);
  SafetensorsFile f = read_safetensors(p);
  REQUIRE(f.tensors.size() == 2);
  CHECK(f.tensors[0].name == "W1");
  CHECK(f.tensors[1].tensor.shape() == Shape{1});
  check_same_bits(f.find("W1")->values(), kSpecial);
  CHECK(std::signbit((*f.find("loss"))[0]));
  CHECK(f.metadata == meta);

  write_safetensors(p, {{"W1", w.view()}}, {}, StDtype::F32);
  f = read_safetensors(p);
  std::vector<double> want;
  for (double v : kSpecial) want.push_back(static_cast<double>(static_cast<float>(v)));
  check_same_bits(f.find("W1")->values(), want);
  CHECK(f.metadata.empty());
}

TEST_CASE("safetensors: every malformed file is an InputError at its place") {
  TempDir d;
  const std::string t16 = "\"t\":{\"dtype\":\"F64\",\"shape\":[2],\"data_offsets\":[0,16]}";
  const std::string d16 = raw<double>({1, 2});
  auto file = [&](const std::string& header, const std::string& data) { return st_bytes(header, data); };
  std::string huge;
  le(huge, 200'000'000, 8);
  std::string longer;
  le(longer, 64, 8);
  struct Case {
    std::string bytes, place, part;
  };
  const std::vector<Case> cases = {
      {"abcde", "header", "8-byte header length"},
      {huge + "{}", "header", "absurd"},
      {longer + "{}", "header", "exceeds the file size"},
      {file("{\"t\":", ""), "header", "not valid JSON"},
      {file("[1,2]", ""), "header", "not a JSON object"},
      {file("{" + t16 + "," + t16 + "}", d16), "header", "duplicate key \"t\""},
      {file("{\"\":{\"dtype\":\"F64\",\"shape\":[1],\"data_offsets\":[0,8]}}", raw<double>({1})), "header",
       "empty tensor name"},
      {file("{\"t\":[1]}", ""), "t", "expected an object"},
      {file("{\"t\":{\"dtype\":\"F64\",\"shape\":[2]}}", d16), "t", "missing key \"data_offsets\""},
      {file("{\"t\":{\"dtype\":\"F64\",\"shape\":[2],\"data_offsets\":[0,16],\"x\":1}}", d16), "t",
       "unknown key \"x\""},
      {file("{\"t\":{\"dtype\":\"Q7\",\"shape\":[2],\"data_offsets\":[0,16]}}", d16), "t", "unknown dtype \"Q7\""},
      {file("{\"t\":{\"dtype\":\"F16\",\"shape\":[8],\"data_offsets\":[0,16]}}", d16), "t", "\"F16\" is not supported"},
      {file("{\"t\":{\"dtype\":7,\"shape\":[2],\"data_offsets\":[0,16]}}", d16), "t", "not a string"},
      {file("{\"t\":{\"dtype\":\"F64\",\"shape\":[-2],\"data_offsets\":[0,16]}}", d16), "t", "negative"},
      {file("{\"t\":{\"dtype\":\"F64\",\"shape\":[2,0],\"data_offsets\":[0,0]}}", ""), "t", "zero-size dim"},
      {file("{\"t\":{\"dtype\":\"F64\",\"shape\":[2.5],\"data_offsets\":[0,16]}}", d16), "t", "other than integers"},
      {file("{\"t\":{\"dtype\":\"F64\",\"shape\":[1,1,1,1,1,1,1,1,2],\"data_offsets\":[0,16]}}", d16), "t", "rank 9"},
      {file("{\"t\":{\"dtype\":\"F64\",\"shape\":2,\"data_offsets\":[0,16]}}", d16), "t", "not an array"},
      {file("{\"t\":{\"dtype\":\"F64\",\"shape\":[2],\"data_offsets\":[0,8]}}", d16), "t",
       "span 8 bytes but shape [2] of F64 needs 16"},
      {file("{\"t\":{\"dtype\":\"F64\",\"shape\":[2],\"data_offsets\":[0,16]}}", d16.substr(0, 12)), "t",
       "extend past the data buffer (12 bytes): truncated"},
      {file("{\"t\":{\"dtype\":\"F64\",\"shape\":[2],\"data_offsets\":[16,0]}}", d16), "t", "end before they begin"},
      {file("{\"t\":{\"dtype\":\"F64\",\"shape\":[2],\"data_offsets\":[0]}}", d16), "t",
       "\"data_offsets\" must be [begin, end]"},
      {file("{\"t\":{\"dtype\":\"F64\",\"shape\":[2],\"data_offsets\":[-1,15]}}", d16), "t",
       "\"data_offsets\" must be [begin, end]"},
      {file("{" + t16 + ",\"u\":{\"dtype\":\"F64\",\"shape\":[2],\"data_offsets\":[8,24]}}", d16 + d16), "u",
       "overlap tensor \"t\""},
      {file("{" + t16 + ",\"u\":{\"dtype\":\"F64\",\"shape\":[2],\"data_offsets\":[24,40]}}", d16 + d16 + d16), "u",
       "leave a gap"},
      {file("{\"u\":{\"dtype\":\"F64\",\"shape\":[2],\"data_offsets\":[8,24]}}", d16 + d16), "u", "leave a gap"},
      {file("{" + t16 + "}", d16 + "12345678"), "header", "the data buffer is 24 bytes but the tensors cover 16"},
      {file("{\"__metadata__\":{\"k\":1}," + t16 + "}", d16), "__metadata__", "value of \"k\" is not a string"},
      {file("{\"__metadata__\":[]," + t16 + "}", d16), "__metadata__", "is not an object"},
      {file("{\"t\":{\"dtype\":\"I64\",\"shape\":[1],\"data_offsets\":[0,8]}}", raw<int64_t>({(int64_t(1) << 53) + 1})),
       "t", "no exact f64"},
      {file("{\"t\\nx\":[1]}", ""), "t\\x0ax", "expected an object"},
  };
  for (const Case& c : cases) {
    INFO("expecting: " << c.part);
    const std::string p = d.put("bad.safetensors", c.bytes);
    expect_input_error([&] { read_safetensors(p); }, p, c.place, c.part);
  }
  CHECK_THROWS_AS(read_safetensors(d.file("missing.safetensors")), IoError);
}

TEST_CASE("safetensors: python numpy reads our files") {
  NEED_NUMPY();
  TempDir d;
  const Tensor w(Shape{3, 4}, kSpecial);
  const Tensor b(Shape{2, 1, 1}, {0.5, -3});
  const std::string code = R"PY(
import sys, struct, json, numpy as np
b = open(sys.argv[1], "rb").read()
(n,) = struct.unpack("<Q", b[:8])
assert (8 + n) % 8 == 0 and n < len(b)
h = json.loads(b[8:8 + n])
buf = b[8 + n:]
end = 0
for k, v in h.items():
    if k == "__metadata__":
        print("meta", json.dumps(v, sort_keys=True))
        continue
    assert list(v.keys()) == ["dtype", "shape", "data_offsets"]
    s, e = v["data_offsets"]
    assert s == end, "tensors must be contiguous and in header order"
    end = e
    dt = {"F64": "<f8", "F32": "<f4"}[v["dtype"]]
    a = np.frombuffer(buf[s:e], dtype=dt).reshape(v["shape"])
    u = a.view("<u8" if dt == "<f8" else "<u4").ravel()
    print(k, v["dtype"], list(a.shape), " ".join(format(int(x), "x") for x in u))
assert end == len(buf)
)PY";
  for (const StDtype dt : {StDtype::F64, StDtype::F32}) {
    const std::string p = d.file("ours.safetensors");
    write_safetensors(p, {{"w", w.view()}, {"b", b.view()}}, {{"steps", "3"}, {"device", "cpu"}}, dt);
    std::string want = "meta {\"device\": \"cpu\", \"steps\": \"3\"}\n";
    for (const auto& [name, t] : {std::pair<const char*, const Tensor*>{"w", &w}, {"b", &b}}) {
      want += std::string(name) + (dt == StDtype::F64 ? " F64 " : " F32 ") +
              (t->shape() == Shape{3, 4} ? "[3, 4] " : "[2, 1, 1] ");
      for (int64_t i = 0; i < t->numel(); ++i) {
        char buf[32];
        const unsigned long long u =
            dt == StDtype::F64 ? bits((*t)[i]) : std::bit_cast<uint32_t>(static_cast<float>((*t)[i]));
        std::snprintf(buf, sizeof buf, i ? " %llx" : "%llx", u);
        want += buf;
      }
      want += "\n";
    }
    CHECK(python(code, "'" + p + "'") == want);
  }
}

TEST_CASE("safetensors: we read files numpy writes by hand") {
  NEED_NUMPY();
  TempDir d;
  const std::string p = d.file("np.safetensors");
  python(R"PY(
import sys, struct, json, numpy as np
arrs = [("w64", np.array([[0.1, 1e-300, 5e-324], [-0.0, 1 / 3, -1.7976931348623157e308]], dtype="<f8"), "F64"),
        ("w32", np.array([0.1, -2.5, 1e-45], dtype="<f4"), "F32"),
        ("i64", np.array([-9007199254740992, 42], dtype="<i8"), "I64"),
        ("i32", np.array([[-2147483648], [7]], dtype="<i4"), "I32"),
        ("s", np.array(2.5, dtype="<f8"), "F64")]
hdr = {}
data = b""
for name, a, dt in arrs:
    hdr[name] = {"dtype": dt, "shape": list(a.shape), "data_offsets": [len(data), len(data) + a.nbytes]}
    data += a.tobytes()
hdr = dict(reversed(list(hdr.items())))
hdr["__metadata__"] = {"format": "np"}
h = json.dumps(hdr).encode()
h += b" " * (-len(h) % 8)
open(sys.argv[1], "wb").write(struct.pack("<Q", len(h)) + h + data)
)PY",
         "'" + p + "'");
  const SafetensorsFile f = read_safetensors(p);
  REQUIRE(f.tensors.size() == 5);
  CHECK(f.tensors[0].name == "w64");
  CHECK(f.find("w64")->shape() == Shape{2, 3});
  check_same_bits(f.find("w64")->values(), {0.1, 1e-300, 5e-324, -0.0, 1.0 / 3, -DBL_MAX});
  check_same_bits(f.find("w32")->values(), {double(0.1f), -2.5, double(1e-45f)});
  check_same_bits(f.find("i64")->values(), {-9007199254740992.0, 42});
  CHECK(f.find("i32")->shape() == Shape{2, 1});
  check_same_bits(f.find("i32")->values(), {-2147483648.0, 7});
  CHECK(f.find("s")->shape() == Shape{1});
  CHECK(f.metadata.at("format") == "np");
}

// ---- .npy / .npz ---------------------------------------------------------------------------

namespace {
// A .npy file from a header dict text, padded like numpy pads it (to 64 bytes, ending in \n).
std::string npy_bytes(const std::string& dict, std::string_view data, int major = 1) {
  const size_t pre = major == 1 ? 10 : 12;
  std::string h = dict;
  while ((pre + h.size() + 1) % 64) h += ' ';
  h += '\n';
  std::string out = std::string("\x93NUMPY", 6) + static_cast<char>(major) + '\0';
  le(out, h.size(), major == 1 ? 2 : 4);
  return out + h + std::string(data);
}

uint32_t crc32_ref(std::string_view s) {  // bitwise CRC-32 (IEEE), for hand-built archives
  uint32_t c = 0xFFFFFFFFu;
  for (const char ch : s) {
    c ^= static_cast<unsigned char>(ch);
    for (int k = 0; k < 8; ++k) c = (c >> 1) ^ (0xEDB88320u & (0u - (c & 1u)));
  }
  return ~c;
}

struct ZipEntry {
  std::string name, data;
  uint16_t method = 0, flags = 0;
};
// A minimal zip (STORED data; `method` is only a label, to test refusal of other methods).
std::string make_zip(const std::vector<ZipEntry>& entries) {
  std::string out, cd;
  for (const ZipEntry& e : entries) {
    const uint32_t crc = crc32_ref(e.data);
    const uint64_t off = out.size();
    le(out, 0x04034b50, 4), le(out, 20, 2), le(out, e.flags, 2), le(out, e.method, 2), le(out, 0, 4);
    le(out, crc, 4), le(out, e.data.size(), 4), le(out, e.data.size(), 4), le(out, e.name.size(), 2);
    le(out, 0, 2);
    out += e.name + e.data;
    le(cd, 0x02014b50, 4), le(cd, 20, 2), le(cd, 20, 2), le(cd, e.flags, 2), le(cd, e.method, 2);
    le(cd, 0, 4), le(cd, crc, 4), le(cd, e.data.size(), 4), le(cd, e.data.size(), 4);
    le(cd, e.name.size(), 2), le(cd, 0, 2), le(cd, 0, 2), le(cd, 0, 2), le(cd, 0, 2), le(cd, 0, 4);
    le(cd, off, 4);
    cd += e.name;
  }
  const uint64_t cd_off = out.size();
  out += cd;
  le(out, 0x06054b50, 4), le(out, 0, 4), le(out, entries.size(), 2), le(out, entries.size(), 2);
  le(out, cd.size(), 4), le(out, cd_off, 4), le(out, 0, 2);
  return out;
}
const std::string kF8x4 = "{'descr': '<f8', 'fortran_order': False, 'shape': (2, 2), }";
}  // namespace

TEST_CASE("npy: hand-assembled files with versions and fortran order and 0-d") {
  Tensor t = parse_npy(npy_bytes(kF8x4, raw<double>({0.1, -0.0, 5e-324, 1e-300})), "a.npy");
  CHECK(t.shape() == Shape{2, 2});
  check_same_bits(t.values(), {0.1, -0.0, 5e-324, 1e-300});
  for (int major : {2, 3}) {
    t = parse_npy(npy_bytes(kF8x4, raw<double>({1, 2, 3, 4}), major), "v.npy");
    check_same_bits(t.values(), {1, 2, 3, 4});
  }
  // Column-major [2, 3] holding the row-major values 0..5 as 0 3 1 4 2 5.
  t = parse_npy(
      npy_bytes("{'descr': '<i4', 'fortran_order': True, 'shape': (2, 3), }", raw<int32_t>({0, 3, 1, 4, 2, 5})),
      "f.npy");
  CHECK(t.shape() == Shape{2, 3});
  check_same_bits(t.values(), {0, 1, 2, 3, 4, 5});
  t = parse_npy(npy_bytes("{\"shape\": (), \"fortran_order\": False, \"descr\": \"|b1\"}", std::string(1, '\x02')),
                "s.npy");
  CHECK(t.shape() == Shape{1});
  check_same_bits(t.values(), {1});
}

TEST_CASE("npy: every malformed file is an InputError at its place") {
  TempDir d;
  auto hdr = [](const std::string& descr, const std::string& shape, const std::string& fo = "False") {
    return "{'descr': '" + descr + "', 'fortran_order': " + fo + ", 'shape': " + shape + ", }";
  };
  const std::string d32 = raw<double>({1, 2, 3, 4});
  std::string v4 = npy_bytes(kF8x4, d32);
  v4[6] = 4;
  struct Case {
    std::string bytes, place, part;
  };
  const std::vector<Case> cases = {
      {"PK\x03\x04 not npy", "header", "does not start with \\x93NUMPY"},
      {v4, "header", "unsupported .npy version 4.0"},
      {npy_bytes(kF8x4, d32).substr(0, 40), "header", "exceeds the file size"},
      {npy_bytes("['descr']", d32), "header", "not a Python dict literal"},
      {npy_bytes("{'descr': '<f8', 'shape': (2, 2)}", d32), "header", "missing key 'fortran_order'"},
      {npy_bytes("{'descr': '<f8', 'fortran_order': False, 'shape': (4,), 'x': 1}", d32), "header", "unknown key 'x'"},
      {npy_bytes("{'descr': '<f8', 'descr': '<f8', 'fortran_order': False, 'shape': (4,)}", d32), "header",
       "duplicate key 'descr'"},
      {npy_bytes("{'descr': [('a', '<f8')], 'fortran_order': False, 'shape': (4,)}", d32), "header",
       "structured dtypes"},
      {npy_bytes(hdr("<f8", "(4,)", "Maybe"), d32), "header", "neither True nor False"},
      {npy_bytes(hdr(">f8", "(4,)"), d32), "header", "dtype '>f8' is not supported"},
      {npy_bytes(hdr("<c16", "(2,)"), d32), "header", "dtype '<c16' is not supported"},
      {npy_bytes(hdr("<f2", "(16,)"), d32), "header", "dtype '<f2' is not supported"},
      {npy_bytes(hdr("<f8", "(0, 4)"), ""), "header", "zero-size dim"},
      {npy_bytes(hdr("<f8", "(-4,)"), d32), "header", "negative dim"},
      {npy_bytes(hdr("<f8", "(1, 1, 1, 1, 1, 1, 1, 1, 4)"), d32), "header", "rank 9"},
      {npy_bytes(hdr("<f8", "(4, x)"), d32), "header", "other than integers"},
      {npy_bytes(hdr("<f8", "(5,)"), d32), "data", "the data is 32 bytes but shape [5] of '<f8' needs 40: truncated"},
      {npy_bytes(hdr("<f8", "(3,)"), d32), "data", "the data is 32 bytes but shape [3] of '<f8' needs 24"},
      {npy_bytes(hdr("<u8", "(1,)"), raw<uint64_t>({(uint64_t(1) << 63) + 1})), "data", "has no exact f64"},
  };
  for (const Case& c : cases) {
    INFO("expecting: " << c.part);
    const std::string p = d.put("bad.npy", c.bytes);
    expect_input_error([&] { read_npy(p); }, p, c.place, c.part);
  }
  CHECK_THROWS_AS(read_npy(d.file("missing.npy")), IoError);
}

TEST_CASE("npz: hand-built stored archives and their errors") {
  TempDir d;
  const std::string x = npy_bytes(kF8x4, raw<double>({1, 2, 3, 4}));
  const std::string y = npy_bytes("{'descr': '|u1', 'fortran_order': False, 'shape': (3,), }", "\x01\x02\xff");
  const std::string p = d.put("ok.npz", make_zip({{"x.npy", x}, {"y.npy", y}}));
  const std::vector<NamedTensor> ts = read_npz(p);
  REQUIRE(ts.size() == 2);
  CHECK(ts[0].name == "x");
  CHECK(ts[1].name == "y");
  check_same_bits(ts[0].tensor.values(), {1, 2, 3, 4});
  check_same_bits(ts[1].tensor.values(), {1, 2, 255});
  CHECK(read_npz(d.put("empty.npz", make_zip({}))).empty());

  std::string crc_bad = make_zip({{"x.npy", x}});
  crc_bad[30 + 5 + 80] ^= 1;  // a data byte of x.npy
  struct Case {
    std::string bytes, place, part;
  };
  const std::vector<Case> cases = {
      {"short", "zip", "not a zip archive"},
      {make_zip({{"x.npy", x}}).substr(0, 60), "zip", "no end-of-directory record"},
      {crc_bad, "x.npy", "CRC-32 mismatch"},
      {make_zip({{"readme.txt", "hi"}}), "readme.txt", "not a .npy member"},
      {make_zip({{"x.npy", x}, {"x.npy", x}}), "x.npy", "duplicate member name"},
      {make_zip({{"x.npy", x, 12}}), "x.npy", "compression method 12 is not supported"},
      {make_zip({{"x.npy", x, 0, 1}}), "x.npy", "encrypted"},
      {make_zip({{"x.npy", "\x93NUMPY\x01"}}), "x.npy: header", "does not start with"},
      {make_zip({{"x.npy", x.substr(0, x.size() - 8)}}), "x.npy: data", "truncated"},
  };
  for (const Case& c : cases) {
    INFO("expecting: " << c.part);
    const std::string b = d.put("bad.npz", c.bytes);
    expect_input_error([&] { read_npz(b); }, b, c.place, c.part);
  }
}

TEST_CASE("npy: python numpy np.save files read exactly") {
  NEED_NUMPY();
  TempDir d;
  const std::vector<double> fvals = {0.1, 1e-300, 5e-324, -0.0, 1.0 / 3, 1e308, -2.5, 0, 1, 2, 3, 1e-45};
  const std::vector<double> ivals = {-128, -1, 0, 1, 2, 3, 4, 5, 6, 7, 100, 127};
  const std::vector<double> uvals = {0, 1, 2, 3, 4, 5, 6, 7, 8, 100, 200, 255};
  const std::vector<double> bvals = {0, 1, 2, 0, 0, 1, 1, 1, 0, 0, 3, 0};
  struct Dt {
    const char* descr;
    const std::vector<double>* vals;
  };
  const std::vector<Dt> dts = {{"<f8", &fvals}, {"<f4", &fvals}, {"<i8", &ivals}, {"<i4", &ivals},
                               {"<i2", &ivals}, {"|i1", &ivals}, {"|u1", &uvals}, {"<u2", &uvals},
                               {"<u4", &uvals}, {"<u8", &uvals}, {"|b1", &bvals}};
  std::string args = "'" + d.dir.string() + "'";
  for (const Dt& dt : dts) {
    args += std::string(" '") + dt.descr + ":";
    for (size_t i = 0; i < dt.vals->size(); ++i) {
      char buf[40];
      std::snprintf(buf, sizeof buf, i ? ",%.17g" : "%.17g", (*dt.vals)[i]);
      args += buf;
    }
    args += "'";
  }
  python(R"PY(
import sys, numpy as np
np.seterr(all="ignore")  # 1e308 -> float32 overflows to inf on purpose
d = sys.argv[1]
for spec in sys.argv[2:]:
    dt, vals = spec.split(":")
    a = np.array([float(x) for x in vals.split(",")]).astype(dt).reshape(3, 2, 2)
    np.save(d + "/" + dt[1:] + ".npy", a)
np.save(d + "/fortran.npy", np.asfortranarray(np.arange(24, dtype="<f8").reshape(2, 3, 4)))
np.save(d + "/scalar.npy", np.float64(2.5))
for v in [(2, 0), (3, 0)]:
    with open(d + "/v%d.npy" % v[0], "wb") as f:
        np.lib.format.write_array(f, np.arange(6, dtype="<i8").reshape(2, 3), version=v)
np.save(d + "/big_endian.npy", np.arange(3, dtype=">f8"))
np.save(d + "/half.npy", np.arange(3, dtype="<f2"))
np.save(d + "/empty.npy", np.zeros((0, 3)))
np.save(d + "/inexact.npy", np.array([2**53 + 1], dtype="<i8"))
)PY",
         args);
  for (const Dt& dt : dts) {
    INFO("dtype " << dt.descr);
    const Tensor t = read_npy(d.file(std::string(dt.descr + 1) + ".npy"));
    CHECK(t.shape() == Shape{3, 2, 2});
    std::vector<double> want;
    for (double v : *dt.vals)
      want.push_back(dt.descr[1] == 'f' && dt.descr[2] == '4' ? double(float(v)) : dt.descr[1] == 'b' ? (v != 0) : v);
    check_same_bits(t.values(), want);
  }
  std::vector<double> iota(24);
  for (size_t i = 0; i < iota.size(); ++i) iota[i] = double(i);
  const Tensor f = read_npy(d.file("fortran.npy"));
  CHECK(f.shape() == Shape{2, 3, 4});
  check_same_bits(f.values(), iota);
  CHECK(read_npy(d.file("scalar.npy")).shape() == Shape{1});
  CHECK(read_npy(d.file("scalar.npy"))[0] == 2.5);
  for (const char* v : {"v2.npy", "v3.npy"}) check_same_bits(read_npy(d.file(v)).values(), {0, 1, 2, 3, 4, 5});
  expect_input_error([&] { read_npy(d.file("big_endian.npy")); }, d.file("big_endian.npy"), "header", "'>f8'");
  expect_input_error([&] { read_npy(d.file("half.npy")); }, d.file("half.npy"), "header", "'<f2'");
  expect_input_error([&] { read_npy(d.file("empty.npy")); }, d.file("empty.npy"), "header", "zero-size");
  expect_input_error([&] { read_npy(d.file("inexact.npy")); }, d.file("inexact.npy"), "data", "9007199254740993");
}

TEST_CASE("npz: python numpy np.savez and np.savez_compressed read exactly") {
  NEED_NUMPY();
  TempDir d;
  python(R"PY(
import sys, zipfile, numpy as np
d = sys.argv[1]
x = np.array([[0.1, 5e-324], [-0.0, 1e-300]])
y = np.arange(6, dtype="<i4").reshape(3, 2)
big = (np.arange(200000, dtype="<f8") % 97) / 7
np.savez(d + "/s.npz", x=x, y=y)
np.savez_compressed(d + "/c.npz", x=x, y=y, big=big)
np.savez(d + "/pos.npz", x, y)
with zipfile.ZipFile(d + "/txt.npz", "w") as z:
    z.writestr("notes.txt", "hello")
with zipfile.ZipFile(d + "/bz.npz", "w", compression=zipfile.ZIP_BZIP2) as z:
    z.writestr("x.npy", open(d + "/s.npz", "rb").read())
)PY",
         "'" + d.dir.string() + "'");
  const std::vector<double> xv = {0.1, 5e-324, -0.0, 1e-300};
  for (const char* name : {"s.npz", "c.npz"}) {
    INFO(name);
    const std::vector<NamedTensor> ts = read_npz(d.file(name));
    REQUIRE(ts.size() >= 2);
    CHECK(ts[0].name == "x");
    CHECK(ts[1].name == "y");
    CHECK(ts[0].tensor.shape() == Shape{2, 2});
    check_same_bits(ts[0].tensor.values(), xv);
    CHECK(ts[1].tensor.shape() == Shape{3, 2});
    check_same_bits(ts[1].tensor.values(), {0, 1, 2, 3, 4, 5});
  }
  const std::vector<NamedTensor> c = read_npz(d.file("c.npz"));
  REQUIRE(c.size() == 3);
  CHECK(c[2].name == "big");
  std::vector<double> big(200000);
  for (size_t i = 0; i < big.size(); ++i) big[i] = double(i % 97) / 7;
  size_t differing = 0;  // one assertion, not 200000
  for (size_t i = 0; i < big.size(); ++i) differing += bits(c[2].tensor[int64_t(i)]) != bits(big[i]);
  CHECK(differing == 0);
  const std::vector<NamedTensor> pos = read_npz(d.file("pos.npz"));
  REQUIRE(pos.size() == 2);
  CHECK((pos[0].name == "arr_0" && pos[1].name == "arr_1"));

  expect_input_error([&] { read_npz(d.file("txt.npz")); }, d.file("txt.npz"), "notes.txt", "not a .npy member");
  expect_input_error([&] { read_npz(d.file("bz.npz")); }, d.file("bz.npz"), "x.npy", "compression method 12");
  // A damaged compressed member: flip a byte in the middle of big.npy's deflate stream.
  std::ifstream in(d.file("c.npz"), std::ios::binary);
  std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const size_t at = bytes.find("big.npy") + 7 + 20 + 300;
  bytes[at] = static_cast<char>(bytes[at] ^ 0x55);
  const std::string bad = d.put("damaged.npz", bytes);
  expect_input_error([&] { read_npz(bad); }, bad, "big.npy", "damaged");
  CHECK_THROWS_AS(read_npz(d.file("missing.npz")), IoError);
}
