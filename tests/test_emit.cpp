// test_emit.cpp — the scalar CUDA-C emitter (lib/emit, docs/emit.md): the emitted gradient function
// reproduces the tape bit for bit (special values, the linreg example over its whole data set;
// every supported op in test_emit_ops.cpp), compiles with NVRTC without FMA (when NVRTC is present) and warning-free on the
// host, matches the golden sources byte for byte, and refuses what it cannot emit, naming the node.
#include <dlfcn.h>
#include <sys/wait.h>

#include <algorithm>
#include <bit>
#include <catch2/catch.hpp>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>

#include "emit/emit.h"
#include "train/emit_spec.h"
#include "train/host_build.h"
#include "emit/kernel_text.h"
#include "io/errors.h"
#include "support/skip.h"

namespace fs = std::filesystem;
using namespace gr;

namespace {

std::string source_path(const std::string& rel) { return std::string(GR_SOURCE_DIR) + "/" + rel; }

std::string read_text(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

void write_text(const fs::path& p, const std::string& text) { std::ofstream(p, std::ios::binary) << text; }

// A spec file (and optional CSV) in a temp folder, loaded.
struct TempSpec {
  TempDir dir{"gr_test_emit_"};
  std::string path;
  Spec spec;
  TempSpec(const std::string& json, const std::string& csv = "") {
    if (!csv.empty()) write_text(dir.path() / "data.csv", csv);
    path = (dir.path() / "spec.json").string();
    write_text(path, json);
    spec = load_spec(path);
  }
};

// The InputError a spec's emission throws (fails the test when it does not throw).
InputError emit_error(const Spec& spec) {
  try {
    SpecEmitter e(spec);
  } catch (const InputError& e) {
    return e;
  }
  FAIL("the emitter accepted the spec");
  throw std::logic_error("unreachable");
}

std::string scalar_data_spec(const std::string& params, const std::string& graph, const std::string& loss,
                             const std::string& extra = "") {
  return R"({"gradrun": 1, "data": {"csv": "data.csv", "inputs": {"x": {"column": "x"}, "y": {"column": "y"}}},
             "params": )" +
         params + R"(, "graph": )" + graph + R"(, "loss": ")" + loss + R"(", )" + extra +
         R"( "emit": {"bind": {"x": "(double)x", "y": "v"}}})";
}

const char* kSmallCsv = "x,y\n0,1.5\n1,-2\n2,0.25\n";

// ---- NVRTC, loaded at test time (no link-time dependency on CUDA) ------------------------------
struct Nvrtc {
  using Program = void*;
  int (*create)(Program*, const char*, const char*, int, const char* const*, const char* const*) = nullptr;
  int (*compile)(Program, int, const char* const*) = nullptr;
  int (*log_size)(Program, size_t*) = nullptr;
  int (*log)(Program, char*) = nullptr;
  int (*ptx_size)(Program, size_t*) = nullptr;
  int (*ptx)(Program, char*) = nullptr;
  int (*destroy)(Program*) = nullptr;
  void* lib = nullptr;
  std::string where;

  static Nvrtc* get() {
    static Nvrtc n;
    static bool tried = false;
    if (!tried) {
      tried = true;
      std::vector<std::string> candidates = {"libnvrtc.so", "libnvrtc.so.13", "libnvrtc.so.12"};
      for (const char* env : {"CUDA_HOME", "CUDA_PATH"})
        if (const char* d = std::getenv(env)) candidates.push_back(std::string(d) + "/lib64/libnvrtc.so");
      for (const char* f : {"libnvrtc.so.13", "libnvrtc.so.12", "libnvrtc.so"})
        candidates.push_back(std::string("/usr/local/cuda/lib64/") + f);
      for (const std::string& c : candidates)
        if ((n.lib = ::dlopen(c.c_str(), RTLD_NOW | RTLD_LOCAL))) {
          n.where = c;
          break;
        }
      if (n.lib) {
        auto sym = [&](auto& fn, const char* name) { fn = reinterpret_cast<std::remove_reference_t<decltype(fn)>>(::dlsym(n.lib, name)); };
        sym(n.create, "nvrtcCreateProgram");
        sym(n.compile, "nvrtcCompileProgram");
        sym(n.log_size, "nvrtcGetProgramLogSize");
        sym(n.log, "nvrtcGetProgramLog");
        sym(n.ptx_size, "nvrtcGetPTXSize");
        sym(n.ptx, "nvrtcGetPTX");
        sym(n.destroy, "nvrtcDestroyProgram");
        if (!n.create || !n.compile || !n.log_size || !n.log || !n.ptx_size || !n.ptx || !n.destroy) n.lib = nullptr;
      }
    }
    return n.lib ? &n : nullptr;
  }

  // Compiles to PTX; false with the log on failure.
  bool to_ptx(const std::string& src, std::string& ptx_out, std::string& log_out) const {
    Program p = nullptr;
    if (create(&p, src.c_str(), "emitted.cu", 0, nullptr, nullptr) != 0) {
      log_out = "nvrtcCreateProgram failed";
      return false;
    }
    const char* opts[] = {"--gpu-architecture=compute_90", "--fmad=false", "--std=c++17"};
    const int rc = compile(p, 3, opts);
    size_t n = 0;
    log_size(p, &n);
    log_out.assign(n, '\0');
    if (n) log(p, log_out.data());
    while (!log_out.empty() && (log_out.back() == '\0' || log_out.back() == '\n')) log_out.pop_back();
    if (rc == 0) {
      ptx_size(p, &n);  // counts the trailing NUL
      ptx_out.assign(n, '\0');
      ptx(p, ptx_out.data());
    }
    destroy(&p);
    return rc == 0;
  }
};

int run_cli(const std::string& args, std::string& out, std::string& err) {
#ifdef GR_GRADRUN
  TempDir d("gr_test_emit_cli_");
  const std::string o = (d.path() / "out").string(), e = (d.path() / "err").string();
  const std::string cmd = std::string("'") + GR_GRADRUN + "' " + args + " >'" + o + "' 2>'" + e + "'";
  const int status = std::system(cmd.c_str());
  out = read_text(o);
  err = read_text(e);
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
#else
  (void)args, (void)out, (void)err;
  return -1;
#endif
}

}  // namespace

TEST_CASE("emit: literals read back as the same bits", "[emit]") {
  const double values[] = {0.0, -0.0, 1.0, -3.0, 0.5, 0.1, -0.7, 1e-310, -4.9406564584124654e-324, 2.2250738585072014e-308,
                           1.7976931348623157e308, 9007199254740991.0, 9007199254740992.0, 1e300, 123456.789, -1.0 / 3.0};
  for (double v : values) {
    const std::string lit = c_double_literal(v);
    INFO(v << " -> " << lit);
    const double back = std::strtod(lit.c_str(), nullptr);
    CHECK(std::bit_cast<uint64_t>(back) == std::bit_cast<uint64_t>(v));
  }
  CHECK(c_double_literal(-0.0) == "-0.0");
  CHECK(c_double_literal(3.0) == "3.0");
  CHECK(c_double_literal(0.75) == "0x1.8p-1");
  CHECK(c_double_literal(HUGE_VAL) == "gr_from_bits(0x7ff0000000000000LL)");
  CHECK(c_double_literal(-HUGE_VAL) == "gr_from_bits((long long)0xfff0000000000000ULL)");
  CHECK(c_double_literal(std::bit_cast<double>(uint64_t{0x7ff8000000000123})) == "gr_from_bits(0x7ff8000000000123LL)");
}

TEST_CASE("emit: the embedded kernel headers are the kernels/ files", "[emit]") {
  const auto headers = embedded_kernel_headers();
  REQUIRE(headers.size() == 3);
  for (const EmbeddedHeader& h : headers) {
    INFO(h.name);
    const std::string file = read_text(source_path(std::string(h.name)));
    CHECK(h.text.find("#include") == std::string_view::npos);
    CHECK(h.text.find("#pragma once") == std::string_view::npos);
    // Every line of the embedded text is a line of the header, in order.
    std::istringstream lines{std::string(h.text)};
    size_t at = 0;
    for (std::string line; std::getline(lines, line);) {
      const size_t found = file.find(line + "\n", at);
      REQUIRE(found != std::string::npos);
      at = found + line.size() + 1;
    }
  }
}

TEST_CASE("emit: special values (±0, ±inf, NaN, subnormals) verify bit for bit", "[emit]") {
  // y = 0 and -0 make log(y*y) = -inf and w/y = ±inf; inf - inf makes NaN; tiny y makes subnormals;
  // relu sees 0 and -0; sqrt takes -0; the sum of c*y = -0.0 is +0.0 (the tape's accumulator starts at
  // 0.0), which decides whether w / sum is +inf or -inf and so whether the sigmoid is 1 or 0.
  const TempSpec s(scalar_data_spec(R"({"w": {"shape": [1], "init": {"values": [0.75]}}, "c": {"shape": [1], "init": {"values": [-0.0]}}})",
                                    R"([{"id": "yy", "op": "mul", "inputs": ["y", "y"]},
                                        {"id": "l", "op": "log", "inputs": ["yy"]},
                                        {"id": "wl", "op": "mul", "inputs": ["w", "l"]},
                                        {"id": "d", "op": "div", "inputs": ["w", "y"]},
                                        {"id": "s", "op": "add", "inputs": ["wl", "d"]},
                                        {"id": "cy", "op": "mul", "inputs": ["c", "y"]},
                                        {"id": "r", "op": "relu", "inputs": ["cy"]},
                                        {"id": "q", "op": "sqrt", "inputs": ["cy"]},
                                        {"id": "rq", "op": "add", "inputs": ["r", "q"]},
                                        {"id": "cz", "op": "sum", "inputs": ["cy"]},
                                        {"id": "wz", "op": "div", "inputs": ["w", "cz"]},
                                        {"id": "sg", "op": "sigmoid", "inputs": ["wz"]},
                                        {"id": "rs", "op": "add", "inputs": ["rq", "sg"]},
                                        {"id": "t", "op": "add", "inputs": ["s", "rs"]},
                                        {"id": "loss", "op": "sum", "inputs": ["t"]}])",
                                    "loss"),
                   "x,y\n0,0\n1,-0\n2,1e-300\n3,-1e-300\n4,4.9e-324\n5,1e308\n6,-1e308\n7,2\n8,-3\n");
  SpecEmitter e(s.spec);
  const EmitVerifyResult r = e.verify();
  INFO(r.difference);
  REQUIRE(r.ok);
  CHECK(r.examples == 9);
}

TEST_CASE("emit: the linreg example verifies over its whole data set", "[emit]") {
  const Spec spec = load_spec(source_path("specs/linreg.json"));
  SpecEmitter e(spec);
  std::ifstream csv(source_path("datasets/linreg.csv"));
  int64_t rows = -1;  // minus the header
  for (std::string line; std::getline(csv, line);) rows += line.empty() ? 0 : 1;
  REQUIRE(rows > 1);
  CHECK(e.examples() == rows);
  const EmitVerifyResult r = e.verify();
  INFO(r.difference);
  REQUIRE(r.ok);
  CHECK(r.examples == rows);
  CHECK(r.params == 2);
  CHECK(r.compiler.find("-ffp-contract=off") != std::string::npos);
}

TEST_CASE("emit: golden sources, byte for byte (regenerate with scripts/regen-emit-golden)", "[emit]") {
  for (const auto& [spec_file, golden] : {std::pair{"specs/linreg.json", "tests/golden/emit/linreg.cu"},
                                          std::pair{"tests/golden/emit/all_ops.json", "tests/golden/emit/all_ops.cu"}}) {
    INFO(spec_file << " vs " << golden);
    const std::string want = read_text(source_path(golden));
    REQUIRE(!want.empty());
    const std::string got = SpecEmitter(load_spec(source_path(spec_file))).source();
    if (got != want) {  // name the first differing line
      std::istringstream a(got), b(want);
      std::string la, lb;
      int line = 1;
      while (std::getline(a, la) && std::getline(b, lb) && la == lb) ++line;
      FAIL("line " << line << ":\n  emitted: " << la << "\n  golden:  " << lb
                   << "\n(an intended change? run scripts/regen-emit-golden and review the diff)");
    }
  }
}

TEST_CASE("emit: the emitted source compiles with NVRTC, without FMA", "[emit][nvrtc]") {
  const Nvrtc* nv = Nvrtc::get();
  if (!nv) {
    GR_SKIP("nvrtc", "NVRTC (libnvrtc.so) is not available here: the NVRTC compile check did not run");
  }
  INFO("NVRTC from " << nv->where);
  for (const char* spec_file : {"tests/golden/emit/all_ops.json", "specs/linreg.json"}) {
    INFO(spec_file);
    SpecEmitter e(load_spec(source_path(spec_file)));
    std::string ptx, log;
    // The file alone: a __device__ function and the scalar definitions.
    CHECK(nv->to_ptx(e.source(), ptx, log));
    INFO(log);
    // Called from a kernel, so the PTX holds the function's arithmetic.
    const std::string fn = std::string(spec_file).find("linreg") != std::string::npos ? "grad" : "all_ops_grad";
    const std::string probe = e.source() +
                              "\nextern \"C\" __global__ void gr_emit_probe(double* g, const double* p, long long n) {\n"
                              "  for (long long i = 0; i < n; ++i) " + fn + "(i, 0.5 * (double)i, g, p);\n}\n";
    REQUIRE(nv->to_ptx(probe, ptx, log));
    CHECK(log.find("warning") == std::string::npos);
    CHECK(ptx.find("gr_emit_probe") != std::string::npos);
    CHECK(ptx.find("add.rn.f64") != std::string::npos);
    CHECK(ptx.find("mul.rn.f64") != std::string::npos);
    CHECK(ptx.find("fma") == std::string::npos);
  }
}

TEST_CASE("emit: the emitted source compiles warning-free on the host and stands alone", "[emit]") {
  SpecEmitter e(load_spec(source_path("tests/golden/emit/all_ops.json")));
  CHECK(e.source().find("\n#include") == std::string::npos);
  TempDir d("gr_test_emit_host_");
  write_text(d.path() / "emitted.cpp", e.source());
  const HostCompile c = compile_shared_object(d.path() / "emitted.cpp", d.path() / "emitted.so",
                                              {"-Wall", "-Wextra", "-Wpedantic", "-Wshadow", "-Werror"});
  INFO(c.command << "\n" << c.output);
  CHECK(c.ok);
  CHECK(c.output.empty());
}

TEST_CASE("emit: the params signature, bound consts and a custom function name", "[emit]") {
  const TempSpec s(R"({"gradrun": 1,
      "params": {"w": {"shape": [1], "init": {"values": [1.5]}}, "b": {"shape": [1, 1], "init": {"values": [[-0.25]]}}},
      "consts": {"t": {"value": 2.0}, "k": {"value": 0.1}},
      "graph": [{"id": "wk", "op": "mul", "inputs": ["w", "k"]},
                {"id": "z", "op": "add", "inputs": ["wk", "b"]},
                {"id": "th", "op": "tanh", "inputs": ["z"]},
                {"id": "loss", "op": "mse", "inputs": ["th", "t"]}],
      "loss": "loss",
      "emit": {"bind": {"t": "2.0"}, "signature": "params", "function": "loss_grad"}})");
  SpecEmitter e(s.spec);
  CHECK(e.examples() == 1);
  CHECK(e.source().find("__device__ void loss_grad(double* g, const double* p) {") != std::string::npos);
  CHECK(e.source().find("= 0x1.999999999999ap-4;") != std::string::npos);  // k = 0.1 inlined exactly
  const EmitVerifyResult r = e.verify();
  INFO(r.difference);
  REQUIRE(r.ok);
  CHECK(r.params == 2);
}

TEST_CASE("emit: a loss without a parameter upstream emits no backward code", "[emit]") {
  const TempSpec s(scalar_data_spec(R"({"w": {"shape": [1], "init": "ones"}})",
                                    R"([{"id": "loss", "op": "exp", "inputs": ["y"]}])", "loss"),
                   kSmallCsv);
  SpecEmitter e(s.spec);
  CHECK(e.source().find("gr_accumulate(") == e.source().rfind("gr_accumulate("));  // only its definition
  CHECK(e.source().find("gr_emit_grad(g, 0, 0.0);") != std::string::npos);
  const EmitVerifyResult r = e.verify();
  INFO(r.difference);
  CHECK(r.ok);
}

TEST_CASE("emit: names from the spec cannot break out of their comments", "[emit]") {
  // A trailing backslash (or the trigraph ??/) would splice the next line into a // comment; a line
  // break would end it, so names with control characters are refused when the spec is read.
  const TempSpec s(R"J({"gradrun": 1, "name": "n */ x = 1; //??/",
      "params": {"w\\": {"shape": [1], "init": {"values": [0.5]}}},
      "consts": {"c": {"value": 3}},
      "graph": [{"id": "a??/", "op": "mul", "inputs": ["w\\", "c"]},
                {"id": "loss\\", "op": "mul", "inputs": ["a??/", "a??/"]}],
      "loss": "loss\\", "emit": {"signature": "params"}})J");
  SpecEmitter e(s.spec);
  CHECK(e.source().find("?\?/") == std::string::npos);
  const EmitVerifyResult r = e.verify();
  INFO(r.difference);
  CHECK(r.ok);
  try {
    TempSpec bad(R"J({"gradrun": 1, "params": {"w": {"shape": [1], "init": "ones"}},
        "graph": [{"id": "a\nb", "op": "mul", "inputs": ["w", "w"]}], "loss": "a\nb"})J");
    FAIL("a name with a line break was accepted");
  } catch (const InputError& err) {
    CHECK(err.place() == "/graph/0/id");
    CHECK(std::string(err.what()).find('\n') == std::string::npos);
  }
}

TEST_CASE("emit: refusals name the node", "[emit]") {
  SECTION("a node with more than one element") {
    const TempSpec s(scalar_data_spec(R"({"w": {"shape": [1], "init": "ones"}})",
                                      R"([{"id": "xx", "op": "concat", "inputs": ["x", "x"], "axis": 1},
                                          {"id": "m", "op": "mul", "inputs": ["xx", "w"]},
                                          {"id": "loss", "op": "sum", "inputs": ["m"]}])",
                                      "loss"),
                     kSmallCsv);
    const InputError err = emit_error(s.spec);
    CHECK(err.place() == "/graph/0");
    CHECK_THAT(err.what(), Catch::Contains("\"xx\"") && Catch::Contains("[1, 2]") && Catch::Contains("exactly one element"));
    CHECK(std::string(err.what()).rfind(s.path + ": /graph/0: ", 0) == 0);
  }
  SECTION("an op without a scalar form, though its values hold one element") {
    const TempSpec s(scalar_data_spec(R"({"W": {"shape": [1, 1], "init": "ones"}})",
                                      R"([{"id": "h", "op": "tanh", "inputs": ["x"]},
                                          {"id": "z", "op": "matmul", "inputs": ["h", "W"]},
                                          {"id": "loss", "op": "mse", "inputs": ["z", "y"]}])",
                                      "loss"),
                     kSmallCsv);
    const InputError err = emit_error(s.spec);
    CHECK(err.place() == "/graph/1");
    CHECK_THAT(err.what(), Catch::Contains("\"z\"") && Catch::Contains("does not support matmul"));
  }
  SECTION("a parameter with more than one element") {
    const TempSpec s(scalar_data_spec(R"({"w": {"shape": [2], "init": "ones"}})",
                                      R"([{"id": "loss", "op": "sum", "inputs": ["w"]}])", "loss"),
                     kSmallCsv);
    const InputError err = emit_error(s.spec);
    CHECK(err.place() == "/params/w");
    CHECK_THAT(err.what(), Catch::Contains("[2]"));
  }
  SECTION("a non-scalar const in the loss's cone") {
    const TempSpec s(scalar_data_spec(R"({"w": {"shape": [1], "init": "ones"}})",
                                      R"([{"id": "m", "op": "mul", "inputs": ["big", "w"]},
                                          {"id": "loss", "op": "sum", "inputs": ["m"]}])",
                                      "loss", R"("consts": {"big": {"shape": [3], "values": [1, 2, 3]}},)"),
                     kSmallCsv);
    CHECK(emit_error(s.spec).place() == "/consts/big");
  }
  SECTION("a data input without a C expression") {
    const TempSpec s(R"({"gradrun": 1, "data": {"csv": "data.csv", "inputs": {"x": {"column": "x"}, "y": {"column": "y"}}},
        "params": {"w": {"shape": [1], "init": "ones"}},
        "graph": [{"id": "m", "op": "mul", "inputs": ["x", "w"]}, {"id": "loss", "op": "mse", "inputs": ["m", "y"]}],
        "loss": "loss", "emit": {"bind": {"x": "(double)x"}}})",
                     kSmallCsv);
    const InputError err = emit_error(s.spec);
    CHECK(err.place() == "/data/inputs/y");
    CHECK_THAT(err.what(), Catch::Contains("emit.bind"));
  }
  SECTION("binding a parameter, an unknown name, a bad expression, a bad function name") {
    const std::string base = R"({"gradrun": 1, "params": {"w": {"shape": [1], "init": "ones"}}, "consts": {"c": {"value": 1}},
        "graph": [{"id": "loss", "op": "mul", "inputs": ["w", "c"]}], "loss": "loss", "emit": )";
    CHECK(emit_error(TempSpec(base + R"({"bind": {"w": "1.0"}}})").spec).place() == "/emit/bind/w");
    CHECK(emit_error(TempSpec(base + R"({"bind": {"nope": "1.0"}}})").spec).place() == "/emit/bind/nope");
    // A bind outside the grammar and a function name that is no identifier: refused when read.
    auto load_error = [&](const std::string& emit) -> std::string {
      try {
        TempSpec t(base + emit);
      } catch (const InputError& e) {
        return e.place();
      }
      return "accepted";
    };
    CHECK(load_error(R"({"bind": {"c": "1.0; 2.0"}}})") == "/emit/bind/c");
    CHECK(load_error(R"({"function": "2fast"}})") == "/emit/function");
  }
}

TEST_CASE("emit: verify names the first difference", "[emit]") {
  // The bind says x is the example index plus one, the data says it is the index: the harness sees
  // the emitted code and the tape disagree on the data and stops at example 0.
  const TempSpec s(R"({"gradrun": 1, "data": {"csv": "data.csv", "inputs": {"x": {"column": "x"}, "y": {"column": "y"}}},
      "params": {"w": {"shape": [1], "init": "ones"}},
      "graph": [{"id": "m", "op": "mul", "inputs": ["x", "w"]}, {"id": "loss", "op": "mse", "inputs": ["m", "y"]}],
      "loss": "loss", "emit": {"bind": {"x": "(double)x + 1.0", "y": "v"}}})",
                   kSmallCsv);
  SpecEmitter e(s.spec);
  const EmitVerifyResult r = e.verify();
  CHECK_FALSE(r.ok);
  CHECK(r.examples == 0);
  CHECK_THAT(r.difference, Catch::Contains("example 0") && Catch::Contains("\"x\"") && Catch::Contains("(double)x + 1.0"));

  // Emitted code that does not compile (a keyword as the function name; a bind outside the grammar
  // never gets this far, see test_bind.cpp): the host build fails and says so.
  const TempSpec bad(R"({"gradrun": 1, "params": {"w": {"shape": [1], "init": "ones"}}, "consts": {"c": {"value": 1}},
      "graph": [{"id": "loss", "op": "mul", "inputs": ["w", "c"]}], "loss": "loss",
      "emit": {"function": "double"}})");
  const EmitVerifyResult rb = SpecEmitter(bad.spec).verify();
  CHECK_FALSE(rb.ok);
  CHECK_THAT(rb.difference, Catch::Contains("does not compile"));
}

TEST_CASE("emit-cuda: the command line", "[emit][cli]") {
#ifndef GR_GRADRUN
  GR_SKIP("build", "GR_GRADRUN is not defined: the command-line checks did not run");
#else
  std::string out, err;
  // Success: the source on stdout, the verify report on stderr.
  REQUIRE(run_cli("emit-cuda '" + source_path("specs/linreg.json") + "' --verify", out, err) == 0);
  CHECK(out == SpecEmitter(load_spec(source_path("specs/linreg.json"))).source());
  CHECK_THAT(err, Catch::Contains("verify: OK: 32 examples"));

  // -o writes the file; the report goes to stdout.
  TempDir d("gr_test_emit_cli_out_");
  const std::string file = (d.path() / "grad.cu").string();
  REQUIRE(run_cli("emit-cuda '" + source_path("specs/linreg.json") + "' -o '" + file + "'", out, err) == 0);
  CHECK(read_text(file) == read_text(source_path("tests/golden/emit/linreg.cu")));
  CHECK_THAT(out, Catch::Contains("wrote"));

  // A refused spec: exit 2, one line naming the file and the node.
  const TempSpec s(scalar_data_spec(R"({"W": {"shape": [1, 1], "init": "ones"}})",
                                    R"([{"id": "z", "op": "matmul", "inputs": ["x", "W"]},
                                        {"id": "loss", "op": "mse", "inputs": ["z", "y"]}])",
                                    "loss"),
                   kSmallCsv);
  CHECK(run_cli("emit-cuda '" + s.path + "'", out, err) == 2);
  CHECK(out.empty());
  CHECK(err.rfind("gradrun: error: " + s.path + ": /graph/0: ", 0) == 0);
  CHECK(std::count(err.begin(), err.end(), '\n') == 1);

  // A failed verify: exit 1, the first difference named.
  const TempSpec v(R"({"gradrun": 1, "data": {"csv": "data.csv", "inputs": {"x": {"column": "x"}, "y": {"column": "y"}}},
      "params": {"w": {"shape": [1], "init": "ones"}},
      "graph": [{"id": "m", "op": "mul", "inputs": ["x", "w"]}, {"id": "loss", "op": "mse", "inputs": ["m", "y"]}],
      "loss": "loss", "emit": {"bind": {"x": "(double)x * 2.0", "y": "v"}}})",
                   kSmallCsv);
  CHECK(run_cli("emit-cuda '" + v.path + "' -o '" + (d.path() / "v.cu").string() + "' --verify", out, err) == 1);
  CHECK_THAT(out, Catch::Contains("verify: FAILED") && Catch::Contains("example 1"));
#endif
}
