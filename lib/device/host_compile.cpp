// host_compile.cpp — the system C++ compiler and dlopen (host_compile.h).
#include "device/host_compile.h"

#include <dlfcn.h>

#include <cstdlib>
#include <sstream>

#include "device/detail.h"

namespace gr::device {

std::vector<std::string> host_compiler() {
  const char* cxx = std::getenv("CXX");
  std::istringstream words(cxx && *cxx ? cxx : "c++");  // $CXX may be "ccache g++"
  std::vector<std::string> argv;
  for (std::string w; words >> w;) argv.push_back(w);
  if (argv.empty()) argv.push_back("c++");
  return argv;
}

const std::vector<std::string>& host_code_flags() {
  static const std::vector<std::string> flags = {"-O2",    "-ffp-contract=off",   "-fno-fast-math", "-fPIC",
                                                 "-shared", "-fvisibility=hidden", "-std=c++17"};
  return flags;
}

std::string HostCompileRun::command() const {
  std::string s;
  for (const std::string& a : argv) s += (s.empty() ? "" : " ") + a;
  return s;
}

HostCompileRun compile_host_module(const std::string& source, const std::string& output,
                                   const std::vector<std::string>& flags) {
  HostCompileRun r;
  r.argv = host_compiler();
  r.argv.insert(r.argv.end(), flags.begin(), flags.end());
  r.argv.insert(r.argv.end(), {source, "-o", output});
  r.status = detail::run_process(r.argv, &r.output, &r.start_error);
  return r;
}

void* load_shared_object(const std::string& path, std::string* why) {
  void* handle = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!handle && why) {
    const char* e = dlerror();
    *why = e ? e : "dlopen failed";
  }
  return handle;
}

}  // namespace gr::device
