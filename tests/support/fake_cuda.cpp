// fake_cuda.cpp — a stand-in libcuda.so.1 for tests/test_cuda_driver.cpp: the driver API entry points
// lib/device/cuda_backend.cpp resolves, over host memory, with no GPU. It runs no kernel: launches
// are recorded (kernel, grid, block), stream capture records them into a graph, and a graph launch
// records its launches again. Modules are whatever NVRTC made (cuModuleGetFunction finds a kernel
// when its name is in the image). Test controls (extern "C" fake_cuda_*) set a kernel's
// MAX_THREADS_PER_BLOCK and register count and make the next cuGraphInstantiateWithFlags fail, so
// the CUDA backend's driver-level rules (block limits, a failed instantiation keeping the previous
// episode, the cache's one compile per module) are tested here. Built as libcuda.so.1 in its own
// folder; the test loads it by path before any backend asks for "libcuda.so.1" (the dynamic
// loader then answers that soname with it). Never installed, never on a library path.
#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

namespace {

using CUresult = int;
constexpr CUresult kOk = 0, kInvalidValue = 1, kNotFound = 500, kNotPermitted = 800, kUnknown = 999;

struct Launch {
  std::string kernel;
  unsigned grid, block;
};

struct Module {
  std::string image;
};
struct Function {
  std::string name;
};
struct Graph {
  std::vector<Launch> launches;
};
struct Exec {
  std::vector<Launch> launches;
};

struct State {
  std::mutex mu;
  std::map<std::string, int> max_threads, regs;  // per kernel name; defaults 1024, 32
  bool fail_next_instantiate = false;
  bool capturing = false;
  Graph capture;
  std::vector<Launch> log;  // every launch that "ran" (direct or through a graph launch)
  int graphs_live = 0, execs_live = 0, modules_loaded = 0;
  std::vector<std::unique_ptr<Function>> functions;  // the backend keeps its kernels for its lifetime
};

State& st() {
  static State s;
  return s;
}

}  // namespace

extern "C" {

// ---- test controls ---------------------------------------------------------------------------------
void fake_cuda_set_kernel(const char* name, int max_threads, int regs) {
  std::lock_guard<std::mutex> lock(st().mu);
  st().max_threads[name] = max_threads;
  st().regs[name] = regs;
}
void fake_cuda_fail_next_instantiate() {
  std::lock_guard<std::mutex> lock(st().mu);
  st().fail_next_instantiate = true;
}
// Launches that ran since the log was last taken, as "kernel grid block" lines: their length
// (out null), or copied to out and cleared.
size_t fake_cuda_take_log(char* out, size_t cap) {
  std::lock_guard<std::mutex> lock(st().mu);
  std::string text;
  for (const Launch& l : st().log) text += l.kernel + " " + std::to_string(l.grid) + " " + std::to_string(l.block) + "\n";
  if (out && cap) {
    st().log.clear();
    const size_t n = text.size() < cap - 1 ? text.size() : cap - 1;
    std::memcpy(out, text.data(), n);
    out[n] = '\0';
  }
  return text.size();
}
int fake_cuda_graphs_live() { return st().graphs_live; }
int fake_cuda_execs_live() { return st().execs_live; }
int fake_cuda_modules_loaded() { return st().modules_loaded; }

// ---- the driver API subset gradrun uses ------------------------------------------------------------------
CUresult cuInit(unsigned) { return kOk; }
// NVRTC itself opens libcuda.so.1 when it is there (it gets the stand-in, the soname being loaded)
// and asks for the driver's private export tables: none here, as with no driver.
CUresult cuGetExportTable(const void** table, const void*) {
  *table = nullptr;
  return kNotFound;
}
CUresult cuDriverGetVersion(int* v) {
  *v = 13000;
  return kOk;
}
CUresult cuDeviceGetCount(int* n) {
  *n = 1;
  return kOk;
}
CUresult cuDeviceGet(int* d, int ordinal) {
  if (ordinal != 0) return kInvalidValue;
  *d = 0;
  return kOk;
}
CUresult cuDeviceGetAttribute(int* v, int attr, int) {
  *v = attr == 75 ? 9 : attr == 76 ? 0 : 0;  // compute capability 9.0
  return kOk;
}
CUresult cuDeviceGetName(char* name, int len, int) {
  std::strncpy(name, "gradrun fake CUDA device (tests/support/fake_cuda.cpp)", static_cast<size_t>(len));
  return kOk;
}
CUresult cuDevicePrimaryCtxRetain(void** ctx, int) {
  static int the_context;
  *ctx = &the_context;
  return kOk;
}
CUresult cuDevicePrimaryCtxRelease_v2(int) { return kOk; }
CUresult cuCtxSetCurrent(void*) { return kOk; }
CUresult cuStreamCreate(void** s, unsigned) {
  static int the_stream;
  *s = &the_stream;
  return kOk;
}
CUresult cuStreamDestroy_v2(void*) { return kOk; }
CUresult cuStreamSynchronize(void*) { return kOk; }

// The image's size: PTX is a C string; a cubin is an ELF64 file, which ends with the last of its
// sections and its section header table.
static size_t image_size(const unsigned char* p) {
  if (std::memcmp(p, "\x7f" "ELF", 4) != 0) return std::strlen(reinterpret_cast<const char*>(p));
  auto u16 = [&](size_t at) { uint16_t v; std::memcpy(&v, p + at, 2); return static_cast<size_t>(v); };
  auto u64 = [&](size_t at) { uint64_t v; std::memcpy(&v, p + at, 8); return static_cast<size_t>(v); };
  const size_t shoff = u64(0x28), shentsize = u16(0x3A), shnum = u16(0x3C);
  size_t end = shoff + shentsize * shnum;
  for (size_t i = 0; i < shnum; ++i) {
    const size_t h = shoff + i * shentsize;
    const uint32_t type = static_cast<uint32_t>(u64(h + 4) & 0xffffffffu);
    if (type != 8) end = std::max(end, u64(h + 0x18) + u64(h + 0x20));  // not SHT_NOBITS: offset + size
  }
  return end;
}

CUresult cuModuleLoadData(void** mod, const void* image) {
  const auto* p = static_cast<const unsigned char*>(image);
  auto* m = new Module{std::string(reinterpret_cast<const char*>(p), image_size(p))};
  *mod = m;
  std::lock_guard<std::mutex> lock(st().mu);
  ++st().modules_loaded;
  return kOk;
}
CUresult cuModuleUnload(void* mod) {
  delete static_cast<Module*>(mod);
  return kOk;
}
CUresult cuModuleGetFunction(void** fn, void* mod, const char* name) {
  const std::string& image = static_cast<Module*>(mod)->image;
  const std::string key = std::string(name) + '\0';
  if (image.find(key) == std::string::npos && image.find(std::string(".entry ") + name + "(") == std::string::npos)
    return kNotFound;
  std::lock_guard<std::mutex> lock(st().mu);
  st().functions.push_back(std::make_unique<Function>(Function{name}));
  *fn = st().functions.back().get();
  return kOk;
}
CUresult cuFuncGetAttribute(int* v, int attr, void* fn) {
  const std::string& name = static_cast<Function*>(fn)->name;
  std::lock_guard<std::mutex> lock(st().mu);
  if (attr == 0) {  // MAX_THREADS_PER_BLOCK
    auto it = st().max_threads.find(name);
    *v = it == st().max_threads.end() ? 1024 : it->second;
    return kOk;
  }
  if (attr == 4) {  // NUM_REGS
    auto it = st().regs.find(name);
    *v = it == st().regs.end() ? 32 : it->second;
    return kOk;
  }
  return kInvalidValue;
}

CUresult cuMemAlloc_v2(unsigned long long* p, size_t bytes) {
  *p = reinterpret_cast<unsigned long long>(std::malloc(bytes));
  return *p ? kOk : 2;  // CUDA_ERROR_OUT_OF_MEMORY
}
CUresult cuMemFree_v2(unsigned long long p) {
  std::free(reinterpret_cast<void*>(p));
  return kOk;
}
CUresult cuMemsetD8Async(unsigned long long p, unsigned char v, size_t n, void*) {
  std::memset(reinterpret_cast<void*>(p), v, n);
  return kOk;
}
CUresult cuMemcpyHtoDAsync_v2(unsigned long long d, const void* s, size_t n, void*) {
  std::memcpy(reinterpret_cast<void*>(d), s, n);
  return kOk;
}
CUresult cuMemcpyDtoHAsync_v2(void* d, unsigned long long s, size_t n, void*) {
  std::memcpy(d, reinterpret_cast<const void*>(s), n);
  return kOk;
}
CUresult cuMemcpyHtoD_v2(unsigned long long d, const void* s, size_t n) {
  std::memcpy(reinterpret_cast<void*>(d), s, n);
  return kOk;
}
CUresult cuMemcpyDtoH_v2(void* d, unsigned long long s, size_t n) {
  std::memcpy(d, reinterpret_cast<const void*>(s), n);
  return kOk;
}

CUresult cuLaunchKernel(void* fn, unsigned gx, unsigned, unsigned, unsigned bx, unsigned, unsigned, unsigned, void*, void**,
                        void**) {
  const Launch l{static_cast<Function*>(fn)->name, gx, bx};
  std::lock_guard<std::mutex> lock(st().mu);
  int limit = 1024;
  if (auto it = st().max_threads.find(l.kernel); it != st().max_threads.end()) limit = it->second;
  if (bx > static_cast<unsigned>(limit)) return kInvalidValue;  // CUDA: too many resources requested
  if (st().capturing) st().capture.launches.push_back(l);
  else st().log.push_back(l);
  return kOk;
}

CUresult cuStreamBeginCapture_v2(void*, int) {
  std::lock_guard<std::mutex> lock(st().mu);
  if (st().capturing) return kNotPermitted;
  st().capturing = true;
  st().capture = Graph{};
  return kOk;
}
CUresult cuStreamEndCapture(void*, void** graph) {
  std::lock_guard<std::mutex> lock(st().mu);
  if (!st().capturing) return kNotPermitted;
  st().capturing = false;
  *graph = new Graph(st().capture);
  ++st().graphs_live;
  return kOk;
}
CUresult cuGraphInstantiateWithFlags(void** exec, void* graph, unsigned long long) {
  std::lock_guard<std::mutex> lock(st().mu);
  if (st().fail_next_instantiate) {
    st().fail_next_instantiate = false;
    return kUnknown;
  }
  *exec = new Exec{static_cast<Graph*>(graph)->launches};
  ++st().execs_live;
  return kOk;
}
CUresult cuGraphLaunch(void* exec, void*) {
  std::lock_guard<std::mutex> lock(st().mu);
  for (const Launch& l : static_cast<Exec*>(exec)->launches) st().log.push_back(l);
  return kOk;
}
CUresult cuGraphExecDestroy(void* exec) {
  delete static_cast<Exec*>(exec);
  std::lock_guard<std::mutex> lock(st().mu);
  --st().execs_live;
  return kOk;
}
CUresult cuGraphDestroy(void* graph) {
  delete static_cast<Graph*>(graph);
  std::lock_guard<std::mutex> lock(st().mu);
  --st().graphs_live;
  return kOk;
}
CUresult cuGetErrorString(CUresult r, const char** s) {
  *s = r == kUnknown ? "unknown error (fake_cuda: instantiation failure requested by the test)" : "fake_cuda error";
  return kOk;
}
CUresult cuGetErrorName(CUresult r, const char** s) {
  *s = r == kUnknown ? "CUDA_ERROR_UNKNOWN" : r == kInvalidValue ? "CUDA_ERROR_INVALID_VALUE" : "CUDA_ERROR_FAKE";
  return kOk;
}

}  // extern "C"
