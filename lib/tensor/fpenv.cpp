#include "tensor/fpenv.h"

#include <cfenv>
#if defined(__x86_64__) || defined(__i386__)
#include <xmmintrin.h>
#endif

namespace gr {

std::string fp_environment_problem() {
  std::string why;
  if (std::fegetround() != FE_TONEAREST) why = "the rounding mode is not round-to-nearest";
#if defined(__x86_64__) || defined(__i386__)
  const unsigned csr = _mm_getcsr();
  if (csr & 0x8000u) why += std::string(why.empty() ? "" : "; ") + "flush-to-zero (MXCSR.FTZ) is on";
  if (csr & 0x0040u) why += std::string(why.empty() ? "" : "; ") + "denormals-are-zero (MXCSR.DAZ) is on";
  if (((csr >> 13) & 3u) != 0) why += std::string(why.empty() ? "" : "; ") + "the SSE rounding mode is not round-to-nearest";
#endif
  if (!why.empty())
    why = "the floating-point environment breaks bit-exactness: " + why +
          " (was a library built with -ffast-math loaded?)";
  return why;
}

}  // namespace gr
