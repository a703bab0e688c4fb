// dtype.h — the one precision enum of every layer: what a tape computes in (lib/grad: f64, or f32
// rounding every value to float, bit for bit the f32 device program's), what a device program
// stores (lib/replay), what a spec and the command line ask for ("dtype": "f64" | "f32") and what a
// safetensors file holds (lib/io). Lowest layer, so no layer converts between spellings of it.
#pragma once
#include <cstddef>
#include <string>

namespace gr {

enum class DType { F64, F32 };

// The spelling of the spec, the command line and run files: "f64" | "f32".
inline const char* to_string(DType dtype) {
  switch (dtype) {
    case DType::F64: return "f64";
    case DType::F32: return "f32";
  }
  return "?";
}

// false for an unknown word (out unchanged).
inline bool parse_dtype(const std::string& word, DType& out) {
  for (DType t : {DType::F64, DType::F32})
    if (word == to_string(t)) {
      out = t;
      return true;
    }
  return false;
}

inline size_t element_bytes(DType dtype) { return dtype == DType::F64 ? 8 : 4; }

}  // namespace gr
