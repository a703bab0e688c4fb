// ptx_audit.h — what the FMA contract (docs/numerics.md) looks like in PTX: the only fused
// multiply-adds are gr_dot's explicit ones (gr_rfma → __fma_rn / __fmaf_rn); NVRTC runs with
// --fmad=false, so it never contracts an add of a product by itself.
//
// Two checks, both able to fail: fma_functions() names the PTX functions (.entry or .func) that
// contain an fma instruction, so a test can require them to be exactly the dot-product kernels; and
// ptx_without_explicit_fma(source) compiles the module with macros, ahead of every header, that spell
// __fma_rn as a multiply and an add, so its PTX must hold no fma at all — any fma left there is a
// contraction. Throws device::DeviceUnavailable like nvrtc_compile_ptx.
#pragma once
#include <set>
#include <string>

#include "device/detail.h"
#include "device/nvrtc.h"

namespace gr::ptxaudit {

inline std::set<std::string> fma_functions(const std::string& ptx) {
  std::set<std::string> out;
  size_t pos = 0;
  while (true) {
    size_t start = std::string::npos;
    for (const char* kw : {".entry ", ".func "}) {
      const size_t p = ptx.find(kw, pos);
      if (p != std::string::npos && (start == std::string::npos || p < start)) start = p;
    }
    if (start == std::string::npos) break;
    const size_t name_begin = ptx.find(' ', start) + 1;
    size_t name_end = ptx.find_first_of("( \n", name_begin);
    std::string name = ptx.substr(name_begin, name_end - name_begin);
    if (name.rfind(".param", 0) == 0 || name.empty()) {  // ".func (.param ...) name(": the name follows the return
      const size_t close = ptx.find(')', name_begin);
      const size_t nb = ptx.find_first_not_of(' ', close + 1);
      name = ptx.substr(nb, ptx.find_first_of("( \n", nb) - nb);
    }
    size_t next = std::string::npos;
    for (const char* kw : {".entry ", ".func "}) {
      const size_t p = ptx.find(kw, name_end);
      if (p != std::string::npos && (next == std::string::npos || p < next)) next = p;
    }
    const std::string body = ptx.substr(start, next == std::string::npos ? std::string::npos : next - start);
    if (body.find("\tfma.") != std::string::npos || body.find(" fma.") != std::string::npos) out.insert(name);
    if (next == std::string::npos) break;
    pos = next;
  }
  return out;
}

inline std::string ptx_without_explicit_fma(const std::string& source) {
  const std::string text = "#define __fma_rn(a, b, c) __dadd_rn(__dmul_rn((a), (b)), (c))\n"
                           "#define __fmaf_rn(a, b, c) __fadd_rn(__fmul_rn((a), (b)), (c))\n" +
                           device::detail::module_text(source, "module.cu");
  return device::detail::nvrtc_compile(text, "module.cu", "compute_90", nullptr);
}

}  // namespace gr::ptxaudit
