#include "train/host_build.h"

#include <dlfcn.h>
#include <stdlib.h>

#include <cerrno>
#include <cstring>

#include "device/host_compile.h"
#include "io/errors.h"

namespace gr {

TempDir::TempDir(const std::string& prefix) {
  std::string templ = (std::filesystem::temp_directory_path() / (prefix + "XXXXXX")).string();
  if (!::mkdtemp(templ.data())) throw IoError(templ, std::string("cannot create a temporary folder: ") + std::strerror(errno));
  dir_ = templ;
}

TempDir::~TempDir() {
  std::error_code ec;
  std::filesystem::remove_all(dir_, ec);
}

HostCompile compile_shared_object(const std::filesystem::path& source, const std::filesystem::path& output,
                                  const std::vector<std::string>& extra_flags) {
  std::vector<std::string> flags = device::host_code_flags();
  flags.insert(flags.end(), extra_flags.begin(), extra_flags.end());
  const device::HostCompileRun run = device::compile_host_module(source.string(), output.string(), flags);
  if (run.status == -1)
    throw IoError(run.argv[0], "cannot run the host C++ compiler: " + run.start_error + " (set CXX)");
  if (run.status == 127 && run.output.empty()) throw IoError(run.argv[0], "cannot run the host C++ compiler (set CXX)");
  HostCompile r;
  r.ok = run.ok();
  r.command = run.command();
  r.output = run.output;
  return r;
}

SharedObject::SharedObject(const std::filesystem::path& path) : path_(path.string()) {
  std::string why;
  handle_ = device::load_shared_object(path_, &why);
  if (!handle_) throw IoError(path_, "cannot load: " + why);
}

SharedObject::~SharedObject() {
  if (handle_) ::dlclose(handle_);
}

void* SharedObject::symbol(const char* name) const {
  ::dlerror();
  void* s = ::dlsym(handle_, name);
  if (!s) throw IoError(path_, std::string("symbol ") + name + " is missing");
  return s;
}

}  // namespace gr
