// cuda_backend.cpp — the CUDA Backend: NVRTC → cubin for the present device (cached on disk) →
// driver API. libcuda.so.1 is loaded with dlopen and the few types and entry points are declared
// here by hand (values from cuda.h), so the project builds without the toolkit and one binary
// runs with or without a GPU. Pitfalls handled (docs/design.md §8): the primary context, not
// cuCtxCreate; the _v2 memory symbols; cuGraphInstantiateWithFlags; a non-blocking stream for
// capture; never the toolkit's stub libcuda.so.
#include <dlfcn.h>

#include <algorithm>
#include <cstring>
#include <map>
#include <unordered_map>

#include "device/detail.h"
#include "device/nvrtc.h"
#include "tensor/diag.h"

namespace gr::device {
namespace {

using namespace detail;

using CUresult = int;
using CUdevice = int;
using CUdeviceptr = unsigned long long;
using CUcontext = struct CUctx_st*;
using CUmodule = struct CUmod_st*;
using CUfunction = struct CUfunc_st*;
using CUstream = struct CUstream_st*;
using CUgraph = struct CUgraph_st*;
using CUgraphExec = struct CUgraphExec_st*;
constexpr CUresult kSuccess = 0, kStubLibrary = 34, kNotFound = 500;
constexpr int kAttrCcMajor = 75, kAttrCcMinor = 76;  // CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_*
constexpr unsigned kStreamNonBlocking = 1;           // CU_STREAM_NON_BLOCKING
constexpr int kCaptureRelaxed = 2;                   // CU_STREAM_CAPTURE_MODE_RELAXED
constexpr int kFuncMaxThreads = 0, kFuncNumRegs = 4;  // CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK, _NUM_REGS

struct Driver {
  std::string error;  // why the driver cannot be used (empty: loaded)
  CUresult (*cuInit)(unsigned);
  CUresult (*cuDriverGetVersion)(int*);
  CUresult (*cuDeviceGetCount)(int*);
  CUresult (*cuDeviceGet)(CUdevice*, int);
  CUresult (*cuDeviceGetAttribute)(int*, int, CUdevice);
  CUresult (*cuDeviceGetName)(char*, int, CUdevice);
  CUresult (*cuDevicePrimaryCtxRetain)(CUcontext*, CUdevice);
  CUresult (*cuDevicePrimaryCtxRelease)(CUdevice);
  CUresult (*cuCtxSetCurrent)(CUcontext);
  CUresult (*cuStreamCreate)(CUstream*, unsigned);
  CUresult (*cuStreamDestroy)(CUstream);
  CUresult (*cuStreamSynchronize)(CUstream);
  CUresult (*cuModuleLoadData)(CUmodule*, const void*);
  CUresult (*cuModuleUnload)(CUmodule);
  CUresult (*cuModuleGetFunction)(CUfunction*, CUmodule, const char*);
  CUresult (*cuFuncGetParamInfo)(CUfunction, size_t, size_t*, size_t*);  // optional (12.4+)
  CUresult (*cuFuncGetAttribute)(int*, int, CUfunction);
  CUresult (*cuMemAlloc)(CUdeviceptr*, size_t);
  CUresult (*cuMemFree)(CUdeviceptr);
  CUresult (*cuMemsetD8Async)(CUdeviceptr, unsigned char, size_t, CUstream);
  CUresult (*cuMemcpyHtoDAsync)(CUdeviceptr, const void*, size_t, CUstream);
  CUresult (*cuMemcpyDtoHAsync)(void*, CUdeviceptr, size_t, CUstream);
  CUresult (*cuMemcpyHtoD)(CUdeviceptr, const void*, size_t);
  CUresult (*cuMemcpyDtoH)(void*, CUdeviceptr, size_t);
  CUresult (*cuLaunchKernel)(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
                             CUstream, void**, void**);
  CUresult (*cuStreamBeginCapture)(CUstream, int);
  CUresult (*cuStreamEndCapture)(CUstream, CUgraph*);
  CUresult (*cuGraphInstantiateWithFlags)(CUgraphExec*, CUgraph, unsigned long long);
  CUresult (*cuGraphLaunch)(CUgraphExec, CUstream);
  CUresult (*cuGraphExecDestroy)(CUgraphExec);
  CUresult (*cuGraphDestroy)(CUgraph);
  CUresult (*cuGetErrorString)(CUresult, const char**);
  CUresult (*cuGetErrorName)(CUresult, const char**);
};

template <class Fn>
bool resolve(void* lib, const char* name, Fn* out) {
  void* p = dlsym(lib, name);
  std::memcpy(out, &p, sizeof p);
  return p != nullptr;
}

Driver load_driver() {
  Driver d{};
  // Only the real driver's soname: the toolkit's stubs/libcuda.so would load and then fail.
  void* lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);  // never closed
  if (!lib) {
    d.error = "libcuda.so.1 not found (no NVIDIA driver)";
    return d;
  }
  std::string missing;
  auto need = [&](const char* name, auto* out) {
    if (!resolve(lib, name, out)) missing += std::string(missing.empty() ? "" : ", ") + name;
  };
  need("cuInit", &d.cuInit);
  need("cuDriverGetVersion", &d.cuDriverGetVersion);
  need("cuDeviceGetCount", &d.cuDeviceGetCount);
  need("cuDeviceGet", &d.cuDeviceGet);
  need("cuDeviceGetAttribute", &d.cuDeviceGetAttribute);
  need("cuDeviceGetName", &d.cuDeviceGetName);
  need("cuDevicePrimaryCtxRetain", &d.cuDevicePrimaryCtxRetain);
  need("cuDevicePrimaryCtxRelease_v2", &d.cuDevicePrimaryCtxRelease);
  need("cuCtxSetCurrent", &d.cuCtxSetCurrent);
  need("cuStreamCreate", &d.cuStreamCreate);
  need("cuStreamDestroy_v2", &d.cuStreamDestroy);
  need("cuStreamSynchronize", &d.cuStreamSynchronize);
  need("cuModuleLoadData", &d.cuModuleLoadData);
  need("cuModuleUnload", &d.cuModuleUnload);
  need("cuModuleGetFunction", &d.cuModuleGetFunction);
  need("cuFuncGetAttribute", &d.cuFuncGetAttribute);
  need("cuMemAlloc_v2", &d.cuMemAlloc);
  need("cuMemFree_v2", &d.cuMemFree);
  need("cuMemsetD8Async", &d.cuMemsetD8Async);
  need("cuMemcpyHtoDAsync_v2", &d.cuMemcpyHtoDAsync);
  need("cuMemcpyDtoHAsync_v2", &d.cuMemcpyDtoHAsync);
  need("cuMemcpyHtoD_v2", &d.cuMemcpyHtoD);
  need("cuMemcpyDtoH_v2", &d.cuMemcpyDtoH);
  need("cuLaunchKernel", &d.cuLaunchKernel);
  need("cuStreamBeginCapture_v2", &d.cuStreamBeginCapture);
  need("cuStreamEndCapture", &d.cuStreamEndCapture);
  need("cuGraphInstantiateWithFlags", &d.cuGraphInstantiateWithFlags);
  need("cuGraphLaunch", &d.cuGraphLaunch);
  need("cuGraphExecDestroy", &d.cuGraphExecDestroy);
  need("cuGraphDestroy", &d.cuGraphDestroy);
  need("cuGetErrorString", &d.cuGetErrorString);
  need("cuGetErrorName", &d.cuGetErrorName);
  if (!missing.empty()) {
    d.error = "the NVIDIA driver is too old for gradrun (libcuda.so.1 lacks " + missing + ")";
    return d;
  }
  resolve(lib, "cuFuncGetParamInfo", &d.cuFuncGetParamInfo);
  const CUresult r = d.cuInit(0);
  if (r == kStubLibrary) d.error = "libcuda.so.1 is the CUDA toolkit's stub library (no NVIDIA driver)";
  else if (r != kSuccess) {
    const char* s = nullptr;
    d.error = "cuInit failed: " + std::string(d.cuGetErrorString(r, &s) == kSuccess && s ? s : "error " + std::to_string(r));
  }
  return d;
}

const Driver& driver() {
  static const Driver d = load_driver();
  if (!d.error.empty()) throw DeviceUnavailable("unavailable: " + d.error);
  return d;
}

std::string error_text(const Driver& d, CUresult r) {
  const char* name = nullptr;
  const char* text = nullptr;
  d.cuGetErrorName(r, &name);
  d.cuGetErrorString(r, &text);
  return std::string(name ? name : "CUDA error " + std::to_string(r)) + " (" + (text ? text : "?") + ")";
}

class CudaBackend final : public Backend {
 public:
  explicit CudaBackend(const CudaOptions& options) : d_(driver()) {
    root_ = resolve_cache_dir(options.cache_dir) + "/cuda";
    auto init = [&](CUresult r, const char* call) {
      if (r != kSuccess) throw DeviceUnavailable("unavailable: " + std::string(call) + " failed: " + error_text(d_, r));
    };
    int count = 0;
    init(d_.cuDeviceGetCount(&count), "cuDeviceGetCount");
    if (options.device < 0 || options.device >= count)
      throw DeviceUnavailable("unavailable: no CUDA device " + std::to_string(options.device) + " (" +
                              std::to_string(count) + " visible)");
    init(d_.cuDeviceGet(&device_, options.device), "cuDeviceGet");
    int major = 0, minor = 0, version = 0;
    init(d_.cuDeviceGetAttribute(&major, kAttrCcMajor, device_), "cuDeviceGetAttribute");
    init(d_.cuDeviceGetAttribute(&minor, kAttrCcMinor, device_), "cuDeviceGetAttribute");
    init(d_.cuDriverGetVersion(&version), "cuDriverGetVersion");
    char name[256] = {};
    init(d_.cuDeviceGetName(name, sizeof name - 1, device_), "cuDeviceGetName");
    sm_ = major * 10 + minor;
    target_ = pick_target(sm_);  // throws DeviceUnavailable when NVRTC is missing or too old
    init(d_.cuDevicePrimaryCtxRetain(&ctx_, device_), "cuDevicePrimaryCtxRetain");
    try {
      init(d_.cuCtxSetCurrent(ctx_), "cuCtxSetCurrent");
      init(d_.cuStreamCreate(&stream_, kStreamNonBlocking), "cuStreamCreate");  // capture needs one
    } catch (...) {
      d_.cuDevicePrimaryCtxRelease(device_);  // no destructor runs for a half-built object
      throw;
    }
    retained_ = true;
    describe_ = "cuda: " + std::string(name) + ", sm_" + std::to_string(sm_) + ", driver " +
                std::to_string(version / 1000) + "." + std::to_string(version % 1000 / 10) + ", nvrtc " +
                nvrtc_version() + (target_.rfind("sm_", 0) == 0 ? "" : " (PTX " + target_ + ", JIT by the driver)");
  }

  ~CudaBackend() override {
    if (!retained_) return;
    d_.cuCtxSetCurrent(ctx_);
    if (stream_) d_.cuStreamSynchronize(stream_);
    drop_episode();
    for (auto& [handle, bytes] : buffers_) d_.cuMemFree(handle);
    kernels_.clear();
    for (auto& [key, m] : modules_) d_.cuModuleUnload(static_cast<CUmodule>(m->handle));
    if (stream_) d_.cuStreamDestroy(stream_);
    d_.cuDevicePrimaryCtxRelease(device_);
  }

  std::string name() const override { return "cuda"; }
  Capabilities capabilities() const override { return Capabilities{true, 128}; }
  std::string describe() const override { return describe_; }

  Module* compile(const std::string& source, const std::string& name) override {
    bind();
    const std::string text = module_text(source, name);
    std::string opts;
    for (const std::string& o : nvrtc_options()) opts += o + " ";
    Sha256 h;
    h.update(hash_parts({"gradrun cuda module v1", text, nvrtc_version(), target_, opts, embedded_headers_digest()}));
    const std::string key = h.hex();
    if (auto it = modules_.find(key); it != modules_.end()) return it->second.get();
    const bool cubin = target_.rfind("sm_", 0) == 0;
    const std::string path = root_ + "/" + key + (cubin ? ".cubin" : ".ptx");
    // The cached image when it is ours alone and sealed, else NVRTC's (cache.cpp); one compile per
    // module even when several threads' backends miss at once, different modules in parallel.
    bool compiled = false;
    CUmodule mod = nullptr;
    CUresult r = load(cuda_module_image(root_, path, text, name, target_, false, &compiled), cubin, &mod);
    diag::debug("cuda backend: kernel module '" + name + "' " + (compiled ? "compiled by NVRTC (" : "from the cache (") + path + ")");
    if (r != kSuccess && !compiled) {  // a cached image the driver refuses: rebuild once
      diag::warn("cuda backend: cached kernel module " + path + " is unusable; rebuilding it");
      std::remove(path.c_str());
      r = load(cuda_module_image(root_, path, text, name, target_, true), cubin, &mod);
    }
    check(r, ("cuModuleLoadData(" + name + ")").c_str());
    auto m = std::make_unique<Module>();
    m->owner = this;
    m->name = name;
    m->key = key;
    m->handle = mod;
    Module* raw = m.get();
    modules_.emplace(key, std::move(m));
    return raw;
  }

  Kernel* kernel(Module* module, const std::string& name) override {
    if (!module || module->owner != this) throw gr::Error("cuda backend: kernel(): the module belongs to another backend");
    auto slot = kernels_.find({module, name});
    if (slot != kernels_.end()) return slot->second.get();
    bind();
    CUfunction fn = nullptr;
    const CUresult r = d_.cuModuleGetFunction(&fn, static_cast<CUmodule>(module->handle), name.c_str());
    if (r == kNotFound)
      throw gr::Error("kernel module '" + module->name + "' has no kernel '" + name +
                      "' (kernels are defined extern \"C\" __global__)");
    check(r, "cuModuleGetFunction");
    auto k = std::make_unique<Kernel>();
    k->owner = this;
    k->module = module;
    k->name = name;
    k->entry = fn;
    if (d_.cuFuncGetParamInfo) {  // check the 8-byte argument rule where the driver can tell
      size_t offset = 0, size = 0;
      for (size_t i = 0; d_.cuFuncGetParamInfo(fn, i, &offset, &size) == kSuccess; ++i, ++k->nargs)
        if (size != 8)
          throw gr::Error("kernel " + name + ": parameter " + std::to_string(i) + " is " + std::to_string(size) +
                          " bytes; gradrun kernel parameters are 8 bytes (pointer, long long, double)");
    }
    // The kernel's own block limit: its registers (and the device) may allow fewer than 1024
    // threads per block (96 registers per thread: 672). Launchers fit their block to it
    // (device::fit_block); launch() refuses a larger one.
    int max_threads = 0, regs = 0;
    check(d_.cuFuncGetAttribute(&max_threads, kFuncMaxThreads, fn), "cuFuncGetAttribute(MAX_THREADS_PER_BLOCK)");
    check(d_.cuFuncGetAttribute(&regs, kFuncNumRegs, fn), "cuFuncGetAttribute(NUM_REGS)");
    if (max_threads < 1)
      throw gr::Error("kernel " + name + " of module '" + module->name + "': the driver reports a limit of " +
                      std::to_string(max_threads) + " threads per block");
    k->max_block = static_cast<unsigned>(std::min(max_threads, 1024));
    k->registers = regs;
    Kernel* raw = k.get();
    kernels_.emplace(std::make_pair(module, name), std::move(k));
    return raw;
  }

  unsigned max_block(Kernel* k) const override {
    if (!k || k->owner != this) throw gr::Error("cuda backend: max_block of a kernel from another backend");
    return k->max_block;
  }

  Buffer alloc(size_t bytes) override {
    if (capturing_) throw gr::Error("cuda backend: alloc during a capture (allocate every buffer before begin_capture)");
    if (bytes == 0) throw gr::Error("cuda backend: alloc of 0 bytes");
    bind();
    CUdeviceptr p = 0;
    check(d_.cuMemAlloc(&p, bytes), "cuMemAlloc_v2");
    buffers_.emplace(p, bytes);
    check(d_.cuMemsetD8Async(p, 0, bytes, stream_), "cuMemsetD8Async");  // ordered before our launches
    check(d_.cuStreamSynchronize(stream_), "cuStreamSynchronize");
    return Buffer{p, bytes};
  }

  void free(Buffer buffer) override {
    if (capturing_) throw gr::Error("cuda backend: free during a capture");
    auto it = buffers_.find(buffer.handle);
    if (it == buffers_.end()) throw gr::Error("cuda backend: free of a buffer this backend does not own");
    bind();
    check(d_.cuStreamSynchronize(stream_), "cuStreamSynchronize");
    check(d_.cuMemFree(buffer.handle), "cuMemFree_v2");
    buffers_.erase(it);
  }

  // Outside a capture, copies are ordered on our stream. During one, the stream is recording, so
  // they go synchronously through the legacy stream (our stream is non-blocking and was drained
  // at begin_capture; the capture is RELAXED so the driver allows it) and stay out of the graph.
  void upload(Buffer dst, const void* src, size_t bytes, size_t offset) override {
    check_range(dst, bytes, offset, "upload");
    if (!bytes) return;
    bind();
    if (capturing_) return check(d_.cuMemcpyHtoD(dst.handle + offset, src, bytes), "cuMemcpyHtoD_v2");
    check(d_.cuMemcpyHtoDAsync(dst.handle + offset, src, bytes, stream_), "cuMemcpyHtoDAsync_v2");
    check(d_.cuStreamSynchronize(stream_), "cuStreamSynchronize");  // the caller may reuse src now
  }

  void download(void* dst, Buffer src, size_t bytes, size_t offset) override {
    check_range(src, bytes, offset, "download");
    if (!bytes) return;
    bind();
    if (capturing_) return check(d_.cuMemcpyDtoH(dst, src.handle + offset, bytes), "cuMemcpyDtoH_v2");
    check(d_.cuMemcpyDtoHAsync(dst, src.handle + offset, bytes, stream_), "cuMemcpyDtoHAsync_v2");
    check(d_.cuStreamSynchronize(stream_), "cuStreamSynchronize");
  }

  void launch(Kernel* k, unsigned grid, unsigned block, void** args) override {
    if (!k || k->owner != this) throw gr::Error("cuda backend: launch of a kernel from another backend");
    if (grid == 0 || block == 0 || block > 1024)
      throw gr::Error("launch of " + k->name + ": grid " + std::to_string(grid) + ", block " + std::to_string(block) +
                      " (need grid >= 1 and 1 <= block <= 1024)");
    if (block > k->max_block)
      throw gr::Error("launch of " + k->name + ": block " + std::to_string(block) + " exceeds the kernel's limit of " +
                      std::to_string(k->max_block) + " threads per block on this device (" + std::to_string(k->registers) +
                      " registers per thread); launch it with at most " + std::to_string(k->max_block) +
                      " (device::fit_block)");
    bind();
    check(d_.cuLaunchKernel(static_cast<CUfunction>(k->entry), grid, 1, 1, block, 1, 1, 0, stream_, args, nullptr),
          ("cuLaunchKernel(" + k->name + ")").c_str());
  }

  void synchronize() override {
    if (capturing_) return;  // nothing has run: the launches are being recorded
    bind();
    check(d_.cuStreamSynchronize(stream_), "cuStreamSynchronize");
  }

  void begin_capture() override {
    if (capturing_) throw gr::Error("cuda backend: begin_capture while a capture is open");
    bind();
    check(d_.cuStreamSynchronize(stream_), "cuStreamSynchronize");
    check(d_.cuStreamBeginCapture(stream_, kCaptureRelaxed), "cuStreamBeginCapture_v2");
    capturing_ = true;
  }

  void end_capture() override {
    if (!capturing_) throw gr::Error("cuda backend: end_capture without begin_capture");
    bind();
    capturing_ = false;
    CUgraph graph = nullptr;
    const CUresult r = d_.cuStreamEndCapture(stream_, &graph);
    if (r != kSuccess) {  // e.g. invalidated by a failed launch: the previous episode stays
      if (graph) d_.cuGraphDestroy(graph);
      check(r, "cuStreamEndCapture");
    }
    // Instantiate before dropping anything: when it fails, the episode held before stays (the
    // Backend contract), and the new graph goes.
    CUgraphExec exec = nullptr;
    const CUresult ri = d_.cuGraphInstantiateWithFlags(&exec, graph, 0);
    if (ri != kSuccess) {
      if (exec) d_.cuGraphExecDestroy(exec);
      d_.cuGraphDestroy(graph);
      check(ri, "cuGraphInstantiateWithFlags");
    }
    drop_episode();
    graph_ = graph;
    exec_ = exec;
    episode_id_ = ++captures_;
  }

  void abort_capture() noexcept override {
    if (!capturing_) return;
    capturing_ = false;
    // Ends the stream's capture whatever invalidated it; its error code is the abort's, not news.
    if (d_.cuCtxSetCurrent(ctx_) != kSuccess) return;
    CUgraph graph = nullptr;
    d_.cuStreamEndCapture(stream_, &graph);
    if (graph) d_.cuGraphDestroy(graph);
  }

  void clear_capture() noexcept override {
    if (d_.cuCtxSetCurrent(ctx_) != kSuccess) return;
    drop_episode();
  }

  uint64_t capture_id() const override { return episode_id_; }

  void replay() override {
    if (capturing_) throw gr::Error("cuda backend: replay during a capture");
    if (!exec_) throw gr::Error("cuda backend: replay without a captured episode");
    bind();
    check(d_.cuGraphLaunch(exec_, stream_), "cuGraphLaunch");
  }

  bool has_capture() const override { return exec_ != nullptr; }

 private:
  static std::string pick_target(int sm) {
    const std::vector<int> archs = nvrtc_supported_archs();
    if (archs.empty()) return "sm_" + std::to_string(sm);
    for (int a : archs)
      if (a == sm) return "sm_" + std::to_string(sm);
    const int newest = *std::max_element(archs.begin(), archs.end());
    if (sm > newest) return "compute_" + std::to_string(newest);  // a newer GPU: the driver JITs PTX
    throw DeviceUnavailable("unavailable: NVRTC " + nvrtc_version() + " cannot compile for sm_" + std::to_string(sm));
  }

  CUresult load(std::string image, bool cubin, CUmodule* mod) const {
    if (!cubin) image.push_back('\0');  // cuModuleLoadData reads PTX as a C string
    return d_.cuModuleLoadData(mod, image.data());
  }

  void bind() const { check(d_.cuCtxSetCurrent(ctx_), "cuCtxSetCurrent"); }  // any calling thread

  void check(CUresult r, const char* call) const {
    if (r != kSuccess) throw gr::Error(std::string("CUDA ") + call + " failed: " + error_text(d_, r));
  }

  void check_range(Buffer b, size_t bytes, size_t offset, const char* what) const {
    auto it = buffers_.find(b.handle);
    if (it == buffers_.end()) throw gr::Error(std::string("cuda backend: ") + what + " with a buffer this backend does not own");
    if (offset > it->second || bytes > it->second - offset)
      throw gr::Error(std::string("cuda backend: ") + what + " of " + std::to_string(bytes) + " bytes at offset " +
                      std::to_string(offset) + " outside a buffer of " + std::to_string(it->second) + " bytes");
  }

  void drop_episode() {
    if (exec_) d_.cuGraphExecDestroy(exec_);
    if (graph_) d_.cuGraphDestroy(graph_);
    exec_ = nullptr;
    graph_ = nullptr;
    episode_id_ = 0;
  }

  const Driver& d_;
  std::string root_, target_, describe_;
  CUdevice device_ = 0;
  int sm_ = 0;
  CUcontext ctx_ = nullptr;
  bool retained_ = false;
  CUstream stream_ = nullptr;
  CUgraph graph_ = nullptr;
  CUgraphExec exec_ = nullptr;
  uint64_t captures_ = 0, episode_id_ = 0;  // episodes made so far; the one exec_ holds (0: none)
  bool capturing_ = false;
  std::unordered_map<std::string, std::unique_ptr<Module>> modules_;
  std::map<std::pair<Module*, std::string>, std::unique_ptr<Kernel>> kernels_;
  std::unordered_map<CUdeviceptr, size_t> buffers_;
};

}  // namespace

std::unique_ptr<Backend> make_cuda_backend(const CudaOptions& options) {
  return std::make_unique<CudaBackend>(options);
}

}  // namespace gr::device
