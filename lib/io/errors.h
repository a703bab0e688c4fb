// errors.h — the two kinds of failure a user can cause, each mapped to an exit code by the CLI.
//
//   InputError (exit 2): a bad spec, data file or weights file. The message says where:
//                        "<file>: <place>: <what>", the place being a JSON pointer, a CSV line,
//                        a tensor name ... (empty place: "<file>: <what>").
//   IoError    (exit 3): a file that cannot be read or written (missing, permissions, disk full).
#pragma once
#include <string>

#include "tensor/error.h"

namespace gr {

inline std::string located(const std::string& file, const std::string& place, const std::string& what) {
  std::string s = file;
  if (!place.empty()) s += (s.empty() ? "" : ": ") + place;
  return s + (s.empty() ? "" : ": ") + what;
}

class InputError : public Error {
 public:
  InputError(const std::string& file, const std::string& place, const std::string& what)
      : Error(located(file, place, what)), file_(file), place_(place) {}
  const std::string& file() const { return file_; }
  const std::string& place() const { return place_; }

 private:
  std::string file_, place_;
};

class IoError : public Error {
 public:
  IoError(const std::string& file, const std::string& what) : Error(located(file, "", what)) {}
};

}  // namespace gr
