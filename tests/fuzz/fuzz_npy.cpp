// libFuzzer harness: .npy and .npz (zip, stored and deflated members, ZIP64). The same bytes go
// to both parsers. A gr::Error is a clean refusal; anything else is a finding.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "io/npy.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view bytes(reinterpret_cast<const char*>(data), size);
  try {
    gr::parse_npy(bytes, "fuzz.npy");
  } catch (const gr::Error&) {
  }
  try {
    gr::parse_npz(bytes, "fuzz.npz");
  } catch (const gr::Error&) {
  }
  return 0;
}
