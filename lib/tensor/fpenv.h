// fpenv.h — the floating-point environment the bit rule depends on (docs/design.md §8): round to nearest,
// and no flush-to-zero / denormals-are-zero. A library built with -ffast-math that gets loaded
// into the process can switch FTZ/DAZ on for everyone; callers check at start-up and refuse.
#pragma once
#include <string>

namespace gr {

// Empty when the environment is as required; otherwise what is wrong, in one line.
std::string fp_environment_problem();

}  // namespace gr
