// gradrun — train, check and inspect models described by JSON specs (docs/cli.md).
#include <cstdio>
#include <cstring>

#include "cli.h"
#include "tensor/fpenv.h"
#include "tensor/parallel.h"
#include "train/device_runner.h"
#include "train/trainer.h"

namespace gr::cli {

Spec load_with_overrides(const std::string& path, const Overrides& o) {
  Spec s = load_spec(path);
  if (o.seed) s.seed = *o.seed;
  if (o.epochs) s.train.epochs = *o.epochs;
  return s;
}

DeviceChoice choose_device(const Spec& spec, const std::string& device_flag, const std::string& dtype_flag, bool fuse_flag,
                           bool quiet) {
  DeviceChoice d;
  d.kind = spec.device.kind;
  d.dtype = spec.device.dtype;
  d.fuse = fuse_flag ? FuseMode::On : spec.device.fuse;
  // CLI11 admits only the known words; a word it let through that is not one is a bug here.
  if (!device_flag.empty() && !parse_device_kind(device_flag, d.kind)) throw UsageError("unknown device " + device_flag);
  if (!dtype_flag.empty() && !parse_dtype(dtype_flag, d.dtype)) throw UsageError("unknown dtype " + dtype_flag);
  if (d.kind == DeviceKind::Auto) {
    std::string why;
    d.backend = open_backend(DeviceKind::Auto, &why);
    d.kind = d.backend ? DeviceKind::Cuda : DeviceKind::Cpu;
    if (!quiet)
      std::fprintf(stderr, "gradrun: device auto: %s\n", d.backend ? "using CUDA" : ("using the CPU tape (" + why + ")").c_str());
  }
  if (d.kind == DeviceKind::Cpu && d.dtype == DType::F32)
    throw UsageError("dtype f32 needs a device engine (--device host or cuda); the CPU tape computes in f64");
  if (d.fuse == FuseMode::On && d.kind == DeviceKind::Cpu) throw UsageError("--fuse needs a device engine (--device host or cuda)");
  return d;
}

void add_threads_option(CLI::App* command, int& threads) {
  threads = hardware_threads();
  command->add_option("--threads", threads, "Worker threads (default: all cores); any count gives the same bits")
      ->check(CLI::Range(1, 1024));
}

void apply_threads(int threads) { set_num_threads(threads); }

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
  auto fail = [](const char* what, int code) {
    std::fprintf(stderr, "gradrun: error: %s\n", cli::printable_line(what).c_str());
    return code;
  };
  try {
    if (const std::string why = fp_environment_problem(); !why.empty()) throw Error(why);
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    if (e.get_exit_code() == 0) return app.exit(e);
    return fail((std::string(e.what()) + " (see gradrun --help or gradrun COMMAND --help)").c_str(), 2);
  } catch (const cli::CheckFailed&) {
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
