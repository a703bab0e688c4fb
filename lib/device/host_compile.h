// host_compile.h — the system C++ compiler and dlopen, shared by the host backend (kernel modules,
// cached and sealed: cache.cpp) and lib/train's host builds (emit-cuda --verify, in a temp folder).
//
// Compiler: $CXX split at spaces (so "ccache g++" works), else `c++`; it runs without a shell
// (posix_spawn), so paths need no quoting and nothing in them is ever interpreted.
#pragma once
#include <string>
#include <vector>

namespace gr::device {

// The compiler command: $CXX split at spaces, else {"c++"}.
std::vector<std::string> host_compiler();

// The flags that decide the generated code (docs/design.md §8): no contraction, no fast-math, a hidden
// shared object; no -march, so a cache folder can be shared between machines.
const std::vector<std::string>& host_code_flags();

struct HostCompileRun {
  std::vector<std::string> argv;  // what ran (compiler, flags, the source, -o, the output)
  int status = -1;                // exit status (128 + signal when killed); -1: not started
  std::string start_error;        // why it could not be started (strerror), when status is -1
  std::string output;             // its stdout and stderr together
  bool ok() const { return status == 0; }
  std::string command() const;    // argv joined by spaces, for messages
};

// Runs `compiler flags... source -o output`. Never throws for a compile error or a missing
// compiler: the caller words the message.
HostCompileRun compile_host_module(const std::string& source, const std::string& output,
                                   const std::vector<std::string>& flags);

// dlopen(path, RTLD_NOW | RTLD_LOCAL); nullptr with the loader's reason in *why on failure.
void* load_shared_object(const std::string& path, std::string* why);

}  // namespace gr::device
