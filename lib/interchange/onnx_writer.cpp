#include "interchange/onnx_writer.h"

#include <bit>
#include <cstring>

namespace gr::onnx {

namespace {

template <class T>
void append_le(std::string& out, T v) {
  static_assert(std::endian::native == std::endian::little, "onnx_writer assumes a little-endian host");
  char b[sizeof(T)];
  std::memcpy(b, &v, sizeof(T));
  out.append(b, sizeof(T));
}

PbWriter tensor(const TensorProto& t) {
  PbWriter w;
  for (int64_t d : t.dims) w.int64(1, d);            // dims
  w.int64(2, static_cast<int32_t>(t.type));        // data_type
  if (!t.name.empty()) w.bytes(8, t.name);         // name
  w.bytes(9, t.raw);                               // raw_data
  return w;
}

PbWriter attribute(const AttributeProto& a) {
  PbWriter w;
  w.bytes(1, a.name);
  switch (a.kind) {
    case AttributeProto::Kind::Int:
      w.int64(3, a.i);
      w.int64(20, 2);  // type INT
      break;
    case AttributeProto::Kind::Ints:
      for (int64_t v : a.ints) w.int64(8, v);
      w.int64(20, 7);  // type INTS
      break;
    case AttributeProto::Kind::Float:
      w.fixed32(2, std::bit_cast<uint32_t>(a.f));
      w.int64(20, 1);  // type FLOAT
      break;
  }
  return w;
}

PbWriter node(const NodeProto& n) {
  PbWriter w;
  for (const std::string& s : n.inputs) w.bytes(1, s);
  for (const std::string& s : n.outputs) w.bytes(2, s);
  if (!n.name.empty()) w.bytes(3, n.name);
  w.bytes(4, n.op_type);
  for (const AttributeProto& a : n.attributes) w.message(5, attribute(a));
  return w;
}

PbWriter value_info(const ValueInfoProto& v) {
  PbWriter shape;
  for (const Dim& d : v.dims) {
    PbWriter dim;
    if (d.value >= 0) dim.int64(1, d.value);
    else if (!d.param.empty()) dim.bytes(2, d.param);
    shape.message(1, dim);
  }
  PbWriter tensor_type;
  tensor_type.int64(1, static_cast<int32_t>(v.type));  // elem_type
  tensor_type.message(2, shape);
  PbWriter type;
  type.message(1, tensor_type);  // TypeProto.tensor_type
  PbWriter w;
  w.bytes(1, v.name);
  w.message(2, type);
  return w;
}

PbWriter graph(const GraphProto& g) {
  PbWriter w;
  for (const NodeProto& n : g.nodes) w.message(1, node(n));
  w.bytes(2, g.name);
  for (const TensorProto& t : g.initializers) w.message(5, tensor(t));
  if (!g.doc.empty()) w.bytes(10, g.doc);
  for (const ValueInfoProto& v : g.inputs) w.message(11, value_info(v));
  for (const ValueInfoProto& v : g.outputs) w.message(12, value_info(v));
  return w;
}

}  // namespace

void PbWriter::varint(uint64_t v) {
  while (v >= 0x80) {
    out_ += static_cast<char>((v & 0x7f) | 0x80);
    v >>= 7;
  }
  out_ += static_cast<char>(v);
}

void PbWriter::tag(int field, int wire_type) { varint((static_cast<uint64_t>(field) << 3) | static_cast<uint64_t>(wire_type)); }

void PbWriter::int64(int field, int64_t v) {
  tag(field, 0);
  varint(static_cast<uint64_t>(v));
}

void PbWriter::bytes(int field, std::string_view s) {
  tag(field, 2);
  varint(s.size());
  out_.append(s);
}

void PbWriter::fixed32(int field, uint32_t v) {
  tag(field, 5);
  append_le(out_, v);
}

TensorProto float_tensor(const std::string& name, std::vector<int64_t> dims, std::span<const double> values) {
  TensorProto t{name, DataType::Float, std::move(dims), {}};
  t.raw.reserve(values.size() * 4);
  for (double v : values) append_le(t.raw, static_cast<float>(v));
  return t;
}

TensorProto double_tensor(const std::string& name, std::vector<int64_t> dims, std::span<const double> values) {
  TensorProto t{name, DataType::Double, std::move(dims), {}};
  t.raw.reserve(values.size() * 8);
  for (double v : values) append_le(t.raw, v);
  return t;
}

TensorProto int64_tensor(const std::string& name, std::vector<int64_t> dims, std::span<const int64_t> values) {
  TensorProto t{name, DataType::Int64, std::move(dims), {}};
  t.raw.reserve(values.size() * 8);
  for (int64_t v : values) append_le(t.raw, v);
  return t;
}

AttributeProto attr_int(const std::string& name, int64_t v) {
  AttributeProto a;
  a.name = name;
  a.kind = AttributeProto::Kind::Int;
  a.i = v;
  return a;
}

AttributeProto attr_ints(const std::string& name, std::vector<int64_t> v) {
  AttributeProto a;
  a.name = name;
  a.kind = AttributeProto::Kind::Ints;
  a.ints = std::move(v);
  return a;
}

std::string serialize(const ModelProto& m) {
  PbWriter w;
  w.int64(1, m.ir_version);
  w.bytes(2, m.producer_name);
  if (!m.producer_version.empty()) w.bytes(3, m.producer_version);
  if (!m.doc.empty()) w.bytes(6, m.doc);
  w.message(7, graph(m.graph));
  PbWriter opset;
  opset.bytes(1, "");
  opset.int64(2, m.opset);
  w.message(8, opset);
  for (const auto& [k, v] : m.metadata) {
    PbWriter e;
    e.bytes(1, k);
    e.bytes(2, v);
    w.message(14, e);
  }
  return w.str();
}

}  // namespace gr::onnx
