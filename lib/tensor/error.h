// error.h — gr::Error, the base of every failure a user can cause (bad shape, bad argument, bad
// input file: io/errors.h derives InputError and IoError from it). The CLI maps it to an exit code.
// Invariant violations use GR_ASSERT instead.
#pragma once
#include <stdexcept>

namespace gr {

// A user-facing error: the message is one line, meant for the person who ran gradrun.
class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

}  // namespace gr
