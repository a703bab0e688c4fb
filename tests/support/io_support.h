// io_support.h — helpers shared by the file-format tests (test_io_*.cpp): bitwise
// comparison, located-error checks, little-endian byte assembly, python/numpy interop.
#pragma once
#include <bit>
#include <catch2/catch.hpp>
#include <cfloat>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>

#include "io/csv.h"
#include "io/errors.h"
#include "io/npy.h"
#include "io/safetensors.h"
#include "skip.h"
#include "temp_dir.h"


namespace fs = std::filesystem;

namespace gr::iotest {

using test::TempDir;  // support/temp_dir.h

inline uint64_t bits(double d) { return std::bit_cast<uint64_t>(d); }

inline void check_same_bits(std::span<const double> got, const std::vector<double>& want) {
  REQUIRE(got.size() == want.size());
  for (size_t i = 0; i < want.size(); ++i) {
    INFO("element " << i << ": got " << got[i] << ", want " << want[i]);
    CHECK(bits(got[i]) == bits(want[i]));
  }
}

// Runs f, which must throw InputError for `file` at `place` with `part` in its one-line message.
template <class F>
inline void expect_input_error(F&& f, const std::string& file, const std::string& place, const std::string& part) {
  try {
    f();
    FAIL("no InputError thrown; expected \"" << part << "\" at " << place);
  } catch (const InputError& e) {
    const std::string m = e.what();
    INFO("message: " << m);
    CHECK(e.file() == file);
    CHECK(e.place() == place);
    CHECK(m.rfind(file + ": " + place + ": ", 0) == 0);
    CHECK(m.find(part) != std::string::npos);
    CHECK(m.find('\n') == std::string::npos);
  }
}

template <class T>
inline std::string raw(std::initializer_list<T> v) {
  std::string s(v.size() * sizeof(T), '\0');
  std::memcpy(s.data(), std::data(v), s.size());
  return s;
}
inline void le(std::string& s, uint64_t v, int n) {
  for (int i = 0; i < n; ++i) s += static_cast<char>((v >> (8 * i)) & 0xff);
}

inline bool have_numpy() {
  static const bool ok = std::system("/usr/bin/python3 -c 'import numpy' >/dev/null 2>&1") == 0;
  return ok;
}
#define NEED_NUMPY() \
  if (!have_numpy()) GR_SKIP("numpy", "/usr/bin/python3 with numpy is not available")

// Runs `code` with /usr/bin/python3 -c (the code must not contain single quotes) and returns
// its stdout; requires exit status 0.
inline std::string python(const std::string& code, const std::string& args) {
  REQUIRE(code.find('\'') == std::string::npos);
  const std::string cmd = "/usr/bin/python3 -c '" + code + "' " + args;
  FILE* p = ::popen(cmd.c_str(), "r");
  REQUIRE(p != nullptr);
  std::string out;
  char buf[4096];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, p)) > 0) out.append(buf, n);
  const int status = ::pclose(p);
  INFO("python output: " << out);
  REQUIRE(status == 0);
  return out;
}

const std::vector<double> kSpecial = {0.1,
                                      1e-300,
                                      std::numeric_limits<double>::denorm_min(),
                                      2.2250738585072009e-308,
                                      -0.0,
                                      1.0 / 3.0,
                                      DBL_MAX,
                                      -DBL_MIN,
                                      123456789.123456789,
                                      -7.0,
                                      1e22,
                                      0.0};

}  // namespace gr::iotest
