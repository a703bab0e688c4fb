// bench_tape.cpp — what the tape itself costs: per-op recording overhead on tiny tensors, the
// autoencoder training episode, and heap allocations per steady-state episode.
//
//   (a) ~100-op chains on shape [1] / [4] (adds, muls, mul, add, ...), recorded and dropped with
//       reset_to(mark) over and over: ns per recorded op, forward only and forward + backward.
//       The arithmetic on 1-4 doubles is a few ns, so this is the tape's bookkeeping.
//   (b) the reference autoencoder episode: batch 200, 6-64-32-64-6 tanh MLP, mse, backward, Adam
//       step, reset_to — µs per episode (and per phase) and episodes/s.
//   (c) heap traffic per steady-state episode: global operator new/delete are replaced here to
//       count calls; on glibc (without sanitizers) the C allocation functions are also counted
//       (the arena and the matmul scratch use aligned_alloc; the column includes the malloc under
//       each operator new); and the arena's own chunk counter.
//
// Timings are thread CPU time (the machine may be shared; descheduled time must not count),
// best of N reps. Target (issue): < 100 ns per recorded op on tiny tensors, 0 allocations per
// steady-state episode.
//
// Usage: bench_tape [reps]   (default 7; reps=1 makes a short run, e.g. under callgrind)
#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <new>
#include <vector>

#include "grad/optimizer.h"
#include "grad/tape.h"

// ---- allocation counting ----------------------------------------------------------------------
namespace {
std::atomic<int64_t> g_new_calls{0};      // global operator new (every form)
std::atomic<int64_t> g_c_alloc_calls{0};  // malloc / calloc / realloc / aligned_alloc / posix_memalign

void* counted_new(std::size_t n) {
  g_new_calls.fetch_add(1, std::memory_order_relaxed);
  if (void* p = std::malloc(n ? n : 1)) return p;
  throw std::bad_alloc();
}
void* counted_new_aligned(std::size_t n, std::align_val_t al) {
  g_new_calls.fetch_add(1, std::memory_order_relaxed);
  const std::size_t a = static_cast<std::size_t>(al);
  if (void* p = std::aligned_alloc(a, (std::max<std::size_t>(n, 1) + a - 1) / a * a)) return p;
  throw std::bad_alloc();
}
}  // namespace

void* operator new(std::size_t n) { return counted_new(n); }
void* operator new[](std::size_t n) { return counted_new(n); }
void* operator new(std::size_t n, const std::nothrow_t&) noexcept {
  try {
    return counted_new(n);
  } catch (...) {
    return nullptr;
  }
}
void* operator new[](std::size_t n, const std::nothrow_t&) noexcept {
  try {
    return counted_new(n);
  } catch (...) {
    return nullptr;
  }
}
void* operator new(std::size_t n, std::align_val_t al) { return counted_new_aligned(n, al); }
void* operator new[](std::size_t n, std::align_val_t al) { return counted_new_aligned(n, al); }
void operator delete(void* p) noexcept { std::free(p); }
void operator delete[](void* p) noexcept { std::free(p); }
void operator delete(void* p, std::size_t) noexcept { std::free(p); }
void operator delete[](void* p, std::size_t) noexcept { std::free(p); }
void operator delete(void* p, std::align_val_t) noexcept { std::free(p); }
void operator delete[](void* p, std::align_val_t) noexcept { std::free(p); }
void operator delete(void* p, std::size_t, std::align_val_t) noexcept { std::free(p); }
void operator delete[](void* p, std::size_t, std::align_val_t) noexcept { std::free(p); }

// The C allocation functions, counted and forwarded to glibc's own entry points. Only where that
// is safe: glibc, and no sanitizer (whose runtime intercepts these itself).
#if defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(memory_sanitizer)
#define BENCH_NO_C_COUNT 1
#endif
#endif
#if defined(__SANITIZE_ADDRESS__)
#define BENCH_NO_C_COUNT 1
#endif
#if defined(__GLIBC__) && !defined(BENCH_NO_C_COUNT)
#define BENCH_C_COUNT 1
extern "C" {
void* __libc_malloc(std::size_t);
void* __libc_calloc(std::size_t, std::size_t);
void* __libc_realloc(void*, std::size_t);
void* __libc_memalign(std::size_t, std::size_t);
void* malloc(std::size_t n) noexcept {
  g_c_alloc_calls.fetch_add(1, std::memory_order_relaxed);
  return __libc_malloc(n);
}
void* calloc(std::size_t k, std::size_t n) noexcept {
  g_c_alloc_calls.fetch_add(1, std::memory_order_relaxed);
  return __libc_calloc(k, n);
}
void* realloc(void* p, std::size_t n) noexcept {
  g_c_alloc_calls.fetch_add(1, std::memory_order_relaxed);
  return __libc_realloc(p, n);
}
void* aligned_alloc(std::size_t a, std::size_t n) noexcept {
  g_c_alloc_calls.fetch_add(1, std::memory_order_relaxed);
  return __libc_memalign(a, n);
}
int posix_memalign(void** out, std::size_t a, std::size_t n) noexcept {
  g_c_alloc_calls.fetch_add(1, std::memory_order_relaxed);
  if (a < sizeof(void*) || (a & (a - 1)) != 0) return 22;  // EINVAL
  void* p = __libc_memalign(a, n);
  if (!p) return 12;  // ENOMEM
  *out = p;
  return 0;
}
}
#endif

namespace {

using gr::Optimizer;
using gr::Shape;
using gr::Tape;
using gr::Var;

// ---- timing ------------------------------------------------------------------------------------
double now_s() {
  timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
}

struct SplitMix64 {
  uint64_t s;
  uint64_t next() {
    uint64_t z = (s += 0x9E3779B97F4A7C15ULL);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    return z ^ (z >> 31);
  }
  double uniform(double lo, double hi) { return lo + (hi - lo) * (static_cast<double>(next() >> 11) * 0x1.0p-53); }
};

volatile double g_sink = 0.0;  // keeps results observable

// ---- (a) tiny-tensor op chains -----------------------------------------------------------------
enum class Chain { Unary, Binary, Mixed, Broadcast };
const char* chain_name(Chain c) {
  switch (c) {
    case Chain::Unary:
      return "adds/muls";
    case Chain::Binary:
      return "add/mul";
    case Chain::Mixed:
      return "adds,muls,mul,add";
    case Chain::Broadcast:
      return "add/mul by [1]";
  }
  return "?";
}

constexpr int kChainOps = 100;

// kChainOps ops on top of the leaves p (param) and c (const), both of x's shape — except for
// Chain::Broadcast, where p1 and c1 are shape [1] and stretch over x (the broadcast path).
// Values stay bounded: muls by 0.5, mul by p ≈ 1, adds/add of ≈ 1.
Var record_chain(Tape& t, Var p, Var c, Var p1, Var c1, Chain kind) {
  Var x = p;
  for (int i = 0; i < kChainOps; ++i) {
    switch (kind) {
      case Chain::Unary:
        x = (i & 1) ? t.muls(x, 0.5) : t.adds(x, 1.0);
        break;
      case Chain::Binary:
        x = (i & 1) ? t.mul(x, p) : t.add(x, c);
        break;
      case Chain::Mixed:
        switch (i & 3) {
          case 0:
            x = t.adds(x, 1.0);
            break;
          case 1:
            x = t.muls(x, 0.5);
            break;
          case 2:
            x = t.mul(x, p);
            break;
          default:
            x = t.add(x, c);
            break;
        }
        break;
      case Chain::Broadcast:
        x = (i & 1) ? t.mul(x, p1) : t.add(x, c1);
        break;
    }
  }
  return x;
}

struct ChainResult {
  double fwd_ns, fwdbwd_ns;
};

ChainResult bench_chain(int64_t width, Chain kind, int reps, int64_t episodes) {
  Tape t;
  const std::vector<double> ones(static_cast<size_t>(width), 1.0);
  const Var p = t.param(Shape{width}, ones);
  const Var c = t.constant(Shape{width}, ones);
  const Var p1 = t.param(Shape{1}, std::vector<double>{1.0});
  const Var c1 = t.constant(Shape{1}, std::vector<double>{1.0});
  const int32_t mark = t.mark();
  auto episode = [&](bool bwd) {
    const Var y = record_chain(t, p, c, p1, c1, kind);
    if (bwd) t.backward(y);
    g_sink = g_sink + t.scalar(y);
    t.reset_to(mark);
  };
  for (int i = 0; i < 100; ++i) episode(true);  // warm the arena and the node vector
  ChainResult r{1e300, 1e300};
  for (int rep = 0; rep < reps; ++rep) {
    for (int pass = 0; pass < 2; ++pass) {
      const bool bwd = pass == 1;
      const double t0 = now_s();
      for (int64_t e = 0; e < episodes; ++e) episode(bwd);
      const double ns = (now_s() - t0) * 1e9 / static_cast<double>(episodes * kChainOps);
      double& best = bwd ? r.fwdbwd_ns : r.fwd_ns;
      best = std::min(best, ns);
    }
  }
  if (!t.ok()) std::fprintf(stderr, "tape poisoned: %s\n", t.error().c_str());
  return r;
}

// ---- (b) the autoencoder episode ---------------------------------------------------------------
constexpr int64_t kDim = 6, kBatch = 200, kSamples = 2000;
constexpr int64_t kWidths[] = {kDim, 64, 32, 64, kDim};
constexpr int kLayers = 4;

struct Ae {
  Tape tape;
  Optimizer opt = Optimizer::adam(2e-3);
  Var W[kLayers], b[kLayers];
  int32_t mark = 0;
  std::vector<double> data;
  int64_t next_batch = 0;
  double last_loss = 0.0;
  double t_fwd = 0.0, t_bwd = 0.0, t_step = 0.0, t_reset = 0.0;  // accumulated when timing phases

  Ae() {
    SplitMix64 rng{0x5EEDF00DULL};
    data.resize(static_cast<size_t>(kSamples * kDim));
    for (int64_t i = 0; i < kSamples; ++i) {
      const double u = rng.uniform(-1, 1), v = rng.uniform(-1, 1);
      const double c[kDim] = {u,
                              v,
                              std::sin(1.5 * u) * std::cos(v),
                              std::cos(1.5 * u + 0.5 * v) - 0.5,
                              u * v,
                              0.5 * std::sin(2.0 * v) + 0.3 * u * u - 0.1};
      for (int64_t j = 0; j < kDim; ++j) data[static_cast<size_t>(i * kDim + j)] = c[j] + rng.uniform(-0.017, 0.017);
    }
    for (int l = 0; l < kLayers; ++l) {
      const int64_t fi = kWidths[l], fo = kWidths[l + 1];
      const double a = std::sqrt(6.0 / static_cast<double>(fi + fo));
      std::vector<double> w(static_cast<size_t>(fi * fo));
      for (double& e : w) e = rng.uniform(-a, a);
      W[l] = tape.param(Shape{fi, fo}, w);
      b[l] = tape.param(Shape{fo}, std::vector<double>(static_cast<size_t>(fo), 0.0));
      opt.add(tape, W[l]);
      opt.add(tape, b[l]);
    }
    mark = tape.mark();
  }

  template <bool kPhases>
  void episode() {
    double t0 = kPhases ? now_s() : 0.0, t1 = 0.0;
    const int64_t first = next_batch * kBatch * kDim;
    next_batch = (next_batch + 1) % (kSamples / kBatch);
    const Var x = tape.constant(Shape{kBatch, kDim},
                                std::span<const double>(data.data() + first, static_cast<size_t>(kBatch * kDim)));
    Var h = x;
    for (int l = 0; l < kLayers; ++l) {
      h = tape.add(tape.matmul(h, W[l]), b[l]);
      if (l + 1 < kLayers) h = tape.tanh(h);
    }
    const Var loss = tape.mse(h, x);
    if (kPhases) t1 = now_s(), t_fwd += t1 - t0, t0 = t1;
    tape.backward(loss);
    last_loss = tape.scalar(loss);
    if (kPhases) t1 = now_s(), t_bwd += t1 - t0, t0 = t1;
    opt.step(tape);
    if (kPhases) t1 = now_s(), t_step += t1 - t0, t0 = t1;
    tape.reset_to(mark);
    if (kPhases) t1 = now_s(), t_reset += t1 - t0;
  }
};

}  // namespace

int main(int argc, char** argv) {
  const int reps = argc > 1 ? std::max(1, std::atoi(argv[1])) : 7;
  const bool quick = reps == 1;
  std::printf("bench_tape: thread CPU time, best of %d reps\n\n", reps);

  // (a)
  std::printf("(a) tape overhead per recorded op, %d-op chains, record + reset_to(mark)\n", kChainOps);
  std::printf("    %-20s %6s %14s %18s\n", "chain", "shape", "fwd ns/op", "fwd+bwd ns/op");
  const int64_t chain_episodes = quick ? 2000 : 20000;
  double worst_fwd = 0.0, worst_fwdbwd = 0.0;
  for (int64_t width : {1, 4}) {
    for (Chain kind : {Chain::Unary, Chain::Binary, Chain::Mixed, Chain::Broadcast}) {
      if (kind == Chain::Broadcast && width == 1) continue;  // [1] by [1] is not a broadcast
      const ChainResult r = bench_chain(width, kind, reps, chain_episodes);
      worst_fwd = std::max(worst_fwd, r.fwd_ns);
      worst_fwdbwd = std::max(worst_fwdbwd, r.fwdbwd_ns);
      std::printf("    %-20s %6s %14.1f %18.1f\n", chain_name(kind), width == 1 ? "[1]" : "[4]", r.fwd_ns, r.fwdbwd_ns);
    }
  }
  std::printf("    worst: fwd %.1f ns/op, fwd+bwd %.1f ns/op (target < 100 ns/op: %s)\n\n", worst_fwd, worst_fwdbwd,
              worst_fwdbwd < 100.0 ? "met" : "NOT met");

  // (b) + (c)
  Ae ae;
  for (int i = 0; i < 20; ++i) ae.episode<false>();  // warm-up: the arena reaches its size
  const int64_t ae_episodes = quick ? 20 : 200;
  double best_us = 1e300;
  for (int rep = 0; rep < reps; ++rep) {
    const double t0 = now_s();
    for (int64_t e = 0; e < ae_episodes; ++e) ae.episode<false>();
    best_us = std::min(best_us, (now_s() - t0) * 1e6 / static_cast<double>(ae_episodes));
  }
  // Phase split: its own pass (the clock reads cost ~0.1 µs each, noise next to the phases).
  double bf = 1e300, bb = 1e300, bs = 1e300, br = 1e300;
  for (int rep = 0; rep < reps; ++rep) {
    ae.t_fwd = ae.t_bwd = ae.t_step = ae.t_reset = 0.0;
    for (int64_t e = 0; e < ae_episodes; ++e) ae.episode<true>();
    const double k = 1e6 / static_cast<double>(ae_episodes);
    bf = std::min(bf, ae.t_fwd * k), bb = std::min(bb, ae.t_bwd * k);
    bs = std::min(bs, ae.t_step * k), br = std::min(br, ae.t_reset * k);
  }
  const int32_t nodes = ae.tape.size();  // after reset: the parameters only
  std::printf("(b) autoencoder episode: batch %lld, 6-64-32-64-6 tanh, mse, backward, Adam step, reset_to\n",
              static_cast<long long>(kBatch));
  std::printf("    %10.1f us/episode   %8.0f episodes/s   (loss now %.3g, %d leaves kept)\n", best_us, 1e6 / best_us,
              ae.last_loss, nodes);
  std::printf("    phases (best rep each): forward %.1f us, backward %.1f us, Adam step %.1f us, reset_to %.2f us\n\n",
              bf, bb, bs, br);

  // (c) allocations per steady-state episode (the AE and a tiny chain)
  const int64_t count_episodes = quick ? 50 : 500;
  const int64_t new0 = g_new_calls.load(), c0 = g_c_alloc_calls.load(), chunks0 = ae.tape.arena().heap_allocations();
  for (int64_t e = 0; e < count_episodes; ++e) ae.episode<false>();
  const int64_t dnew = g_new_calls.load() - new0, dc = g_c_alloc_calls.load() - c0,
                dchunks = ae.tape.arena().heap_allocations() - chunks0;

  Tape t;
  const Var p = t.param(Shape{4}, std::vector<double>(4, 1.0));
  const Var c = t.constant(Shape{4}, std::vector<double>(4, 1.0));
  const int32_t mark = t.mark();
  for (int i = 0; i < 10; ++i) t.backward(record_chain(t, p, c, p, c, Chain::Mixed)), t.reset_to(mark);
  const int64_t new1 = g_new_calls.load(), c1 = g_c_alloc_calls.load(), chunks1 = t.arena().heap_allocations();
  for (int64_t e = 0; e < count_episodes; ++e) t.backward(record_chain(t, p, c, p, c, Chain::Mixed)), t.reset_to(mark);
  const int64_t tnew = g_new_calls.load() - new1, tc = g_c_alloc_calls.load() - c1,
                tchunks = t.arena().heap_allocations() - chunks1;

  // The counters are live: a fresh tape's first episode does allocate (arena chunks, matmul scratch).
  int64_t cnew = 0, cc = 0, cchunks = 0;
  {
    Ae cold;
    const int64_t new2 = g_new_calls.load(), c2 = g_c_alloc_calls.load(),
                  chunks2 = cold.tape.arena().heap_allocations();
    cold.episode<false>();
    cnew = g_new_calls.load() - new2, cc = g_c_alloc_calls.load() - c2;
    cchunks = cold.tape.arena().heap_allocations() - chunks2;
  }

  const double n = static_cast<double>(count_episodes);
  std::printf("(c) heap allocations per steady-state episode (%lld episodes after warm-up)\n",
              static_cast<long long>(count_episodes));
  std::printf("    %-28s %14s %16s %14s\n", "episode", "operator new", "C malloc family", "arena chunks");
#ifdef BENCH_C_COUNT
  std::printf("    %-28s %14lld %16lld %14lld\n", "autoencoder, 1st (cold) ep.", static_cast<long long>(cnew),
              static_cast<long long>(cc), static_cast<long long>(cchunks));
  std::printf("    %-28s %14.3f %16.3f %14.3f\n", "autoencoder (fwd+bwd+Adam)", dnew / n, dc / n, dchunks / n);
  std::printf("    %-28s %14.3f %16.3f %14.3f\n", "100-op chain [4] (fwd+bwd)", tnew / n, tc / n, tchunks / n);
#else
  (void)dc, (void)tc, (void)cc;
  std::printf("    %-28s %14lld %16s %14lld\n", "autoencoder, 1st (cold) ep.", static_cast<long long>(cnew), "n/a",
              static_cast<long long>(cchunks));
  std::printf("    %-28s %14.3f %16s %14.3f\n", "autoencoder (fwd+bwd+Adam)", dnew / n, "n/a", dchunks / n);
  std::printf("    %-28s %14.3f %16s %14.3f\n", "100-op chain [4] (fwd+bwd)", tnew / n, "n/a", tchunks / n);
#endif
  const bool zero = dnew == 0 && dc == 0 && dchunks == 0 && tnew == 0 && tc == 0 && tchunks == 0;
  std::printf("    target 0 allocations per steady-state episode: %s\n", zero ? "met" : "NOT met");
  return 0;
}
