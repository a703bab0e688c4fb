// kernel_text.h — the text of the shared scalar definitions (kernels/gr_device.h, gr_math.h,
// gr_ops_scalar.h), embedded at build time by cmake/embed_text.cmake, so that emitted CUDA-C carries
// exactly the functions the tape calls. Each text has its `#pragma once` and its includes of the
// other kernels/ headers removed; concatenated in the order given they compile as one unit.
#pragma once
#include <span>
#include <string_view>

namespace gr {

struct EmbeddedHeader {
  std::string_view name;  // "kernels/gr_math.h"
  std::string_view text;
};

// In dependency order: gr_device.h, gr_math.h, gr_ops_scalar.h.
std::span<const EmbeddedHeader> embedded_kernel_headers();

}  // namespace gr
