#include "io/number_text.h"

#include <charconv>
#include <cmath>

namespace gr {

std::string format_shortest(double v) {
  if (std::isnan(v)) return "nan";  // to_chars writes "-nan" for a negative NaN
  if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
  char buf[40];  // the longest shortest double, "-2.2250738585072014e-308", is 24 characters
  const auto res = std::to_chars(buf, buf + sizeof buf, v);
  return std::string(buf, res.ptr);
}

}  // namespace gr
