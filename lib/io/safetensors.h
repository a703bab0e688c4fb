// safetensors.h — read and write the safetensors format (https://github.com/huggingface/safetensors).
//
// Layout: 8 bytes little-endian u64 N; N bytes of UTF-8 JSON header
//   {"__metadata__": {str: str}, "name": {"dtype": "F64", "shape": [...], "data_offsets": [b, e]}, ...}
// then the data buffer; offsets are relative to the buffer start; element bytes little-endian,
// row-major.
//
// Writer (deterministic bytes for the same input, so weight files can be compared by hash):
//   - tensors are laid out in the ORDER GIVEN (gradrun passes parameters in spec order), with no
//     gaps; the header is nlohmann::ordered_json, so its keys appear in that same order:
//     "__metadata__" first (omitted when empty, like the reference writer), then the tensors, each
//     as {"dtype", "shape", "data_offsets"} — the reference implementation's field order;
//     metadata keys come in std::map (byte-wise sorted) order;
//   - the header is compact JSON padded with spaces so that N is a multiple of 8 (the buffer
//     then starts 8-aligned);
//   - F32 converts each double with round-to-nearest-even (IEEE default; overflow gives ±inf);
//   - a shape-[1] scalar is written as shape [1] (never as the rank-0 shape []).
//
// Reader: accepts F64, F32, I64, I32 (converted to double; an I64 value beyond ±2^53 has no exact
// double and is rejected rather than rounded); other dtypes are refused by name. Everything in
// the header is validated and reported as InputError(file, place, what), place = the tensor name
// (or "__metadata__", or "header" for file-level problems): short file, absurd header length
// (> 100 MB), invalid JSON, duplicate/missing/unknown keys, bad shapes (gradrun needs every dim
// >= 1 and rank <= 8; the rank-0 shape [] reads as [1]), data_offsets that disagree with
// shape × dtype size, fall outside the buffer, overlap, or leave gaps — and a buffer with bytes
// no tensor covers (a truncated or padded file). Tensor order in the result: ascending data
// offset, i.e. the writer's order (independent of the header's key order).
#pragma once
#include <map>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "tensor/dtype.h"
#include "tensor/tensor.h"

namespace gr {

struct NamedTensor {
  std::string name;
  Tensor tensor;
};

struct SafetensorsFile {
  std::vector<NamedTensor> tensors;
  std::map<std::string, std::string> metadata;
  const Tensor* find(std::string_view name) const;  // nullptr when absent
};

using StTensorList = std::vector<std::pair<std::string, ConstTensorView>>;

// Throws IoError when the file cannot be read, InputError when its content is not valid.
SafetensorsFile read_safetensors(const std::string& path);
// The same, from bytes already in memory; `path` is only used in messages.
SafetensorsFile parse_safetensors(std::string_view bytes, const std::string& path);

// Throws gr::Error on an empty, duplicate or reserved ("__metadata__") tensor name, or names /
// metadata that are not valid UTF-8 (JSON cannot carry them).
std::string encode_safetensors(const StTensorList& tensors, const std::map<std::string, std::string>& metadata,
                               DType dtype);
// encode_safetensors + write_file_atomic (IoError when the file cannot be written).
void write_safetensors(const std::string& path, const StTensorList& tensors,
                       const std::map<std::string, std::string>& metadata, DType dtype);

}  // namespace gr
