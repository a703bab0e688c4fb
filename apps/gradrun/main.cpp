// gradrun — train, check and inspect models described by JSON specs (docs/cli.md).
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <vector>

#include "child_jobs.h"
#include "cli.h"
#include "spec/class_weight.h"
#include "spec/overrides.h"
#include "spec/suggest.h"
#include "tensor/diag.h"
#include "tensor/fpenv.h"
#include "tensor/parallel.h"
#include "train/device_runner.h"
#include "train/junit.h"
#include "train/run_model.h"
#include "io/atomic_file.h"
#include "train/trainer.h"

namespace gr::cli {

std::unique_ptr<dist::Comm> g_comm;

namespace {
std::vector<std::string> g_sets;  // --set PATH=VALUE, added to every subcommand in main()
std::string g_log_level = "info", g_log_file;  // --log-level, --log-file, also on every subcommand

// Diagnostics (tensor/diag.h) once the command line is parsed, before the command runs: the console
// at --log-level (only errors under the command's --quiet), the --log-file at --log-level.
void configure_diagnostics(const CLI::App& app) {
  diag::Level level = diag::Level::Info;
  if (!diag::parse_level(g_log_level, level)) throw UsageError("--log-level " + g_log_level + ": use one of " + diag::level_names());
  bool quiet = false;
  for (const CLI::App* sub : app.get_subcommands())
    if (const CLI::Option* q = sub->get_option_no_throw("--quiet")) quiet = quiet || q->count() > 0;
  const diag::Level console = quiet && level < diag::Level::Error ? diag::Level::Error : level;
  diag::configure(console, g_log_file, level);
}
}  // namespace

const std::vector<std::string>& command_line_sets() { return g_sets; }

Spec load_with_overrides(const std::string& path, const Overrides& o) {
  Spec s = load_spec(path, g_sets);
  if (o.seed) s.seed = *o.seed;
  if (o.epochs) s.train.epochs = *o.epochs;
  if (!s.balanced_weights.empty()) {  // "class_weight": "balanced": counted on the training rows, kept as --set items
    std::vector<std::string> sets = g_sets;
    for (const std::string& item : resolve_balanced_weights(s)) sets.push_back(item);
    s = load_spec(path, sets);
    if (o.seed) s.seed = *o.seed;
    if (o.epochs) s.train.epochs = *o.epochs;
  }
  return s;
}

void with_junit(const std::string& junit_file, const std::string& command, const std::string& name, const std::function<void()>& body) {
  if (junit_file.empty()) return body();
  const auto t0 = std::chrono::steady_clock::now();
  JunitCase c;
  c.classname = "gradrun." + command, c.name = name;
  auto write = [&] {
    c.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    write_file_atomic(junit_file, render_junit({JunitSuite{"gradrun " + command, {c}}}));
  };
  try {
    body();
  } catch (const CheckFailed& e) {
    c.failed = true, c.message = e.what.empty() ? "check failed" : e.what, c.detail = e.what;
    write();
    throw;
  } catch (const std::exception& e) {
    c.error = true, c.message = e.what(), c.detail = e.what();
    write();
    throw;
  }
  write();
}

Spec load_spec_or_run(const std::string& spec_or_run_dir, const Overrides& o) {
  if (!is_run_folder(spec_or_run_dir)) return load_with_overrides(spec_or_run_dir, o);
  Spec s = load_run_spec(spec_or_run_dir, g_sets);
  if (o.seed) s.seed = *o.seed;
  if (o.epochs) s.train.epochs = *o.epochs;
  return s;
}

TrainedSource trained_source(const std::string& spec_or_run, const std::string& weights_flag) {
  if (is_run_folder(spec_or_run)) return {load_run_spec(spec_or_run, g_sets), weights_flag.empty() ? spec_or_run : weights_flag};
  std::error_code ec;
  if (std::filesystem::is_directory(spec_or_run, ec))
    throw InputError(spec_or_run, "", "this folder holds no spec.json, so it is not a run folder of this gradrun (a run from "
                                      "before runs kept their spec?); give the spec file and --weights " + spec_or_run);
  if (!std::filesystem::exists(spec_or_run, ec))  // a mistyped run folder: say so, not "--weights is needed"
    throw InputError(spec_or_run, "", "no such run folder or spec file");
  if (weights_flag.empty())
    throw UsageError("--weights RUN_DIR|FILE is needed with a spec file (or give the run folder alone: it holds its spec)");
  return {load_with_overrides(spec_or_run, {}), weights_flag};
}

Engine choose_engine(const Spec& spec, const std::string& device_flag, const std::string& dtype_flag, bool fuse_flag) {
  DeviceSpec want;
  try {  // CLI11 admits only the known words; a word it let through that is not one is a bug here
    want = engine_request(spec.device, device_flag, dtype_flag, fuse_flag);
  } catch (const Error& e) {
    throw UsageError(e.what());
  }
  if (want.fuse == FuseMode::On && want.kind == DeviceKind::Cpu) throw UsageError("--fuse needs a device engine (--device host or cuda)");
  Engine e = open_engine(want);
  if (e.spec.fuse == FuseMode::On && !e.on_device()) throw UsageError("--fuse needs a device engine (--device host or cuda)");
  return e;
}

void add_threads_option(CLI::App* command, int& threads, bool* automatic) {
  threads = hardware_threads();
  if (automatic) *automatic = true;
  command
      ->add_option_function<std::string>(
          "--threads",
          [&threads, automatic](const std::string& v) {
            if (v == "auto") {
              threads = hardware_threads();
              if (automatic) *automatic = true;
              return;
            }
            size_t used = 0;
            int n = 0;
            try {
              n = std::stoi(v, &used);
            } catch (const std::exception&) {
              used = 0;
            }
            if (used != v.size() || n < 1 || n > 1024)
              throw CLI::ValidationError("--threads", "expected a count from 1 to 1024 or auto, got '" + v + "'");
            threads = n;
            if (automatic) *automatic = false;
          },
          "Worker threads: a count, or auto (the default: all cores; train then runs each step on 1 thread or all, "
          "whichever its timings say is faster). Any count gives the same bits")
      ->type_name("N|auto");
}

void apply_threads(int threads) {
  if (threads > hardware_threads())
    diag::warn("--threads " + std::to_string(threads) + " is more than the " + std::to_string(hardware_threads()) +
               " cores here: the results are the same, the run is slower");
  set_num_threads(threads);
}

// One printable line: control characters and bytes that are not valid UTF-8 (a binary file's
// contents quoted in a message) become \xNN, so the error stays one readable line.
std::string printable_line(const std::string& s) {
  std::string out;
  char hex[8];
  for (size_t i = 0; i < s.size();) {
    const unsigned char c = static_cast<unsigned char>(s[i]);
    size_t len = c < 0x80 ? 1 : (c >> 5) == 0x6 ? 2 : (c >> 4) == 0xE ? 3 : (c >> 3) == 0x1E ? 4 : 0;
    bool valid = len > 0 && i + len <= s.size();
    for (size_t k = 1; valid && k < len; ++k) valid = (static_cast<unsigned char>(s[i + k]) >> 6) == 0x2;
    if (len == 1 && (c < 0x20 || c == 0x7f)) valid = false;
    if (!valid) {
      std::snprintf(hex, sizeof hex, "\\x%02x", c);
      out += hex;
      ++i;
    } else {
      out.append(s, i, len);
      i += len;
    }
  }
  return out;
}

// "did you mean" for a command line CLI11 refused: an unknown command (CLI11 only says that one is
// required) or an unknown option of the chosen command. Empty when no better message is found.
std::string suggest_usage(const CLI::App& app, int argc, char** argv, bool extras) {
  std::vector<std::string> commands;
  for (const CLI::App* sub : app.get_subcommands([](const CLI::App*) { return true; })) commands.push_back(sub->get_name());
  int i = 1;
  while (i < argc && argv[i][0] == '-') ++i;
  if (i >= argc) return "";
  const std::string word = argv[i];
  const CLI::App* sub = nullptr;
  for (const CLI::App* s : app.get_subcommands([](const CLI::App*) { return true; }))
    if (s->get_name() == word) sub = s;
  if (!sub) {
    std::string list;
    for (const std::string& c : commands) list += (list.empty() ? "" : ", ") + c;
    return "unknown command \"" + word + "\"" + did_you_mean(word, commands) + " (commands: " + list + ")";
  }
  if (!extras) return "";
  std::vector<std::string> flags;
  for (const CLI::Option* o : sub->get_options()) {
    for (const std::string& n : o->get_lnames()) flags.push_back("--" + n);
    for (const std::string& n : o->get_snames()) flags.push_back("-" + n);
  }
  for (int k = i + 1; k < argc; ++k) {
    std::string a = argv[k];
    if (a == "--") break;
    if (a.size() < 2 || a[0] != '-' || (a[1] >= '0' && a[1] <= '9') || a[1] == '.') continue;  // a value, not a flag
    a = a.substr(0, a.find('='));
    if (std::find(flags.begin(), flags.end(), a) != flags.end()) continue;
    return "unknown option \"" + a + "\" for \"" + word + "\"" + did_you_mean(a, flags) + " (see gradrun " + word + " --help)";
  }
  return "";
}

}  // namespace gr::cli

int main(int argc, char** argv) {
  using namespace gr;
  CLI::App app{"gradrun: bit-exact training of small models described by JSON specs"};
  app.name("gradrun");
  app.require_subcommand(1);
  app.set_version_flag("--version", "gradrun 0.1.0");
  cli::add_train(app);
  cli::add_check(app);
  cli::add_grad(app);
  cli::add_inspect(app);
  cli::add_export(app);
  cli::add_emit(app);
  cli::add_predict(app);
  cli::add_evaluate(app);
  cli::add_generate(app);
  cli::add_import(app);
  cli::add_diff(app);
  cli::add_regress(app);
  cli::add_cv(app);
  cli::add_sweep(app);
  for (CLI::App* sub : app.get_subcommands([](const CLI::App*) { return true; })) {
    sub->add_option("--set", cli::g_sets,
                    "Override a spec value before it is read: PATH=VALUE, PATH dotted (optimizer.lr) or a JSON pointer "
                    "(/optimizer/lr), VALUE JSON or a plain string; repeatable")
        ->take_all()
        ->allow_extra_args(false);
    sub->add_option("--log-level", cli::g_log_level,
                    std::string("Diagnostics shown on stderr and written to --log-file: ") + diag::level_names() +
                        " (default info; --quiet shows only errors on stderr)");
    sub->add_option("--log-file", cli::g_log_file, "Also append diagnostics, with timestamps, to this file");
  }
  app.parse_complete_callback([&app] { cli::configure_diagnostics(app); });  // runs before the command's callback
  auto fail = [](const char* what, int code) {
    if (cli::g_comm && cli::g_comm->size() > 1) {  // one line naming the rank, then the whole job ends
      diag::error("rank " + std::to_string(cli::g_comm->rank()) + " of " + std::to_string(cli::g_comm->size()) + ": " +
                  cli::printable_line(what));
      cli::g_comm->abort(code);
    }
    diag::error(cli::printable_line(what));
    return code;
  };
  try {
    if (const std::string why = fp_environment_problem(); !why.empty()) throw Error(why);
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    if (e.get_exit_code() == 0) return app.exit(e);
    if (const std::string s = cli::suggest_usage(app, argc, argv, dynamic_cast<const CLI::ExtrasError*>(&e) != nullptr); !s.empty())
      return fail(s.c_str(), 2);
    return fail((std::string(e.what()) + " (see gradrun --help or gradrun COMMAND --help)").c_str(), 2);
  } catch (const cli::CheckFailed&) {
    if (cli::g_comm && cli::g_comm->size() > 1) cli::g_comm->abort(1);
    return 1;
  } catch (const InputError& e) {
    return fail(e.what(), 2);
  } catch (const cli::UsageError& e) {
    return fail(e.what(), 2);
  } catch (const IoError& e) {
    return fail(e.what(), 3);
  } catch (const DivergedError& e) {
    return fail(e.what(), 3);
  } catch (const Error& e) {
    return fail(e.what(), 3);
  } catch (const std::bad_alloc&) {
    return fail("out of memory", 3);
  } catch (const std::exception& e) {
    return fail((std::string("internal error: ") + e.what()).c_str(), 3);
  }
  return 0;
}
