// test_io_npy.cpp — .npy and .npz: hand-assembled versions, fortran order, 0-d, stored and
// deflated archives, every malformed file as a located InputError, np.save/np.savez interop.
#include "support/io_support.h"

using namespace gr;
using namespace gr::iotest;
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
  std::string args = "'" + d.path + "'";
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
         "'" + d.path + "'");
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

