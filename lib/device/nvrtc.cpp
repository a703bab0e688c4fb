// nvrtc.cpp — NVRTC through dlopen: no build-time dependency on the CUDA toolkit, and a binary
// that runs (and says why) where the toolkit is absent. The few entry points are declared here
// by hand from nvrtc.h.
#include "device/nvrtc.h"

#include <dlfcn.h>
#include <link.h>

#include <filesystem>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <thread>

#include "device/detail.h"

namespace gr::device {
namespace detail {
namespace {

using nvrtcProgram = struct _nvrtcProgram*;
using nvrtcResult = int;  // NVRTC_SUCCESS = 0

struct Nvrtc {
  std::string error;  // why it could not be loaded (empty: loaded)
  std::string version;
  nvrtcResult (*Version)(int*, int*) = nullptr;
  nvrtcResult (*CreateProgram)(nvrtcProgram*, const char*, const char*, int, const char* const*,
                               const char* const*) = nullptr;
  nvrtcResult (*CompileProgram)(nvrtcProgram, int, const char* const*) = nullptr;
  nvrtcResult (*GetProgramLogSize)(nvrtcProgram, size_t*) = nullptr;
  nvrtcResult (*GetProgramLog)(nvrtcProgram, char*) = nullptr;
  nvrtcResult (*GetPTXSize)(nvrtcProgram, size_t*) = nullptr;
  nvrtcResult (*GetPTX)(nvrtcProgram, char*) = nullptr;
  nvrtcResult (*GetCUBINSize)(nvrtcProgram, size_t*) = nullptr;
  nvrtcResult (*GetCUBIN)(nvrtcProgram, char*) = nullptr;
  nvrtcResult (*DestroyProgram)(nvrtcProgram*) = nullptr;
  const char* (*GetErrorString)(nvrtcResult) = nullptr;
  nvrtcResult (*GetNumSupportedArchs)(int*) = nullptr;  // optional (CUDA >= 11.2)
  nvrtcResult (*GetSupportedArchs)(int*) = nullptr;
};

template <class Fn>
bool resolve(void* lib, const char* name, Fn* out) {
  void* p = dlsym(lib, name);
  std::memcpy(out, &p, sizeof p);
  return p != nullptr;
}

// NVRTC dlopens libnvrtc-builtins.so.<major>.<minor> by its bare name when it compiles, which fails
// where the toolkit's lib folder is not on the loader's path (the GPU image, a chroot with the toolkit
// mounted: the rehearsal found it) even though libnvrtc itself was found by its full path here. Loaded
// first from libnvrtc's own folder, it is already in the process, and the loader matches it by soname.
void preload_builtins(void* nvrtc) {
  link_map* map = nullptr;
  if (dlinfo(nvrtc, RTLD_DI_LINKMAP, &map) != 0 || map == nullptr || map->l_name == nullptr) return;
  std::error_code ec;
  const std::filesystem::path dir = std::filesystem::path(map->l_name).parent_path();
  for (const auto& entry : std::filesystem::directory_iterator(dir, ec)) {
    const std::string name = entry.path().filename().string();
    if (name.rfind("libnvrtc-builtins.so.", 0) == 0 && name.find(".alt.") == std::string::npos) {
      dlopen(entry.path().c_str(), RTLD_NOW | RTLD_GLOBAL);  // never closed, like libnvrtc
      return;
    }
  }
}

Nvrtc load() {
  Nvrtc n;
  std::vector<std::string> names;
  if (const char* v = std::getenv("GRADRUN_NVRTC"); v && *v) names.push_back(v);
  for (const char* s : {"libnvrtc.so.13", "libnvrtc.so.12", "libnvrtc.so"}) names.push_back(s);
  if (const char* v = std::getenv("CUDA_HOME"); v && *v) names.push_back(std::string(v) + "/lib64/libnvrtc.so");
  for (const char* s : {"/usr/local/cuda/lib64/libnvrtc.so.13", "/usr/local/cuda/lib64/libnvrtc.so"}) names.push_back(s);
  void* lib = nullptr;
  std::string tried;
  for (const std::string& name : names) {
    lib = dlopen(name.c_str(), RTLD_NOW | RTLD_LOCAL);  // never closed: loaded once per process
    if (lib) break;
    tried += (tried.empty() ? "" : ", ") + name;
  }
  if (!lib) {
    n.error = "NVRTC not found (tried " + tried + "; set GRADRUN_NVRTC to its path)";
    return n;
  }
  preload_builtins(lib);
  bool ok = resolve(lib, "nvrtcVersion", &n.Version) && resolve(lib, "nvrtcCreateProgram", &n.CreateProgram) &&
            resolve(lib, "nvrtcCompileProgram", &n.CompileProgram) &&
            resolve(lib, "nvrtcGetProgramLogSize", &n.GetProgramLogSize) &&
            resolve(lib, "nvrtcGetProgramLog", &n.GetProgramLog) && resolve(lib, "nvrtcGetPTXSize", &n.GetPTXSize) &&
            resolve(lib, "nvrtcGetPTX", &n.GetPTX) && resolve(lib, "nvrtcGetCUBINSize", &n.GetCUBINSize) &&
            resolve(lib, "nvrtcGetCUBIN", &n.GetCUBIN) && resolve(lib, "nvrtcDestroyProgram", &n.DestroyProgram) &&
            resolve(lib, "nvrtcGetErrorString", &n.GetErrorString);
  if (!ok) {
    n.error = "the NVRTC library found lacks an entry point gradrun needs (too old?)";
    return n;
  }
  resolve(lib, "nvrtcGetNumSupportedArchs", &n.GetNumSupportedArchs);
  resolve(lib, "nvrtcGetSupportedArchs", &n.GetSupportedArchs);
  int major = 0, minor = 0;
  n.Version(&major, &minor);
  n.version = std::to_string(major) + "." + std::to_string(minor);
  return n;
}

// At most this many NVRTC compiles run at once (one per hardware thread; ~140 MB each for the
// per-node module): different modules compile in parallel, more would only share the cores.
class CompileSlots {
 public:
  CompileSlots() {
    const unsigned hw = std::thread::hardware_concurrency();
    free_ = std::max(2u, hw);
    if (const char* v = std::getenv("GRADRUN_NVRTC_JOBS"); v && *v) free_ = std::max(1, std::atoi(v));
  }
  void acquire() {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait(lock, [&] { return free_ > 0; });
    --free_;
  }
  void release() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      ++free_;
    }
    cv_.notify_one();
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  int free_ = 2;
};

std::atomic<unsigned long> g_compiles{0}, g_compile_us{0};

const Nvrtc& api() {
  static const Nvrtc n = load();
  if (!n.error.empty()) throw DeviceUnavailable("unavailable: " + n.error);
  return n;
}

}  // namespace

std::string nvrtc_version() { return api().version; }

std::vector<int> nvrtc_supported_archs() {
  const Nvrtc& n = api();
  std::vector<int> archs;
  int count = 0;
  if (n.GetNumSupportedArchs && n.GetSupportedArchs && n.GetNumSupportedArchs(&count) == 0 && count > 0) {
    archs.resize(static_cast<size_t>(count));
    if (n.GetSupportedArchs(archs.data()) != 0) archs.clear();
  }
  return archs;
}

const std::vector<std::string>& nvrtc_options() {
  // --fmad=false: the rn intrinsics are never contracted anyway; this is the backstop for any
  // plain a*b+c that slips into a kernel (docs/design.md §2).
  static const std::vector<std::string> options = {"--fmad=false", "--std=c++17"};
  return options;
}

std::string nvrtc_compile(const std::string& text, const std::string& name, const std::string& arch,
                          std::string* log) {
  const Nvrtc& n = api();
  // NVRTC is thread-safe for distinct programs (each call here creates, compiles and destroys its
  // own), so different modules compile in parallel, bounded by CompileSlots; the same module is
  // compiled once at a time by the callers' in-flight map (detail::build_once).
  static CompileSlots slots;
  slots.acquire();
  struct Release {
    CompileSlots& s;
    ~Release() { s.release(); }
  } release{slots};
  const auto t0 = std::chrono::steady_clock::now();
  struct Count {
    std::chrono::steady_clock::time_point t0;
    ~Count() {
      ++g_compiles;
      g_compile_us += static_cast<unsigned long>(
          std::chrono::duration_cast<std::chrono::microseconds>(std::chrono::steady_clock::now() - t0).count());
    }
  } count{t0};
  std::vector<const char*> header_text, header_names;
  for (const EmbeddedHeader& h : embedded_headers()) {
    header_text.push_back(h.text);
    header_names.push_back(h.name);
  }
  nvrtcProgram prog = nullptr;
  nvrtcResult r = n.CreateProgram(&prog, text.c_str(), name.c_str(), static_cast<int>(header_text.size()),
                                  header_text.data(), header_names.data());
  if (r != 0) throw gr::Error("NVRTC: nvrtcCreateProgram failed: " + std::string(n.GetErrorString(r)));
  struct Destroy {
    const Nvrtc& n;
    nvrtcProgram* p;
    ~Destroy() { n.DestroyProgram(p); }
  } destroy{n, &prog};

  const std::string arch_opt = "--gpu-architecture=" + arch;
  std::vector<const char*> opts = {arch_opt.c_str()};
  for (const std::string& o : nvrtc_options()) opts.push_back(o.c_str());
  r = n.CompileProgram(prog, static_cast<int>(opts.size()), opts.data());
  std::string text_log;
  size_t log_size = 0;
  if (n.GetProgramLogSize(prog, &log_size) == 0 && log_size > 1) {
    text_log.resize(log_size);
    n.GetProgramLog(prog, text_log.data());
    text_log.resize(log_size - 1);  // the size counts the trailing NUL
  }
  if (log) *log = text_log;
  if (r != 0)
    throw gr::Error("NVRTC " + n.version + ": compiling kernel module '" + name + "' for " + arch + " failed (" +
                    n.GetErrorString(r) + "):\n" + first_lines(text_log, 20));

  const bool cubin = arch.rfind("sm_", 0) == 0;
  size_t size = 0;
  r = cubin ? n.GetCUBINSize(prog, &size) : n.GetPTXSize(prog, &size);
  if (r != 0) throw gr::Error(std::string("NVRTC: nvrtcGet") + (cubin ? "CUBIN" : "PTX") + "Size failed: " + n.GetErrorString(r));
  std::string code(size, '\0');
  r = cubin ? n.GetCUBIN(prog, code.data()) : n.GetPTX(prog, code.data());
  if (r != 0) throw gr::Error(std::string("NVRTC: nvrtcGet") + (cubin ? "CUBIN" : "PTX") + " failed: " + n.GetErrorString(r));
  if (!cubin && !code.empty() && code.back() == '\0') code.pop_back();  // nvrtcGetPTXSize counts the NUL
  return code;
}

NvrtcStats nvrtc_stats() { return NvrtcStats{g_compiles.load(), g_compile_us.load() / 1e3}; }

}  // namespace detail

std::string nvrtc_compile_ptx(const std::string& source, const std::string& arch, std::string* log) {
  if (arch.rfind("compute_", 0) != 0) throw gr::Error("nvrtc_compile_ptx: arch must be compute_XY, got '" + arch + "'");
  return detail::nvrtc_compile(detail::module_text(source, "module.cu"), "module.cu", arch, log);
}

}  // namespace gr::device
