// gpu_static_check — the static GPU check (docs/device.md, "Resources"): every kernel module gradrun
// generates, compiled with NVRTC to PTX and by ptxas for sm_80 and sm_90 with -v, no GPU needed.
//
//   gpu_static_check [--specs DIR] [--cache DIR] [--jobs N] [--doc docs/device.md] [--block B] [--plant] [--name TEST]
//
// Modules, each its own translation unit (the emitter's output carries its own copy of the scalar
// definitions, which would clash with the kernel prelude in one unit): the per-node kernels (f64,
// f32), the batch kernels, the fused module of every example spec in --specs (f64 and f32) and the
// emitter's output (`gradrun emit-cuda`) of every spec it accepts there and of the emitter's
// all-ops golden spec, with a probe kernel calling the emitted function so it has code. Modules with
// the same text are compiled once. For each module and architecture: NVRTC → PTX for compute_XY
// (--fmad=false, as the CUDA backend), then `ptxas -arch=sm_XY -v`; its report is parsed per
// function. The check FAILS (exit 1) on any spill (stores or loads, in any function), on a kernel
// whose registers make gradrun's launch block impossible (its register-limited threads per block,
// with CUDA's allocation granularity, below --block, default 128: the CUDA backend's block; e.g.
// 96 registers allow 672 threads), and on any compile error. Without NVRTC or ptxas it reports
// Skipped (exit 77, kind nvrtc, recorded in $GR_SKIP_LOG like tests/support/skip.h; with
// GR_REQUIRE_CUDA=1 a failure), never Passed. --doc rewrites the generated table between the markers
// in that file. --cache keeps each ptxas report by the content hash of everything that decides it,
// so a rerun recompiles only what changed. The work runs on --jobs threads (default: all).
// --plant adds a module the check must fail (its own test); --name names the ctest a skip is
// recorded under.
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>
#include <regex>
#include <set>
#include <sstream>
#include <thread>
#include <vector>

#include "device/backend.h"
#include "device/detail.h"
#include "device/nvrtc.h"
#include "fuse/fuse.h"
#include "io/errors.h"
#include "replay/replay.h"
#include "spec/dataset.h"
#include "spec/overrides.h"
#include "spec/spec.h"
#include "train/batch_kernels.h"
#include "train/emit_spec.h"
#include "train/model.h"

using namespace gr;
namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

namespace {

constexpr int kSkip = 77;
const char* const kArchs[] = {"80", "90"};
const char* const kBegin = "<!-- gpu-static-check: begin (generated; scripts/gpu-static-check regenerates it) -->";
const char* const kEnd = "<!-- gpu-static-check: end -->";

struct ModuleText {
  std::string label;  // e.g. "fused iris f64"
  std::string text;   // the complete translation unit NVRTC compiles
  std::string file;   // the name NVRTC reports
};

struct Function {
  std::string name;
  bool entry = false;
  int regs = -1, stack = 0, spill_stores = 0, spill_loads = 0;
};

struct Result {  // one module on one architecture
  std::string error;                 // a compile error ("" = compiled)
  std::vector<Function> functions;  // ptxas's report, in its order
  bool cached = false;
  double ms = 0;
};

// Threads per block a kernel of `regs` registers per thread can launch with: registers are allocated
// per warp in units of 256 (a thread's count rounded up to a multiple of 8), 65536 per block, at most
// 32 warps (sm_80 and sm_90 alike).
int max_threads(int regs) {
  if (regs <= 0) return 1024;
  const int per_warp = ((regs + 7) / 8 * 8 * 32 + 255) / 256 * 256;
  return std::min(32, 65536 / per_warp) * 32;
}

std::vector<Function> parse_ptxas(const std::string& report) {
  std::vector<Function> out;
  std::map<std::string, size_t> at;
  auto fn = [&](const std::string& name) -> Function& {
    auto it = at.find(name);
    if (it != at.end()) return out[it->second];
    at[name] = out.size();
    out.push_back(Function{name});
    return out.back();
  };
  static const std::regex entry_re(R"(Compiling entry function '([^']+)')"), props_re(R"(Function properties for ([^\s]+))"),
      stack_re(R"((\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads)"), regs_re(R"(Used (\d+) registers)");
  std::string entry, props;
  std::istringstream lines(report);
  for (std::string line; std::getline(lines, line);) {
    std::smatch m;
    if (std::regex_search(line, m, entry_re)) {
      entry = m[1];
      fn(entry).entry = true;
    } else if (std::regex_search(line, m, props_re)) {
      props = m[1];
    } else if (std::regex_search(line, m, stack_re) && !props.empty()) {
      Function& f = fn(props);
      f.stack = std::stoi(m[1]);
      f.spill_stores = std::stoi(m[2]);
      f.spill_loads = std::stoi(m[3]);
    } else if (std::regex_search(line, m, regs_re) && !entry.empty()) {
      fn(entry).regs = std::stoi(m[1]);
    }
  }
  return out;
}

std::string find_ptxas() {
  std::vector<std::string> c;
  if (const char* v = std::getenv("GRADRUN_PTXAS"); v && *v) return access(v, X_OK) == 0 ? v : "";  // as named, or none
  if (const char* p = std::getenv("PATH"))
    for (std::string dir; const char ch : std::string(p) + ":") {
      if (ch != ':') {
        dir += ch;
        continue;
      }
      if (!dir.empty()) c.push_back(dir + "/ptxas");
      dir.clear();
    }
  for (const char* env : {"CUDA_HOME", "CUDA_PATH"})
    if (const char* v = std::getenv(env); v && *v) c.push_back(std::string(v) + "/bin/ptxas");
  c.push_back("/usr/local/cuda/bin/ptxas");
  for (const std::string& p : c)
    if (access(p.c_str(), X_OK) == 0) return p;
  return "";
}

std::string g_test_name = "gpu_static_check";  // --name: the ctest name a skip is recorded under

int skip(const std::string& why) {
  if (const char* v = std::getenv("GR_REQUIRE_CUDA"); v && std::string(v) == "1") {
    std::printf("gpu_static_check: FAILED: GR_REQUIRE_CUDA=1 but [nvrtc] is missing: %s\n", why.c_str());
    return 1;
  }
  std::printf("SKIPPED [nvrtc]: %s -- %s\n", g_test_name.c_str(), why.c_str());
  if (const char* log = std::getenv("GR_SKIP_LOG"); log && *log) {
    std::ofstream f(log, std::ios::app);
    f << "nvrtc\t" << g_test_name << "\t" << why << "\n";
  }
  return kSkip;
}

// The emitter's probe: a kernel calling the emitted function once per thread (docs/emit.md's worker).
std::string emit_probe(const Spec& spec) {
  const std::string& fn = spec.emit.function;
  if (spec.emit.signature == "params")
    return "\nextern \"C\" __global__ void gr_emit_probe(const double* p, double* g_rows, long long n) {\n"
           "  for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (long long)gridDim.x * blockDim.x)\n"
           "    " + fn + "(g_rows + 64 * i, p);\n}\n";
  return "\nextern \"C\" __global__ void gr_emit_probe(const double* v, const double* p, double* g_rows, long long n) {\n"
         "  for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (long long)gridDim.x * blockDim.x)\n"
         "    " + fn + "(i, v[i], g_rows + 64 * i, p);\n}\n";
}

// The spec, for planning: a parameter whose init is a tensor file that is not there (a fine-tuning
// spec before its base run exists) gets "zeros" instead — the kernels depend on shapes and on what
// is trainable, not on values — and a note says so.
Spec load_planning_spec(const std::string& path, std::vector<std::string>* notes) {
  static const std::regex missing_re(R"(: (/[^:\s]+): cannot read tensor)");
  std::vector<std::string> sets;
  for (int attempt = 0;; ++attempt) {
    try {
      Spec spec = load_spec(path, sets);
      if (!sets.empty() && notes)
        notes->push_back(fs::path(path).stem().string() + ": its init tensor file is not there (train its base run first); " +
                         "planned with zeros in its place at " + std::to_string(sets.size()) + " init(s)");
      return spec;
    } catch (const std::exception& e) {
      std::smatch m;
      const std::string what = e.what();
      if (attempt >= 32 || !std::regex_search(what, m, missing_re)) throw gr::Error(std::string("cannot load the spec: ") + what);
      sets.push_back(std::string(m[1]) + "=zeros");
    }
  }
}

std::vector<ModuleText> gather_modules(const std::string& specs_dir, std::vector<std::string>* notes) {
  std::vector<ModuleText> mods;
  for (DType dt : {DType::F64, DType::F32}) {
    const std::string d = dt == DType::F32 ? "f32" : "f64";
    mods.push_back({"per-node kernels " + d, device::detail::module_text(replay::kernel_source(dt), "gr_replay_" + d),
                    "gr_replay_" + d});
  }
  mods.push_back({"batch kernels", device::detail::module_text(batch_kernel_text(), "gradrun_batches"), "gradrun_batches"});
  std::vector<fs::path> specs;
  for (const auto& e : fs::directory_iterator(specs_dir))
    if (e.path().extension() == ".json") specs.push_back(e.path());
  std::sort(specs.begin(), specs.end());
  const std::unique_ptr<device::Backend> null = device::make_null_backend();
  for (const fs::path& p : specs) {
    const std::string name = p.stem().string();
    Spec spec = load_planning_spec(p.string(), notes);
    for (DType dt : {DType::F64, DType::F32}) {
      const std::string d = dt == DType::F32 ? "f32" : "f64";
      Model model(spec, load_datasets(spec), dt);
      std::vector<int64_t> rows;
      if (spec.data)
        for (int64_t i = 0; i < model.program().batch; ++i) rows.push_back(i);
      const std::vector<Var>& nodes = model.record(model.data().train, rows, model.dropout_key(1));
      if (nodes.empty()) {
        notes->push_back(name + " " + d + ": no episode recorded (no fused module)");
        continue;
      }
      replay::ReplayOptions ro;
      ro.dtype = dt;
      replay::Program prog(*null, model.tape(), nodes[static_cast<size_t>(model.program().loss)], ro);
      const fuse::Plan plan = fuse::plan(prog);
      if (!plan.fuses()) {
        notes->push_back(name + " " + d + ": the plan fuses nothing (fill kernel only)");
      }
      mods.push_back({"fused " + name + " " + d, device::detail::module_text(plan.source, plan.module_name), plan.module_name});
    }
  }
  // The emitter: every spec it accepts, and the golden spec that holds every op it emits.
  std::string refused;
  std::vector<fs::path> emit_specs = specs;
  const fs::path all_ops = fs::path(specs_dir).parent_path() / "tests/golden/emit/all_ops.json";
  if (fs::exists(all_ops)) emit_specs.push_back(all_ops);
  for (const fs::path& p : emit_specs) {
    const std::string name = p.stem().string();
    try {
      const Spec spec = load_planning_spec(p.string(), nullptr);
      SpecEmitter e(spec);
      mods.push_back({"emit-cuda " + name, e.source() + emit_probe(spec), "emit_" + name + ".cu"});
    } catch (const InputError&) {
      refused += (refused.empty() ? "" : ", ") + name;
    }
  }
  if (!refused.empty())
    notes->push_back("emit-cuda: the emitter refuses " + refused + " (not single-element per-example losses), as `gradrun emit-cuda` does");
  return mods;
}

// A kernel name for the table: a fused kernel's plan id (which changes with any generated text) left out.
std::string shown(const std::string& kernel) {
  static const std::regex plan_id("^grf_[0-9a-f]{12}_");
  return std::regex_replace(kernel, plan_id, "grf_…_");
}

// --plant (the check's own test): a module of two kernels the check must fail — one that spills
// (its launch bounds allow 32 registers for 48 live doubles) and one whose 80 live doubles take
// ~185 registers, so it can launch with at most 320 threads per block (fails at --block 512).
const char* kPlanted = R"(
extern "C" __global__ void __launch_bounds__(1024, 2) gr_planted_spill(double* out, const double* in, long long n) {
  double acc[48];
#pragma unroll
  for (int i = 0; i < 48; ++i) acc[i] = in[i * n + threadIdx.x];
  for (long long k = 0; k < n; ++k) {
#pragma unroll
    for (int i = 0; i < 48; ++i) acc[i] = __dadd_rn(__dmul_rn(acc[i], acc[(i + 7) % 48]), in[k]);
  }
#pragma unroll
  for (int i = 0; i < 48; ++i) out[i * n + threadIdx.x] = acc[i];
}
GR_EXPORT_KERNEL(gr_planted_spill)
extern "C" __global__ void __launch_bounds__(256, 1) gr_planted_registers(double* out, const double* in, long long n) {
  double acc[80];
#pragma unroll
  for (int i = 0; i < 80; ++i) acc[i] = in[i * n + threadIdx.x];
  for (long long k = 0; k < n; ++k) {
#pragma unroll
    for (int i = 0; i < 80; ++i) acc[i] = __dadd_rn(__dmul_rn(acc[i], acc[(i + 7) % 80]), in[k]);
  }
#pragma unroll
  for (int i = 0; i < 80; ++i) out[i * n + threadIdx.x] = acc[i];
}
GR_EXPORT_KERNEL(gr_planted_registers)
)";

}  // namespace

int main(int argc, char** argv) {
  std::string specs_dir = "specs", cache_dir, doc;
  bool plant = false;
  unsigned jobs = std::max(1u, std::thread::hardware_concurrency());
  int block = 128;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto val = [&]() -> std::string {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "gpu_static_check: %s needs a value\n", a.c_str());
        std::exit(2);
      }
      return argv[++i];
    };
    if (a == "--specs") specs_dir = val();
    else if (a == "--cache") cache_dir = val();
    else if (a == "--doc") doc = val();
    else if (a == "--jobs") jobs = static_cast<unsigned>(std::max(1, std::atoi(val().c_str())));
    else if (a == "--block") block = std::max(1, std::atoi(val().c_str()));
    else if (a == "--plant") plant = true;
    else if (a == "--name") g_test_name = val();
    else {
      std::fprintf(stderr, "usage: gpu_static_check [--specs DIR] [--cache DIR] [--jobs N] [--doc FILE] [--block B] [--plant] [--name TEST]\n");
      return 2;
    }
  }
  const auto t0 = Clock::now();
  std::string nvrtc_version;
  try {
    nvrtc_version = device::detail::nvrtc_version();
  } catch (const device::DeviceUnavailable& e) {
    return skip(std::string("no NVRTC: ") + e.what());
  }
  const std::string ptxas = find_ptxas();
  if (ptxas.empty()) return skip("no ptxas ($GRADRUN_PTXAS, else on PATH, $CUDA_HOME/bin or /usr/local/cuda/bin)");
  std::string ptxas_version;
  if (device::detail::run_process({ptxas, "--version"}, &ptxas_version) != 0) return skip("ptxas --version failed: " + ptxas_version);
  ptxas_version = ptxas_version.substr(ptxas_version.rfind("release") == std::string::npos ? 0 : ptxas_version.rfind("release"));
  ptxas_version = ptxas_version.substr(0, ptxas_version.find('\n'));

  std::vector<std::string> notes;
  std::vector<ModuleText> all;
  try {
    all = gather_modules(specs_dir, &notes);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "gpu_static_check: cannot build the modules: %s\n", e.what());
    return 1;
  }
  if (plant) all.push_back({"planted (--plant)", device::detail::module_text(kPlanted, "planted.cu"), "planted.cu"});
  // Each distinct text once (the first label names it; the others are listed as the same module).
  std::vector<ModuleText> mods;
  std::map<std::string, size_t> by_text;
  std::map<size_t, std::vector<std::string>> aliases;
  for (ModuleText& m : all) {
    auto it = by_text.find(m.text);
    if (it != by_text.end()) {
      aliases[it->second].push_back(m.label);
      continue;
    }
    by_text[m.text] = mods.size();
    mods.push_back(std::move(m));
  }
  const double gather_ms = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();

  std::string opts;
  for (const std::string& o : device::detail::nvrtc_options()) opts += (opts.empty() ? "" : " ") + o;
  if (!cache_dir.empty()) fs::create_directories(cache_dir);
  const std::string work = fs::temp_directory_path() / ("gr_static_check_" + std::to_string(getpid()));
  fs::create_directories(work);

  // The tasks: (module, arch), biggest text first so the long ones start early.
  std::vector<std::pair<size_t, size_t>> tasks;
  for (size_t m = 0; m < mods.size(); ++m)
    for (size_t a = 0; a < std::size(kArchs); ++a) tasks.push_back({m, a});
  std::stable_sort(tasks.begin(), tasks.end(),
                   [&](const auto& x, const auto& y) { return mods[x.first].text.size() > mods[y.first].text.size(); });
  std::vector<std::vector<Result>> results(mods.size(), std::vector<Result>(std::size(kArchs)));
  std::atomic<size_t> next{0};
  auto worker = [&] {
    for (size_t t; (t = next++) < tasks.size();) {
      const auto [mi, ai] = tasks[t];
      const ModuleText& m = mods[mi];
      Result& r = results[mi][ai];
      const std::string arch = kArchs[ai];
      const auto s0 = Clock::now();
      gr::Sha256 h;
      h.update(device::detail::hash_parts({"gpu_static_check v1", m.text, device::detail::embedded_headers_digest(), arch,
                                           nvrtc_version, opts, ptxas_version}));
      const std::string key = h.hex();
      const std::string cached = cache_dir.empty() ? "" : cache_dir + "/" + key + ".ptxas";
      std::string report;
      if (!cached.empty() && fs::exists(cached)) {
        std::ifstream f(cached);
        report.assign(std::istreambuf_iterator<char>(f), {});
        r.cached = true;
      } else {
        try {
          const std::string ptx = device::detail::nvrtc_compile(m.text, m.file, "compute_" + arch, nullptr);
          const std::string ptx_file = work + "/" + key + ".ptx";
          std::ofstream(ptx_file, std::ios::binary) << ptx;
          const int rc = device::detail::run_process({ptxas, "-arch=sm_" + arch, "-v", ptx_file, "-o", "/dev/null"}, &report);
          fs::remove(ptx_file);
          if (rc != 0) throw gr::Error("ptxas -arch=sm_" + arch + " failed (exit " + std::to_string(rc) + "):\n" +
                                       device::detail::first_lines(report, 12));
          if (!cached.empty()) device::detail::write_file_atomic(cached, report);
        } catch (const std::exception& e) {
          r.error = e.what();
        }
      }
      if (r.error.empty()) r.functions = parse_ptxas(report);
      r.ms = std::chrono::duration<double, std::milli>(Clock::now() - s0).count();
    }
  };
  std::vector<std::thread> pool;
  for (unsigned j = 0; j < std::min<size_t>(jobs, tasks.size()); ++j) pool.emplace_back(worker);
  for (std::thread& t : pool) t.join();
  fs::remove_all(work);

  // Verdicts and the table.
  int failures = 0, entries = 0, cached = 0;
  double cpu_ms = 0;
  std::string table =
      "| module | kernels | sm_80: most registers (kernel) | sm_80 threads/block | sm_90: most registers (kernel) | sm_90 threads/block | spills |\n"
      "| --- | ---: | --- | ---: | --- | ---: | --- |\n";
  for (size_t mi = 0; mi < mods.size(); ++mi) {
    const ModuleText& m = mods[mi];
    std::string row = "| " + m.label;
    for (const std::string& a : aliases[mi]) row += " = " + a;
    int kernels = 0;
    std::string cells, spills;
    for (size_t ai = 0; ai < std::size(kArchs); ++ai) {
      const Result& r = results[mi][ai];
      cpu_ms += r.ms;
      cached += r.cached;
      const std::string arch = std::string("sm_") + kArchs[ai];
      if (!r.error.empty()) {
        std::printf("FAIL %s, %s: does not compile: %s\n", m.label.c_str(), arch.c_str(), r.error.c_str());
        ++failures;
        cells += " | compile error | -";
        continue;
      }
      const Function* widest = nullptr;
      int fewest = 1024, k = 0;
      for (const Function& f : r.functions) {
        if (f.spill_stores || f.spill_loads) {
          std::printf("FAIL %s, %s: %s spills (%d bytes stores, %d bytes loads)\n", m.label.c_str(), arch.c_str(), f.name.c_str(),
                      f.spill_stores, f.spill_loads);
          spills += (spills.empty() ? "" : ", ") + arch + " " + f.name;
          ++failures;
        }
        if (!f.entry) continue;
        ++k;
        if (!widest || f.regs > widest->regs) widest = &f;
        fewest = std::min(fewest, max_threads(f.regs));
        if (max_threads(f.regs) < block) {
          std::printf("FAIL %s, %s: %s uses %d registers per thread: at most %d threads per block, below gradrun's block %d\n",
                      m.label.c_str(), arch.c_str(), f.name.c_str(), f.regs, max_threads(f.regs), block);
          ++failures;
        }
      }
      if (k == 0) {
        std::printf("FAIL %s, %s: ptxas reported no kernel\n", m.label.c_str(), arch.c_str());
        ++failures;
      }
      kernels = std::max(kernels, k);
      entries += k;
      cells += " | " + (widest ? std::to_string(widest->regs) + " (`" + shown(widest->name) + "`)" : std::string("-")) + " | " +
               std::to_string(fewest);
    }
    table += row + " | " + std::to_string(kernels) + cells + " | " + (spills.empty() ? "none" : spills) + " |\n";
  }
  const double wall_ms = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
  std::printf("gpu_static_check: %zu distinct modules (%zu asked for) x sm_80, sm_90: %d kernels, %d of %zu compiles from the cache; "
              "NVRTC %s, ptxas %s; %.1f s wall on %u threads (modules built in %.1f s, compile work %.1f s)\n",
              mods.size(), all.size(), entries, cached, tasks.size(), nvrtc_version.c_str(), ptxas_version.c_str(), wall_ms / 1e3, jobs,
              gather_ms / 1e3, cpu_ms / 1e3);
  for (const std::string& n : notes) std::printf("  note: %s\n", n.c_str());
  if (!doc.empty()) {
    std::ifstream in(doc);
    std::string text((std::istreambuf_iterator<char>(in)), {});
    const size_t b = text.find(kBegin), e = text.find(kEnd);
    if (b == std::string::npos || e == std::string::npos || e < b) {
      std::fprintf(stderr, "gpu_static_check: %s has no generated-table markers\n", doc.c_str());
      return 1;
    }
    std::string gen = std::string(kBegin) + "\n\nNVRTC " + nvrtc_version + " (PTX for compute_80 / compute_90, " + opts +
                      ") and ptxas " + ptxas_version + " -v; threads/block: the fewest any kernel of the module can launch " +
                      "with (register-limited); the check fails below " + std::to_string(block) + ".\n\n" + table;
    if (!notes.empty()) {
      gen += "\n";
      for (const std::string& n : notes) gen += "- " + n + "\n";
    }
    gen += "\n";
    text = text.substr(0, b) + gen + text.substr(e);
    const std::string tmp = doc + ".tmp";
    std::ofstream(tmp, std::ios::binary) << text;
    fs::rename(tmp, doc);
    std::printf("gpu_static_check: wrote the table into %s\n", doc.c_str());
  }
  if (failures) {
    std::printf("gpu_static_check: FAILED: %d problem(s) above\n", failures);
    return 1;
  }
  std::printf("gpu_static_check: OK: no spills; every kernel launches with block %d on sm_80 and sm_90\n", block);
  return 0;
}
