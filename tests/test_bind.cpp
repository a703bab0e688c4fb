// test_bind.cpp — the emit.bind grammar (lib/emit/bind_expr.h): what it accepts and re-prints, what
// it refuses and where, and that a spec holding a refused bind is refused when it is read.
#include <catch2/catch.hpp>
#include <filesystem>
#include <fstream>
#include <string>

#include "emit/bind_expr.h"
#include "io/errors.h"
#include "spec/spec.h"
#include "train/host_build.h"

using namespace gr;

namespace {

std::string ok(const std::string& e, EmitSignature sig = EmitSignature::Dataset, int64_t params = 2) {
  return parse_bind(e, sig, params);
}

// The refusal's message ("column N: ..."); fails the test when the bind is accepted.
std::string refused(const std::string& e, EmitSignature sig = EmitSignature::Dataset, int64_t params = 2) {
  try {
    const std::string got = parse_bind(e, sig, params);
    FAIL("accepted \"" << e << "\" as \"" << got << "\"");
  } catch (const BindError& err) {
    return err.what();
  }
  return "";
}

}  // namespace

TEST_CASE("bind grammar: every bind the examples and docs use is accepted and re-printed as written", "[bind]") {
  // specs/linreg.json, tests/golden/emit/all_ops.json, docs/emit.md and tests/test_emit.cpp.
  for (const char* e : {"(double)x", "v", "0.125", "2.0", "(double)x + 1.0", "(double)x * 2.0"}) CHECK(ok(e) == e);
  CHECK(ok("2.0", EmitSignature::Params) == "2.0");
}

TEST_CASE("bind grammar: the re-print is canonical", "[bind]") {
  CHECK(ok("  ( double )  x+1.5e-3 ") == "(double)x + 1.5e-3");
  CHECK(ok("p[1]*v/(float)x") == "p[1] * v / (float)x");
  CHECK(ok("- -v") == "-(-v)");  // never "--v", a decrement
  CHECK(ok("-(double)x - -p[0]") == "-(double)x - -p[0]");
  CHECK(ok("((v))") == "((v))");
  CHECK(ok(".5f * v") == ".5f * v");
  CHECK(ok("p[0]", EmitSignature::Params, 1) == "p[0]");
  CHECK(ok("-1") == "-1");
}

TEST_CASE("bind grammar: calls, builtins, other names and pointer casts are refused at their column", "[bind]") {
  const std::string printf_bind = R"((double)x + 0*__builtin_printf("INJECTED"))";
  CHECK_THAT(refused(printf_bind), Catch::StartsWith("column 15: \"__builtin_printf\" is not allowed"));
  CHECK_THAT(refused("sin(v)"), Catch::StartsWith("column 1: \"sin\" is not allowed"));
  CHECK_THAT(refused("v + no_such_symbol"), Catch::StartsWith("column 5: \"no_such_symbol\""));
  CHECK_THAT(refused("(char*)v"), Catch::StartsWith("column 2:") && Catch::Contains("only casts to double or float"));
  CHECK_THAT(refused("(double*)v"), Catch::StartsWith("column 8:"));
  CHECK_THAT(refused("(long)x"), Catch::Contains("only casts to double or float"));
  CHECK_THAT(refused("*p"), Catch::StartsWith("column 1:"));
  CHECK_THAT(refused("p"), Catch::StartsWith("column 2:"));
  CHECK_THAT(refused("p[2]"), Catch::Contains("p[2] does not exist: the spec has 2 parameters"));
  CHECK_THAT(refused("p[01]"), Catch::Contains("leading zeros"));
  CHECK_THAT(refused("p[99999999999999]"), Catch::Contains("out of range"));
  CHECK_THAT(refused("x", EmitSignature::Params), Catch::StartsWith("column 1: \"x\" is not allowed") && Catch::Contains("p[k]"));
  CHECK_THAT(refused("v", EmitSignature::Params), Catch::StartsWith("column 1:"));
  CHECK_THAT(refused("v, v"), Catch::StartsWith("column 2: unexpected \",\""));
  CHECK_THAT(refused("v = 1.0"), Catch::StartsWith("column 3:"));
  CHECK_THAT(refused("v ? 1.0 : 2.0"), Catch::StartsWith("column 3:"));
  CHECK_THAT(refused("\"str\""), Catch::StartsWith("column 1: unexpected \"\\x22\""));
  CHECK_THAT(refused("v // c"), Catch::StartsWith("column 4:"));
  CHECK_THAT(refused("v /* c */"), Catch::StartsWith("column 4:"));
  CHECK_THAT(refused("v\n#include <stdio.h>"), Catch::StartsWith("column 2: a bind is one line"));
  CHECK_THAT(refused("v; 1.0"), Catch::StartsWith("column 2:"));
  CHECK_THAT(refused("{v}"), Catch::StartsWith("column 1:"));
  CHECK_THAT(refused("v \\"), Catch::StartsWith("column 3:"));
  CHECK_THAT(refused("#error x"), Catch::StartsWith("column 1:"));
  CHECK_THAT(refused("v & 1"), Catch::StartsWith("column 3:"));
  CHECK_THAT(refused("x[0]"), Catch::StartsWith("column 2:"));
  CHECK_THAT(refused(""), Catch::Contains("empty"));
  CHECK_THAT(refused("   "), Catch::Contains("empty"));
  CHECK_THAT(refused("v +"), Catch::Contains("end of expression"));
  CHECK_THAT(refused("(v"), Catch::Contains("closes the parenthesis"));
}

TEST_CASE("bind grammar: numbers are decimal, in range, and integer arithmetic is refused", "[bind]") {
  CHECK_THAT(refused("0x10"), Catch::Contains("malformed number"));
  CHECK_THAT(refused("010"), Catch::Contains("octal"));
  CHECK_THAT(refused("1.2.3"), Catch::Contains("malformed number"));
  CHECK_THAT(refused("1e"), Catch::Contains("exponent"));
  CHECK_THAT(refused("1e999"), Catch::Contains("out of range"));
  CHECK_THAT(refused("1e39f"), Catch::Contains("out of range"));
  CHECK_THAT(refused("12345678901234567890"), Catch::Contains("out of range"));
  CHECK_THAT(refused("1u"), Catch::Contains("malformed number"));
  CHECK_THAT(refused("x + 1"), Catch::StartsWith("column 3: integer arithmetic"));
  CHECK_THAT(refused("1 / 0"), Catch::StartsWith("column 3: integer arithmetic"));
  CHECK(ok("(double)x / 0") == "(double)x / 0");  // a double division: inf, no trap
}

TEST_CASE("bind grammar: length and nesting are bounded", "[bind]") {
  CHECK_THAT(refused(std::string(4097, '1')), Catch::Contains("at most 4096 characters"));
  CHECK_THAT(refused(std::string(100, '(') + "v" + std::string(100, ')')), Catch::Contains("nested more than 64"));
  CHECK_THAT(refused(std::string(100, '-') + "v"), Catch::Contains("nested more than 64"));
  CHECK(ok(std::string(30, '(') + "v" + std::string(30, ')')).size() == 61);
}

TEST_CASE("bind grammar: messages are one printable line", "[bind]") {
  const std::string m = refused("v\x01\xff");
  CHECK(m.find('\x01') == std::string::npos);
  CHECK(m.find('\xff') == std::string::npos);
  CHECK(m.find('\n') == std::string::npos);
  CHECK(printable(std::string(100, 'a')).size() == 48 + 3);
}

TEST_CASE("function names: C identifiers the emitted file does not reserve", "[bind]") {
  CHECK(function_name_problem("grad").empty());
  CHECK(function_name_problem("loss_grad2").empty());
  CHECK_FALSE(function_name_problem("").empty());
  CHECK_FALSE(function_name_problem("2fast").empty());
  CHECK_FALSE(function_name_problem("f(){}int g").empty());
  CHECK_FALSE(function_name_problem("f\n#include").empty());
  CHECK_FALSE(function_name_problem("__builtin_trap").empty());
  CHECK_FALSE(function_name_problem("_Exit").empty());
  CHECK_FALSE(function_name_problem("gr_verify_binds").empty());
  CHECK_FALSE(function_name_problem("gr_emit_grad").empty());
  CHECK_FALSE(function_name_problem(std::string(65, 'f')).empty());
}

TEST_CASE("spec: a bind outside the grammar is refused when the spec is read, at its pointer", "[bind]") {
  TempDir dir("gr_test_bind_");
  const std::string path = (dir.path() / "spec.json").string();
  auto load = [&](const std::string& emit) {
    std::ofstream(path) << R"({"gradrun": 1, "params": {"w": {"shape": [1], "init": "ones"}}, "consts": {"c": {"value": 1}},
      "graph": [{"id": "loss", "op": "mul", "inputs": ["w", "c"]}], "loss": "loss", "emit": )" + emit + "}";
    return load_spec(path);
  };
  CHECK(load(R"({"bind": {"c": "(double)x"}})").emit.bind.at("c") == "(double)x");
  try {
    load(R"j({"bind": {"c": "(double)x + 0*__builtin_printf(\"INJECTED\")"}})j");
    FAIL("accepted");
  } catch (const InputError& e) {
    CHECK(e.place() == "/emit/bind/c");
    CHECK_THAT(e.what(), Catch::Contains("column 15: \"__builtin_printf\" is not allowed"));
  }
  // The params signature has no x.
  CHECK_THROWS_AS(load(R"({"signature": "params", "bind": {"c": "(double)x"}})"), InputError);
  try {
    load(R"({"function": "grad(){}\n#error"})");
    FAIL("accepted");
  } catch (const InputError& e) {
    CHECK(e.place() == "/emit/function");
    CHECK(std::string(e.what()).find('\n') == std::string::npos);
  }
}
