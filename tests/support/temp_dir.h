// temp_dir.h — the one test TempDir: a fresh private folder under the system temp dir (mkdtemp:
// mode 0700, a name nobody can guess first), removed with everything in it at scope exit unless
// `keep` is set (then its path is printed, for diagnosis). Shared by every C++ test that needs
// scratch files: kernel caches (device, replay, fusion, adversarial, TSan), the file-format tests
// (support/io_support.h) and the PyTorch oracle's exchange files.
#pragma once
#include <stdlib.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>
#include <stdexcept>
#include <string>
#include <string_view>

namespace gr::test {

struct TempDir {
  std::string path;
  bool keep = false;
  explicit TempDir(const std::string& prefix = "gr_test", bool keep_folder = false) : keep(keep_folder) {
    std::string templ = (std::filesystem::temp_directory_path() / (prefix + "_XXXXXX")).string();
    if (!mkdtemp(templ.data())) throw std::runtime_error("mkdtemp failed for " + templ);
    path = templ;
  }
  ~TempDir() {
    std::error_code ec;
    if (keep) std::printf("kept %s\n", path.c_str());
    else std::filesystem::remove_all(path, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;

  // The path of `name` inside the folder.
  std::string file(const std::string& name) const { return path + "/" + name; }
  // Writes `bytes` to `name` inside the folder; returns its path.
  std::string put(const std::string& name, std::string_view bytes) const {
    std::ofstream(file(name), std::ios::binary).write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
    return file(name);
  }
};

// A test process's kernel cache folder: $GR_TEST_CACHE when it is set (scripts/gpu-check points every
// step's test suites and the fuzzer at one warm cache, so a module NVRTC compiled for one step is a
// disk-cache hit in the next), else a fresh private TempDir, removed at exit (the default: CI's
// tests start cold and leave nothing behind).
struct CacheDir {
  std::string path;
  explicit CacheDir(const std::string& prefix) {
    if (const char* shared = std::getenv("GR_TEST_CACHE"); shared && *shared) {
      path = shared;
    } else {
      temp_ = std::make_unique<TempDir>(prefix);
      path = temp_->path;
    }
  }

 private:
  std::unique_ptr<TempDir> temp_;
};

}  // namespace gr::test
