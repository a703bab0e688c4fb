// libFuzzer harness: the CSV reader. A gr::Error is a clean refusal; anything else is a finding.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "io/csv.h"
#include "tensor/shape.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  try {
    const gr::CsvTable t = gr::parse_csv(std::string_view(reinterpret_cast<const char*>(data), size), "fuzz.csv");
    if (t.values.size() != static_cast<size_t>(t.rows * t.cols)) __builtin_trap();
  } catch (const gr::Error&) {
  }
  return 0;
}
