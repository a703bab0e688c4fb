// gradrun cv SPEC --folds K [--jobs N] [--out RUN] — K-fold cross-validation (issue 41 item 6;
// docs/cli.md, cv): every row is in one fold (stratified by the label for a classifier, from the
// seed: spec/folds.h); fold i is a full `gradrun train` in RUN/fold-i with data.cv {"folds": K,
// "fold": i} (its validation rows are the fold), then `gradrun evaluate` on those rows; cv.json
// holds every metric per fold with its mean and standard deviation. Runs are child processes, so
// any --jobs gives the same bytes.
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <nlohmann/json.hpp>

#include "child_jobs.h"
#include "cli.h"
#include "io/atomic_file.h"
#include "spec/folds.h"
#include "train/run_files.h"

namespace gr::cli {

namespace {

struct CvFlags {
  std::string spec, out;
  int folds = 0, jobs = 1;
  bool quiet = false;
};

// The mean and population standard deviation (Σ in fold order) of the finite values; null without any.
nlohmann::ordered_json cv_summary(const std::vector<double>& values) {
  double sum = 0.0, n = 0.0;
  for (double v : values)
    if (std::isfinite(v)) sum = sum + v, n = n + 1.0;
  nlohmann::ordered_json per = nlohmann::ordered_json::array();
  for (double v : values) per.push_back(std::isfinite(v) ? nlohmann::ordered_json(v) : nlohmann::ordered_json(nullptr));
  if (n == 0.0) return {{"mean", nullptr}, {"std", nullptr}, {"folds", per}};
  const double mean = sum / n;
  double sq = 0.0;
  for (double v : values)
    if (std::isfinite(v)) sq = sq + (v - mean) * (v - mean);
  return {{"mean", mean}, {"std", std::sqrt(sq / n)}, {"folds", per}};
}

void run_cv(const CvFlags& f) {
  const Spec spec = load_with_overrides(f.spec, {});
  if (!spec.data) throw InputError(spec.path, "/data", "cross-validation needs data");
  if (f.folds < 2) throw UsageError("--folds must be at least 2");
  const std::string run = f.out.empty() ? spec.output_dir : f.out;
  namespace fs = std::filesystem;
  std::error_code ec;
  fs::create_directories(run, ec);
  if (ec || !fs::is_directory(run)) throw IoError(run, "cannot create the output folder");
  const bool stratified = folds_stratified(spec);
  const std::string label = folds_label(spec);
  std::vector<Training> runs;
  for (int i = 1; i <= f.folds; ++i)
    runs.push_back({run + "/fold-" + std::to_string(i),
                    {"data.validation=0", "data.cv={\"folds\": " + std::to_string(f.folds) + ", \"fold\": " + std::to_string(i) + "}"}});
  if (!f.quiet)
    std::printf("cv: %d folds of %s%s, %d at a time, in %s\n", f.folds, f.spec.c_str(),
                stratified ? (" (stratified by \"" + label + "\")").c_str() : "", f.jobs, run.c_str());
  std::fflush(stdout);
  size_t finished = 0;
  const int failed = run_trainings(f.spec, runs, f.jobs, run + "/logs", [&](size_t i) {
    ++finished;
    if (f.quiet) return;
    const Training& t = runs[i];
    std::fprintf(stderr, "cv: %zu/%zu folds done (fold-%zu %s)\n", finished, runs.size(), i + 1,
                 t.skipped ? "finished earlier, not rerun" : t.code == 0 ? "trained" : ("FAILED, exit " + std::to_string(t.code)).c_str());
  });
  if (failed > 0) {
    std::string why;
    for (size_t i = 0; i < runs.size(); ++i)
      if (runs[i].code != 0) why += "\n  fold-" + std::to_string(i + 1) + ": " + child_log_detail(runs[i].log) + " (log: " + runs[i].log + ")";
    throw Error("cv: " + std::to_string(failed) + " of " + std::to_string(runs.size()) + " folds failed:" + why);
  }
  // Each fold's held-out rows: evaluate's numbers (the best weights under early stopping).
  std::vector<ChildJob> evals;
  const std::string exe = gradrun_executable();
  for (const Training& t : runs) {  // run in RUN, so evaluate.json names fold-i/... whatever RUN is
    const std::string fold = fs::path(t.dir).filename().string();
    evals.push_back({{exe, "evaluate", fold, "--json", fold + "/evaluate.json", "--quiet"},
                     fs::absolute(run + "/logs/" + fold + ".evaluate.log").string(), run});
  }
  run_children(evals, f.jobs);
  std::vector<std::string> names;  // metric names, first appearance order
  std::vector<std::vector<double>> values;
  std::vector<int64_t> rows;
  auto put = [&](const std::string& name, size_t fold, double v) {
    size_t k = 0;
    while (k < names.size() && names[k] != name) ++k;
    if (k == names.size()) names.push_back(name), values.emplace_back(runs.size(), kNaNMetric);
    values[k][fold] = v;
  };
  for (size_t i = 0; i < runs.size(); ++i) {
    if (evals[i].code != 0)
      throw Error("cv: evaluating fold-" + std::to_string(i + 1) + " failed: " + child_log_detail(evals[i].log));
    const nlohmann::ordered_json ev = nlohmann::ordered_json::parse(read_file(runs[i].dir + "/evaluate.json"));
    const nlohmann::ordered_json rj = nlohmann::ordered_json::parse(read_file(runs[i].dir + "/run.json"));
    rows.push_back(ev.value("rows", int64_t{0}));
    put("train_loss", i, rj["final_loss"].is_number() ? rj["final_loss"].get<double>() : kNaNMetric);
    for (auto it = ev.begin(); it != ev.end(); ++it) {
      if (it.key() == "rows" || !(it->is_number() || it->is_null())) continue;
      put(it.key(), i, it->is_number() ? it->get<double>() : kNaNMetric);
    }
  }
  nlohmann::ordered_json doc = {{"gradrun_cv", 1},
                                {"spec", f.spec},
                                {"overrides", command_line_sets()},
                                {"seed", spec.seed},
                                {"folds", f.folds},
                                {"stratified", stratified},
                                {"labels", stratified ? nlohmann::ordered_json(label) : nlohmann::ordered_json(nullptr)},
                                {"runs", nlohmann::ordered_json::array()},
                                {"validation_rows", rows},
                                {"metrics", nlohmann::ordered_json::object()}};
  for (const Training& t : runs) doc["runs"].push_back(fs::path(t.dir).filename().string());
  for (size_t k = 0; k < names.size(); ++k) doc["metrics"][names[k]] = cv_summary(values[k]);
  write_file_atomic(run + "/cv.json", doc.dump(2) + "\n");
  if (f.quiet) return;
  std::printf("%-18s %12s %12s", "metric", "mean", "std");
  for (size_t i = 0; i < runs.size(); ++i) std::printf(" %10s", ("fold-" + std::to_string(i + 1)).c_str());
  std::printf("\n");
  for (size_t k = 0; k < names.size(); ++k) {
    const nlohmann::ordered_json& s = doc["metrics"][names[k]];
    auto cell = [&](const char* key) {
      char buf[32];
      if (s[key].is_number()) std::snprintf(buf, sizeof buf, "%12.6g", s[key].get<double>());
      else std::snprintf(buf, sizeof buf, "%12s", "null");
      return std::string(buf);
    };
    std::printf("%-18s %s %s", names[k].c_str(), cell("mean").c_str(), cell("std").c_str());
    for (double v : values[k]) std::printf(" %10.4g", v);
    std::printf("\n");
  }
  std::printf("cv: %s/cv.json\n", run.c_str());
}

}  // namespace

void add_cv(CLI::App& app) {
  auto f = std::make_shared<CvFlags>();
  CLI::App* c = app.add_subcommand("cv", "K-fold cross-validation: one full run per fold, the metrics' mean and standard deviation");
  c->add_option("spec", f->spec, "The spec file")->required();
  c->add_option("--folds", f->folds, "The number of folds K (>= 2)")->required()->check(CLI::Range(2, 1 << 20));
  c->add_option("--jobs", f->jobs, "Folds trained at the same time, as separate processes (any count gives the same bytes)")
      ->check(CLI::Range(1, 256));
  c->add_option("--out", f->out, "The folder of the folds (RUN/fold-i) and cv.json (default: the spec's output.dir, else runs/<name>)");
  c->add_flag("--quiet,-q", f->quiet, "Print only errors");
  c->callback([f] { run_cv(*f); });
}

}  // namespace gr::cli
