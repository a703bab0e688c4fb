// libFuzzer harness: the safetensors reader (header JSON, dtypes, offsets). A gr::Error is a
// clean refusal; anything else is a finding.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "io/safetensors.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  try {
    gr::parse_safetensors(std::string_view(reinterpret_cast<const char*>(data), size), "fuzz.safetensors");
  } catch (const gr::Error&) {
  }
  return 0;
}
