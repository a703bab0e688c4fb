// skip.h — a test whose prerequisite is missing reports SKIPPED to ctest instead of passing.
//
//   GR_SKIP("gpu", "no CUDA driver: " << e.what());   // prints, records, returns from the test
//
// Kinds: "gpu" (no CUDA driver or device), "nvrtc", "torch", "numpy", "build". A skip prints
// `SKIPPED [kind]: why`, appends `kind<TAB>test<TAB>why` to $GR_SKIP_LOG when set (scripts/test
// reads it to tell an allowed "no GPU" skip from a missing package), and makes the test process
// exit 77 when nothing failed (tests/support/test_main.cpp; ctest's SKIP_RETURN_CODE). With
// GR_REQUIRE_CUDA=1 a "gpu" or "nvrtc" skip is a failure instead: on a GPU machine nothing may
// quietly not run.
#pragma once
#include <catch2/catch.hpp>
#include <sstream>
#include <string>

namespace gr::test {

// Records one skip of the running test (defined in test_main.cpp).
void note_skip(const std::string& kind, const std::string& why);
// True when GR_REQUIRE_CUDA=1 and `kind` is a CUDA prerequisite ("gpu", "nvrtc").
bool skip_is_failure(const std::string& kind);

}  // namespace gr::test

#define GR_SKIP(kind, why_stream)                                                              \
  do {                                                                                         \
    std::ostringstream gr_skip_why_;                                                           \
    gr_skip_why_ << why_stream;                                                                \
    if (::gr::test::skip_is_failure(kind))                                                     \
      FAIL("GR_REQUIRE_CUDA=1 but [" << kind << "] is missing: " << gr_skip_why_.str());       \
    ::gr::test::note_skip(kind, gr_skip_why_.str());                                           \
    return;                                                                                    \
  } while (0)
