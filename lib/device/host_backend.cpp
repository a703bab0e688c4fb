// host_backend.cpp — the host Backend: kernel source → system C++ compiler → shared object in the
// disk cache → dlopen; launches run on the CPU (host_exec.cpp); capture records launches.
#include <dlfcn.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <map>
#include <unordered_map>

#include "device/detail.h"
#include "device/host_compile.h"
#include "device/host_exec.h"
#include "tensor/diag.h"
#include "tensor/fpenv.h"

namespace gr::device {
namespace {

using namespace detail;

std::atomic<unsigned long> g_compiler_runs{0};

// The flags that decide the generated code (host_compile.h: docs/design.md §8, no -march).
const std::vector<std::string> kFlags = [] {
  std::vector<std::string> f = host_code_flags();
#ifdef GR_TSAN_BUILD
  f.push_back("-fsanitize=thread");  // the modules' accesses are checked too
#endif
  return f;
}();

template <class Fn>
Fn symbol(void* handle, const std::string& name) {
  void* p = dlsym(handle, name.c_str());
  Fn fn = nullptr;
  static_assert(sizeof fn == sizeof p);
  std::memcpy(&fn, &p, sizeof fn);  // object → function pointer without a conditionally-supported cast
  return fn;
}

// GR_HOST_SCHEDULE=adversarial[:SEED] (or in_order) for backends whose options keep the default.
void apply_schedule_env(HostOptions& o) {
  const char* v = std::getenv("GR_HOST_SCHEDULE");
  if (!o.schedule_from_env || o.schedule != HostSchedule::in_order || !v || !*v) return;
  const std::string s = v;
  if (s == "in_order") return;
  if (s.rfind("adversarial", 0) != 0 || (s.size() > 11 && s[11] != ':'))
    throw gr::Error("GR_HOST_SCHEDULE: expected in_order or adversarial[:SEED], got '" + s + "'");
  o.schedule = HostSchedule::adversarial;
  if (s.size() > 12) {
    char* end = nullptr;
    o.schedule_seed = std::strtoull(s.c_str() + 12, &end, 10);
    if (!end || *end) throw gr::Error("GR_HOST_SCHEDULE: the seed must be a decimal number, got '" + s.substr(12) + "'");
  }
}

struct Recorded {
  Kernel* kernel;
  unsigned grid, block;
  std::vector<uint64_t> args;  // one 8-byte value per kernel parameter (the kernel ABI)
};

class HostBackend final : public Backend {
 public:
  explicit HostBackend(const HostOptions& options) : options_(options) {
    apply_schedule_env(options_);
    root_ = resolve_cache_dir(options.cache_dir) + "/host";
    compiler_ = host_compiler();
    std::vector<std::string> argv = compiler_;
    argv.push_back("--version");
    std::string out;
    const int rc = run_process(argv, &out);
    if (rc != 0)
      throw gr::Error("host backend: cannot run the C++ compiler '" + compiler_[0] + " --version' (set $CXX): " +
                      first_lines(out, 3));
    compiler_id_ = out;
    compiler_line_ = out.substr(0, out.find('\n'));
    unsigned threads = options.threads;
    if (threads == 0) threads = std::max(1u, std::thread::hardware_concurrency());
    if (threads > 1) pool_ = std::make_unique<WorkerPool>(threads);
  }

  ~HostBackend() override {
    for (auto& [handle, bytes] : buffers_) std::free(reinterpret_cast<void*>(handle));
    kernels_.clear();
    for (auto& [key, m] : modules_) dlclose(m->handle);
  }

  std::string name() const override { return "host"; }
  // No launch latency to save; blockDim 1 runs without fiber switches (the bytes do not depend on it).
  Capabilities capabilities() const override { return Capabilities{false, 1}; }

  std::string describe() const override {
    return "host: " + compiler_line_ + ", " + std::to_string(pool_ ? pool_->size() : 1) + " thread" +
           (pool_ ? "s" : "") +
           (options_.fiber_block ? (options_.schedule == HostSchedule::adversarial
                                        ? ", blockDim > 1 as fibers, adversarial schedule (seed " +
                                              std::to_string(options_.schedule_seed) + ")"
                                        : std::string(", blockDim > 1 as fibers (reverse order)"))
                                 : std::string(", blockDim forced to 1"));
  }

  Module* compile(const std::string& source, const std::string& name) override {
    const std::string text = module_text(source, name);
    std::string flags;
    for (const std::string& f : kFlags) flags += f + " ";
    Sha256 h;
    h.update(hash_parts({"gradrun host module v1", text, compiler_id_, flags, embedded_headers_digest()}));
    const std::string key = h.hex();
    if (auto it = modules_.find(key); it != modules_.end()) return it->second.get();

    make_dirs(root_);
    const std::string so = root_ + "/" + key + ".so";
    const std::string src = root_ + "/" + key + ".cpp";
    // One compiler run per module even when several threads' backends miss at once (build_once:
    // the others wait for it, then load the file it wrote); different modules compile in parallel.
    bool fresh = false;
    build_once(so, [&]() -> std::string {
      if (file_exists(so)) return "";
      const auto t0 = std::chrono::steady_clock::now();
      build(text, name, src, so), fresh = true;
      diag::debug("host backend: compiled kernel module '" + name + "' in " +
                  std::to_string(std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - t0).count()) +
                  " ms (" + so + ")");
      return "";
    });
    if (!fresh) diag::debug("host backend: kernel module '" + name + "' from the cache (" + so + ")");
    std::string load_error;
    void* handle = open_cached_module(so, &load_error);  // owner, mode and seal checked first (cache.cpp)
    if (!handle && !fresh) {  // a damaged cache entry (e.g. a disk that filled up): rebuild once
      diag::warn("host backend: cached kernel module " + so + " is unusable (" + load_error + "); rebuilding it");
      std::remove(so.c_str());
      build(text, name, src, so);
      handle = open_cached_module(so, &load_error);
    }
    if (!handle) throw gr::Error("host backend: cannot load kernel module '" + name + "': " + load_error);
    // A module must not change the floating-point environment (a -ffast-math constructor would
    // switch FTZ/DAZ on for the whole process; docs/design.md §8).
    if (const std::string why = gr::fp_environment_problem(); !why.empty()) {
      dlclose(handle);
      throw gr::Error("after loading kernel module '" + name + "' (" + so + "): " + why);
    }
    auto m = std::make_unique<Module>();
    m->owner = this;
    m->name = name;
    m->key = key;
    m->handle = handle;
    Module* raw = m.get();
    modules_.emplace(key, std::move(m));
    return raw;
  }

  Kernel* kernel(Module* module, const std::string& name) override {
    if (!module || module->owner != this) throw gr::Error("host backend: kernel(): the module belongs to another backend");
    if (!is_identifier(name)) throw gr::Error("host backend: '" + name + "' is not a kernel name");
    auto slot = kernels_.find({module, name});
    if (slot != kernels_.end()) return slot->second.get();
    auto entry = symbol<gr_host_launch_fn>(module->handle, "gr_host_launch_" + name);
    auto nargs = symbol<gr_host_nargs_fn>(module->handle, "gr_host_nargs_" + name);
    if (!entry || !nargs)
      throw gr::Error("kernel module '" + module->name + "' has no kernel '" + name +
                      "' (kernels are defined extern \"C\" __global__ and exported with GR_EXPORT_KERNEL(" +
                      name + "))");
    auto k = std::make_unique<Kernel>();
    k->owner = this;
    k->module = module;
    k->name = name;
    std::memcpy(&k->entry, &entry, sizeof entry);
    k->nargs = nargs();
    k->max_block = std::clamp(options_.max_block, 1u, 1024u);
    Kernel* raw = k.get();
    kernels_.emplace(std::make_pair(module, name), std::move(k));
    return raw;
  }

  unsigned max_block(Kernel* k) const override {
    if (!k || k->owner != this) throw gr::Error("host backend: max_block of a kernel from another backend");
    return k->max_block;
  }

  Buffer alloc(size_t bytes) override {
    if (capturing_) throw gr::Error("host backend: alloc during a capture (allocate every buffer before begin_capture)");
    if (bytes == 0) throw gr::Error("host backend: alloc of 0 bytes");
    const size_t rounded = (bytes + 255) / 256 * 256;  // CUDA's alignment, so kernels see the same
    void* p = std::aligned_alloc(256, rounded);
    if (!p) throw gr::Error("host backend: out of memory allocating " + std::to_string(bytes) + " bytes");
    std::memset(p, 0, rounded);
    const uint64_t handle = reinterpret_cast<uintptr_t>(p);
    buffers_.emplace(handle, bytes);
    return Buffer{handle, bytes};
  }

  void free(Buffer buffer) override {
    if (capturing_) throw gr::Error("host backend: free during a capture");
    auto it = buffers_.find(buffer.handle);
    if (it == buffers_.end()) throw gr::Error("host backend: free of a buffer this backend does not own");
    std::free(reinterpret_cast<void*>(buffer.handle));
    buffers_.erase(it);
  }

  void upload(Buffer dst, const void* src, size_t bytes, size_t offset) override {
    check_range(dst, bytes, offset, "upload");
    if (bytes) std::memcpy(reinterpret_cast<char*>(dst.handle) + offset, src, bytes);
  }

  void download(void* dst, Buffer src, size_t bytes, size_t offset) override {
    check_range(src, bytes, offset, "download");
    if (bytes) std::memcpy(dst, reinterpret_cast<const char*>(src.handle) + offset, bytes);
  }

  void launch(Kernel* k, unsigned grid, unsigned block, void** args) override {
    if (!capturing_) {
      check_launch(k, grid, block, args);
      return execute(k, grid, block, args);
    }
    try {
      check_launch(k, grid, block, args);
    } catch (const std::exception& e) {
      // As on CUDA, an illegal launch invalidates the capture around it: end_capture must fail, so
      // callers that end a failed capture with it (instead of abort_capture) are caught here too.
      if (invalid_.empty()) invalid_ = e.what();
      throw;
    }
    Recorded r{k, grid, block, std::vector<uint64_t>(k->nargs)};
    for (unsigned i = 0; i < k->nargs; ++i) std::memcpy(&r.args[i], args[i], 8);
    recording_.push_back(std::move(r));
  }

  void synchronize() override {}  // launches are synchronous on the host

  void begin_capture() override {
    if (capturing_) throw gr::Error("host backend: begin_capture while a capture is open");
    capturing_ = true;
    recording_.clear();
    invalid_.clear();
  }

  void end_capture() override {
    if (!capturing_) throw gr::Error("host backend: end_capture without begin_capture");
    capturing_ = false;
    if (!invalid_.empty()) {
      recording_.clear();
      throw gr::Error("host backend: end_capture: the capture was invalidated by an error inside it (" + invalid_ +
                      ")");
    }
    episode_ = std::move(recording_);
    recording_.clear();
    has_episode_ = true;
    episode_id_ = ++captures_;
  }

  void abort_capture() noexcept override {
    capturing_ = false;
    recording_.clear();
    invalid_.clear();
  }

  void clear_capture() noexcept override {
    episode_.clear();
    has_episode_ = false;
    episode_id_ = 0;
  }

  uint64_t capture_id() const override { return episode_id_; }

  void replay() override {
    if (capturing_) throw gr::Error("host backend: replay during a capture");
    if (!has_episode_) throw gr::Error("host backend: replay without a captured episode");
    std::vector<void*> ptrs;
    for (Recorded& r : episode_) {
      ptrs.resize(r.args.size());
      for (size_t i = 0; i < r.args.size(); ++i) ptrs[i] = &r.args[i];
      execute(r.kernel, r.grid, r.block, ptrs.data());
    }
  }

  bool has_capture() const override { return has_episode_; }

 private:
  // Runs the compiler: source text → `so` (via a temp name and rename, so the cache never holds
  // a partial object). The source stays at `src` for error messages and inspection.
  void build(const std::string& text, const std::string& name, const std::string& src, const std::string& so) {
    write_file_atomic(src, text);
    const std::string tmp = temp_name(so);
    std::vector<std::string> flags = kFlags;
    flags.insert(flags.end(), {"-I", include_dir()});
    ++g_compiler_runs;
    const HostCompileRun run = compile_host_module(src, tmp, flags);
    if (!run.ok()) {
      std::remove(tmp.c_str());
      throw gr::Error("host backend: compiling kernel module '" + name + "' failed (" + compiler_[0] +
                      " exit status " + std::to_string(run.status) + "; source " + src + "):\n" +
                      first_lines(run.output, 20));
    }
    seal_module_file(tmp);  // its SHA-256, checked before every load
    if (std::rename(tmp.c_str(), so.c_str()) != 0) {
      std::remove(tmp.c_str());
      throw gr::Error("host backend: cannot move the compiled module into the cache at " + so);
    }
  }

  // The shim and kernels/ headers, written once per header-set digest next to the modules.
  const std::string& include_dir() {
    if (include_dir_.empty()) {
      const std::string dir = root_ + "/include-" + embedded_headers_digest().substr(0, 16);
      make_dirs(dir);
      for (const EmbeddedHeader& e : embedded_headers()) {
        const std::string path = dir + "/" + e.name;
        if (!file_exists(path)) write_file_atomic(path, e.text);
      }
      include_dir_ = dir;
    }
    return include_dir_;
  }

  void check_range(Buffer b, size_t bytes, size_t offset, const char* what) const {
    auto it = buffers_.find(b.handle);
    if (it == buffers_.end()) throw gr::Error(std::string("host backend: ") + what + " with a buffer this backend does not own");
    if (offset > it->second || bytes > it->second - offset)
      throw gr::Error(std::string("host backend: ") + what + " of " + std::to_string(bytes) + " bytes at offset " +
                      std::to_string(offset) + " outside a buffer of " + std::to_string(it->second) + " bytes");
  }

  void check_launch(Kernel* k, unsigned grid, unsigned block, void** args) const {
    if (!k || k->owner != this) throw gr::Error("host backend: launch of a kernel from another backend");
    if (grid == 0 || block == 0 || block > 1024)
      throw gr::Error("launch of " + k->name + ": grid " + std::to_string(grid) + ", block " + std::to_string(block) +
                      " (need grid >= 1 and 1 <= block <= 1024)");
    if (block > k->max_block)
      throw gr::Error("launch of " + k->name + ": block " + std::to_string(block) + " exceeds the kernel's limit of " +
                      std::to_string(k->max_block) + " threads per block (HostOptions::max_block); launch it with at most " +
                      std::to_string(k->max_block) + " (device::fit_block)");
    if (k->nargs > 0 && !args) throw gr::Error("launch of " + k->name + ": null argument array");
  }

  void execute(Kernel* k, unsigned grid, unsigned block, void** args) {
    gr_host_launch_fn entry = nullptr;
    std::memcpy(&entry, &k->entry, sizeof entry);
    const unsigned b = options_.fiber_block ? block : 1;
    if (options_.schedule == HostSchedule::adversarial) return execute_adversarial(entry, args, grid, b, k->name);
    if (!pool_ || grid == 1) return run_blocks(entry, args, grid, b, 0, grid, k->name);
    const unsigned workers = std::min<unsigned>(pool_->size(), grid);
    pool_->run([&](unsigned w) {
      if (w >= workers) return;
      const auto lo = static_cast<unsigned>(uint64_t(grid) * w / workers);
      const auto hi = static_cast<unsigned>(uint64_t(grid) * (w + 1) / workers);
      run_blocks(entry, args, grid, b, lo, hi, k->name);
    });
  }

  // The adversarial schedule (backend.h): the blocks in a seeded shuffled order, pulled one at a time
  // by every worker thread (so they run concurrently and out of order), each block's fibers in a
  // seeded order per barrier round. A new order for every launch, replays included.
  void execute_adversarial(gr_host_launch_fn entry, void** args, unsigned grid, unsigned block,
                           const std::string& kernel) {
    const uint64_t seed = (options_.schedule_seed * 0x9e3779b97f4a7c15ULL + ++launches_) | 1;
    const std::vector<unsigned> order = shuffled_order(grid, seed);
    std::atomic<unsigned> next{0};
    const auto work = [&](unsigned) {
      // Relaxed: handing out an index must not order one block's writes before another's reads (a
      // seq_cst RMW chain would, and would hide cross-block races from ThreadSanitizer).
      for (unsigned i; (i = next.fetch_add(1, std::memory_order_relaxed)) < grid;)
        run_blocks(entry, args, grid, block, order[i], order[i] + 1, kernel, seed ^ order[i]);
    };
    if (!pool_ || grid == 1) return work(0);
    pool_->run(work);
  }

  HostOptions options_;
  uint64_t launches_ = 0;  // adversarial schedule: launches so far (each gets its own order)
  std::string root_, compiler_id_, compiler_line_, include_dir_;
  std::vector<std::string> compiler_;
  std::unique_ptr<WorkerPool> pool_;
  std::unordered_map<std::string, std::unique_ptr<Module>> modules_;
  std::map<std::pair<Module*, std::string>, std::unique_ptr<Kernel>> kernels_;
  std::unordered_map<uint64_t, size_t> buffers_;
  bool capturing_ = false, has_episode_ = false;
  std::vector<Recorded> recording_, episode_;
  std::string invalid_;                        // the first launch error inside the open capture
  uint64_t captures_ = 0, episode_id_ = 0;     // episodes made so far; the one held (0: none)
};

}  // namespace

std::unique_ptr<Backend> make_host_backend(const HostOptions& options) {
  return std::make_unique<HostBackend>(options);
}

unsigned long host_compiler_runs() { return g_compiler_runs.load(); }

}  // namespace gr::device
