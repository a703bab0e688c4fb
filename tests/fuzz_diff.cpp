// fuzz_diff — the differential fuzzer (issue 10; models: ggml's test-backend-ops, Csmith).
//
//   fuzz_diff [--seeds N] [--start S] [--backend host|cuda] [--bundle K] [--jobs J] [--cache DIR]
//             [--out DIR] [--max-failures M] [--shrink-trials T] [--no-fd] [--spec FILE]
//
// Seeds S .. S+N-1 each give a random graph (tests/fuzz_gen.cpp; every 5th a scalar graph the
// emitter takes). Graphs run in bundles of K seeds — one spec whose loss is the sum of the seeds'
// losses — so one generated fused module serves K graphs (compiling modules is the cost; a bundle's
// sum seeds each part's loss gradient with exactly 1, as alone). Every bundle runs every path:
//   CPU tape == per-node f64 replay, CPU tape == fused f64 replay (check --replay's lockstep: every
//       node value and gradient, every loss, the parameters after 3 optimizer steps), each at
//       blockDim 128 and at blockDim 3 with a grid of at most 2 blocks;
//   per-node f32 replay == fused f32 replay (the same comparisons), both geometries;
//   emitted CUDA-C built on the host == CPU tape (emit-cuda --verify), scalar bundles;
// on the host backend's adversarial schedule (seeded per bundle and path) with 3 worker threads.
// Even bundles train with Adam, odd ones with SGD; every other pair clips. Every seed also runs the
// outside oracle, central finite differences against the tape (tolerances from support/op_cases.h).
// Bitwise comparisons are memcmp. A failure is shrunk (tests/fuzz_shrink.cpp) and written as
// OUT/fuzz-fail-<seed>.json with the command line that reproduces it; `--spec FILE` runs every path
// on such a file. Exit 0 all agree, 1 a failure, 2 bad usage, 77 --backend cuda without a GPU.
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <regex>
#include <sstream>
#include <thread>

#include "device/backend.h"
#include "spec/dataset.h"
#include "io/errors.h"
#include "spec/program.h"
#include "spec/spec.h"
#include "support/fuzz_graph.h"

using namespace gr;
using namespace gr::fuzz;

namespace {

struct Options {
  uint64_t seeds = 300, start = 0;
  size_t bundle = 0;  // 0: the tensor seeds split evenly over the jobs (one fused module per job)
  unsigned jobs = 2;
  int max_failures = 3, shrink_trials = 60;
  bool fd = true;
  std::string out = ".", spec;
  RunOptions run;
};

std::mutex out_mu;
void say(const std::string& s) {
  std::lock_guard<std::mutex> lock(out_mu);
  std::fputs(s.c_str(), stdout);
  std::fflush(stdout);
}

double now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

OptimizerChoice optimizer_for(size_t bundle_index) {
  OptimizerChoice o;
  o.kind = bundle_index % 2 == 0 ? "adam" : "sgd";
  o.lr = o.kind == "adam" ? 0.01 : 0.05;
  o.clip = (bundle_index / 2) % 2 ? 0.5 : 0.0;
  return o;
}

// The paths of a bundle. blockDim 128 runs 128 fibers per block on the host (a context switch each, two
// syscalls), so it goes where barriers are: the fused kernels, and every path of the (small) scalar
// bundles; the per-node and f32 comparisons of tensor bundles run at blockDim 3 with a grid of ≤ 2.
std::vector<Path> paths_for(uint64_t salt, bool scalar) {
  std::vector<Path> ps;
  auto add = [&](Path::Kind k, bool fuse, unsigned block, unsigned grid) {
    Path p;
    p.kind = k;
    p.fuse = fuse;
    p.block = block;
    p.max_grid = grid;
    p.schedule_seed = salt * 16 + ps.size();
    ps.push_back(p);
  };
  add(Path::Replay, false, 3, 2);
  if (scalar) add(Path::Replay, false, 128, 65535);
  add(Path::Replay, true, 3, 2);
  add(Path::Replay, true, 128, 65535);
  add(Path::F32, true, 3, 2);
  if (scalar) add(Path::F32, true, 128, 65535);
  if (scalar) add(Path::Emit, false, 1, 1);
  return ps;
}

std::string seeds_in(const std::string& msg) {
  std::smatch m;
  return std::regex_search(msg, m, std::regex("\"s([0-9]+)_")) ? m[1].str() : "";
}

std::string command_for(const Path& p, const std::string& file, const Graph& g) {
  char rt[32];
  std::snprintf(rt, sizeof rt, "%g", fd_rtol(g));
  switch (p.kind) {
    case Path::Replay:
      return std::string("gradrun check ") + file + " --replay --device host" + (p.fuse ? " --fuse" : "") + " --episodes 3";
    case Path::F32: return "fuzz_diff --spec " + file + "   (no CLI command compares f32 fused with f32 per-node)";
    case Path::Emit: return "gradrun emit-cuda " + file + " --verify";
    case Path::Fd: return "gradrun check " + file + " --fd --eps 1e-06 --rtol " + rt + " --atol 1e-06 --max-elems 8";
  }
  return "";
}

// Shrinks a failure of path p on graph g, writes it, prints what and how to rerun.
std::set<std::string> report(const Options& o, const Path& p, const Graph& g, const OptimizerChoice& opt, const std::string& msg,
                             const std::string& label) {
  const bool was_error = msg.rfind("error: ", 0) == 0;
  // The plain CLI configuration (`gradrun check --replay`: default blockDim, in-order schedule, one
  // thread). When it fails too, shrink with it, so the printed command reproduces the written file.
  Path plain = p;
  plain.block = 0;
  plain.max_grid = 65535;
  plain.adversarial = false;
  RunOptions r1 = o.run;
  r1.threads = 1;
  auto fails_with = [&](const Path& q, const RunOptions& r, const Graph& c) {
    try {
      return !was_error && !run_path(q, c, opt, r).empty();
    } catch (const std::exception&) {
      return was_error;
    }
  };
  const bool use_plain = p.kind == Path::Replay && fails_with(plain, r1, g);
  auto fails = [&](const Graph& c) { return use_plain ? fails_with(plain, r1, c) : fails_with(p, o.run, c); };
  const double t0 = now();
  int trials = 0;
  Graph small = o.shrink_trials > 0 ? shrink(g, fails, o.shrink_trials, &trials) : g;
  const std::string seed = seeds_in("\"" + (small.losses.empty() ? std::string() : small.losses[0]));
  const std::string file = (std::filesystem::path(o.out) / ("fuzz-fail-" + (seed.empty() ? label : seed) + ".json")).string();
  std::ofstream(file) << spec_json(small, "fuzz-fail-" + (seed.empty() ? label : seed), opt, true).dump(1) << "\n";
  std::string again;
  try {
    again = run_path(p, small, opt, o.run);
  } catch (const std::exception& e) {
    again = std::string("error: ") + e.what();
  }
  std::string cli;
  if (p.kind == Path::Replay)
    cli = fails_with(plain, r1, small) ? "yes" : "no: it needs the fuzzer's geometry/schedule; run fuzz_diff --spec FILE";
  std::ostringstream s;
  s << "FAIL [" << label << "] " << p.describe() << ":\n  " << msg << "\n  shrunk in " << trials << " trials ("
    << static_cast<int>(now() - t0) << " s): " << g.nodes.size() << " -> " << small.nodes.size() << " nodes; the shrunk spec: "
    << again << "\n  wrote " << file << "\n  rerun: " << command_for(p, file, small) << "\n";
  if (!cli.empty()) s << "  that command reproduces it: " << cli << "\n";
  say(s.str());
  std::set<std::string> seeds;  // the seeds the shrunk graph came from
  for (const Leaf& l : small.leaves) seeds.insert(seeds_in("\"" + l.name));
  for (const fuzz::Node& n : small.nodes) seeds.insert(seeds_in("\"" + n.id));
  seeds.erase("");
  return seeds;
}

// A spec file (a written failure, or any spec with explicit parameter values) back into a Graph.
Graph graph_from_file(const std::string& path, OptimizerChoice* opt) {
  std::ifstream in(path);
  if (!in) throw IoError(path, "cannot read");
  std::stringstream ss;
  ss << in.rdbuf();
  const json j = json::parse(ss.str());
  const Spec spec = parse_spec(ss.str(), path);
  const Program prog = resolve_program(spec, DataTable{});
  Graph g;
  if (j.contains("params"))
    for (auto it = j["params"].begin(); it != j["params"].end(); ++it) {
      if (!it.value()["init"].is_object() || !it.value()["init"].contains("values"))
        throw InputError(path, "/params/" + it.key(), "fuzz_diff --spec needs explicit init values");
      Leaf l{it.key(), true, it.value()["shape"].get<std::vector<int64_t>>(), {}};
      for (const auto& v : it.value()["init"]["values"].flatten()) l.values.push_back(v.get<double>());
      g.leaves.push_back(l);
    }
  if (j.contains("consts"))
    for (auto it = j["consts"].begin(); it != j["consts"].end(); ++it) {
      Leaf l{it.key(), false, it.value()["shape"].get<std::vector<int64_t>>(), {}};
      for (const auto& v : it.value()["values"].flatten()) l.values.push_back(v.get<double>());
      g.leaves.push_back(l);
    }
  for (size_t i = 0; i < spec.graph.size(); ++i) {
    const json& n = j["graph"][i];
    fuzz::Node node{n["id"], n["op"], n["inputs"].get<std::vector<std::string>>(), json::object(), {}};
    const auto d = prog.nodes[i].shape.dims();
    node.shape.assign(d.begin(), d.end());
    for (auto it = n.begin(); it != n.end(); ++it)
      if (it.key() != "id" && it.key() != "op" && it.key() != "inputs") node.attrs[it.key()] = it.value();
    g.nodes.push_back(node);
  }
  g.losses.push_back(spec.loss);
  for (const auto& [k, v] : spec.optimizer.l2) g.l2[k] = v;
  opt->kind = spec.optimizer.kind;
  opt->lr = spec.optimizer.lr;
  opt->clip = spec.optimizer.clip;
  return g;
}

bool all_scalar(const Graph& g) {
  for (const Leaf& l : g.leaves)
    if (l.values.size() != 1) return false;
  for (const fuzz::Node& n : g.nodes) {
    int64_t k = 1;
    for (int64_t d : n.shape) k *= d;
    if (k != 1) return false;
  }
  return true;
}

int run_spec_file(const Options& o) {
  OptimizerChoice opt;
  const Graph g = graph_from_file(o.spec, &opt);
  std::vector<Path> ps = paths_for(1, all_scalar(g));
  ps.push_back(Path{Path::Fd});
  int bad = 0;
  for (const Path& p : ps) {
    std::string msg;
    try {
      msg = run_path(p, g, opt, o.run);
    } catch (const std::exception& e) {
      msg = std::string("error: ") + e.what();
    }
    std::printf("%-4s %s%s%s\n", msg.empty() ? "ok" : "FAIL", p.describe().c_str(), msg.empty() ? "" : ": ", msg.c_str());
    bad += !msg.empty();
  }
  return bad ? 1 : 0;
}

int run_seeds(const Options& o) {
  const double t0 = now();
  const unsigned long compiles0 = device::host_compiler_runs();
  std::vector<Case> cases;
  for (uint64_t s = o.start; s < o.start + o.seeds; ++s) {
    cases.push_back(generate(s, s % 10 == 9));
    if (has_image_case(s)) cases.push_back(generate_image(s));  // after the seed's own: its graph is unchanged
  }
  // A batch case (batch_norm, ...) beside every tenth seed, from its own stream (the seeds keep their graphs).
  for (uint64_t s = o.start; s < o.start + o.seeds; ++s)
    if (s % 10 == 4) cases.push_back(generate_batch(s));
  // A token case (embedding, ...) beside every tenth seed too, its own stream likewise.
  for (uint64_t s = o.start; s < o.start + o.seeds; ++s)
    if (s % 10 == 7) cases.push_back(generate_tokens(s));
  struct Bundle {
    std::vector<const Case*> members;
    bool scalar;
  };
  std::vector<Bundle> bundles;
  size_t tensors = 0;
  for (const Case& c : cases) tensors += !c.scalar;
  const size_t per = o.bundle ? o.bundle : std::max<size_t>(1, (tensors + o.jobs - 1) / o.jobs);
  for (int sc = 0; sc < 2; ++sc) {
    std::vector<const Case*> cur;
    for (const Case& c : cases)
      if (c.scalar == (sc == 1)) {
        cur.push_back(&c);
        if (cur.size() == per) bundles.push_back({cur, sc == 1}), cur.clear();
      }
    if (!cur.empty()) bundles.push_back({cur, sc == 1});
  }
  std::atomic<size_t> next{0};
  std::atomic<int> failures{0}, path_runs{0}, fd_runs{0};
  auto worker = [&] {
    for (size_t b; (b = next++) < bundles.size();) {
      if (failures >= o.max_failures) return;
      const OptimizerChoice opt = optimizer_for(b);
      std::vector<const Case*> members = bundles[b].members;
      const double tb = now();
      if (o.fd)
        for (const Case* c : members) {
          std::string msg;
          try {
            msg = run_path(Path{Path::Fd}, c->graph, opt, o.run);
          } catch (const std::exception& e) {
            msg = std::string("error: ") + e.what();
          }
          ++fd_runs;
          if (!msg.empty() && failures++ < o.max_failures) report(o, Path{Path::Fd}, c->graph, opt, msg, std::to_string(c->seed));
        }
      for (int round = 0; !members.empty() && failures < o.max_failures; ++round) {
        const Graph g = bundle(members);
        // f32 on every third tensor seed: its fused module costs as much to compile as the f64 one
        std::vector<const Case*> third;
        for (const Case* c : members)
          if (bundles[b].scalar || c->seed % 3 == 0) third.push_back(c);
        const Graph g32 = bundle(third);
        const std::vector<Path> ps = paths_for(b * 64 + static_cast<uint64_t>(round) + 1, bundles[b].scalar);
        std::string msg, times;
        const Path* failed = nullptr;
        for (const Path& p : ps) {
          const double tp = now();
          if (p.kind == Path::F32 && third.empty()) continue;
          try {
            msg = run_path(p, p.kind == Path::F32 ? g32 : g, opt, o.run);
          } catch (const std::exception& e) {
            msg = std::string("error: ") + e.what();
          }
          ++path_runs;
          char tb2[32];
          std::snprintf(tb2, sizeof tb2, "%s%.1f", times.empty() ? "" : " ", now() - tp);
          times += tb2;
          if (!msg.empty()) {
            failed = &p;
            break;
          }
        }
        if (!failed) {
          char buf[512];
          std::snprintf(buf, sizeof buf, "bundle %zu: seeds %llu..%llu (%zu %s graphs, %zu nodes, %s%s): %zu paths agree (%.1f s: %s)\n", b,
                        static_cast<unsigned long long>(members.front()->seed), static_cast<unsigned long long>(members.back()->seed),
                        members.size(), bundles[b].scalar ? "scalar" : "tensor", g.nodes.size(), opt.kind.c_str(),
                        opt.clip > 0 ? " + clip" : "", ps.size(), now() - tb, times.c_str());
          say(buf);
          break;
        }
        ++failures;
        Graph target = failed->kind == Path::F32 ? g32 : g;
        std::string label = "bundle" + std::to_string(b);
        const std::string seed = seeds_in(msg);
        for (const Case* c : members)
          if (!seed.empty() && std::to_string(c->seed) == seed) {
            try {
              if (!run_path(*failed, c->graph, opt, o.run).empty()) target = c->graph, label = seed;
            } catch (const std::exception&) {
              if (msg.rfind("error: ", 0) == 0) target = c->graph, label = seed;
            }
          }
        std::set<std::string> culprits = report(o, *failed, target, opt, msg, label);
        if (!seed.empty()) culprits.insert(seed);
        std::vector<const Case*> rest;  // go on without the seeds the failure was shrunk from
        for (const Case* c : members)
          if (!culprits.count(std::to_string(c->seed))) rest.push_back(c);
        if (rest.size() == members.size()) break;
        members = rest;
      }
    }
  };
  std::vector<std::thread> pool;
  for (unsigned j = 0; j < std::min<size_t>(o.jobs, bundles.size()); ++j) pool.emplace_back(worker);
  for (std::thread& t : pool) t.join();
  // coverage: every op of the table, every batch size
  std::set<std::string> ops;
  std::set<int64_t> batches;
  size_t scalar = 0;
  for (const Case& c : cases) {
    ops.insert(c.ops.begin(), c.ops.end());
    scalar += c.scalar;
    if (!c.scalar && !c.image) batches.insert(c.graph.leaves.front().shape[0]);
  }
  std::string missing;
  std::string covered;
  std::vector<std::string> required = test::spec_op_names();
  for (const char* variant : {"softmax(causal)", "matmul(batched)"}) required.emplace_back(variant);  // attribute / shape variants
  for (const std::string& name : required)
    (ops.count(name) ? covered : missing) += " " + name;
  const double dt = now() - t0;
  std::printf("fuzz_diff: seeds %llu..%llu (%zu tensor, %zu scalar; batch sizes %zu of 8) in %zu bundles: %d path runs, %d finite-"
              "difference checks, %lu module compiles, %.1f s (%.1f seeds/s), %d failure%s\n",
              static_cast<unsigned long long>(o.start), static_cast<unsigned long long>(o.start + o.seeds - 1), cases.size() - scalar,
              scalar, batches.size(), bundles.size(), path_runs.load(), fd_runs.load(), device::host_compiler_runs() - compiles0, dt,
              static_cast<double>(o.seeds) / dt, failures.load(), failures == 1 ? "" : "s");
  std::printf("fuzz_diff: ops generated:%s\n", covered.c_str());
  if (o.seeds >= 200 && (!missing.empty() || batches.size() < 8)) {
    std::printf("FAIL: coverage: ops never generated:%s; batch sizes seen: %zu of 8\n", missing.c_str(), batches.size());
    return 1;
  }
  return failures ? 1 : 0;
}

int usage(const char* why) {
  std::fprintf(stderr, "fuzz_diff: %s\nusage: fuzz_diff [--seeds N] [--start S] [--backend host|cuda] [--bundle K] [--jobs J] "
                       "[--cache DIR] [--out DIR] [--max-failures M] [--shrink-trials T] [--no-fd] [--spec FILE]\n", why);
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  // Fresh gradient slots start as NaN here, not as whatever the arena held: a backward rule that
  // reads one, or leaves an element of one unwritten, then differs from the other paths.
  gr::Tape::poison_fresh_gradients(true);
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto val = [&]() -> std::string { return i + 1 < argc ? argv[++i] : ""; };
    if (a == "--seeds") o.seeds = std::stoull(val());
    else if (a == "--start") o.start = std::stoull(val());
    else if (a == "--backend") o.run.backend = val();
    else if (a == "--bundle") o.bundle = std::max<size_t>(1, std::stoull(val()));
    else if (a == "--jobs") o.jobs = std::max(1u, static_cast<unsigned>(std::stoul(val())));
    else if (a == "--cache") o.run.cache_dir = val();
    else if (a == "--out") o.out = val();
    else if (a == "--max-failures") o.max_failures = std::stoi(val());
    else if (a == "--shrink-trials") o.shrink_trials = std::stoi(val());
    else if (a == "--no-fd") o.fd = false;
    else if (a == "--threads") o.run.threads = static_cast<unsigned>(std::stoul(val()));
    else if (a == "--spec") o.spec = val();
    else return usage(("unknown argument " + a).c_str());
  }
  if (o.run.backend != "host" && o.run.backend != "cuda") return usage("--backend is host or cuda");
  for (const OpInfo& info : kOps)
    if (!op_meta(info.name)) return std::printf("FAIL: op \"%s\" has no metadata in support/op_cases.h\n",
                                                std::string(info.name).c_str()), 1;
  if (o.run.backend == "cuda") {
    try {
      device::make_cuda_backend();
    } catch (const std::exception& e) {
      std::printf("SKIPPED: --backend cuda: %s\n", e.what());
      return 77;
    }
  }
  std::string temp_cache;
  // Without --cache: $GR_TEST_CACHE (scripts/gpu-check's one warm cache for every step), else a clean
  // cache, as on CI.
  if (const char* shared = std::getenv("GR_TEST_CACHE"); o.run.cache_dir.empty() && shared && *shared)
    o.run.cache_dir = shared;
  if (o.run.cache_dir.empty()) {
    std::string t = (std::filesystem::temp_directory_path() / "gr_fuzz_cache_XXXXXX").string();
    if (!mkdtemp(t.data())) return usage("cannot create a temp dir");
    temp_cache = o.run.cache_dir = t;
  }
  std::filesystem::create_directories(o.out);
  int rc = 0;
  if (!o.spec.empty()) {
    try {
      rc = run_spec_file(o);
    } catch (const std::exception& e) {
      std::fprintf(stderr, "fuzz_diff: %s\n", e.what());
      rc = 2;
    }
  } else {
    rc = run_seeds(o);
  }
  if (!temp_cache.empty()) std::filesystem::remove_all(temp_cache);
  return rc;
}
