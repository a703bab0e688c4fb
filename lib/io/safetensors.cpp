#include "io/safetensors.h"

#include <algorithm>
#include <bit>
#include <cstring>
#include <nlohmann/json.hpp>
#include <set>

#include "io/atomic_file.h"
#include "io/errors.h"

namespace gr {

// Bytes are copied as-is between the file and host values; the format is little-endian.
static_assert(std::endian::native == std::endian::little, "gradrun assumes a little-endian host");

namespace {

using ojson = nlohmann::ordered_json;

constexpr uint64_t kMaxHeader = 100'000'000;  // the reference implementation's limit too

// Tensor names come from the file: escape control bytes so that messages stay on one line.
std::string printable(std::string_view s) {
  std::string out;
  for (const char ch : s) {
    const unsigned char c = static_cast<unsigned char>(ch);
    if (c < 0x20 || c == 0x7f) {
      static const char* hex = "0123456789abcdef";
      out += "\\x";
      out += hex[c >> 4];
      out += hex[c & 15];
    } else {
      out += ch;
    }
  }
  return out.size() > 80 ? out.substr(0, 80) + "..." : out;
}

std::string dims_str(const std::vector<int64_t>& d) {
  std::string s = "[";
  for (size_t i = 0; i < d.size(); ++i) s += (i ? ", " : "") + std::to_string(d[i]);
  return s + "]";
}

// nlohmann's messages start with "[json.exception.parse_error.101] "; the user needs the rest.
std::string json_reason(const std::exception& e) {
  std::string w = e.what();
  const size_t p = w.find("] ");
  return p == std::string::npos ? w : w.substr(p + 2);
}

enum class Dt { F64, F32, I64, I32 };

struct Entry {
  std::string name;
  Dt dt = Dt::F64;
  Shape shape;
  uint64_t begin = 0, end = 0;
};

size_t dt_size(Dt d) { return (d == Dt::F64 || d == Dt::I64) ? 8 : 4; }

Dt parse_dtype(const ojson& v, const std::string& path, const std::string& place) {
  if (!v.is_string()) throw InputError(path, place, "\"dtype\" is not a string");
  const std::string s = v.get<std::string>();
  if (s == "F64") return Dt::F64;
  if (s == "F32") return Dt::F32;
  if (s == "I64") return Dt::I64;
  if (s == "I32") return Dt::I32;
  static const std::set<std::string> known = {"BOOL", "U8",      "I8",      "I16", "U16", "F16",     "BF16",    "U32",
                                              "U64",  "F8_E5M2", "F8_E4M3", "C64", "F4",  "F6_E2M3", "F6_E3M2", "E8M0"};
  if (known.count(s))
    throw InputError(path, place, "dtype \"" + s + "\" is not supported (gradrun reads F64, F32, I64, I32)");
  throw InputError(path, place, "unknown dtype \"" + printable(s) + "\"");
}

Shape parse_shape(const ojson& v, const std::string& path, const std::string& place) {
  if (!v.is_array()) throw InputError(path, place, "\"shape\" is not an array");
  std::vector<int64_t> dims;
  for (const auto& d : v) {
    if (d.is_number_unsigned() && d.get<uint64_t>() <= uint64_t(kMaxElems)) {
      dims.push_back(static_cast<int64_t>(d.get<uint64_t>()));
    } else if (d.is_number_integer() && !d.is_number_unsigned()) {
      throw InputError(path, place, "shape " + v.dump() + " has a negative dim");
    } else if (d.is_number_unsigned()) {
      throw InputError(path, place, "shape " + v.dump() + " has a dim larger than 2^40");
    } else {
      throw InputError(path, place, "shape " + v.dump() + " holds something other than integers");
    }
  }
  if (dims.empty()) dims.push_back(1);  // rank 0: a scalar, which gradrun writes as [1]
  for (const int64_t d : dims)
    if (d == 0)
      throw InputError(path, place,
                       "shape " + dims_str(dims) + " has a zero-size dim; gradrun tensors need every dim >= 1");
  try {
    return Shape(std::span<const int64_t>(dims));
  } catch (const Error& e) {  // rank > 8, too many elements
    throw InputError(path, place, e.what());
  }
}

Entry parse_entry(const std::string& name, const ojson& info, uint64_t buffer_size, const std::string& path) {
  const std::string place = printable(name);
  if (!info.is_object()) throw InputError(path, place, "expected an object {\"dtype\", \"shape\", \"data_offsets\"}");
  for (const auto& [k, unused] : info.items())
    if (k != "dtype" && k != "shape" && k != "data_offsets")
      throw InputError(path, place, "unknown key \"" + printable(k) + "\" (expected dtype, shape, data_offsets)");
  for (const char* k : {"dtype", "shape", "data_offsets"})
    if (!info.contains(k)) throw InputError(path, place, std::string("missing key \"") + k + "\"");

  Entry e;
  e.name = name;
  e.dt = parse_dtype(info["dtype"], path, place);
  e.shape = parse_shape(info["shape"], path, place);
  const ojson& off = info["data_offsets"];
  if (!off.is_array() || off.size() != 2 || !off[0].is_number_unsigned() || !off[1].is_number_unsigned())
    throw InputError(path, place,
                     "\"data_offsets\" must be [begin, end], two non-negative integers; got " + printable(off.dump()));
  e.begin = off[0].get<uint64_t>();
  e.end = off[1].get<uint64_t>();
  const std::string offs = "data_offsets [" + std::to_string(e.begin) + ", " + std::to_string(e.end) + "]";
  if (e.begin > e.end) throw InputError(path, place, offs + " end before they begin");
  if (e.end > buffer_size)
    throw InputError(
        path, place,
        offs + " extend past the data buffer (" + std::to_string(buffer_size) + " bytes): truncated file?");
  // numel <= 2^40 (Shape's limit), so the byte count cannot overflow.
  const uint64_t need = static_cast<uint64_t>(e.shape.numel()) * dt_size(e.dt);
  if (e.end - e.begin != need)
    throw InputError(path, place,
                     offs + " span " + std::to_string(e.end - e.begin) + " bytes but shape " + e.shape.str() + " of " +
                         info["dtype"].get<std::string>() + " needs " + std::to_string(need));
  return e;
}

template <class T>
T load(const char* p) {
  T v;
  std::memcpy(&v, p, sizeof v);
  return v;
}

Tensor decode(const Entry& e, const char* buf, const std::string& path) {
  const int64_t n = e.shape.numel();
  std::vector<double> v(static_cast<size_t>(n));
  const char* p = buf + e.begin;
  for (int64_t i = 0; i < n; ++i) {
    double& out = v[static_cast<size_t>(i)];
    switch (e.dt) {
      case Dt::F64:
        out = load<double>(p + 8 * i);
        break;
      case Dt::F32:
        out = static_cast<double>(load<float>(p + 4 * i));
        break;
      case Dt::I32:
        out = static_cast<double>(load<int32_t>(p + 4 * i));
        break;
      case Dt::I64: {
        // Refuse values with no exact double rather than rounding them silently.
        const int64_t x = load<int64_t>(p + 8 * i);
        const double d = static_cast<double>(x);
        if (d >= 0x1p63 || static_cast<int64_t>(d) != x)
          throw InputError(
              path, printable(e.name),
              "I64 value " + std::to_string(x) + " at index " + std::to_string(i) + " has no exact f64 representation");
        out = d;
        break;
      }
    }
  }
  return Tensor(e.shape, std::move(v));
}

}  // namespace

const Tensor* SafetensorsFile::find(std::string_view name) const {
  for (const auto& t : tensors)
    if (t.name == name) return &t.tensor;
  return nullptr;
}

SafetensorsFile read_safetensors(const std::string& path) { return parse_safetensors(read_file(path), path); }

SafetensorsFile parse_safetensors(std::string_view bytes, const std::string& path) {
  if (bytes.size() < 8)
    throw InputError(
        path, "header",
        "file is " + std::to_string(bytes.size()) + " bytes; a safetensors file starts with an 8-byte header length");
  const uint64_t n = load<uint64_t>(bytes.data());
  if (n > kMaxHeader)
    throw InputError(path, "header",
                     "header length " + std::to_string(n) + " is absurd (> 100 MB): not a safetensors file?");
  if (n > bytes.size() - 8)
    throw InputError(path, "header",
                     "header length " + std::to_string(n) + " exceeds the file size (" + std::to_string(bytes.size()) +
                         " bytes): truncated file?");
  const std::string_view text = bytes.substr(8, n);
  const std::string_view buffer = bytes.substr(8 + n);

  // ordered_json keeps the file's key order; the callback catches duplicate keys, which a plain
  // parse would silently collapse to the last one.
  std::vector<std::set<std::string>> open_objects;
  std::string duplicate;
  const auto cb = [&](int, ojson::parse_event_t ev, ojson& parsed) {
    if (ev == ojson::parse_event_t::object_start) open_objects.emplace_back();
    if (ev == ojson::parse_event_t::object_end && !open_objects.empty()) open_objects.pop_back();
    if (ev == ojson::parse_event_t::key && !open_objects.empty() && duplicate.empty() &&
        !open_objects.back().insert(parsed.get<std::string>()).second)
      duplicate = parsed.get<std::string>();
    return true;
  };
  ojson header;
  try {
    header = ojson::parse(text.begin(), text.end(), cb);
  } catch (const ojson::exception& e) {
    throw InputError(path, "header", "header is not valid JSON: " + json_reason(e));
  }
  if (!duplicate.empty()) throw InputError(path, "header", "duplicate key \"" + printable(duplicate) + "\"");
  if (!header.is_object()) throw InputError(path, "header", "header is not a JSON object");

  SafetensorsFile out;
  std::vector<Entry> entries;
  for (const auto& [key, value] : header.items()) {
    if (key == "__metadata__") {
      if (!value.is_object()) throw InputError(path, "__metadata__", "is not an object");
      for (const auto& [mk, mv] : value.items()) {
        if (!mv.is_string())
          throw InputError(path, "__metadata__", "value of \"" + printable(mk) + "\" is not a string");
        out.metadata[mk] = mv.get<std::string>();
      }
      continue;
    }
    if (key.empty()) throw InputError(path, "header", "empty tensor name");
    entries.push_back(parse_entry(key, value, buffer.size(), path));
  }

  // The tensors must tile the buffer exactly: a gap, an overlap or uncovered trailing bytes mean a
  // damaged file (most often one cut short, or two files concatenated).
  std::stable_sort(entries.begin(), entries.end(), [](const Entry& a, const Entry& b) { return a.begin < b.begin; });
  uint64_t covered = 0;
  const Entry* prev = nullptr;
  for (const Entry& e : entries) {
    const std::string offs = "data_offsets [" + std::to_string(e.begin) + ", " + std::to_string(e.end) + "]";
    if (e.begin < covered)
      throw InputError(path, printable(e.name), offs + " overlap tensor \"" + printable(prev->name) + "\"");
    if (e.begin > covered)
      throw InputError(path, printable(e.name),
                       offs + " leave a gap: the previous tensor ends at " + std::to_string(covered));
    covered = e.end;
    prev = &e;
  }
  if (covered != buffer.size())
    throw InputError(path, "header",
                     "the data buffer is " + std::to_string(buffer.size()) + " bytes but the tensors cover " +
                         std::to_string(covered));

  out.tensors.reserve(entries.size());
  for (const Entry& e : entries) out.tensors.push_back({e.name, decode(e, buffer.data(), path)});
  return out;
}

std::string encode_safetensors(const StTensorList& tensors, const std::map<std::string, std::string>& metadata,
                               DType dtype) {
  const size_t esize = dtype == DType::F64 ? 8 : 4;
  ojson header = ojson::object();
  if (!metadata.empty()) {
    ojson meta = ojson::object();
    for (const auto& [k, v] : metadata) meta[k] = v;
    header["__metadata__"] = std::move(meta);
  }
  std::set<std::string> seen;
  uint64_t offset = 0;
  for (const auto& [name, view] : tensors) {
    if (name.empty()) throw Error("safetensors: empty tensor name");
    if (name == "__metadata__") throw Error("safetensors: \"__metadata__\" is reserved, not a tensor name");
    if (!seen.insert(name).second) throw Error("safetensors: duplicate tensor name \"" + name + "\"");
    if (view.shape.rank() == 0) throw Error("safetensors: tensor \"" + name + "\" has no shape");
    const uint64_t bytes = static_cast<uint64_t>(view.shape.numel()) * esize;
    ojson info = ojson::object();
    info["dtype"] = dtype == DType::F64 ? "F64" : "F32";
    info["shape"] = std::vector<int64_t>(view.shape.dims().begin(), view.shape.dims().end());
    info["data_offsets"] = {offset, offset + bytes};
    header[name] = std::move(info);
    offset += bytes;
  }
  std::string text;
  try {
    text = header.dump();
  } catch (const ojson::exception& e) {  // invalid UTF-8 in a name or a metadata string
    throw Error("safetensors: cannot encode the header: " + json_reason(e));
  }
  while (text.size() % 8 != 0) text += ' ';

  std::string out;
  out.reserve(8 + text.size() + offset);
  const uint64_t n = text.size();
  char len[8];
  std::memcpy(len, &n, 8);
  out.append(len, 8);
  out += text;
  for (const auto& [name, view] : tensors) {
    GR_ASSERT(view.data != nullptr);
    if (dtype == DType::F64) {
      out.append(reinterpret_cast<const char*>(view.data), static_cast<size_t>(view.shape.numel()) * 8);
    } else {
      for (const double d : view.values()) {
        const float f = static_cast<float>(d);  // round to nearest even
        char b[4];
        std::memcpy(b, &f, 4);
        out.append(b, 4);
      }
    }
  }
  return out;
}

void write_safetensors(const std::string& path, const StTensorList& tensors,
                       const std::map<std::string, std::string>& metadata, DType dtype) {
  write_file_atomic(path, encode_safetensors(tensors, metadata, dtype));
}

}  // namespace gr
