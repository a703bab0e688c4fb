#include "train/host_build.h"

#include <dlfcn.h>
#include <fcntl.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cfenv>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>

#if defined(__x86_64__) || defined(__i386__)
#include <xmmintrin.h>
#endif

#include "io/errors.h"

extern char** environ;

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

std::vector<std::string> host_compiler() {
  std::vector<std::string> argv;
  const char* cxx = std::getenv("CXX");
  std::istringstream words(cxx && *cxx ? cxx : "c++");
  for (std::string w; words >> w;) argv.push_back(w);
  if (argv.empty()) argv.push_back("c++");
  return argv;
}

std::vector<std::string> host_compile_flags() {
  return {"-std=c++17", "-O2", "-ffp-contract=off", "-fno-fast-math", "-fPIC", "-shared", "-fvisibility=hidden"};
}

HostCompile compile_shared_object(const std::filesystem::path& source, const std::filesystem::path& output,
                                  const std::vector<std::string>& extra_flags) {
  std::vector<std::string> args = host_compiler();
  for (const std::string& f : host_compile_flags()) args.push_back(f);
  for (const std::string& f : extra_flags) args.push_back(f);
  args.push_back(source.string());
  args.push_back("-o");
  args.push_back(output.string());
  HostCompile r;
  for (const std::string& a : args) r.command += (r.command.empty() ? "" : " ") + a;

  const std::string log = output.string() + ".log";
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_addopen(&fa, 1, log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  posix_spawn_file_actions_adddup2(&fa, 1, 2);
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  pid_t pid = 0;
  const int rc = ::posix_spawnp(&pid, argv[0], &fa, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&fa);
  if (rc != 0) throw IoError(args[0], std::string("cannot run the host C++ compiler: ") + std::strerror(rc) + " (set CXX)");
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0)
    if (errno != EINTR) throw IoError(args[0], std::string("waiting for the host C++ compiler: ") + std::strerror(errno));
  std::ifstream in(log, std::ios::binary);
  std::ostringstream text;
  text << in.rdbuf();
  r.output = text.str();
  if (WIFEXITED(status) && WEXITSTATUS(status) == 127 && r.output.empty())
    throw IoError(args[0], "cannot run the host C++ compiler (set CXX)");
  r.ok = WIFEXITED(status) && WEXITSTATUS(status) == 0;
  return r;
}

SharedObject::SharedObject(const std::filesystem::path& path) : path_(path.string()) {
  handle_ = ::dlopen(path_.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!handle_) {
    const char* e = ::dlerror();
    throw IoError(path_, std::string("cannot load: ") + (e ? e : "dlopen failed"));
  }
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

std::string fp_environment_problem() {
  if (std::fegetround() != FE_TONEAREST) return "the rounding mode is not round-to-nearest";
#if defined(__x86_64__) || defined(__i386__)
  const unsigned csr = _mm_getcsr();
  if (csr & 0x8000u) return "flush-to-zero (MXCSR.FTZ) is on";
  if (csr & 0x0040u) return "denormals-are-zero (MXCSR.DAZ) is on";
#endif
  return "";
}

}  // namespace gr
