// gradrun sweep SPEC --grid KEY=V1,V2,... [--grid ...] [--jobs N] [--metric M] [--out RUN] — a grid
// search (issue 41 item 7; docs/cli.md, sweep): every combination of the grids' values is a full
// `gradrun train` with `--set KEY=V` per grid, in RUN/<i> (1-based; the first --grid varies slowest);
// a run whose run.json says complete with the same --set items is not rerun when the sweep is
// started again; sweep.csv ranks the runs by the metric, best first. Runs are child processes, so
// any --jobs gives the same bytes.
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <nlohmann/json.hpp>

#include "child_jobs.h"
#include "cli.h"
#include "io/atomic_file.h"
#include "spec/overrides.h"
#include "train/run_files.h"

namespace gr::cli {

namespace {

struct SweepFlags {
  std::string spec, out, metric;
  std::vector<std::string> grids;
  int jobs = 1;
  bool quiet = false;
};

struct Grid {
  std::string key;
  std::vector<std::string> values;
};

// KEY=V1,V2,...: the values split at commas outside brackets, braces and double quotes (so a JSON
// array or object may be one value).
Grid parse_grid(const std::string& item) {
  const size_t eq = item.find('=');
  if (eq == std::string::npos || eq == 0 || eq + 1 == item.size())
    throw UsageError("--grid " + item + ": expected KEY=V1,V2,... (a --set path and its values)");
  Grid g{item.substr(0, eq), {}};
  std::string cur;
  int depth = 0;
  bool quoted = false;
  for (size_t i = eq + 1; i < item.size(); ++i) {
    const char c = item[i];
    if (c == '"' && (i == 0 || item[i - 1] != '\\')) quoted = !quoted;
    if (!quoted && (c == '[' || c == '{')) ++depth;
    if (!quoted && (c == ']' || c == '}')) --depth;
    if (c == ',' && depth == 0 && !quoted) {
      g.values.push_back(cur);
      cur.clear();
    } else {
      cur += c;
    }
  }
  g.values.push_back(cur);
  for (const std::string& v : g.values)
    if (v.empty()) throw UsageError("--grid " + item + ": an empty value");
  return g;
}

// Higher is better for accuracies, F1, AUC and R²; lower for losses and errors.
bool higher_is_better(const std::string& metric) {
  return metric.find("accuracy") != std::string::npos || metric == "val_f1" || metric == "val_auc" || metric == "val_r2";
}

// The metric of a finished run: metrics.csv's column at the best epoch under early stopping, else
// at the last epoch. NaN (epoch 0) when the run or the column is missing.
std::pair<double, int64_t> run_metric(const std::string& dir, const std::string& metric) {
  try {
    const nlohmann::json run = nlohmann::json::parse(read_file(dir + "/run.json"));
    int64_t best = 0;
    if (run.contains("early_stopping") && run["early_stopping"]["best_epoch"].is_number_integer())
      best = run["early_stopping"]["best_epoch"].get<int64_t>();
    const std::string text = read_file(dir + "/metrics.csv");
    std::vector<std::string> lines;
    for (size_t s = 0; s < text.size();) {
      size_t e = text.find('\n', s);
      if (e == std::string::npos) e = text.size();
      lines.push_back(text.substr(s, e - s));
      s = e + 1;
    }
    auto cells = [](const std::string& line) {
      std::vector<std::string> out;
      size_t s = 0;
      for (size_t e; (e = line.find(',', s)) != std::string::npos; s = e + 1) out.push_back(line.substr(s, e - s));
      out.push_back(line.substr(s));
      return out;
    };
    if (lines.size() < 2) return {kNaNMetric, 0};
    const std::vector<std::string> header = cells(lines[0]);
    size_t col = 0;
    while (col < header.size() && header[col] != metric) ++col;
    if (col == header.size()) return {kNaNMetric, 0};
    for (size_t l = lines.size() - 1; l >= 1; --l) {
      const std::vector<std::string> row = cells(lines[l]);
      const int64_t epoch = std::stoll(row[0]);
      if (best == 0 || epoch == best) return {std::stod(row[col]), epoch};
    }
  } catch (const std::exception&) {
  }
  return {kNaNMetric, 0};
}

std::string csv_cell(const std::string& s) {
  if (s.find_first_of(",\"\n") == std::string::npos) return s;
  std::string q = "\"";
  for (char c : s) q += c == '"' ? std::string("\"\"") : std::string(1, c);
  return q + "\"";
}

void run_sweep(const SweepFlags& f) {
  const Spec spec = load_with_overrides(f.spec, {});
  std::vector<Grid> grids;
  for (const std::string& item : f.grids) grids.push_back(parse_grid(item));
  for (size_t a = 0; a < grids.size(); ++a)
    for (size_t b = 0; b < a; ++b)
      if (grids[a].key == grids[b].key) throw UsageError("--grid " + grids[a].key + " is given twice");
  for (const Grid& g : grids)  // every value must make a valid spec, before anything runs
    for (const std::string& v : g.values) {
      std::vector<std::string> sets = command_line_sets();
      sets.push_back(g.key + "=" + v);
      load_spec(f.spec, sets);
    }
  const bool has_validation = spec.data && (spec.data->validation > 0 || spec.data->cv_folds > 0);
  const std::string metric = !f.metric.empty() ? f.metric : has_validation ? "val_loss" : "train_loss";
  static const char* const kKnown[] = {"train_loss", "val_loss", "val_accuracy", "train_accuracy", "grad_norm", "val_mae",
                                       "val_rmse",   "val_r2",   "val_f1",       "val_auc"};
  bool known = false;
  std::string list;
  for (const char* k : kKnown) known = known || metric == k, list += (list.empty() ? "" : ", ") + std::string(k);
  if (!known) throw UsageError("--metric " + metric + ": not a metrics.csv column (known: " + list + ")");
  const std::string run = f.out.empty() ? spec.output_dir : f.out;
  namespace fs = std::filesystem;
  std::error_code ec;
  fs::create_directories(run, ec);
  if (ec || !fs::is_directory(run)) throw IoError(run, "cannot create the output folder");
  // sweep.json: the grid of this folder's runs; a restart must be the same sweep (run i is a combination).
  nlohmann::ordered_json plan = {{"gradrun_sweep", 1}, {"spec", f.spec}, {"overrides", command_line_sets()}, {"grid", nlohmann::ordered_json::array()}};
  for (const Grid& g : grids) plan["grid"].push_back({{"key", g.key}, {"values", g.values}});
  const std::string plan_text = plan.dump(2) + "\n", plan_path = run + "/sweep.json";
  if (fs::exists(plan_path, ec) && read_file(plan_path) != plan_text)
    throw UsageError(run + " holds a different sweep (its sweep.json: another spec, --set or --grid); give another --out");
  write_file_atomic(plan_path, plan_text);
  // Every combination, the first grid varying slowest.
  size_t total = 1;
  for (const Grid& g : grids) total *= g.values.size();
  std::vector<Training> runs;
  std::vector<std::vector<size_t>> choice;
  for (size_t i = 0; i < total; ++i) {
    std::vector<size_t> pick(grids.size());
    size_t rest = i;
    for (size_t k = grids.size(); k-- > 0;) pick[k] = rest % grids[k].values.size(), rest /= grids[k].values.size();
    Training t{run + "/" + std::to_string(i + 1), {}};
    for (size_t k = 0; k < grids.size(); ++k) t.sets.push_back(grids[k].key + "=" + grids[k].values[pick[k]]);
    runs.push_back(std::move(t));
    choice.push_back(pick);
  }
  if (!f.quiet) std::printf("sweep: %zu runs of %s, %d at a time, in %s, ranked by %s\n", total, f.spec.c_str(), f.jobs, run.c_str(), metric.c_str());
  std::fflush(stdout);
  size_t finished = 0;
  std::vector<std::pair<double, int64_t>> value(total, {kNaNMetric, 0});
  const int failed = run_trainings(f.spec, runs, f.jobs, run + "/logs", [&](size_t i) {
    ++finished;
    const Training& t = runs[i];
    if (t.code == 0) value[i] = run_metric(t.dir, metric);
    if (f.quiet) return;
    std::string what = t.skipped ? "finished earlier, not rerun" : t.code == 0 ? "trained" : "FAILED, exit " + std::to_string(t.code);
    if (t.code == 0) what += ", " + metric + " " + format_shortest(value[i].first);
    std::fprintf(stderr, "sweep: %zu/%zu runs done (run %zu: %s)\n", finished, total, i + 1, what.c_str());
  }, [&](size_t i) {
    if (f.quiet) return;
    std::string sets;
    for (const std::string& s : runs[i].sets) sets += (sets.empty() ? "" : " ") + s;
    std::fprintf(stderr, "sweep: run %zu of %zu started (%s)\n", i + 1, total, sets.c_str());
  });
  // Ranked: best first, NaN (and failed runs) last, ties by run number.
  std::vector<size_t> order(total);
  for (size_t i = 0; i < total; ++i) order[i] = i;
  const bool higher = higher_is_better(metric);
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    const double x = value[a].first, y = value[b].first;
    if (std::isnan(x) || std::isnan(y)) return !std::isnan(x) && std::isnan(y);
    return higher ? x > y : x < y;
  });
  std::string csv = "rank,run";
  for (const Grid& g : grids) csv += "," + csv_cell(g.key);
  csv += "," + metric + ",epoch,status\n";
  for (size_t r = 0; r < order.size(); ++r) {
    const size_t i = order[r];
    csv += std::to_string(r + 1) + "," + std::to_string(i + 1);
    for (size_t k = 0; k < grids.size(); ++k) csv += "," + csv_cell(grids[k].values[choice[i][k]]);
    csv += "," + format_shortest(value[i].first) + "," + std::to_string(value[i].second) + "," + (runs[i].code == 0 ? "complete" : "failed") + "\n";
  }
  write_file_atomic(run + "/sweep.csv", csv);
  const size_t best = order.front();
  if (!f.quiet) {
    std::string sets;
    for (const std::string& s : runs[best].sets) sets += (sets.empty() ? "" : " ") + s;
    if (std::isnan(value[best].first)) std::printf("sweep: no run has a %s (see %s/sweep.csv)\n", metric.c_str(), run.c_str());
    else
      std::printf("best: run %zu (%s): %s %s, in %s\nsweep: %s/sweep.csv\n", best + 1, sets.c_str(), metric.c_str(),
                  format_shortest(value[best].first).c_str(), runs[best].dir.c_str(), run.c_str());
  }
  if (failed > 0) {
    std::string why;
    for (size_t i = 0; i < runs.size(); ++i)
      if (runs[i].code != 0) why += "\n  run " + std::to_string(i + 1) + ": " + child_log_detail(runs[i].log) + " (log: " + runs[i].log + ")";
    throw Error("sweep: " + std::to_string(failed) + " of " + std::to_string(total) + " runs failed (sweep.csv lists them; "
                "run the sweep again to retry them):" + why);
  }
}

}  // namespace

void add_sweep(CLI::App& app) {
  auto f = std::make_shared<SweepFlags>();
  CLI::App* c = app.add_subcommand("sweep", "Grid search: one full run per combination of --grid values, ranked in sweep.csv");
  c->add_option("spec", f->spec, "The spec file")->required();
  c->add_option("--grid", f->grids, "KEY=V1,V2,...: a --set path and its values (repeatable: every combination runs)")
      ->required()
      ->allow_extra_args(false);
  c->add_option("--jobs", f->jobs, "Runs trained at the same time, as separate processes (any count gives the same bytes)")
      ->check(CLI::Range(1, 256));
  c->add_option("--metric", f->metric, "The metrics.csv column that ranks the runs (default val_loss with validation rows, else train_loss)");
  c->add_option("--out", f->out, "The folder of the runs (RUN/<i>), sweep.json and sweep.csv (default: the spec's output.dir, else runs/<name>)");
  c->add_flag("--quiet,-q", f->quiet, "Print only errors");
  c->callback([f] { run_sweep(*f); });
}

}  // namespace gr::cli
