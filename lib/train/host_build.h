// host_build.h — build generated C++ with the system compiler into a shared object and load it
// (emit-cuda --verify, and the emitter's tests): lib/device's host compiler and dlopen
// (device/host_compile.h) with the error kinds of lib/io, in a private temp folder.
//
// Compiler: $CXX (split at spaces, so "ccache g++" works), else `c++`. Flags: docs/design.md §8's
// -O2 -ffp-contract=off -fno-fast-math -fPIC -shared -fvisibility=hidden -std=c++17, then any extra
// flags. The compiler runs without a shell; its output is kept for the error report.
#pragma once
#include <filesystem>
#include <string>
#include <vector>

#include "tensor/fpenv.h"  // fp_environment_problem(), checked after loading

namespace gr {

// A fresh folder under the system temp dir (mkdtemp), removed with its contents on destruction.
class TempDir {
 public:
  explicit TempDir(const std::string& prefix);
  ~TempDir();
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const std::filesystem::path& path() const { return dir_; }

 private:
  std::filesystem::path dir_;
};

struct HostCompile {
  bool ok = false;
  std::string command;  // for messages
  std::string output;   // the compiler's stdout and stderr
};

// Compiles `source` into the shared object `output`. Throws IoError when the compiler cannot be
// started; a compile error comes back as ok = false with the compiler's output.
HostCompile compile_shared_object(const std::filesystem::path& source, const std::filesystem::path& output,
                                  const std::vector<std::string>& extra_flags = {});

// A dlopen'ed shared object (RTLD_NOW | RTLD_LOCAL), closed on destruction.
class SharedObject {
 public:
  explicit SharedObject(const std::filesystem::path& path);  // throws IoError
  ~SharedObject();
  SharedObject(const SharedObject&) = delete;
  SharedObject& operator=(const SharedObject&) = delete;
  void* symbol(const char* name) const;  // throws IoError when missing

 private:
  void* handle_ = nullptr;
  std::string path_;
};

}  // namespace gr
