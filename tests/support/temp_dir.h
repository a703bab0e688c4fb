// temp_dir.h — a fresh private folder under the system temp dir (mkdtemp: mode 0700, a name nobody
// can guess first), removed with everything in it at scope exit. Shared by the device, replay,
// fusion, adversarial and TSan tests for their kernel caches.
#pragma once
#include <stdlib.h>

#include <filesystem>
#include <stdexcept>
#include <string>

namespace gr::test {

struct TempDir {
  std::string path;
  explicit TempDir(const std::string& prefix = "gr_test") {
    std::string templ = (std::filesystem::temp_directory_path() / (prefix + "_XXXXXX")).string();
    if (!mkdtemp(templ.data())) throw std::runtime_error("mkdtemp failed for " + templ);
    path = templ;
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
};

}  // namespace gr::test
