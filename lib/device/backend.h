// backend.h — the device Backend interface (docs/device.md) and its two implementations:
//   host  — kernel source compiled by the system C++ compiler against host_shim.h, dlopen'd, run
//           block by block on the CPU (a block's threads as fibers when blockDim > 1);
//   cuda  — the same source compiled by NVRTC to a cubin for the present device, run through the
//           driver API. libcuda.so.1 and libnvrtc are loaded with dlopen, so one binary runs with
//           or without a GPU and can say why CUDA is unavailable.
// Both take the same kernel source text; the kernel ABI rules are in docs/device.md.
#pragma once
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "device/kind.h"
#include "tensor/error.h"

namespace gr::device {

// A device allocation: its address (CUDA: the CUdeviceptr; host: the pointer value) and size.
// Plain value; the backend that allocated it frees it.
struct Buffer {
  uint64_t handle = 0;
  size_t bytes = 0;
};

struct Module;  // opaque, owned by the backend that compiled it (freed with the backend)
struct Kernel;  // opaque, owned by the backend; valid while the backend lives

// CUDA (or NVRTC) cannot be used here; what() is "unavailable: <reason>".
class DeviceUnavailable : public gr::Error {
 public:
  using Error::Error;
};

// What a backend is, for the choices callers make about it (instead of comparing name()).
struct Capabilities {
  // Launches run on a GPU: each costs launch latency, so fewer, larger kernels pay (fuse: auto).
  bool real_gpu = false;
  // Threads per block when the caller leaves it open (replay::ReplayOptions::block == 0).
  unsigned default_block = 1;
};

class Backend {
 public:
  virtual ~Backend();
  virtual std::string name() const = 0;      // "host" | "cuda" (for logs and cache folders)
  virtual Capabilities capabilities() const = 0;
  virtual std::string describe() const = 0;  // one line: compiler / device, threads / driver
  // Compiles (or fetches from the disk cache) a module; `name` labels diagnostics and #line.
  virtual Module* compile(const std::string& source, const std::string& name) = 0;
  // The kernel `name` of a module; throws gr::Error naming the kernel when it is absent.
  virtual Kernel* kernel(Module* module, const std::string& name) = 0;
  virtual Buffer alloc(size_t bytes) = 0;  // zero-filled; not allowed during a capture
  virtual void free(Buffer buffer) = 0;    // not allowed during a capture
  // Byte copies; [offset, offset + bytes) must lie inside the buffer. During a capture they run
  // immediately and are not part of the episode (refresh inputs between replays).
  virtual void upload(Buffer dst, const void* src, size_t bytes, size_t offset = 0) = 0;
  virtual void download(void* dst, Buffer src, size_t bytes, size_t offset = 0) = 0;
  // 1-D launch; args[i] points at the i-th kernel argument (cuLaunchKernel style), every
  // argument 8 bytes (pointer, long long or double). Values are copied at the call.
  // Throws gr::Error naming the kernel when block exceeds max_block(kernel).
  virtual void launch(Kernel* kernel, unsigned grid, unsigned block, void** args) = 0;
  // The most threads per block `kernel` can launch with: 1024, or fewer on CUDA when its registers
  // (or the device) allow fewer (cuFuncGetAttribute MAX_THREADS_PER_BLOCK). See fit_block. (Pure:
  // a backend that wraps another must forward it, or its launchers would not fit their blocks.)
  virtual unsigned max_block(Kernel* kernel) const = 0;
  virtual void synchronize() = 0;  // wait for every launch so far (no-op during a capture)
  // Between begin_capture and end_capture, launches (and only launches) are recorded into one
  // replayable episode instead of running, like CUDA stream capture. A new capture replaces the
  // previous episode. A launch that fails inside a capture invalidates it, as on CUDA: end_capture
  // then throws and keeps no new episode, so error paths call abort_capture instead.
  virtual void begin_capture() = 0;
  virtual void end_capture() = 0;
  virtual void replay() = 0;  // run the captured episode (throws when there is none)
  virtual bool has_capture() const = 0;
  // Names the episode held: a new number at every end_capture that succeeds, 0 when there is none.
  // Several programs share one backend; each keeps the number of its own capture, so none replays
  // an episode another one captured later (buffers it does not own, a graph it did not plan).
  virtual uint64_t capture_id() const = 0;
  // When end_capture fails (a launch invalidated the capture, or CUDA cannot instantiate the
  // graph), it throws and the episode held before stays, with its capture_id.
  // Ends a capture in progress without raising its errors and records nothing (the episode held
  // before it stays). No-op outside a capture; never throws: for error paths.
  virtual void abort_capture() noexcept = 0;
  // Drops the episode held (CUDA: destroys the graph). Never throws: for an owner going away.
  virtual void clear_capture() noexcept = 0;
};

// How the host backend orders the blocks of a launch and the threads of a block.
//   in_order    — blocks in ascending order (contiguous ranges per worker thread), a block's fibers
//                 resumed in reverse order after each barrier. Fast, deterministic.
//   adversarial — harsher than a GPU (docs/device.md): each launch's blocks are handed to the
//                 worker threads in a seeded shuffled order, so blocks run concurrently and out of
//                 order; a block's fibers run in a seeded random order at the start and after every
//                 barrier, and a fiber may be preempted (switched away from) at every barrier. A
//                 kernel that reads another block's writes, misses a __syncthreads or races on a
//                 non-atomic += gives different bytes from run to run here.
// The environment variable GR_HOST_SCHEDULE=adversarial[:SEED] selects the adversarial mode for every
// host backend whose options leave `schedule` at its default (so CLI runs in tests can use it).
enum class HostSchedule { in_order, adversarial };

struct HostOptions {
  // OS threads that share a launch's blocks (contiguous ranges; blocks are independent, so the
  // bytes do not depend on this). 0 = one per hardware thread.
  unsigned threads = 1;
  // true: a launch with blockDim > 1 runs its block's threads as cooperative fibers, resumed in
  // REVERSE order after every __syncthreads (a mode that makes a missing barrier visible).
  // false: every launch runs with blockDim = 1 whatever was requested (kernels are correct for
  // any blockDim, so the bytes are the same; no fiber switches, fastest).
  bool fiber_block = true;
  HostSchedule schedule = HostSchedule::in_order;
  uint64_t schedule_seed = 0;  // adversarial: the seed of the shuffles
  bool schedule_from_env = true;  // false: ignore GR_HOST_SCHEDULE
  // Where compiled modules are cached; empty = $GRADRUN_CACHE, else $XDG_CACHE_HOME/gradrun,
  // else ~/.cache/gradrun.
  std::string cache_dir;
  // Threads per block every kernel allows (max_block; launch refuses more). For tests: a stand-in
  // for the lower per-kernel limit CUDA's register allocation gives, so the launchers' fitting
  // (fit_block) runs without a GPU.
  unsigned max_block = 1024;
};

struct CudaOptions {
  int device = 0;         // CUDA device ordinal (after CUDA_VISIBLE_DEVICES)
  std::string cache_dir;  // as HostOptions::cache_dir
};

// The block size to launch `kernel` with when `wanted` threads per block are asked for: `wanted`,
// or the kernel's own limit (Backend::max_block) when that is lower. gradrun's kernels are correct
// for any launch geometry (grid- and block-stride loops), so a smaller block changes the speed,
// never the bits. The first time a kernel is clamped, one warning says which, why and to what.
unsigned fit_block(Backend& backend, Kernel* kernel, unsigned wanted);

std::unique_ptr<Backend> make_host_backend(const HostOptions& options = {});
// Throws DeviceUnavailable("unavailable: <reason>") when there is no driver, no GPU or no NVRTC.
std::unique_ptr<Backend> make_cuda_backend(const CudaOptions& options = {});
// A backend that compiles and runs nothing (CUDA's capabilities: real_gpu, block 128): enough to
// build a replay::Program and plan its fusion (fuse::plan) without a compiler, for tools that need
// only the generated module texts (the static GPU check, NVRTC benchmarks). Buffers are fake
// addresses; downloads give zeros; launches and captures do nothing.
std::unique_ptr<Backend> make_null_backend();

struct Selection {
  std::unique_ptr<Backend> backend;  // null when "auto" found no usable CUDA device
  std::string why;                   // what was chosen and why, for logs
};
// Host | Cuda | Auto. Cuda throws DeviceUnavailable when CUDA cannot be used. Auto returns the CUDA
// backend when usable, else a null backend with why = "no usable CUDA device: <reason>" — the
// caller then falls back to the CPU tape. Cpu is not a backend (gr::Error).
Selection select_backend(DeviceKind kind);

// Compiles kernel source (with host_shim.h prepended, the embedded kernels/ headers available)
// to PTX for `arch` (e.g. "compute_90") with --fmad=false. Needs NVRTC but no GPU. `log`, when
// given, receives the compiler log. Throws DeviceUnavailable when NVRTC cannot be loaded and
// gr::Error (with the log) when the source does not compile.
std::string nvrtc_compile_ptx(const std::string& source, const std::string& arch,
                              std::string* log = nullptr);

// Process-wide number of times a host backend has run the C++ compiler on a module (cache
// misses); for tests and diagnostics.
unsigned long host_compiler_runs();

// The cache root used when an options' cache_dir is empty (see HostOptions::cache_dir).
std::string default_cache_dir();

}  // namespace gr::device
