// gradrun emit-cuda SPEC [-o FILE] [--verify] — the per-example loss's gradient as a CUDA-C
// __device__ function derived from the tape (docs/emit.md).
#include <cstdio>
#include <memory>

#include "cli.h"
#include "train/emit_spec.h"
#include "io/atomic_file.h"

namespace gr::cli {

namespace {

struct EmitFlags {
  std::string spec, out;
  bool verify = false;
};

void run_emit(const EmitFlags& f) {
  const Spec spec = load_with_overrides(f.spec, {});
  SpecEmitter emitter(spec);
  // The source goes to stdout unless -o names a file; reports then go to stderr.
  FILE* report = f.out.empty() ? stderr : stdout;
  if (f.out.empty()) {
    std::fwrite(emitter.source().data(), 1, emitter.source().size(), stdout);
    std::fflush(stdout);
  } else {
    write_file_atomic(f.out, emitter.source());
    const size_t n = emitter.param_names().size();
    std::fprintf(report, "wrote %s (%s, %zu parameter%s)\n", f.out.c_str(), spec.emit.function.c_str(), n, n == 1 ? "" : "s");
  }
  if (!f.verify) return;
  const EmitVerifyResult r = emitter.verify();
  if (!r.ok) {
    std::fprintf(report, "verify: FAILED after %lld of %lld examples: %s\n", static_cast<long long>(r.examples),
                 static_cast<long long>(emitter.examples()), r.difference.c_str());
    std::fflush(report);
    throw CheckFailed{};
  }
  std::fprintf(report, "verify: built on the host with: %s\n", r.compiler.c_str());
  std::fprintf(report, "verify: OK: %lld examples x %lld parameters: the loss and every gradient are bit-identical to the tape\n",
               static_cast<long long>(r.examples), static_cast<long long>(r.params));
  if (r.nan_bit_differences)
    std::fprintf(report,
                 "verify: note: %lld NaN results were NaN on both sides but with different sign or payload bits "
                 "(IEEE 754 leaves those unspecified; see docs/emit.md)\n",
                 static_cast<long long>(r.nan_bit_differences));
}

}  // namespace

void add_emit(CLI::App& app) {
  auto f = std::make_shared<EmitFlags>();
  CLI::App* c = app.add_subcommand("emit-cuda", "Write the per-example loss's gradient as a CUDA-C __device__ function");
  c->add_option("spec", f->spec, "The spec file (every node the loss depends on must hold one element)")->required();
  c->add_option("-o,--out", f->out, "Output file (default: standard output)");
  c->add_flag("--verify", f->verify,
              "Build the emitted function on the host (-ffp-contract=off) and require the loss and every gradient to match "
              "the tape bit for bit on every example of the data set");
  c->callback([f] { run_emit(*f); });
}

}  // namespace gr::cli
