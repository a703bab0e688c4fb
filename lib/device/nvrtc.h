// nvrtc.h — NVRTC, loaded with dlopen (private to lib/device). Needs no GPU and no driver.
#pragma once
#include <string>
#include <vector>

namespace gr::device::detail {

// "13.0"; throws DeviceUnavailable("unavailable: ...") when no libnvrtc can be loaded.
std::string nvrtc_version();
// The SM numbers NVRTC can target (e.g. 75, 80, ..., 120); empty when it cannot tell.
std::vector<int> nvrtc_supported_archs();
// Compiles a module's text (detail::module_text) with the embedded headers available, for
// `arch` ("sm_90" → cubin, "compute_90" → PTX without the trailing NUL), with --fmad=false.
// Throws gr::Error with the first lines of the log when it does not compile. Thread-safe: distinct
// calls compile in parallel (at most one per hardware thread, $GRADRUN_NVRTC_JOBS to change).
std::string nvrtc_compile(const std::string& text, const std::string& name, const std::string& arch,
                          std::string* log);
// Process-wide: how many nvrtc_compile calls have run (finished, with or without success) and their
// summed wall time; for tests, benchmarks and gpu-check's budget lines.
struct NvrtcStats {
  unsigned long compiles = 0;
  double ms = 0;
};
NvrtcStats nvrtc_stats();
// The options nvrtc_compile passes besides the architecture (part of the CUDA cache key).
const std::vector<std::string>& nvrtc_options();

}  // namespace gr::device::detail
