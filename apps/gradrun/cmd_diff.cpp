// gradrun diff RUN_A RUN_B [--at STEP] — where two runs part (lib/train/run_diff.h): exit 0 the
// same, 1 different, 2 bad input.
#include <cstdio>
#include <memory>

#include "cli.h"
#include "train/run_diff.h"

namespace gr::cli {

namespace {

struct DiffFlags {
  std::string a, b;
  int64_t at = 0;
};

void run_diff(const DiffFlags& f) {
  const RunDiff d = f.at > 0 ? diff_runs_at(f.a, f.b, f.at) : diff_runs(f.a, f.b);
  for (const std::string& line : d.lines) std::printf("%s\n", line.c_str());
  if (d.same && f.at == 0) std::printf("the runs are the same: loss.csv, metrics.csv (seconds aside), weights and receipts\n");
  std::fflush(stdout);
  if (!d.same) throw CheckFailed{};
}

}  // namespace

void add_diff(CLI::App& app) {
  auto f = std::make_shared<DiffFlags>();
  CLI::App* c = app.add_subcommand("diff", "Compare two run folders: the first differing step, epoch, weights and receipt fields");
  c->add_option("run_a", f->a, "A run folder")->required();
  c->add_option("run_b", f->b, "Another run folder")->required();
  c->add_option("--at", f->at, "Replay both runs to STEP on the CPU tape and name the first graph node whose value or gradient differs")
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 40));
  c->callback([f] { run_diff(*f); });
}

}  // namespace gr::cli
