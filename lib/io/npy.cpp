#include "io/npy.h"

#include <zlib.h>

#include <algorithm>
#include <bit>
#include <cstring>
#include <set>

#include "io/atomic_file.h"
#include "io/errors.h"
#include "io/limits.h"

namespace gr {

static_assert(std::endian::native == std::endian::little, "gradrun assumes a little-endian host");

namespace {

template <class T>
T load(const char* p) {
  T v;
  std::memcpy(&v, p, sizeof v);  // no aliasing or alignment assumptions
  return v;
}

// Text from the file quoted in a message: control bytes escaped (one-line messages), long text cut.
std::string printable(std::string_view s, size_t max_chars = 80) {
  std::string out;
  for (size_t i = 0; i < s.size() && i < max_chars; ++i) {
    const unsigned char c = static_cast<unsigned char>(s[i]);
    if (c < 0x20 || c == 0x7f) {
      static const char* hex = "0123456789abcdef";
      out += "\\x";
      out += hex[c >> 4];
      out += hex[c & 15];
    } else {
      out += static_cast<char>(c);
    }
  }
  return s.size() > max_chars ? out + "..." : out;
}

// ---- .npy ----------------------------------------------------------------------------------

enum class Kind { F8, F4, I8, I4, I2, I1, U1, U2, U4, U8, B1 };
struct DtypeInfo {
  const char* descr;
  Kind kind;
  size_t size;
};
constexpr DtypeInfo kDtypes[] = {{"<f8", Kind::F8, 8}, {"<f4", Kind::F4, 4}, {"<i8", Kind::I8, 8}, {"<i4", Kind::I4, 4},
                                 {"<i2", Kind::I2, 2}, {"|i1", Kind::I1, 1}, {"|u1", Kind::U1, 1}, {"<u2", Kind::U2, 2},
                                 {"<u4", Kind::U4, 4}, {"<u8", Kind::U8, 8}, {"|b1", Kind::B1, 1}};

// The header is a Python dict literal written by numpy's format module. A tiny parser for exactly
// the literals numpy writes (no eval): strings, True/False, tuples of non-negative integers.
class HeaderParser {
 public:
  HeaderParser(std::string_view s, const std::string& path, std::string place)
      : s_(s), path_(path), place_(std::move(place)) {}

  std::string descr;
  bool fortran = false;
  std::vector<int64_t> shape;

  void parse() {
    if (!eat('{')) fail("the header is not a Python dict literal");
    std::set<std::string> seen;
    while (!eat('}')) {
      const std::string key = string_lit("a key");
      if (!seen.insert(key).second) fail("duplicate key '" + printable(key) + "'");
      if (!eat(':')) fail("expected ':' after '" + printable(key) + "'");
      if (key == "descr") {
        ws();
        if (i_ < s_.size() && s_[i_] == '[') fail("structured dtypes (a list as 'descr') are not supported");
        descr = string_lit("a dtype string as 'descr'");
      } else if (key == "fortran_order") {
        if (word("True"))
          fortran = true;
        else if (!word("False"))
          fail("'fortran_order' is neither True nor False");
      } else if (key == "shape") {
        shape_tuple();
      } else {
        fail("unknown key '" + printable(key) + "'");
      }
      if (!eat(',')) {
        if (eat('}')) break;
        fail("expected ',' or '}' after the value of '" + printable(key) + "'");
      }
    }
    ws();
    if (i_ != s_.size()) fail("unexpected text after the header dict");
    for (const char* k : {"descr", "fortran_order", "shape"})
      if (!seen.count(k)) fail(std::string("missing key '") + k + "'");
  }

  [[noreturn]] void fail(const std::string& what) const {
    throw InputError(path_, place_, what + " (header: " + printable(s_) + ")");
  }

 private:
  void ws() {
    while (i_ < s_.size() && (s_[i_] == ' ' || s_[i_] == '\t' || s_[i_] == '\n' || s_[i_] == '\r')) ++i_;
  }
  bool eat(char c) {
    ws();
    if (i_ < s_.size() && s_[i_] == c) return ++i_, true;
    return false;
  }
  bool word(std::string_view w) {
    ws();
    if (s_.substr(i_, w.size()) != w) return false;
    i_ += w.size();
    return true;
  }
  std::string string_lit(const char* expected) {
    ws();
    if (i_ >= s_.size() || (s_[i_] != '\'' && s_[i_] != '"')) fail(std::string("expected ") + expected);
    const char q = s_[i_++];
    std::string out;
    while (i_ < s_.size() && s_[i_] != q) {
      if (s_[i_] == '\\' && i_ + 1 < s_.size()) ++i_;  // \' or \\ (numpy never writes others)
      out += s_[i_++];
    }
    if (i_ >= s_.size()) fail("unterminated string");
    ++i_;
    return out;
  }
  void shape_tuple() {
    if (!eat('(')) fail("'shape' is not a tuple");
    while (!eat(')')) {
      ws();
      if (i_ < s_.size() && s_[i_] == '-') fail("'shape' has a negative dim");
      if (i_ >= s_.size() || s_[i_] < '0' || s_[i_] > '9') fail("'shape' holds something other than integers");
      int64_t v = 0;
      while (i_ < s_.size() && s_[i_] >= '0' && s_[i_] <= '9') {
        v = v * 10 + (s_[i_++] - '0');
        if (v > kMaxElems) fail("'shape' has a dim larger than 2^40");
      }
      if (i_ < s_.size() && s_[i_] == 'L') ++i_;  // Python 2 long literal, in old files
      shape.push_back(v);
      if (!eat(',')) {
        if (eat(')')) break;
        fail("expected ',' or ')' in 'shape'");
      }
    }
  }

  std::string_view s_;
  size_t i_ = 0;
  const std::string& path_;
  std::string place_;
};

// Converts the elements to double in file order; integers with no exact double are refused.
std::vector<double> decode(std::string_view data, const DtypeInfo& dt, int64_t n, const std::string& path,
                           const std::string& place) {
  std::vector<double> v(static_cast<size_t>(n));
  const char* p = data.data();
  auto inexact = [&](const std::string& x, int64_t i) {
    throw InputError(
        path, place,
        std::string(dt.descr) + " value " + x + " at index " + std::to_string(i) + " has no exact f64 representation");
  };
  for (int64_t i = 0; i < n; ++i) {
    const char* e = p + static_cast<size_t>(i) * dt.size;
    double& out = v[static_cast<size_t>(i)];
    switch (dt.kind) {
      case Kind::F8:
        out = load<double>(e);
        break;
      case Kind::F4:
        out = static_cast<double>(load<float>(e));
        break;
      case Kind::I4:
        out = load<int32_t>(e);
        break;
      case Kind::I2:
        out = load<int16_t>(e);
        break;
      case Kind::I1:
        out = load<int8_t>(e);
        break;
      case Kind::U1:
        out = load<uint8_t>(e);
        break;
      case Kind::U2:
        out = load<uint16_t>(e);
        break;
      case Kind::U4:
        out = load<uint32_t>(e);
        break;
      case Kind::B1:
        out = load<uint8_t>(e) != 0 ? 1.0 : 0.0;
        break;
      case Kind::I8: {
        const int64_t x = load<int64_t>(e);
        out = static_cast<double>(x);
        if (out >= 0x1p63 || static_cast<int64_t>(out) != x) inexact(std::to_string(x), i);
        break;
      }
      case Kind::U8: {
        const uint64_t x = load<uint64_t>(e);
        out = static_cast<double>(x);
        if (out >= 0x1p64 || static_cast<uint64_t>(out) != x) inexact(std::to_string(x), i);
        break;
      }
    }
  }
  return v;
}

// Column-major (Fortran) element order to row-major: walk the row-major index like an odometer
// and keep the matching column-major offset in step.
std::vector<double> fortran_to_c(const std::vector<double>& f, const Shape& shape) {
  const int r = shape.rank();
  std::vector<double> c(f.size());
  int64_t fstride[kMaxDims], idx[kMaxDims] = {};
  int64_t s = 1;
  for (int k = 0; k < r; ++k) fstride[k] = s, s *= shape[k];
  int64_t off = 0;
  for (size_t i = 0; i < c.size(); ++i) {
    c[i] = f[static_cast<size_t>(off)];
    for (int k = r - 1; k >= 0; --k) {
      off += fstride[k];
      if (++idx[k] < shape[k]) break;
      off -= fstride[k] * shape[k];
      idx[k] = 0;
    }
  }
  return c;
}

// `prefix` is "" for a .npy file and "<member>: " inside an archive.
Tensor parse_npy_in(std::string_view b, const std::string& path, const std::string& prefix, std::string* descr = nullptr) {
  const std::string hplace = prefix + "header";
  if (b.size() < 10 || b.substr(0, 6) != "\x93NUMPY")
    throw InputError(path, hplace, "not a .npy array (the file does not start with \\x93NUMPY)");
  const int major = static_cast<unsigned char>(b[6]), minor = static_cast<unsigned char>(b[7]);
  if (major < 1 || major > 3 || minor != 0)
    throw InputError(path, hplace,
                     "unsupported .npy version " + std::to_string(major) + "." + std::to_string(minor) +
                         " (gradrun reads 1.0, 2.0, 3.0)");
  size_t start = 0, hlen = 0;
  if (major == 1) {
    hlen = load<uint16_t>(b.data() + 8), start = 10;
  } else {
    if (b.size() < 12) throw InputError(path, hplace, "the file ends inside the header length");
    hlen = load<uint32_t>(b.data() + 8), start = 12;
  }
  if (hlen > b.size() - start)
    throw InputError(path, hplace,
                     "header length " + std::to_string(hlen) + " exceeds the file size (" + std::to_string(b.size()) +
                         " bytes): truncated file?");
  HeaderParser hp(b.substr(start, hlen), path, hplace);
  hp.parse();

  const DtypeInfo* dt = nullptr;
  for (const auto& d : kDtypes)
    if (hp.descr == d.descr) dt = &d;
  if (!dt)
    throw InputError(path, hplace,
                     "dtype '" + printable(hp.descr) +
                         "' is not supported (gradrun reads <f8 <f4 <i8 <i4 <i2 |i1 |u1 <u2 <u4 <u8 |b1)");
  if (descr) *descr = dt->descr;
  std::vector<int64_t> dims = hp.shape;
  if (dims.empty()) dims.push_back(1);  // a 0-d array is a scalar: shape [1]
  for (const int64_t d : dims)
    if (d == 0) hp.fail("a zero-size dim; gradrun tensors need every dim >= 1");
  Shape shape;
  try {
    shape = Shape(std::span<const int64_t>(dims));
  } catch (const Error& e) {
    throw InputError(path, hplace, e.what());
  }

  const std::string_view data = b.substr(start + hlen);
  const uint64_t need = static_cast<uint64_t>(shape.numel()) * dt->size;
  if (data.size() != need)
    throw InputError(path, prefix + "data",
                     "the data is " + std::to_string(data.size()) + " bytes but shape " + shape.str() + " of '" +
                         dt->descr + "' needs " + std::to_string(need) +
                         (data.size() < need ? ": truncated file?" : ""));
  check_memory(static_cast<double>(shape.numel()) * sizeof(double), path, hplace, "shape " + shape.str() + " as doubles");
  std::vector<double> v = decode(data, *dt, shape.numel(), path, prefix + "data");
  if (hp.fortran && shape.rank() > 1) v = fortran_to_c(v, shape);
  return Tensor(shape, std::move(v));
}

// ---- .npz (zip) ----------------------------------------------------------------------------

constexpr uint32_t kEocdSig = 0x06054b50, kZip64EocdSig = 0x06064b50, kZip64LocSig = 0x07064b50,
                   kCentralSig = 0x02014b50, kLocalSig = 0x04034b50;

uint32_t crc32_of(std::string_view s) {
  uLong crc = crc32(0L, Z_NULL, 0);
  for (size_t done = 0; done < s.size();) {  // zlib takes uInt lengths: feed in 1 GiB pieces
    const size_t n = std::min<size_t>(s.size() - done, size_t(1) << 30);
    crc = crc32(crc, reinterpret_cast<const Bytef*>(s.data() + done), static_cast<uInt>(n));
    done += n;
  }
  return static_cast<uint32_t>(crc);
}

// Raw DEFLATE (no zlib header), as zip stores it; the output must be exactly `size` bytes.
bool inflate_raw(std::string_view in, std::string& out, uint64_t size) {
  out.assign(static_cast<size_t>(size), '\0');
  z_stream z{};
  if (inflateInit2(&z, -MAX_WBITS) != Z_OK) return false;
  size_t in_done = 0, out_done = 0;
  int rc = Z_OK;
  while (rc == Z_OK) {
    const size_t in_n = std::min<size_t>(in.size() - in_done, size_t(1) << 30);
    const size_t out_n = std::min<size_t>(out.size() - out_done, size_t(1) << 30);
    z.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(in.data() + in_done));
    z.avail_in = static_cast<uInt>(in_n);
    z.next_out = reinterpret_cast<Bytef*>(out.data() + out_done);
    z.avail_out = static_cast<uInt>(out_n);
    rc = inflate(&z, Z_NO_FLUSH);
    in_done += in_n - z.avail_in;
    out_done += out_n - z.avail_out;
    if (rc == Z_OK && in_n == z.avail_in && out_n == z.avail_out) rc = Z_BUF_ERROR;  // no progress
  }
  inflateEnd(&z);
  return rc == Z_STREAM_END && out_done == out.size();
}

struct Member {
  std::string name;
  uint16_t flags = 0, method = 0;
  uint32_t crc = 0;
  uint64_t csize = 0, usize = 0, offset = 0;
};

}  // namespace

Tensor parse_npy(std::string_view bytes, const std::string& path, std::string* descr) {
  return parse_npy_in(bytes, path, "", descr);
}

Tensor read_npy(const std::string& path) { return parse_npy(read_file(path), path); }

std::vector<NamedTensor> read_npz(const std::string& path) { return parse_npz(read_file(path), path); }

std::vector<NamedTensor> parse_npz(std::string_view b, const std::string& path, std::vector<std::string>* descrs) {
  auto zip_error = [&](const std::string& what) { return InputError(path, "zip", what); };
  // End of central directory: the last record signature within the last 22 + 65535 bytes.
  if (b.size() < 22) throw zip_error("not a zip archive (too short for an end-of-directory record)");
  size_t eocd = std::string_view::npos;
  for (size_t p = b.size() - 22, stop = b.size() > 22 + 65535 ? b.size() - 22 - 65535 : 0;; --p) {
    if (load<uint32_t>(b.data() + p) == kEocdSig) {
      eocd = p;
      break;
    }
    if (p == stop) break;
  }
  if (eocd == std::string_view::npos)
    throw zip_error("not a zip archive (no end-of-directory record): not an .npz file, or truncated?");
  if (load<uint16_t>(b.data() + eocd + 4) != 0 || load<uint16_t>(b.data() + eocd + 6) != 0)
    throw zip_error("multi-disk archives are not supported");
  uint64_t count = load<uint16_t>(b.data() + eocd + 10);
  uint64_t cd_size = load<uint32_t>(b.data() + eocd + 12);
  uint64_t cd_off = load<uint32_t>(b.data() + eocd + 16);
  if (count == 0xFFFF || cd_size == 0xFFFFFFFF || cd_off == 0xFFFFFFFF) {
    // ZIP64: the locator sits right before the classic record and points at the ZIP64 record.
    if (eocd < 20 || load<uint32_t>(b.data() + eocd - 20) != kZip64LocSig)
      throw zip_error("ZIP64 end-of-directory locator missing");
    const uint64_t z = load<uint64_t>(b.data() + eocd - 20 + 8);
    if (z > b.size() || b.size() - z < 56 || load<uint32_t>(b.data() + z) != kZip64EocdSig)
      throw zip_error("ZIP64 end-of-directory record missing or damaged");
    count = load<uint64_t>(b.data() + z + 32);
    cd_size = load<uint64_t>(b.data() + z + 40);
    cd_off = load<uint64_t>(b.data() + z + 48);
  }
  if (cd_off > b.size() || cd_size > b.size() - cd_off)
    throw zip_error("the central directory lies outside the file: truncated?");

  std::vector<Member> members;
  size_t p = static_cast<size_t>(cd_off);
  const size_t cd_end = static_cast<size_t>(cd_off + cd_size);
  for (uint64_t k = 0; k < count; ++k) {
    if (cd_end - p < 46 || load<uint32_t>(b.data() + p) != kCentralSig)
      throw zip_error("central directory entry " + std::to_string(k + 1) + " is damaged");
    Member m;
    m.flags = load<uint16_t>(b.data() + p + 8);
    m.method = load<uint16_t>(b.data() + p + 10);
    m.crc = load<uint32_t>(b.data() + p + 16);
    m.csize = load<uint32_t>(b.data() + p + 20);
    m.usize = load<uint32_t>(b.data() + p + 24);
    const size_t nlen = load<uint16_t>(b.data() + p + 28), xlen = load<uint16_t>(b.data() + p + 30),
                 clen = load<uint16_t>(b.data() + p + 32);
    m.offset = load<uint32_t>(b.data() + p + 42);
    if (cd_end - p - 46 < nlen + xlen + clen)
      throw zip_error("central directory entry " + std::to_string(k + 1) + " is damaged");
    m.name.assign(b.data() + p + 46, nlen);
    // ZIP64 extra field: 64-bit values for exactly those fields that hold 0xFFFFFFFF, in order.
    for (size_t x = p + 46 + nlen, xend = x + xlen; xend - x >= 4;) {
      const uint16_t id = load<uint16_t>(b.data() + x), sz = load<uint16_t>(b.data() + x + 2);
      if (sz > xend - x - 4) break;
      if (id == 0x0001) {
        size_t q = x + 4;
        for (uint64_t* f : {&m.usize, &m.csize, &m.offset})
          if (*f == 0xFFFFFFFF && q + 8 <= x + 4 + sz) *f = load<uint64_t>(b.data() + q), q += 8;
      }
      x += 4 + sz;
    }
    p += 46 + nlen + xlen + clen;
    members.push_back(std::move(m));
  }

  std::vector<NamedTensor> out;
  std::set<std::string> seen;
  for (const Member& m : members) {
    const std::string place = printable(m.name);
    auto merr = [&](const std::string& what) { return InputError(path, place, what); };
    if (m.name.size() < 5 || m.name.compare(m.name.size() - 4, 4, ".npy") != 0)
      throw merr("not a .npy member (an .npz archive holds only .npy arrays)");
    if (!seen.insert(m.name).second) throw merr("duplicate member name");
    if (m.flags & 1) throw merr("encrypted members are not supported");
    if (m.method != 0 && m.method != 8)
      throw merr("compression method " + std::to_string(m.method) +
                 " is not supported (gradrun reads stored and deflate: np.savez, np.savez_compressed)");
    if (m.offset > b.size() || b.size() - m.offset < 30 || load<uint32_t>(b.data() + m.offset) != kLocalSig)
      throw merr("local header missing or damaged: truncated archive?");
    // The local header's sizes may be placeholders (np.savez writes ZIP64 / streamed entries), so
    // only its name and extra lengths are used; sizes come from the central directory.
    const uint64_t data_at =
        m.offset + 30 + load<uint16_t>(b.data() + m.offset + 26) + load<uint16_t>(b.data() + m.offset + 28);
    if (data_at > b.size() || m.csize > b.size() - data_at)
      throw merr("member data extends past the end of the file: truncated archive?");
    const std::string_view raw = b.substr(static_cast<size_t>(data_at), static_cast<size_t>(m.csize));
    std::string inflated;
    std::string_view npy = raw;
    if (m.method == 0) {
      if (m.csize != m.usize) throw merr("stored member with differing sizes: damaged archive");
    } else {
      // DEFLATE expands at most ~1032:1; a larger claim is damage (and would be a huge allocation).
      if (m.usize > m.csize * 1040 + 1024) throw merr("implausible uncompressed size: damaged archive");
      check_memory(static_cast<double>(m.usize), path, place, "decompressing the member");
      if (!inflate_raw(raw, inflated, m.usize)) throw merr("the compressed data is damaged");
      npy = inflated;
    }
    if (crc32_of(npy) != m.crc) throw merr("CRC-32 mismatch: the member is damaged");
    std::string descr;
    out.push_back({m.name.substr(0, m.name.size() - 4), parse_npy_in(npy, path, place + ": ", &descr)});
    if (descrs) descrs->push_back(descr);
  }
  return out;
}

}  // namespace gr
