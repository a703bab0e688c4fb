// bench_matmul.cpp — single-threaded GFLOP/s of gr::matmul_exact against OpenBLAS cblas_dgemm and
// against the machine's peaks for separate (unfused) vector multiply + add and for vector FMA.
//
// OpenBLAS is loaded at run time (dlopen), so the build needs only -ldl. If it is missing, only
// our numbers are printed. OpenBLAS's DYNAMIC_ARCH build picks its kernels from the CPU id at load
// time, and on a CPU it does not know it picks a slow one (this AMD EPYC gets Haswell's AVX2
// kernels, about 60% of its AVX-512 ones). So the comparison is against the FASTEST of several
// kernels: the program re-runs itself once per OPENBLAS_CORETYPE candidate (the variable is read
// only when the library loads); each child times OpenBLAS and ours on every row in alternating
// reps, so both sides of a ratio see the same stretch of a shared machine's time (timed in
// different processes minutes apart, rows swung by ±15% from run to run). Each row shows the
// child whose kernel came closest to ours (the smallest OpenBLAS / ours ratio) and names it. A
// candidate that this build does not accept (it reports another core) is skipped. Best-of-N
// timings of thread CPU time; the machine may be shared, so noise is one-sided.
//
// Also the f32 matmul (MatmulArgsF32) on the square sizes against cblas_sgemm and the float FMA peak,
// and the f32 products of the models (MLP-1024, the conv layers' im2col GEMMs) in the form the f32
// CPU tape calls them — matmul_exact_f32 on doubles holding floats — and on floats, against sgemm.
//
// Usage: bench_matmul [reps] [--sections LIST] [--no-blas]   (reps default 7)
//          LIST: comma-separated of sq (f64 squares), sq32 (f32 squares), sh (f64 shapes), s32 (f32
//          shapes); default all. --no-blas: ours only (no OpenBLAS children), for quick tuning.
//          --only TEXT: of the shape tables, only the rows whose use contains TEXT (e.g. "lenet").
//        bench_matmul --blas-worker reps LIST   (internal: times OpenBLAS as loaded, prints raw lines)
#include <dlfcn.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <map>
#include <new>
#include <random>
#include <string>
#include <vector>

#include "bench_matmul_shapes.h"
#include "tensor/matmul.h"

#if defined(__AVX512F__)
#include <immintrin.h>
#define BENCH_W 8
#elif defined(__AVX__)
#define BENCH_W 4
#else
#define BENCH_W 2
#endif

namespace {

typedef double vd __attribute__((vector_size(BENCH_W * sizeof(double))));

// Thread CPU time, not wall time: the machine is shared (2 cores, other builds running), and time
// this thread spends descheduled must not count. The work is pure computation, so CPU time is
// the right denominator; best-of-N then filters cache pollution from the neighbours.
struct Clock {
  static double now() {
    timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
  }
};

double seconds_since(double t0) { return Clock::now() - t0; }

// Best time per call of f(): each rep runs `calls` calls; the best rep wins.
template <class F>
double best_per_call(F&& f, int reps, int64_t calls) {
  double best = 1e300;
  for (int r = 0; r < reps; ++r) {
    const double t0 = Clock::now();
    for (int64_t c = 0; c < calls; ++c) f();
    best = std::min(best, seconds_since(t0) / static_cast<double>(calls));
  }
  return best;
}

// Enough calls per rep that one rep lasts about `target_s`.
template <class F>
int64_t calls_for(F&& f, double target_s) {
  const double t0 = Clock::now();
  f();
  const double once = std::max(seconds_since(t0), 1e-9);
  return std::max<int64_t>(1, static_cast<int64_t>(target_s / once));
}

template <class F>
double time_call(F&& f, int reps, double target_s) {
  return best_per_call(f, reps, calls_for(f, target_s));
}

// Best times per call of f and g measured in alternating reps (f, g, f, g, ...), so a slow phase
// of a shared machine lands on both: {best of f, best of g}.
template <class F, class G>
std::pair<double, double> time_pair(F&& f, G&& g, int reps, double target_s) {
  const int64_t cf = calls_for(f, target_s), cg = calls_for(g, target_s);
  double bf = 1e300, bg = 1e300;
  for (int r = 0; r < reps; ++r) {
    bf = std::min(bf, best_per_call(f, 1, cf));
    bg = std::min(bg, best_per_call(g, 1, cg));
  }
  return {bf, bg};
}

// ---- OpenBLAS, loaded at run time -------------------------------------------------------------
constexpr int kCblasRowMajor = 101, kCblasNoTrans = 111, kCblasTrans = 112;
using DgemmFn = void (*)(int, int, int, int, int, int, double, const double*, int, const double*, int, double, double*,
                         int);
using SgemmFn = void (*)(int, int, int, int, int, int, float, const float*, int, const float*, int, float, float*, int);
using SetThreadsFn = void (*)(int);
using CorenameFn = char* (*)();

struct Blas {
  DgemmFn dgemm = nullptr;
  SgemmFn sgemm = nullptr;
  const char* path = nullptr;
  const char* core = "?";
};

Blas load_blas() {
  setenv("OPENBLAS_NUM_THREADS", "1", 1);  // before the library reads it at load time
  const char* paths[] = {"libopenblas.so.0", "/usr/lib/x86_64-linux-gnu/openblas-pthread/libopenblas.so.0",
                         "/usr/lib/x86_64-linux-gnu/libopenblas.so.0", "libopenblas.so", "libblas.so.3"};
  Blas b;
  for (const char* p : paths) {
    void* h = dlopen(p, RTLD_NOW | RTLD_LOCAL);
    if (!h) continue;
    auto dgemm = reinterpret_cast<DgemmFn>(dlsym(h, "cblas_dgemm"));
    if (!dgemm) {
      dlclose(h);
      continue;
    }
    b.dgemm = dgemm;
    b.sgemm = reinterpret_cast<SgemmFn>(dlsym(h, "cblas_sgemm"));
    b.path = p;
    if (auto set = reinterpret_cast<SetThreadsFn>(dlsym(h, "openblas_set_num_threads"))) set(1);
    if (auto core = reinterpret_cast<CorenameFn>(dlsym(h, "openblas_get_corename"))) b.core = core();
    return b;
  }
  return b;
}

// ---- peak for separate multiply + add ---------------------------------------------------------
// 12 independent chains acc_i = acc_i + x_i * y, each a rounded vector multiply then a rounded
// vector add. The empty asm makes y look new every step so the products cannot be hoisted.
double peak_mul_add_gflops(int reps) {
  constexpr int kChains = 12;
  constexpr int64_t kIters = 20'000'000;
  double best = 0;
  for (int r = 0; r < reps; ++r) {
    vd acc[kChains], x[kChains];
    for (int c = 0; c < kChains; ++c) {
      acc[c] = vd{} + 1.0;
      x[c] = vd{} + (1.0 + c * 1e-3);
    }
    vd y = vd{} + 1e-9;
    const double t0 = Clock::now();
    for (int64_t it = 0; it < kIters; ++it) {
      asm volatile("" : "+v"(y));
#pragma GCC unroll 16
      for (int c = 0; c < kChains; ++c) {
        const vd prod = x[c] * y;
        acc[c] = acc[c] + prod;
      }
    }
    const double s = seconds_since(t0);
    double sink = 0;
    for (int c = 0; c < kChains; ++c) sink += acc[c][0];
    if (sink == 42.0) std::printf(" ");
    best = std::max(best, 2.0 * BENCH_W * kChains * static_cast<double>(kIters) / s * 1e-9);
  }
  return best;
}

#if defined(__AVX512F__)
// Context only (never used by gradrun): the fused multiply-add peak that BLAS kernels run at.
// f32: the same with 16 float lanes (vfmadd...ps), the peak of the f32 matmul.
template <bool f32>
struct FmaLanes;
template <>
struct FmaLanes<false> {
  using V = __m512d;
  static constexpr int kLanes = 8;
  static V set1(double v) { return _mm512_set1_pd(v); }
  static V fma(V a, V b, V c) { return _mm512_fmadd_pd(a, b, c); }
};
template <>
struct FmaLanes<true> {
  using V = __m512;
  static constexpr int kLanes = 16;
  static V set1(double v) { return _mm512_set1_ps(static_cast<float>(v)); }
  static V fma(V a, V b, V c) { return _mm512_fmadd_ps(a, b, c); }
};
template <bool f32>
double peak_fma_gflops(int reps) {
  using L = FmaLanes<f32>;
  using V = typename L::V;
  constexpr int kChains = 12, kLanes = L::kLanes;
  constexpr int64_t kIters = 20'000'000;
  auto set1 = [](double v) { return L::set1(v); };
  auto fma = [](V a, V b, V c) { return L::fma(a, b, c); };
  double best = 0;
  for (int r = 0; r < reps; ++r) {
    V acc[kChains], x[kChains];
    for (int c = 0; c < kChains; ++c) {
      acc[c] = set1(1.0);
      x[c] = set1(1.0 + c * 1e-3);
    }
    V y = set1(1e-9);
    const double t0 = Clock::now();
    for (int64_t it = 0; it < kIters; ++it) {
      asm volatile("" : "+v"(y));
#pragma GCC unroll 16
      for (int c = 0; c < kChains; ++c) acc[c] = fma(x[c], y, acc[c]);
    }
    const double s = seconds_since(t0);
    uint64_t sink = 0;  // every lane of every chain is read, so no chain can be left out
    for (int c = 0; c < kChains; ++c) {
      uint64_t w[8];
      std::memcpy(w, &acc[c], sizeof w);
      for (uint64_t word : w) sink ^= word;
    }
    if (sink == 42) std::printf(" ");
    best = std::max(best, 2.0 * kLanes * kChains * static_cast<double>(kIters) / s * 1e-9);
  }
  return best;
}
#endif

// ---- matmul -----------------------------------------------------------------------------------
// Operands 64-byte aligned, as the tape's arena hands them out (lib/grad/arena.cpp) and as torch's
// allocator does. With std::vector's 16-byte alignment every vector load of a B read in place
// straddles two cache lines: 1x64x64 took 200 ns instead of 117 in a standalone loop, OpenBLAS
// moved less, and whether a row came out ahead depended on where malloc put B.
template <class T>
struct Aligned64 {
  using value_type = T;
  Aligned64() = default;
  template <class U>
  Aligned64(const Aligned64<U>&) {}
  T* allocate(size_t n) {
    void* p = std::aligned_alloc(64, (n * sizeof(T) + 63) / 64 * 64);
    if (!p) throw std::bad_alloc();
    return static_cast<T*>(p);
  }
  void deallocate(T* p, size_t) { std::free(p); }
  bool operator==(const Aligned64&) const { return true; }
  bool operator!=(const Aligned64&) const { return false; }
};
template <class T>
using AlignedVec = std::vector<T, Aligned64<T>>;

struct Problem {
  Shape s;
  AlignedVec<double> a, b, c;
  explicit Problem(const Shape& s_) : s(s_) {
    std::mt19937_64 rng(static_cast<uint64_t>(s.m * 1000003 + s.k * 1009 + s.n));
    std::uniform_real_distribution<double> u(-1.0, 1.0);
    a.resize(static_cast<size_t>(s.m * s.k));
    b.resize(static_cast<size_t>(s.k * s.n));
    c.assign(static_cast<size_t>(s.m * s.n), 0.0);
    for (auto& v : a) v = u(rng);
    for (auto& v : b) v = u(rng);
  }
  void ours() {
    gr::matmul_exact({a.data(), s.a_trans ? 1 : s.k, s.a_trans ? s.m : 1, b.data(), s.b_trans ? 1 : s.n,
                      s.b_trans ? s.k : 1, c.data(), s.m, s.k, s.n,
                      s.accumulate ? gr::MatmulStore::Accumulate : gr::MatmulStore::Overwrite});
  }
  void blas(DgemmFn dgemm) {
    dgemm(kCblasRowMajor, s.a_trans ? kCblasTrans : kCblasNoTrans, s.b_trans ? kCblasTrans : kCblasNoTrans,
          static_cast<int>(s.m), static_cast<int>(s.n), static_cast<int>(s.k), 1.0, a.data(),
          static_cast<int>(s.a_trans ? s.m : s.k), b.data(), static_cast<int>(s.b_trans ? s.k : s.n),
          s.accumulate ? 1.0 : 0.0, c.data(), static_cast<int>(s.n));
  }
  double flops() const { return 2.0 * static_cast<double>(s.m) * static_cast<double>(s.n) * static_cast<double>(s.k); }
};

// The f32 square products (issue 15: "f32 >= 90% of its peak"): ours (gr::MatmulArgsF32) and sgemm.
// Seconds per timing rep.
constexpr double kSquareTarget = 0.05, kShapeTarget = 0.02;

struct ProblemF32 {
  int64_t n;
  AlignedVec<float> a, b, c;
  explicit ProblemF32(int64_t n_) : n(n_) {
    std::mt19937_64 rng(static_cast<uint64_t>(n));
    std::uniform_real_distribution<float> u(-1.0f, 1.0f);
    a.resize(static_cast<size_t>(n * n));
    b.resize(static_cast<size_t>(n * n));
    c.assign(static_cast<size_t>(n * n), 0.0f);
    for (auto& v : a) v = u(rng);
    for (auto& v : b) v = u(rng);
  }
  void ours() { gr::matmul_exact(gr::MatmulArgsF32{a.data(), n, 1, b.data(), n, 1, c.data(), n, n, n, gr::MatmulStore::Overwrite}); }
  void blas(SgemmFn sgemm) {
    const int k = static_cast<int>(n);
    sgemm(kCblasRowMajor, kCblasNoTrans, kCblasNoTrans, k, k, k, 1.0f, a.data(), k, b.data(), k, 0.0f, c.data(), k);
  }
  double flops() const { return 2.0 * static_cast<double>(n) * static_cast<double>(n) * static_cast<double>(n); }
};

// One of kShapes32: the same floats as floats (for sgemm and MatmulArgsF32) and widened to doubles
// (the f32 tape's storage, for matmul_exact_f32).
struct ProblemS32 {
  Shape s;
  AlignedVec<float> a, b, c;
  AlignedVec<double> a64, b64, c64;
  explicit ProblemS32(const Shape& s_) : s(s_) {
    std::mt19937_64 rng(static_cast<uint64_t>(s.m * 1000003 + s.k * 1009 + s.n));
    std::uniform_real_distribution<float> u(-1.0f, 1.0f);
    a.resize(static_cast<size_t>(s.m * s.k));
    b.resize(static_cast<size_t>(s.k * s.n));
    c.assign(static_cast<size_t>(s.m * s.n), 0.0f);
    for (auto& v : a) v = u(rng);
    for (auto& v : b) v = u(rng);
    a64.assign(a.begin(), a.end());
    b64.assign(b.begin(), b.end());
    c64.assign(c.begin(), c.end());
  }
  gr::MatmulStore store() const { return s.accumulate ? gr::MatmulStore::Accumulate : gr::MatmulStore::Overwrite; }
  void tape() {  // the f32 CPU tape's call
    gr::matmul_exact_f32({a64.data(), s.a_trans ? 1 : s.k, s.a_trans ? s.m : 1, b64.data(), s.b_trans ? 1 : s.n,
                          s.b_trans ? s.k : 1, c64.data(), s.m, s.k, s.n, store()});
  }
  void floats() {
    gr::matmul_exact(gr::MatmulArgsF32{a.data(), s.a_trans ? 1 : s.k, s.a_trans ? s.m : 1, b.data(),
                                       s.b_trans ? 1 : s.n, s.b_trans ? s.k : 1, c.data(), s.m, s.k, s.n, store()});
  }
  void blas(SgemmFn sgemm) {
    sgemm(kCblasRowMajor, s.a_trans ? kCblasTrans : kCblasNoTrans, s.b_trans ? kCblasTrans : kCblasNoTrans,
          static_cast<int>(s.m), static_cast<int>(s.n), static_cast<int>(s.k), 1.0f, a.data(),
          static_cast<int>(s.a_trans ? s.m : s.k), b.data(), static_cast<int>(s.b_trans ? s.k : s.n),
          s.accumulate ? 1.0f : 0.0f, c.data(), static_cast<int>(s.n));
  }
  double flops() const { return 2.0 * static_cast<double>(s.m) * static_cast<double>(s.n) * static_cast<double>(s.k); }
};

// Which tables to run (--sections).
struct Sections {
  bool sq = true, sq32 = true, sh = true, s32 = true;
  static Sections parse(const std::string& list) {
    Sections x{false, false, false, false};
    size_t pos = 0;
    while (pos <= list.size()) {
      const size_t end = std::min(list.find(',', pos), list.size());
      const std::string w = list.substr(pos, end - pos);
      if (w == "sq") x.sq = true;
      else if (w == "sq32") x.sq32 = true;
      else if (w == "sh") x.sh = true;
      else if (w == "s32") x.s32 = true;
      else if (w == "all") x = Sections{};
      else {
        std::fprintf(stderr, "bench_matmul: unknown section '%s' (sq, sq32, sh, s32, all)\n", w.c_str());
        std::exit(2);
      }
      pos = end + 1;
    }
    return x;
  }
};

std::string shape_name(const Shape& s) {
  char name[64];
  std::snprintf(name, sizeof name, "%lldx%lldx%lld%s%s", static_cast<long long>(s.m), static_cast<long long>(s.k),
                static_cast<long long>(s.n), s.a_trans ? " At" : "", s.b_trans ? " Bt" : "");
  return name;
}

// Child mode: time OpenBLAS as this process loaded it (OPENBLAS_CORETYPE set by the parent), each
// row in alternating reps with ours, and print "core NAME", then "KIND INDEX BLAS_S OURS_S" lines
// (KIND: sq, sh, sq32).
int blas_worker(int reps, const Sections& sec) {
  const Blas blas = load_blas();
  if (!blas.dgemm) return 1;
  std::printf("core %s\n", blas.core);
  const auto row = [&](const char* kind, size_t i, auto&& blas_call, auto&& ours_call, double target) {
    const auto [tb, to] = time_pair(blas_call, ours_call, reps, target);
    std::printf("%s %zu %.9e %.9e\n", kind, i, tb, to);
    std::fflush(stdout);
  };
  for (size_t i = 0; sec.sq && i < sizeof kSquare / sizeof kSquare[0]; ++i) {
    Problem p({kSquare[i], kSquare[i], kSquare[i], false, false, false, ""});
    row("sq", i, [&] { p.blas(blas.dgemm); }, [&] { p.ours(); }, kSquareTarget);
  }
  for (size_t i = 0; sec.sh && i < kNumShapes; ++i) {
    Problem p(kShapes[i]);
    row("sh", i, [&] { p.blas(blas.dgemm); }, [&] { p.ours(); }, kShapeTarget);
  }
  for (size_t i = 0; sec.sq32 && blas.sgemm && i < sizeof kSquare / sizeof kSquare[0]; ++i) {
    ProblemF32 p(kSquare[i]);
    row("sq32", i, [&] { p.blas(blas.sgemm); }, [&] { p.ours(); }, kSquareTarget);
  }
  for (size_t i = 0; sec.s32 && blas.sgemm && i < kNumShapes32; ++i) {
    ProblemS32 p(kShapes32[i]);  // sgemm against the tape's form, then against ours on floats
    row("s32", i, [&] { p.blas(blas.sgemm); }, [&] { p.tape(); }, kShapeTarget);
    row("s32f", i, [&] { p.blas(blas.sgemm); }, [&] { p.floats(); }, kShapeTarget);
  }
  return 0;
}

// Per row, the OpenBLAS kernel that came closest to ours (the smallest OpenBLAS / ours ratio, both
// timed in that kernel's child in alternating reps), with both times: for every row the hardest
// comparison, each made within one stretch of the machine's time.
struct Pick {
  double blas = 0.0, ours = 0.0;  // seconds per call; 0 = none
  std::string core;
};
struct BlasBest {
  std::vector<Pick> sq, sh, sq32, s32, s32f;
  std::vector<std::string> cores;  // kernels actually timed
};

BlasBest run_blas_candidates(int reps, const std::string& sections) {
  BlasBest best;
  best.sq.resize(sizeof kSquare / sizeof kSquare[0]);
  best.sh.resize(kNumShapes);
  best.sq32.resize(best.sq.size());
  best.s32.resize(kNumShapes32);
  best.s32f.resize(kNumShapes32);
  // "" = OpenBLAS's own CPU detection. SapphireRapids and Zen are accepted only by newer builds.
  char exe[4096];
  const ssize_t len = readlink("/proc/self/exe", exe, sizeof exe - 1);  // popen's shell has its own
  if (len <= 0) return best;
  const std::string self(exe, static_cast<size_t>(len));
  const char* candidates[] = {"", "SkylakeX", "Cooperlake", "SapphireRapids", "Haswell", "Zen"};
  for (const char* cand : candidates) {
    if (*cand)
      setenv("OPENBLAS_CORETYPE", cand, 1);
    else
      unsetenv("OPENBLAS_CORETYPE");
    const std::string cmd = "'" + self + "' --blas-worker " + std::to_string(reps) + " " + sections;
    FILE* f = popen(cmd.c_str(), "r");
    if (!f) continue;
    char line[256], core[128] = "?";
    struct Row {
      std::string kind;
      size_t idx;
      double blas, ours;
    };
    std::vector<Row> rows;
    while (std::fgets(line, sizeof line, f)) {
      char kind[8];  // sq, sh, sq32, s32, s32f
      size_t idx;
      double tb, to;
      if (std::sscanf(line, "core %127s", core) == 1) continue;
      if (std::sscanf(line, "%7s %zu %lf %lf", kind, &idx, &tb, &to) == 4) rows.push_back({kind, idx, tb, to});
    }
    pclose(f);
    const std::string name = core;
    if (name == "?" || std::find(best.cores.begin(), best.cores.end(), name) != best.cores.end()) {
      std::printf("OPENBLAS_CORETYPE=%s: %s\n", *cand ? cand : "(unset)",
                  name == "?" ? "no OpenBLAS" : ("runs kernel " + name + " again; skipped").c_str());
      continue;
    }
    std::printf("OPENBLAS_CORETYPE=%s: kernel %s\n", *cand ? cand : "(unset, own detection)", core);
    best.cores.push_back(name);
    for (const Row& r : rows) {
      auto& t = r.kind == "sq"     ? best.sq
                : r.kind == "sq32" ? best.sq32
                : r.kind == "s32"  ? best.s32
                : r.kind == "s32f" ? best.s32f
                                   : best.sh;
      if (r.idx >= t.size() || r.blas <= 0 || r.ours <= 0) continue;
      Pick& pick = t[r.idx];
      if (pick.blas == 0.0 || r.blas / r.ours < pick.blas / pick.ours) pick = {r.blas, r.ours, name};
    }
  }
  unsetenv("OPENBLAS_CORETYPE");
  return best;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc > 3 && std::strcmp(argv[1], "--blas-worker") == 0)
    return blas_worker(std::max(1, std::atoi(argv[2])), Sections::parse(argv[3]));
  int reps = 7;
  std::string sections = "all";
  bool use_blas = true;
  std::string only;  // --only TEXT: the shape rows whose use contains TEXT
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--sections") && i + 1 < argc)
      sections = argv[++i];
    else if (!std::strcmp(argv[i], "--no-blas"))
      use_blas = false;
    else if (!std::strcmp(argv[i], "--only") && i + 1 < argc)
      only = argv[++i];
    else if (argv[i][0] >= '0' && argv[i][0] <= '9')
      reps = std::max(1, std::atoi(argv[i]));
    else {
      std::fprintf(stderr, "usage: bench_matmul [reps] [--sections sq,sq32,sh,s32] [--no-blas] [--only TEXT]\n");
      return 2;
    }
  }
  const Sections sec = Sections::parse(sections);
  std::printf("SIMD width: %d doubles; best of %d reps, thread CPU time, 1 thread\n", BENCH_W, reps);
  const BlasBest blas = use_blas ? run_blas_candidates(reps, sections) : BlasBest{};
  const bool have_blas = !blas.cores.empty();
  if (!have_blas) std::printf("note: no OpenBLAS/CBLAS %s; benchmarking matmul_exact only\n", use_blas ? "found" : "(--no-blas)");

  const double peak_ma = peak_mul_add_gflops(reps);
  std::printf("\npeak, separate vector mul + add (12 chains): %7.2f GFLOP/s\n", peak_ma);
#if defined(__AVX512F__)
  const double peak_fma = peak_fma_gflops<false>(reps);
  std::printf("peak, fused vector FMA (12 chains):          %7.2f GFLOP/s   <- ours/peak below is of this\n", peak_fma);
  const double peak_fma32 = peak_fma_gflops<true>(reps);
  std::printf("peak, fused vector FMA, float (12 chains):   %7.2f GFLOP/s   <- the f32 table's ours/peak\n", peak_fma32);
#else
  const double peak_fma = peak_ma, peak_fma32 = 2 * peak_ma;
#endif

  // A row's times: the picked child's pair when OpenBLAS ran, else ours timed here.
  const auto times = [&](const Pick& pick, auto&& ours, double target) -> std::pair<double, double> {
    if (have_blas && pick.blas > 0) return {pick.ours, pick.blas};
    return {time_call(ours, reps, target), 0.0};
  };
  if (sec.sq) {
    std::printf("\n%6s %10s %10s %-12s %10s %9s\n", "n", "ours GF/s", "BLAS GF/s", "BLAS kernel", "ours/BLAS", "ours/FMA");
    for (size_t i = 0; i < sizeof kSquare / sizeof kSquare[0]; ++i) {
      Problem p({kSquare[i], kSquare[i], kSquare[i], false, false, false, ""});
      const auto [t_ours, t_blas] = times(blas.sq.empty() ? Pick{} : blas.sq[i], [&] { p.ours(); }, kSquareTarget);
      const double g_ours = p.flops() / t_ours * 1e-9, g_blas = t_blas > 0 ? p.flops() / t_blas * 1e-9 : 0.0;
      std::printf("%6lld %10.2f %10.2f %-12s %10.2f %8.0f%%\n", static_cast<long long>(kSquare[i]), g_ours, g_blas,
                  g_blas > 0 ? blas.sq[i].core.c_str() : "-", g_blas > 0 ? g_ours / g_blas : 0.0,
                  100.0 * g_ours / peak_fma);
    }
  }

  if (sec.sq32) {
    std::printf("\nf32 (acc = fmaf(a, b, acc), serial in k):\n%6s %10s %10s %-12s %10s %9s\n", "n", "ours GF/s",
                "BLAS GF/s", "BLAS kernel", "ours/BLAS", "ours/FMA");
    for (size_t i = 0; i < sizeof kSquare / sizeof kSquare[0]; ++i) {
      ProblemF32 p(kSquare[i]);
      const auto [t_ours, t_blas] = times(blas.sq32.empty() ? Pick{} : blas.sq32[i], [&] { p.ours(); }, kSquareTarget);
      const double g_ours = p.flops() / t_ours * 1e-9, g_blas = t_blas > 0 ? p.flops() / t_blas * 1e-9 : 0.0;
      std::printf("%6lld %10.2f %10.2f %-12s %10.2f %8.0f%%\n", static_cast<long long>(kSquare[i]), g_ours, g_blas,
                  g_blas > 0 ? blas.sq32[i].core.c_str() : "-", g_blas > 0 ? g_ours / g_blas : 0.0,
                  100.0 * g_ours / peak_fma32);
    }
  }

  int slower = 0;
  if (sec.sh) {
    std::printf("\nshapes used by the examples (M x K x N; At/Bt = operand stored transposed; dW/dX accumulate):\n");
    std::printf("%-18s %-20s %11s %11s %-12s %9s %9s %9s\n", "shape", "use", "ours ns", "BLAS ns", "BLAS kernel",
                "BLAS/ours", "ours GF/s", "ours/FMA");
    for (size_t i = 0; i < kNumShapes; ++i) {
      if (!only.empty() && !std::strstr(kShapes[i].what, only.c_str())) continue;
      Problem p(kShapes[i]);
      const auto [t_ours, t_blas] = times(blas.sh.empty() ? Pick{} : blas.sh[i], [&] { p.ours(); }, kShapeTarget);
      if (t_blas > 0 && t_blas < t_ours) ++slower;
      std::printf("%-18s %-20s %11.1f %11.1f %-12s %9.2f %9.2f %8.0f%%\n", shape_name(kShapes[i]).c_str(),
                  kShapes[i].what, t_ours * 1e9, t_blas * 1e9, t_blas > 0 ? blas.sh[i].core.c_str() : "-",
                  t_blas > 0 ? t_blas / t_ours : 0.0, p.flops() / t_ours * 1e-9, 100.0 * p.flops() / t_ours * 1e-9 / peak_fma);
    }
    if (have_blas)
      std::printf("\nshapes where an OpenBLAS kernel beats ours (timed alternately in one process): %d of %zu\n", slower,
                  kNumShapes);
  }

  if (sec.s32) {
    std::printf("\nf32 shapes: 'tape' = matmul_exact_f32 on doubles holding floats (the f32 CPU tape's call),"
                "\n'floats' = matmul_exact on floats; BLAS = sgemm on floats (each paired with its own sgemm run):\n");
    std::printf("%-18s %-20s %10s %10s %10s %-11s %9s %9s %9s %9s\n", "shape", "use", "tape ns", "floats ns",
                "BLAS ns", "BLAS kernel", "BLAS/tape", "BLAS/flt", "tape/FMA", "flt/FMA");
    int slower32 = 0;
    for (size_t i = 0; i < kNumShapes32; ++i) {
      if (!only.empty() && !std::strstr(kShapes32[i].what, only.c_str())) continue;
      ProblemS32 p(kShapes32[i]);
      const auto [t_tape, t_blas] = times(blas.s32.empty() ? Pick{} : blas.s32[i], [&] { p.tape(); }, kShapeTarget);
      const auto [t_flt, t_blas_f] = times(blas.s32f.empty() ? Pick{} : blas.s32f[i], [&] { p.floats(); }, kShapeTarget);
      const double tb = t_blas > 0 && t_blas_f > 0 ? std::min(t_blas, t_blas_f) : 0.0;
      if (tb > 0 && t_blas < t_tape) ++slower32;
      const double gf = p.flops() * 1e-9;
      std::printf("%-18s %-20s %10.1f %10.1f %10.1f %-11s %9.2f %9.2f %8.0f%% %8.0f%%\n", shape_name(kShapes32[i]).c_str(),
                  kShapes32[i].what, t_tape * 1e9, t_flt * 1e9, tb * 1e9, tb > 0 ? blas.s32[i].core.c_str() : "-",
                  tb > 0 ? t_blas / t_tape : 0.0, tb > 0 ? t_blas_f / t_flt : 0.0, 100.0 * gf / t_tape / peak_fma32,
                  100.0 * gf / t_flt / peak_fma32);
    }
    if (have_blas)
      std::printf("\nf32 shapes where sgemm beats the tape's form (timed alternately in one process): %d of %zu\n",
                  slower32, kNumShapes32);
  }
  return 0;
}
