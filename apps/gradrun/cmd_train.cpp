// gradrun train SPEC — train a spec on the CPU tape and write the run folder.
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>

#include "cli.h"
#include "io/atomic_file.h"
#include "spec/tensor_file.h"
#include "tensor/diag.h"
#include "train/run_state.h"
#include "train/trainer.h"

namespace gr::cli {

namespace {

struct TrainFlags {
  int threads = 1;
  bool threads_auto = true;  // --threads auto (the default)
  std::string spec, out, device, dtype, init, resume, expect;
  bool fuse = false, quiet = false, force = false;
  Overrides overrides;
};

// The non-empty lines of a text (CR LF too).
std::vector<std::string> lines(const std::string& s) {
  std::vector<std::string> out;
  size_t start = 0;
  while (start < s.size()) {
    size_t end = s.find('\n', start);
    if (end == std::string::npos) end = s.size();
    std::string line = s.substr(start, end - start);
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (!line.empty()) out.push_back(line);
    start = end + 1;
  }
  return out;
}

// The golden loss.csv's rows after its header (training compares each step as it goes).
std::vector<std::string> read_expected(const std::string& golden_path) {
  std::vector<std::string> want = lines(read_file(golden_path));
  if (want.empty() || want[0] != "step,epoch,loss")
    throw InputError(golden_path, "line 1", "not a loss log (expected the header step,epoch,loss)");
  want.erase(want.begin());
  return want;
}

// Compares a finished run's loss.csv text with a golden file; prints the first differing step.
void compare_expected(const std::string& golden_path, const std::string& got_text) {
  std::vector<std::string> want = lines(read_file(golden_path)), got = lines(got_text);
  for (size_t i = 1; i < std::min(want.size(), got.size()); ++i)
    if (want[i] != got[i]) {
      diag::error("expect: the loss log differs from " + golden_path + " at step " + std::to_string(i) + " (line " +
                  std::to_string(i + 1) + "):\n  expected " + want[i] + "\n  got      " + got[i]);
      throw CheckFailed{};
    }
  if (want.size() != got.size()) {
    diag::error("expect: " + golden_path + " has " + std::to_string(want.size() - 1) + " steps, this run has " +
                std::to_string(got.size() - 1));
    throw CheckFailed{};
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
  Spec spec = load_with_overrides(f.spec, f.overrides);
  require_trainable(spec);
  if (spec.train.shards > 1 && !g_comm && !dist::built_with_mpi())
    diag::info("train.shards = " + std::to_string(spec.train.shards) +
               ": the shards run in this one process, with the same bits as under mpirun; this gradrun was built without MPI, "
               "so to spread them over processes install Open MPI and rebuild (scripts/setup --minimal --mpi)");
  DeviceChoice d = choose_device(spec, f.device, f.dtype, f.fuse);
  if (!f.init.empty() && !f.resume.empty()) throw UsageError("--init and --resume cannot be combined");
  std::vector<std::string> expect;
  if (!f.expect.empty()) expect = read_expected(f.expect);  // a missing or bad golden file fails now, not after training
  Model model(spec, load_datasets(spec), real_of(d.dtype));
  release_tensor_values(spec);  // the tape holds them now: a frozen base is not kept twice
  TrainOptions o;
  std::string resume_run = f.resume;  // the run folder (also when given as its checkpoint/)
  while (resume_run.size() > 1 && resume_run.back() == '/') resume_run.pop_back();
  if (std::filesystem::path(resume_run).filename() == "checkpoint") resume_run = std::filesystem::path(resume_run).parent_path().string();
  o.out_dir = !f.out.empty() ? f.out : !f.resume.empty() ? resume_run : spec.output_dir;
  // A resume without --epochs continues to the checkpoint's target.
  o.epochs = f.resume.empty() || f.overrides.epochs ? spec.train.epochs : 0;
  o.force = f.force;
  o.expect = expect;
  o.init_file = f.init;
  o.resume_dir = f.resume;
  o.quiet = f.quiet;
  o.device = d.kind;
  o.dtype = d.dtype;
  o.fuse = d.fuse;
  o.auto_threads = f.threads_auto;
  o.comm = g_comm.get();
  const bool writer = !g_comm || g_comm->rank() == 0;
  TrainResult r;
  try {
    r = train(model, o, std::move(d.backend));
  } catch (const ExpectMismatch& e) {  // stopped at the first differing step: exit 1, no success line
    if (e.expected.empty())
      diag::error("expect: " + f.expect + " has " + std::to_string(expect.size()) + " steps, this run goes on:\n  got      " + e.got);
    else
      diag::error("expect: the loss log differs from " + f.expect + " at step " + std::to_string(e.step) + " (line " +
                  std::to_string(e.step + 1) + "):\n  expected " + e.expected + "\n  got      " + e.got);
    throw CheckFailed{};
  } catch (const InterruptedError& e) {  // exit 130, as a shell reports a SIGINT
    std::fflush(stdout);
    if (writer) diag::error(e.what());  // an error level, so that even --quiet says how to resume
    std::exit(130);
  }
  if (!f.expect.empty()) compare_expected(f.expect, render_loss_csv(r.log));  // a shorter run: before the success line
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
  }
}

}  // namespace

void add_train(CLI::App& app) {
  auto f = std::make_shared<TrainFlags>();
  CLI::App* c = app.add_subcommand("train", "Train a spec and write loss.csv, metrics.csv, weights, a plot and run.json");
  c->add_option("spec", f->spec, "The spec file (JSON, format v1)")->required();
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
  c->callback([f] { run_train(*f); });
}

}  // namespace gr::cli
