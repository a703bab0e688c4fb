// libFuzzer harness: the spec parser and validator (parse_spec, including the emit.bind grammar),
// and the bind grammar on its own for inputs that do not start with '{'. A gr::Error is a clean
// refusal; anything else (a crash, a sanitizer report, a leak, an uncaught exception) is a finding.
#include <cstddef>
#include <cstdint>
#include <string>

#include "emit/bind_expr.h"
#include "spec/spec.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  try {
    if (!text.empty() && text[0] != '{') {
      const std::string once = gr::parse_bind(text, gr::EmitSignature::Dataset, 3);
      // The re-print is itself a bind the grammar accepts, unchanged (what reaches the source).
      if (gr::parse_bind(once, gr::EmitSignature::Dataset, 3) != once) __builtin_trap();
      return 0;
    }
    gr::parse_spec(text, "fuzz.json");
  } catch (const gr::Error&) {
  }
  return 0;
}
