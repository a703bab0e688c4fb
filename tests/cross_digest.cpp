// cross_digest.cpp — bytes to compare across machines (scripts/cross-check): the same program built
// for two architectures (or two ISA levels) must print the same lines, compared with `cmp`.
//   cross_digest math                  SHA-256 of gr_exp/gr_log/gr_sin/gr_cos (kernels/gr_math.h) over
//                                      2^20 fixed arguments + every special value, f64 and f32
//   cross_digest tape [--seeds N] [--start S]
//                                      per seed of the differential fuzzer's generator (tests/fuzz_gen.cpp):
//                                      SHA-256 of every CPU-tape node value and gradient over 3
//                                      optimizer steps (fuzz_diff's optimizer for that bundle index)
//                                      and the parameters after them, f64 and f32
//   cross_digest tape --start S --seeds 1 --nodes
//                                      the same, one line per node and step (its op, value and gradient
//                                      digests): where two machines' seed lines differ, the first
//                                      differing line of this names the node
// Nothing here compares: each line is a digest of raw IEEE bytes, so equal lines mean equal bits.
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "gr_math.h"
#include "io/errors.h"
#include "spec/dataset.h"
#include "spec/spec.h"
#include "support/fuzz_graph.h"
#include "support/rng.h"
#include "tensor/same_bits.h"
#include "tensor/sha256.h"
#include "train/model.h"

namespace {

using namespace gr;

double from_bits(uint64_t b) {
  double x;
  std::memcpy(&x, &b, sizeof x);
  return x;
}

// The arguments: special values, then random bit patterns (every exponent, NaN payloads included)
// and random values in each function's busy range.
std::vector<double> math_arguments() {
  const double inf = std::numeric_limits<double>::infinity();
  std::vector<double> xs = {0.0, -0.0, 1.0, -1.0, inf, -inf, std::numeric_limits<double>::quiet_NaN(),
                            from_bits(0x7ff4000000000001ULL), from_bits(0xfff8000000000000ULL),
                            std::numeric_limits<double>::denorm_min(), std::numeric_limits<double>::min(),
                            std::numeric_limits<double>::max(), 709.782712893384, -745.1332191019411, 1e-300,
                            3.141592653589793, 1.5707963267948966, 1e22, -1e22};
  test::Rng r(0x5eed);  // SplitMix64: the same arguments on every platform
  for (int i = 0; i < (1 << 19); ++i) xs.push_back(from_bits(r.next()));
  for (int i = 0; i < (1 << 19); ++i) {
    const double u = static_cast<double>(r.next() >> 11) * 0x1p-53;  // [0, 1)
    xs.push_back((u - 0.5) * (i % 4 == 0 ? 1500.0 : i % 4 == 1 ? 60.0 : i % 4 == 2 ? 1e6 : 8.0));
  }
  return xs;
}

int math_digests() {
  const std::vector<double> xs = math_arguments();
  struct Fn {
    const char* name;
    double (*f64)(double);
    float (*f32)(float);
  };
  const Fn fns[] = {{"exp", [](double x) { return gr_exp(x); }, [](float x) { return gr_exp(x); }},
                    {"log", [](double x) { return gr_log(x); }, [](float x) { return gr_log(x); }},
                    {"sin", [](double x) { return gr_sin(x); }, [](float x) { return gr_sin(x); }},
                    {"cos", [](double x) { return gr_cos(x); }, [](float x) { return gr_cos(x); }}};
  for (const Fn& fn : fns) {
    Sha256 h64, h32;
    for (double x : xs) {
      const double y = fn.f64(x);
      h64.update(&y, sizeof y);
      const float yf = fn.f32(static_cast<float>(x));
      h32.update(&yf, sizeof yf);
    }
    std::printf("math %s f64 %zu args %s\n", fn.name, xs.size(), h64.hex().c_str());
    std::printf("math %s f32 %zu args %s\n", fn.name, xs.size(), h32.hex().c_str());
  }
  return 0;
}

// fuzz_diff's optimizer for a bundle index (tests/fuzz_diff.cpp optimizer_for), here per seed.
fuzz::OptimizerChoice optimizer_for(uint64_t seed) {
  fuzz::OptimizerChoice o;
  o.kind = seed % 2 == 0 ? "adam" : "sgd";
  o.lr = o.kind == "adam" ? 0.01 : 0.05;
  o.clip = (seed / 2) % 2 ? 0.5 : 0.0;
  return o;
}

int64_t g_nan = 0, g_inf = 0;  // special values seen by hash_view: the fuzzer's specials at work

void hash_view(Sha256& h, ConstTensorView v) {
  const std::span<const double> xs = v.values();
  hash_doubles(h, xs.data(), xs.size());  // NaN as the canonical one (tensor/same_bits.h)
  for (double x : xs) g_nan += x != x, g_inf += std::isinf(x);
}

// Three steps of the CPU tape in `real`: every node's value and gradient after each backward, then
// the parameters after the last update.
bool g_nodes = false;  // --nodes

std::string view_hex(ConstTensorView v) {
  Sha256 h;
  hash_view(h, v);
  return h.hex().substr(0, 16);
}

std::string tape_digest(const Spec& spec, DType real) {
  Model model(spec, load_datasets(spec), real);
  Optimizer opt = model.make_optimizer();
  std::vector<int64_t> rows(static_cast<size_t>(model.program().batch));
  for (size_t i = 0; i < rows.size(); ++i) rows[i] = static_cast<int64_t>(i);
  Sha256 h;
  for (int step = 0; step <= 3; ++step) {
    const std::vector<Var>& nodes = model.record(model.data().train, rows, model.dropout_key(1 + step));
    if (step == 3) {
      for (const Var& v : nodes)
        if (model.tape().node(v).val != nullptr) hash_view(h, model.tape().value(v));
      break;
    }
    if (!model.tape().backward(nodes[static_cast<size_t>(model.program().loss)]))
      return "backward failed: " + model.tape().error();
    for (size_t i = 0; i < nodes.size(); ++i) {
      const Var v = nodes[i];
      if (model.tape().node(v).val != nullptr) hash_view(h, model.tape().value(v));
      hash_view(h, model.tape().grad(v));
      if (g_nodes)
        std::printf("  %s step %d node %zu %s %s value %s grad %s\n", real == DType::F64 ? "f64" : "f32", step, i,
                    model.program().nodes[i].spec->id.c_str(), std::string(op_name(model.tape().node(v).op)).c_str(),
                    model.tape().node(v).val ? view_hex(model.tape().value(v)).c_str() : "-",
                    view_hex(model.tape().grad(v)).c_str());
    }
    opt.step(model.tape());
    model.reset();
  }
  return h.hex();
}

int tape_digests(uint64_t start, uint64_t seeds) {
  int64_t specials = 0;
  for (uint64_t s = start; s < start + seeds; ++s) {
    const fuzz::Case c = fuzz::generate(s, s % 10 == 9);
    const Spec spec = parse_spec(fuzz::spec_json(c.graph, "fuzz", optimizer_for(s), true).dump(1), "fuzz.json");
    const std::string f64 = tape_digest(spec, DType::F64);  // in this order: --nodes prints as it goes
    const std::string f32 = tape_digest(spec, DType::F32);
    std::printf("tape seed %llu f64 %s f32 %s nan %lld inf %lld\n", static_cast<unsigned long long>(s), f64.c_str(),
                f32.c_str(), static_cast<long long>(g_nan), static_cast<long long>(g_inf));
    specials += g_nan + g_inf > 0;
    g_nan = g_inf = 0;
  }
  std::printf("tape: %lld of %llu seeds have NaN or infinite values\n", static_cast<long long>(specials),
              static_cast<unsigned long long>(seeds));
  return 0;
}

int usage(const char* why) {
  std::fprintf(stderr, "cross_digest: %s\nusage: cross_digest math | cross_digest tape [--seeds N] [--start S]\n", why);
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) return usage("name what to digest");
  const std::string what = argv[1];
  try {
    if (what == "math") return math_digests();
    if (what != "tape") return usage(("unknown mode " + what).c_str());
    uint64_t start = 1, seeds = 100;
    for (int i = 2; i < argc; ++i) {
      const std::string a = argv[i];
      if (a == "--nodes") {
        g_nodes = true;
        continue;
      }
      if (i + 1 >= argc) return usage((a + " needs a value").c_str());
      if (a == "--seeds") seeds = std::stoull(argv[++i]);
      else if (a == "--start") start = std::stoull(argv[++i]);
      else return usage(("unknown option " + a).c_str());
    }
    return tape_digests(start, seeds);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "cross_digest: %s\n", e.what());
    return 1;
  }
}
