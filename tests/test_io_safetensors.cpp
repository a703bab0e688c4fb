// test_io_safetensors.cpp — safetensors: the reference byte layouts, our writer's layout, exact round
// trips, every malformed file as a located InputError, numpy interop both ways.
#include "support/io_support.h"

using namespace gr;
using namespace gr::iotest;
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
  const std::string got = encode_safetensors({{"test", t.view()}}, {}, DType::F64);
  CHECK(got ==
        st_bytes("{\"test\":{\"dtype\":\"F64\",\"shape\":[2],\"data_offsets\":[0,16]}}", raw<double>({1.5, -2.25})));
  // Metadata first (sorted keys), then tensors in the given order; F32 rounds to nearest.
  const Tensor s = Tensor::scalar(0.1);
  const std::string got2 =
      encode_safetensors({{"z", s.view()}, {"a", t.view()}}, {{"spec", "x.json"}, {"dtype", "f32"}}, DType::F32);
  CHECK(got2 == st_bytes("{\"__metadata__\":{\"dtype\":\"f32\",\"spec\":\"x.json\"},"
                         "\"z\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},"
                         "\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[4,12]}}",
                         raw<float>({0.1f, 1.5f, -2.25f})));
  CHECK((got2.size() - 8 - 12) % 8 == 0);
  CHECK(encode_safetensors({{"z", s.view()}, {"a", t.view()}}, {{"spec", "x.json"}}, DType::F32) ==
        encode_safetensors({{"z", s.view()}, {"a", t.view()}}, {{"spec", "x.json"}}, DType::F32));

  CHECK_THROWS_AS(encode_safetensors({{"a", t.view()}, {"a", t.view()}}, {}, DType::F64), Error);
  CHECK_THROWS_AS(encode_safetensors({{"", t.view()}}, {}, DType::F64), Error);
  CHECK_THROWS_AS(encode_safetensors({{"__metadata__", t.view()}}, {}, DType::F64), Error);
  CHECK_THROWS_AS(encode_safetensors({{"bad\xff", t.view()}}, {}, DType::F64), Error);
}

TEST_CASE("safetensors: exact round trip through a file") {
  TempDir d;
  const Tensor w(Shape{3, 4}, kSpecial);
  const Tensor s = Tensor::scalar(-0.0);
  const std::map<std::string, std::string> meta = {{"steps", "12"}, {"spec", "a b \"c\""}};
  const std::string p = d.file("w.safetensors");
  write_safetensors(p, {{"W1", w.view()}, {"loss", s.view()}}, meta, DType::F64);
  SafetensorsFile f = read_safetensors(p);
  REQUIRE(f.tensors.size() == 2);
  CHECK(f.tensors[0].name == "W1");
  CHECK(f.tensors[1].tensor.shape() == Shape{1});
  check_same_bits(f.find("W1")->values(), kSpecial);
  CHECK(std::signbit((*f.find("loss"))[0]));
  CHECK(f.metadata == meta);

  write_safetensors(p, {{"W1", w.view()}}, {}, DType::F32);
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
  for (const DType dt : {DType::F64, DType::F32}) {
    const std::string p = d.file("ours.safetensors");
    write_safetensors(p, {{"w", w.view()}, {"b", b.view()}}, {{"steps", "3"}, {"device", "cpu"}}, dt);
    std::string want = "meta {\"device\": \"cpu\", \"steps\": \"3\"}\n";
    for (const auto& [name, t] : {std::pair<const char*, const Tensor*>{"w", &w}, {"b", &b}}) {
      want += std::string(name) + (dt == DType::F64 ? " F64 " : " F32 ") +
              (t->shape() == Shape{3, 4} ? "[3, 4] " : "[2, 1, 1] ");
      for (int64_t i = 0; i < t->numel(); ++i) {
        char buf[32];
        const unsigned long long u =
            dt == DType::F64 ? bits((*t)[i]) : std::bit_cast<uint32_t>(static_cast<float>((*t)[i]));
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

