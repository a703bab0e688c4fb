// gradrun regress SUITE.json [--jobs N] [--update] [--junit FILE] [--json FILE] — a CI regression
// suite: specs × engines, each run against its golden run folder (docs/cli.md, regress).
//
// SUITE.json: {"gradrun_suite": 1, "goldens": "golden", "engines": ["cpu", "host", "fused"],
//              "cases": [{"spec": "../specs/iris.json", "name": "iris", "args": ["--epochs", "5"],
//                         "engines": [...]}]}
// paths relative to the suite's folder; engines: cpu | host | fused | cuda | cuda-fused, each with
// an optional "-f32" (--dtype f32). The golden of a case is GOLDENS/NAME (f64) or GOLDENS/NAME-f32:
// a run folder's loss.csv, metrics.csv, weights, receipt.json, run.json and spec.json. Every
// engine of one dtype must land on the same golden: that is the bit-exact promise.
#include <chrono>
#include <cstdlib>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <nlohmann/json.hpp>

#include "child_jobs.h"
#include "cli.h"
#include "io/atomic_file.h"
#include "spec/json_reader.h"
#include "train/junit.h"
#include "train/run_diff.h"

namespace gr::cli {

namespace {

namespace fs = std::filesystem;
using Json = nlohmann::ordered_json;

struct RegressFlags {
  std::string suite, junit, json, work;
  int jobs = 1;
  bool update = false;
};

struct Engine {
  std::string name;
  std::vector<std::string> flags;
  bool f32 = false;
};

struct Case {
  std::string name, spec;
  std::vector<std::string> args;
  std::vector<Engine> engines;
};

struct Job {
  const Case* c = nullptr;
  Engine e;
  std::string out, log, golden;
  std::vector<std::string> argv;
  int code = -1;
  double seconds = 0.0;
  std::string verdict, detail;
};

Engine parse_engine(const JsonAt& at) {
  std::string w = at.str();
  Engine e{w, {}, false};
  if (w.size() > 4 && w.compare(w.size() - 4, 4, "-f32") == 0) e.f32 = true, w.resize(w.size() - 4);
  if (w == "cpu") e.flags = {"--device", "cpu"};
  else if (w == "host") e.flags = {"--device", "host"};
  else if (w == "fused") e.flags = {"--device", "host", "--fuse"};
  else if (w == "cuda") e.flags = {"--device", "cuda"};
  else if (w == "cuda-fused") e.flags = {"--device", "cuda", "--fuse"};
  else at.fail("unknown engine \"" + at.str() + "\" (known: cpu, host, fused, cuda, cuda-fused, each with an optional -f32)");
  if (e.f32) e.flags.insert(e.flags.end(), {"--dtype", "f32"});
  return e;
}

std::vector<Case> read_suite(const std::string& path, std::string& goldens) {
  Json doc;
  try {
    doc = Json::parse(read_file(path));
  } catch (const Json::exception& e) {
    throw InputError(path, "", std::string("malformed JSON: ") + e.what());
  }
  const JsonAt root(doc, "", path);
  if (!root.is_object()) root.fail("a suite is a JSON object");
  root.only_keys({"gradrun_suite", "goldens", "engines", "cases"});
  if (root.at("gradrun_suite").integer() != 1) root.at("gradrun_suite").fail("unsupported suite version (this gradrun reads 1)");
  const std::string dir = fs::path(path).parent_path().string();
  auto resolve = [&](const std::string& p) { return (fs::path(dir.empty() ? "." : dir) / p).lexically_normal().string(); };
  goldens = resolve(root.has("goldens") ? root.at("goldens").str() : "golden");
  std::vector<Engine> defaults{parse_engine(JsonAt(Json("cpu"), "", path))};
  if (root.has("engines")) {
    defaults.clear();
    for (size_t i = 0; i < root.at("engines").json().size(); ++i) defaults.push_back(parse_engine(root.at("engines").at(i)));
  }
  const JsonAt cases = root.at("cases");
  if (!cases.json().is_array() || cases.json().empty()) cases.fail("expected a non-empty array of cases");
  std::vector<Case> out;
  for (size_t i = 0; i < cases.json().size(); ++i) {
    const JsonAt c = cases.at(i);
    c.only_keys({"spec", "name", "args", "engines"});
    Case k;
    k.spec = resolve(c.at("spec").str());
    k.name = c.has("name") ? c.at("name").str() : fs::path(k.spec).stem().string();
    for (const Case& o : out)
      if (o.name == k.name) c.at("name").fail("a second case named \"" + k.name + "\" (names pick the golden folder)");
    if (c.has("args"))
      for (size_t a = 0; a < c.at("args").json().size(); ++a) k.args.push_back(c.at("args").at(a).str());
    if (c.has("engines"))
      for (size_t a = 0; a < c.at("engines").json().size(); ++a) k.engines.push_back(parse_engine(c.at("engines").at(a)));
    else
      k.engines = defaults;
    out.push_back(std::move(k));
  }
  return out;
}

// Runs the jobs, at most `n` at a time (child_jobs.h); each job's exit code and wall time.
void run_jobs(std::vector<Job>& jobs, int n) {
  std::vector<ChildJob> children;
  for (const Job& j : jobs) children.push_back({j.argv, j.log});
  run_children(children, n);
  for (size_t i = 0; i < jobs.size(); ++i) jobs[i].code = children[i].code, jobs[i].seconds = children[i].seconds;
}

void promote(const std::string& run, const std::string& golden) {
  fs::create_directories(golden);
  for (const char* f : {"loss.csv", "metrics.csv", "receipt.json", "run.json", "spec.json", "init.safetensors", "weights.safetensors",
                        "weights.best.safetensors"}) {
    std::error_code ec;
    if (fs::exists(fs::path(run) / f, ec)) write_file_atomic((fs::path(golden) / f).string(), read_file((fs::path(run) / f).string()));
    else fs::remove(fs::path(golden) / f, ec);
  }
}

void run_regress(const RegressFlags& f) {
  std::string goldens;
  const std::vector<Case> cases = read_suite(f.suite, goldens);
  std::string work = f.work;
  if (work.empty()) {
    std::string tmpl = (fs::temp_directory_path() / "gradrun-regress-XXXXXX").string();
    if (!mkdtemp(tmpl.data())) throw IoError(tmpl, "cannot create a work folder");
    work = tmpl;
  }
  const std::string exe = gradrun_executable();
  std::vector<Job> jobs;
  for (const Case& c : cases)
    for (const Engine& e : c.engines) {
      Job j;
      j.c = &c;
      j.e = e;
      j.out = work + "/" + c.name + "/" + e.name;
      j.log = work + "/" + c.name + "-" + e.name + ".log";
      j.golden = goldens + "/" + c.name + (e.f32 ? "-f32" : "");
      fs::create_directories(fs::path(j.out).parent_path());
      j.argv = {exe, "train", c.spec, "--out", j.out, "--force", "--quiet", "--threads", "1"};
      j.argv.insert(j.argv.end(), e.flags.begin(), e.flags.end());
      j.argv.insert(j.argv.end(), c.args.begin(), c.args.end());
      std::error_code ec;
      if (!f.update && fs::exists(j.golden + "/receipt.json", ec)) j.argv.insert(j.argv.end(), {"--expect", j.golden});
      jobs.push_back(std::move(j));
    }
  std::printf("regress: %zu runs of %zu cases, %d at a time, in %s\n", jobs.size(), cases.size(), f.jobs, work.c_str());
  std::fflush(stdout);
  run_jobs(jobs, f.jobs);
  std::error_code ec;
  for (Job& j : jobs) {
    if (j.code != 0 && j.code != 1) {
      j.verdict = "ERROR", j.detail = "exit " + std::to_string(j.code) + ": " + child_log_detail(j.log);
      continue;
    }
    if (!f.update) {
      const bool has = fs::exists(j.golden + "/receipt.json", ec);
      j.verdict = !has ? "NO GOLDEN" : j.code == 0 ? "pass" : "FAIL";
      j.detail = !has ? "no golden run in " + j.golden + " (regress --update makes it)" : j.code == 0 ? "" : child_log_detail(j.log);
      continue;
    }
    // --update: the first engine of each (case, dtype) is compared with the golden and promoted when it
    // differs; every engine must then equal the golden.
    bool first = true;
    for (const Job& o : jobs) {
      if (&o == &j) break;
      if (o.c == j.c && o.e.f32 == j.e.f32 && o.code == 0) first = false;
    }
    if (j.code != 0) {
      j.verdict = "FAIL", j.detail = child_log_detail(j.log);
      continue;
    }
    if (first) {
      const bool has = fs::exists(j.golden + "/run.json", ec);
      const RunDiff d = has ? diff_runs(j.golden, j.out) : RunDiff{false, {"a new golden"}};
      if (!d.same) {
        promote(j.out, j.golden);
        std::string what;
        for (size_t k = 0; k < d.lines.size() && k < 3; ++k) what += (k ? "; " : "") + d.lines[k];
        std::printf("updated %s from %s: %s\n", j.golden.c_str(), j.e.name.c_str(), what.c_str());
        j.verdict = "updated", j.detail = what;
        continue;
      }
    }
    const RunDiff d = diff_runs(j.golden, j.out);
    j.verdict = d.same ? "pass" : "FAIL";
    for (size_t k = 0; !d.same && k < d.lines.size() && k < 3; ++k) j.detail += (k ? "; " : "") + d.lines[k];
  }
  // The summary table, JUnit, JSON.
  int failed = 0;
  std::printf("%-28s %-12s %-9s %8s  %s\n", "case", "engine", "verdict", "seconds", "detail");
  for (const Job& j : jobs) {
    const bool bad = j.verdict != "pass" && j.verdict != "updated";
    failed += bad;
    std::printf("%-28s %-12s %-9s %8.2f  %s\n", j.c->name.c_str(), j.e.name.c_str(), j.verdict.c_str(), j.seconds,
                j.detail.substr(0, 160).c_str());
  }
  std::printf("regress: %zu passed, %d failed\n", jobs.size() - static_cast<size_t>(failed), failed);
  if (!f.junit.empty()) {
    JunitSuite s{fs::path(f.suite).stem().string(), {}};
    for (const Job& j : jobs) {
      JunitCase c;
      c.classname = "gradrun." + j.c->name, c.name = j.e.name, c.seconds = j.seconds;
      c.failed = j.verdict == "FAIL" || j.verdict == "NO GOLDEN";
      c.error = j.verdict == "ERROR";
      c.message = j.verdict + (j.detail.empty() ? "" : ": " + j.detail.substr(0, 200));
      c.detail = j.detail;
      s.cases.push_back(c);
    }
    write_file_atomic(f.junit, render_junit({s}));
  }
  if (!f.json.empty()) {
    Json r = Json::array();
    for (const Job& j : jobs)
      r.push_back({{"case", j.c->name}, {"engine", j.e.name}, {"verdict", j.verdict}, {"seconds", j.seconds}, {"exit", j.code},
                   {"detail", j.detail}, {"golden", j.golden}, {"run", j.out}});
    write_file_atomic(f.json, Json{{"suite", f.suite}, {"passed", static_cast<int>(jobs.size()) - failed}, {"failed", failed}, {"results", r}}.dump(2) + "\n");
  }
  if (failed == 0 && f.work.empty()) fs::remove_all(work, ec);  // kept on failure: its logs and runs explain it
  else if (failed > 0) std::printf("regress: runs and logs kept in %s\n", work.c_str());
  std::fflush(stdout);
  if (failed > 0) throw CheckFailed{};
}

}  // namespace

void add_regress(CLI::App& app) {
  auto f = std::make_shared<RegressFlags>();
  CLI::App* c = app.add_subcommand("regress", "Run a regression suite (specs x engines) against its golden runs; JUnit and JSON results");
  c->add_option("suite", f->suite, "The suite file (JSON): its cases, engines and golden folder")->required();
  c->add_option("--jobs", f->jobs, "Runs at a time (each on 1 thread; the bits do not depend on it)")->check(CLI::Range(1, 256));
  c->add_flag("--update", f->update, "Promote each case's new run to its golden where it differs (printing what changed); "
                                     "every engine must then equal it");
  c->add_option("--junit", f->junit, "Also write JUnit XML here");
  c->add_option("--json", f->json, "Also write the results as JSON here");
  c->add_option("--work", f->work, "Where the runs go (default: a temporary folder, removed when every run passes)");
  c->callback([f] { run_regress(*f); });
}

}  // namespace gr::cli
