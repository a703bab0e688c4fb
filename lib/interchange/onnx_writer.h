// onnx_writer.h — the few ONNX protobuf messages an exported model needs, serialized by hand
// (no libprotobuf): varints, length-delimited fields and fixed32, with the field numbers of
// onnx/onnx.proto (ModelProto, GraphProto, NodeProto, AttributeProto, TensorProto,
// ValueInfoProto / TypeProto.Tensor / TensorShapeProto, OperatorSetIdProto, StringStringEntryProto).
// Repeated scalars are written unpacked (proto2's default), which every parser reads.
#pragma once
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace gr::onnx {

// TensorProto.DataType
enum class DataType : int32_t { Float = 1, Int64 = 7, Bool = 9, Double = 11 };

struct TensorProto {
  std::string name;
  DataType type = DataType::Float;
  std::vector<int64_t> dims;
  std::string raw;  // little-endian elements (raw_data)
};
// Values rounded to float32 / as float64 (exact) / as int64, little-endian.
TensorProto float_tensor(const std::string& name, std::vector<int64_t> dims, std::span<const double> values);
TensorProto double_tensor(const std::string& name, std::vector<int64_t> dims, std::span<const double> values);
TensorProto int64_tensor(const std::string& name, std::vector<int64_t> dims, std::span<const int64_t> values);

struct AttributeProto {
  enum class Kind { Int, Ints, Float };
  std::string name;
  Kind kind = Kind::Int;
  int64_t i = 0;
  std::vector<int64_t> ints;
  float f = 0.0f;
};
AttributeProto attr_int(const std::string& name, int64_t v);
AttributeProto attr_ints(const std::string& name, std::vector<int64_t> v);

struct NodeProto {
  std::string op_type, name;
  std::vector<std::string> inputs, outputs;
  std::vector<AttributeProto> attributes;
};

struct Dim {
  int64_t value = -1;  // >= 0: a fixed size
  std::string param;   // non-empty: a symbolic size ("batch"); neither: unknown
};
struct ValueInfoProto {
  std::string name;
  DataType type = DataType::Float;
  std::vector<Dim> dims;
};

struct GraphProto {
  std::string name, doc;
  std::vector<NodeProto> nodes;
  std::vector<TensorProto> initializers;
  std::vector<ValueInfoProto> inputs, outputs;
};

struct ModelProto {
  int64_t ir_version = 7;  // IR 7 goes with opset 13
  int64_t opset = 13;      // the default ("ai.onnx") domain
  std::string producer_name = "gradrun", producer_version, doc;
  GraphProto graph;
  std::vector<std::pair<std::string, std::string>> metadata;  // metadata_props
};

// The wire bytes of a ModelProto (what a .onnx file holds).
std::string serialize(const ModelProto& m);

// The wire-format primitives, exposed for tests.
class PbWriter {
 public:
  void varint(uint64_t v);
  void tag(int field, int wire_type);
  void int64(int field, int64_t v);  // wire type 0 (two's complement for negatives)
  void bytes(int field, std::string_view s);  // wire type 2
  void message(int field, const PbWriter& m) { bytes(field, m.out_); }
  void fixed32(int field, uint32_t v);  // wire type 5
  const std::string& str() const { return out_; }

 private:
  std::string out_;
};

}  // namespace gr::onnx
