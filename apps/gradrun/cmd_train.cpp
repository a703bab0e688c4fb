// gradrun train SPEC | --resume RUN_DIR — train a spec and write the run folder: on the CPU tape or
// the device replay engine (--device host|cuda, --fuse), in f64 or f32 (--dtype), and under mpirun on
// several processes (train.shards); --resume continues a run from its checkpoint (its folder's
// spec.json when no SPEC is given), --expect compares the loss log with a golden one
// (lib/train/trainer.h; docs/cli.md).
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>

#include "cli.h"
#include "io/atomic_file.h"
#include "spec/tensor_file.h"
#include "tensor/diag.h"
#include "train/receipt.h"
#include "train/run_model.h"
#include "train/run_state.h"
#include "train/trainer.h"

namespace gr::cli {

namespace {

struct TrainFlags {
  int threads = 1;
  bool threads_auto = true;  // --threads auto (the default)
  std::string spec, out, device, dtype, init, resume, expect, junit;
  double rtol = -1.0, atol = -1.0;  // --expect's tolerance; negative: bitwise
  bool fuse = false, quiet = false, force = false;
  Overrides overrides;
};

// Compares a finished run's loss log with the golden's rows; prints the first differing step.
void compare_expected(const std::string& golden_path, const std::vector<std::string>& want, const RunLog& log, const Tolerance& tol) {
  const size_t n = log.step_loss.size();
  auto row = [&](size_t i) {
    return std::to_string(i + 1) + "," + std::to_string(log.step_epoch[i]) + "," + format_double(log.step_loss[i]);
  };
  for (size_t i = 0; i < std::min(want.size(), n); ++i)
    if (!tol.same_row(want[i], row(i))) {
      const std::string why = "the loss log differs from " + golden_path + " " +
                              describe_loss_difference(static_cast<int64_t>(i + 1), want[i], row(i));
      diag::error("expect: " + why);
      throw CheckFailed{why};
    }
  if (want.size() != n) {
    const std::string why = golden_path + " has " + std::to_string(want.size()) + " steps, this run has " + std::to_string(n);
    diag::error("expect: " + why);
    throw CheckFailed{why};
  }
}

// run.json records the expectation's outcome beside the run's status (docs/cli.md, --expect).
void record_expectation(const std::string& out_dir, const std::string& golden, const std::string& outcome, const std::string& detail,
                        const std::string& comparison) {
  const std::string path = out_dir + "/run.json";
  try {
    nlohmann::ordered_json run = nlohmann::ordered_json::parse(read_file(path));
    run["expect"] = {{"golden", golden}, {"outcome", outcome}, {"detail", detail}, {"comparison", comparison}};
    write_file_atomic(path, run.dump(2) + "\n");
  } catch (const std::exception&) {  // the comparison's verdict is the exit code; run.json is best effort
  }
}

void run_train(const TrainFlags& f) {
  // Under mpirun: join the job first, so that any error below is reported with this rank.
  if (const int launched = dist::launched_size(); launched > 0) {
    if (!dist::built_with_mpi()) {
      if (launched > 1) throw UsageError("this gradrun was built without MPI, so mpirun's " + std::to_string(launched) +
                                         " processes would each train alone; install Open MPI and rebuild (scripts/setup --minimal --mpi)");
    } else {
      g_comm = dist::world();
    }
  }
  apply_threads(f.threads);
  if (!f.init.empty() && !f.resume.empty()) throw UsageError("--init and --resume cannot be combined");
  std::string resume_run = f.resume;  // the run folder (also when given as its checkpoint/)
  while (resume_run.size() > 1 && resume_run.back() == '/') resume_run.pop_back();
  if (std::filesystem::path(resume_run).filename() == "checkpoint") resume_run = std::filesystem::path(resume_run).parent_path().string();
  if (f.spec.empty() && f.resume.empty())
    throw UsageError("train needs a SPEC file (or --resume RUN_DIR alone: a run folder keeps the spec it was trained with)");
  // A resume without SPEC trains the run folder's spec.json: the spec as trained, --set included.
  Spec spec = f.spec.empty() ? load_spec_or_run(resume_run, f.overrides) : load_spec_or_run(f.spec, f.overrides);
  require_trainable(spec);
  if (spec.train.shards > 1 && !g_comm && !dist::built_with_mpi())
    diag::info("train.shards = " + std::to_string(spec.train.shards) +
               ": the shards run in this one process, with the same bits as under mpirun; this gradrun was built without MPI, "
               "so to spread them over processes install Open MPI and rebuild (scripts/setup --minimal --mpi)");
  // A resume continues on the engine the run used (run.json) unless the command line says otherwise.
  std::string device_flag = f.device, dtype_flag = f.dtype;
  bool fuse_flag = f.fuse;
  if (!f.resume.empty()) {
    const RunEngine was = read_run_engine(resume_run);
    if (device_flag.empty()) device_flag = was.device;
    if (dtype_flag.empty()) dtype_flag = was.dtype;
    if (!fuse_flag && f.device.empty()) fuse_flag = was.fused;
  }
  Engine engine = choose_engine(spec, device_flag, dtype_flag, fuse_flag);
  Golden golden;  // a run folder, a receipt.json or a loss.csv: a missing or bad one fails now, not after training
  if (!f.expect.empty()) golden = read_golden(f.expect);
  Model model(spec, load_datasets(spec), engine.spec.dtype);
  if (!f.expect.empty()) {  // data, spec and model against the golden receipt: known before any step
    const std::string why = expect_inputs_difference(golden, model);
    if (!why.empty()) {
      diag::error("expect: " + why + " (golden " + f.expect + ")");
      throw CheckFailed{why};
    }
  }
  release_tensor_values(spec);  // the tape holds them now: a frozen base is not kept twice
  TrainOptions o;
  o.out_dir = !f.out.empty() ? f.out : !f.resume.empty() ? resume_run : spec.output_dir;
  // A resume without --epochs continues to the checkpoint's target.
  o.epochs = f.resume.empty() || f.overrides.epochs ? spec.train.epochs : 0;
  o.force = f.force;
  o.expect = golden.loss_rows;
  if (f.rtol >= 0 || f.atol >= 0) {
    if (f.expect.empty()) throw UsageError("--rtol and --atol set --expect's tolerance; give --expect too");
    o.expect_tolerance = Tolerance{std::max(f.rtol, 0.0), std::max(f.atol, 0.0)};
  }
  o.init_file = f.init;
  o.resume_dir = f.resume;
  o.quiet = f.quiet;
  o.engine = engine.spec;
  o.auto_threads = f.threads_auto;
  o.comm = g_comm.get();
  const bool writer = !g_comm || g_comm->rank() == 0;
  TrainResult r;
  try {
    r = train(model, o, std::move(engine.backend));
  } catch (const ExpectMismatch& e) {  // stopped at the first differing step: exit 1, no success line
    const std::string detail =
        e.expected.empty() ? f.expect + " has " + std::to_string(golden.loss_rows.size()) + " steps, this run goes on: got " + e.got
                           : "the loss log differs from " + f.expect + " " + describe_loss_difference(e.step, e.expected, e.got);
    if (writer) record_expectation(o.out_dir, f.expect, "failed", detail, o.expect_tolerance.describe());
    diag::error("expect: " + detail);
    throw CheckFailed{detail};
  } catch (const InterruptedError& e) {  // SIGINT or SIGTERM: exit 130, as a shell reports a SIGINT
    std::fflush(stdout);
    if (writer) diag::error(e.what());  // an error level, so that even --quiet says how to resume
    std::exit(130);
  }
  if (!f.expect.empty()) {  // a shorter run, metrics, weights: before the success line
    try {
      if (!golden.loss_rows.empty()) compare_expected(f.expect, golden.loss_rows, r.log, o.expect_tolerance);
    } catch (const CheckFailed&) {
      if (writer) record_expectation(o.out_dir, f.expect, "failed", "the loss log's length differs", o.expect_tolerance.describe());
      throw;
    }
    std::vector<std::string> notes;
    const std::string why = writer ? expect_outputs_difference(golden, o.out_dir, notes, o.expect_tolerance) : std::string();
    for (const std::string& n : notes) diag::info("expect: " + n);
    if (!why.empty()) {
      record_expectation(o.out_dir, f.expect, "failed", why, o.expect_tolerance.describe());
      diag::error("expect: " + why + " (golden " + f.expect + ")");
      throw CheckFailed{why};
    }
    if (writer) record_expectation(o.out_dir, f.expect, "passed", "", o.expect_tolerance.describe());
  }
  if (!f.quiet && writer) {
    const EpochRecord* last = r.log.epochs.empty() ? nullptr : &r.log.epochs.back();
    std::printf("trained %s: %lld steps", spec.name.c_str(), static_cast<long long>(r.steps));
    if (r.steps_run != r.steps) std::printf(" (%lld in this run)", static_cast<long long>(r.steps_run));
    std::printf(" in %.2fs (%.1f us/step), final loss %.6g", r.seconds,
                r.steps_run ? 1e6 * r.seconds / static_cast<double>(r.steps_run) : 0.0, last ? last->train_loss : 0.0);
    if (last && last->val_accuracy == last->val_accuracy) std::printf(", val accuracy %.4f", last->val_accuracy);
    std::printf("\n  outputs in %s\n", o.out_dir.c_str());
    if (r.stop_reason == "early_stopping")  // the last line says why the run ended before its epochs
      std::printf("  early stopping: %s; best weights in %s/weights.best.safetensors\n", r.stop_detail.c_str(), o.out_dir.c_str());
    if (!f.expect.empty())  // a CI log should say that the comparison ran and passed, not only stay silent
      std::printf("  expect: %s equal to %s%s\n", golden.receipt_json.empty() ? "the loss log is" : "the run (data, spec, loss, metrics, weights) is",
                  f.expect.c_str(),
                  o.expect_tolerance.bitwise() ? (golden.loss_rows.empty() ? "" : (", all " + std::to_string(golden.loss_rows.size()) + " steps bit for bit").c_str())
                                               : (", " + o.expect_tolerance.describe() + " (not bitwise)").c_str());
  }
}

}  // namespace

void add_train(CLI::App& app) {
  auto f = std::make_shared<TrainFlags>();
  CLI::App* c = app.add_subcommand("train", "Train a spec and write loss.csv, metrics.csv, weights, a plot and run.json");
  c->add_option("spec", f->spec, "The spec file (JSON, format v1); optional with --resume RUN_DIR, which keeps its spec");
  c->add_option("--out", f->out, "Output folder (default: the spec's output.dir, else runs/<name>)");
  c->add_option("--device", f->device, "cpu (the CPU tape) | host | cuda | auto (default: the spec's device.kind)")
      ->check(CLI::IsMember({"cpu", "host", "cuda", "auto"}));
  c->add_option("--dtype", f->dtype, "f64 | f32 (every engine: the CPU tape computes in float too)")->check(CLI::IsMember({"f64", "f32"}));
  c->add_flag("--fuse", f->fuse, "Run fused megakernels (needs a device engine)");
  c->add_option("--epochs", f->overrides.epochs, "Total epochs (overrides train.epochs)")->check(CLI::Range(1, 100000000));
  c->add_option("--seed", f->overrides.seed, "Seed for init, split and shuffling (overrides the spec's seed)");
  c->add_option("--init", f->init, "Start from the parameters in this safetensors file (names as in the spec)");
  c->add_option("--resume", f->resume,
                "Continue the run in this folder (in place, unless --out) from its checkpoint/ up to its target, or --epochs");
  c->add_flag("--force", f->force, "Replace a different run's files in the output folder (else exit 2)");
  c->add_option("--expect", f->expect, "Compare the loss log with this golden loss.csv; exit 1 at the first difference");
  c->add_flag("--quiet,-q", f->quiet, "Print only errors");
  add_threads_option(c, f->threads, &f->threads_auto);
  c->add_option("--rtol", f->rtol, "With --expect: compare numbers (loss, metrics, weights) within |got - want| <= atol + rtol*|want| "
                                   "instead of bitwise (for comparisons that cannot be bitwise by design, f32 against f64)")
      ->check(CLI::NonNegativeNumber);
  c->add_option("--atol", f->atol, "With --expect: the absolute part of the tolerance (see --rtol)")->check(CLI::NonNegativeNumber);
  c->add_option("--junit", f->junit, "Also write the run's verdict (with --expect: the comparison's) as JUnit XML to this file");
  c->callback([f] { with_junit(f->junit, "train", f->spec.empty() ? f->resume : f->spec, [&] { run_train(*f); }); });
}

}  // namespace gr::cli
