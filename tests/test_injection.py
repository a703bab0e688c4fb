#!/usr/bin/python3
"""The injection corpus: spec strings that try to become code never reach a compiler as code.

    /usr/bin/python3 tests/test_injection.py GRADRUN [CASE...]

Each case mutates specs/linreg.json (2 epochs) with one hostile string — a bind that calls a
builtin, a name with a line break, quotes, `*/`, `#include`, `#error`, a trigraph, a very long
name ... — and runs
    gradrun train SPEC --device host --fuse      (host JIT of the replay and fused kernels)
    gradrun check SPEC --replay --episodes 2     (host JIT, lockstep with the CPU tape)
    gradrun emit-cuda SPEC -o OUT.cu --verify    (the emitter, then the host compiler)
with every module cached in one fresh folder ($GRADRUN_CACHE). For every run it checks that
  - the run was not killed by a signal, and exited 0 (the string was data: kept, escaped) or 2
    (refused, with exactly one printable `gradrun: error:` line naming the spec);
  - nothing printed PWNED: the payloads that would print it if they ran spell it in pieces;
  - emit-cuda --verify did not fail to compile (exit 1): a compile error means spec text was read
    by the compiler as code.
After all cases it checks the generated sources themselves:
  - no source in the module cache contains the marker GRINJ that every payload carries (spec
    strings never reach the host/NVRTC/fusion sources at all);
  - in every emitted .cu file the marker appears only after `//` on its line, and the file's
    preprocessor lines are exactly those of the unmodified spec's emitted file.
A case may also pin its outcome (`refused` / `accepted`) so the grammar cannot silently widen.
Prints `ok   NAME` / `FAIL NAME: why`, then a summary; exits 1 on any failure.
"""
import concurrent.futures
import copy
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PW = '"%s%s\\n", "PW", "NED"'  # printf arguments that print PWNED only when executed


def rename(spec, old, new):
    """Renames a data input, parameter or node everywhere it is referenced."""
    s = copy.deepcopy(spec)
    for section in (s["data"]["inputs"], s["params"]):
        if old in section:
            section[new] = section.pop(old)
    for n in s["graph"]:
        if n["id"] == old:
            n["id"] = new
        n["inputs"] = [new if i == old else i for i in n["inputs"]]
    if s["loss"] == old:
        s["loss"] = new
    b = s.get("emit", {}).get("bind", {})
    if old in b:
        b[new] = b.pop(old)
    return s


def bind(expr, leaf="y"):
    def f(s):
        s["emit"]["bind"][leaf] = expr
        return s
    return f


def setkey(path, value):
    def f(s):
        d = s
        for k in path[:-1]:
            d = d.setdefault(k, {})
        d[path[-1]] = value
        return s
    return f


def ren(old, new):
    return lambda s: rename(s, old, new)


LONG = "GRINJ" + "n" * 100000
CASES = [
    # name, mutation, expected outcome of reading the spec: "refused" (exit 2) or "accepted"
    ("bind_builtin_printf", bind("v + 0*__builtin_printf(" + PW + ")"), "refused"),
    ("bind_builtin_trap", bind("v + 0*(__builtin_trap(), 1) /* GRINJ */"), "refused"),
    ("bind_call", bind("v + puts(\"GRINJ\")"), "refused"),
    ("bind_newline_include", bind("v\n#include \"/etc/passwd\" // GRINJ"), "refused"),
    ("bind_newline_error", bind("v\n#error GRINJ"), "refused"),
    ("bind_hash_error", bind("#error GRINJ"), "refused"),
    ("bind_block_comment", bind("v /* GRINJ */"), "refused"),
    ("bind_comment_end", bind("v */ GRINJ"), "refused"),
    ("bind_line_comment", bind("v // GRINJ"), "refused"),
    ("bind_semicolon", bind("v; __builtin_printf(" + PW + "); // GRINJ"), "refused"),
    ("bind_braces", bind("({ __builtin_printf(" + PW + "); v; }) // GRINJ"), "refused"),
    ("bind_backslash_splice", bind("v \\\n GRINJ"), "refused"),
    ("bind_pointer_cast", bind("*(double*)&v + 0*GRINJ"), "refused"),
    ("bind_char_pointer_cast", bind("(char*)GRINJ"), "refused"),
    ("bind_string", bind("\"GRINJ\"[0]"), "refused"),
    ("bind_sizeof", bind("sizeof(GRINJ)"), "refused"),
    ("bind_ternary", bind("v ? v : GRINJ"), "refused"),
    ("bind_comma", bind("(GRINJ, v)"), "refused"),
    ("bind_param_out_of_range", bind("p[99] + 0*GRINJ"), "refused"),
    ("bind_integer_trap", bind("x / 0 + 0*GRINJ", "x"), "refused"),
    ("bind_macro_name", bind("__LINE__ + GRINJ"), "refused"),
    ("bind_trigraph", bind("v ??/\nGRINJ"), "refused"),
    ("bind_very_long", bind("v" + " + 0.0" * 2000 + " + GRINJ"), "refused"),
    ("bind_ok_canonical", bind("( double )x*1.0", "x"), "accepted"),
    ("function_code", setkey(["emit", "function"], "grad(){} int GRINJ"), "refused"),
    ("function_newline", setkey(["emit", "function"], "grad\n#error GRINJ"), "refused"),
    ("function_builtin", setkey(["emit", "function"], "__builtin_trap"), "refused"),
    ("function_reserved", setkey(["emit", "function"], "gr_verify_binds"), "refused"),
    ("function_very_long", setkey(["emit", "function"], LONG), "refused"),
    ("name_newline", setkey(["name"], "GRINJ\n#error x"), "refused"),
    ("name_comment_tricks", setkey(["name"], "GRINJ */ #error x \" ' //??/"), "accepted"),
    ("name_very_long", setkey(["name"], LONG), "refused"),
    ("param_backslash", ren("w", "GRINJ_w\\"), "accepted"),
    ("param_newline", ren("w", "w\n#error GRINJ"), "refused"),
    ("node_quote_comment", ren("pred", "pred\"GRINJ*/ #include <x>"), "accepted"),
    ("node_crlf_include", ren("pred", "pred\r\n#include \"GRINJ\""), "refused"),
    ("node_very_long", ren("pred", LONG), "refused"),
    ("node_256", ren("pred", "GRINJ" + "n" * 251), "accepted"),
    ("input_hash_error", ren("x", "x #error GRINJ"), "accepted"),
    ("input_nul", ren("x", "x\u0000GRINJ"), "refused"),
    ("loss_trigraph", ren("loss", "GRINJ??/"), "accepted"),
    ("description_code", setkey(["description"], "GRINJ\n#error x\n*/"), "accepted"),
]


def run(argv, env, cwd):
    p = subprocess.run(argv, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=300)
    return p.returncode, p.stdout.decode("utf-8", "replace"), p.stderr.decode("utf-8", "replace")


def check_case(gradrun, name, mutate, expect, work, cache):
    d = os.path.join(work, name)
    os.makedirs(d)
    with open(os.path.join(ROOT, "specs/linreg.json")) as f:
        spec = json.load(f)
    spec["data"]["csv"] = os.path.join(ROOT, "datasets/linreg.csv")
    spec["train"]["epochs"] = 2
    spec = mutate(spec)
    path = os.path.join(d, "spec.json")
    with open(path, "w") as f:
        json.dump(spec, f)
    env = dict(os.environ, GRADRUN_CACHE=cache)
    cu = os.path.join(d, "out.cu")
    cmds = [
        ("train", [gradrun, "train", path, "--device", "host", "--fuse", "--out", os.path.join(d, "run"), "--quiet"]),
        ("check", [gradrun, "check", path, "--replay", "--episodes", "2"]),
        ("emit", [gradrun, "emit-cuda", path, "-o", cu, "--verify"]),
    ]
    problems, codes = [], set()
    for label, argv in cmds:
        rc, out, err = run(argv, env, d)
        codes.add(rc)
        both = out + err
        if rc < 0:
            problems.append(f"{label}: killed by signal {-rc}")
        if "PWNED" in both:
            problems.append(f"{label}: a payload ran (PWNED printed)")
        if label == "emit" and (rc == 1 or "does not compile" in both):
            problems.append(f"emit: spec text reached the compiler as code: {both.strip()[:300]}")
        if rc not in (0, 2):
            problems.append(f"{label}: exit {rc}: {both.strip()[:300]}")
        if rc == 2:
            lines = err.splitlines()
            if len(lines) != 1 or not lines[0].startswith("gradrun: error: ") or path not in lines[0]:
                problems.append(f"{label}: refusal is not one located line: {err[:300]!r}")
            elif any(ord(c) < 0x20 or ord(c) == 0x7f for c in lines[0]):
                problems.append(f"{label}: control characters in the message")
    outcome = "refused" if codes == {2} else "accepted" if codes == {0} else f"mixed {sorted(codes)}"
    if outcome != expect:
        problems.append(f"expected {expect}, got {outcome}")
    return problems, (cu if os.path.exists(cu) else None)


def preprocessor_lines(text):
    return sorted(l.strip() for l in text.splitlines() if l.lstrip().startswith("#"))


def main():
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    gradrun, only = os.path.abspath(sys.argv[1]), set(sys.argv[2:])
    work = tempfile.mkdtemp(prefix="gr_injection_")
    cache = os.path.join(work, "cache")
    failed = 0
    try:
        base_problems, base_cu = check_case(gradrun, "base", lambda s: s, "accepted", work, cache)
        if base_problems or not base_cu:
            print("FAIL base: " + "; ".join(base_problems))
            return 1
        with open(base_cu) as f:
            base_pp = preprocessor_lines(f.read())
        cases = [c for c in CASES if not only or c[0] in only]
        with concurrent.futures.ThreadPoolExecutor(max_workers=min(4, os.cpu_count() or 2)) as pool:
            futs = {c[0]: pool.submit(check_case, gradrun, c[0], c[1], c[2], work, cache) for c in cases}
            for name, _, _ in cases:
                problems, cu = futs[name].result()
                if cu:
                    with open(cu, encoding="utf-8", errors="replace") as f:
                        text = f.read()
                    for i, line in enumerate(text.splitlines(), 1):
                        at = line.find("GRINJ")
                        if at >= 0 and not (0 <= line.find("//") < at):
                            problems.append(f"emitted line {i} holds the marker outside a comment: {line[:120]!r}")
                    if preprocessor_lines(text) != base_pp:
                        problems.append("the emitted file's preprocessor lines differ from the base spec's")
                print(("ok   " if not problems else "FAIL ") + name + ("" if not problems else ": " + "; ".join(problems)))
                failed += bool(problems)
        # The device path's generated sources never hold spec text.
        sources = 0
        for dirpath, _, files in os.walk(cache):
            for fn in files:
                if fn.endswith((".cpp", ".cu", ".h")):
                    sources += 1
                    with open(os.path.join(dirpath, fn), "rb") as f:
                        if b"GRINJ" in f.read():
                            print(f"FAIL cache: {os.path.join(dirpath, fn)} holds spec text")
                            failed += 1
        if sources == 0:
            print("FAIL cache: no generated source was found under " + cache + " (did the host JIT run?)")
            failed += 1
        print(f"{len(cases) - failed} passed, {failed} failed ({len(cases)} cases, {sources} cached sources scanned)")
        return 1 if failed else 0
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
