#!/usr/bin/env python3
"""gradrun regress (issue 37 item 3): a suite of specs x engines against golden runs.

usage: test_regress.py GRADRUN   (run from the repository root)

- a two-case suite (iris on cpu/host/fused, xor on cpu and cpu-f32): --update makes the goldens
  (every engine of a dtype must land on the same golden), then the suite passes, with a JUnit
  file that has the structure CI servers read (testsuites > testsuite > testcase with classname,
  name, time; failures counted) and a JSON file;
- a changed spec (lr) fails every engine of its case, naming the spec, exit 1, the JUnit failures
  carrying the message; --update promotes the new run printing what changed, and the suite
  passes again;
- train --junit (an --expect pass and a failure naming the step) and check --fd / --replay --junit
  write one test case each;
- the repository's own goldens (tests/suite/golden) equal tests/golden/NAME.loss.csv, which the
  other tests read.
"""
import json
import os
import shutil
import subprocess
import sys
import tempfile
import xml.etree.ElementTree as ET

GR = os.path.abspath(sys.argv[1])
ROOT = os.getcwd()
fails = []


def run(*args, code=0):
    p = subprocess.run([GR, *args], capture_output=True, text=True)
    if p.returncode != code:
        fails.append(f"{' '.join(args)}: exit {p.returncode}, wanted {code}\n{p.stdout}\n{p.stderr}")
    return p


def check(cond, what):
    if not cond:
        fails.append(what)


def junit(path, want_tests, want_failures):
    root = ET.parse(path).getroot()
    check(root.tag == "testsuites", f"JUnit root <{root.tag}>")
    suites = root.findall("testsuite")
    check(len(suites) == 1, f"{len(suites)} testsuite elements")
    for s in suites:
        for attr in ("name", "tests", "failures", "errors", "time"):
            check(attr in s.attrib, f"testsuite lacks {attr}")
        cases = s.findall("testcase")
        check(int(s.get("tests", -1)) == len(cases) == want_tests, f"tests={s.get('tests')}, {len(cases)} testcases, want {want_tests}")
        failed = [c for c in cases if c.find("failure") is not None]
        check(int(s.get("failures", -1)) == len(failed) == want_failures, f"failures={s.get('failures')}, {len(failed)} failed, want {want_failures}")
        for c in cases:
            for attr in ("classname", "name", "time"):
                check(attr in c.attrib, f"testcase lacks {attr}")
            float(c.get("time", "x0").lstrip("x"))
            f = c.find("failure")
            check(f is None or f.get("message"), "a failure without a message")
    return root


with tempfile.TemporaryDirectory() as tmp:
    for name in ("iris", "xor"):
        s = json.load(open(os.path.join(ROOT, "specs", name + ".json")))
        if "data" in s:
            s["data"]["csv"] = os.path.join(ROOT, "datasets", os.path.basename(s["data"]["csv"]))
        s["train"]["epochs"] = 6
        json.dump(s, open(os.path.join(tmp, name + ".json"), "w"))
    suite = {"gradrun_suite": 1, "goldens": "golden", "engines": ["cpu", "host", "fused"],
             "cases": [{"spec": "iris.json"}, {"spec": "xor.json", "engines": ["cpu", "cpu-f32"]}]}
    sp = os.path.join(tmp, "suite.json")
    json.dump(suite, open(sp, "w"))
    p = run("regress", sp, "--update", "--jobs", "2")
    check(os.path.exists(os.path.join(tmp, "golden", "iris", "receipt.json")) and os.path.exists(os.path.join(tmp, "golden", "xor-f32", "loss.csv")),
          f"--update made no goldens: {p.stdout}")
    jx, jj = os.path.join(tmp, "r.xml"), os.path.join(tmp, "r.json")
    p = run("regress", sp, "--jobs", "2", "--junit", jx, "--json", jj)
    check("5 passed, 0 failed" in p.stdout, f"suite: {p.stdout}")
    junit(jx, 5, 0)
    check(json.load(open(jj))["passed"] == 5, "JSON results")

    s = json.load(open(os.path.join(tmp, "iris.json")))
    s["optimizer"]["lr"] = 0.0123
    json.dump(s, open(os.path.join(tmp, "iris.json"), "w"))
    p = run("regress", sp, "--jobs", "2", "--junit", jx, code=1)
    check(p.stdout.count("FAIL") >= 3 and "spec differs" in p.stdout and "3 failed" in p.stdout, f"changed spec: {p.stdout}")
    root = junit(jx, 5, 3)
    msgs = [f.get("message") for f in root.iter("failure")]
    check(all("spec differs" in m for m in msgs), f"JUnit failure messages {msgs}")
    p = run("regress", sp, "--update", "--jobs", "2")
    check("updated" in p.stdout and "golden/iris" in p.stdout and "loss.csv" in p.stdout, f"--update after a change: {p.stdout}")
    p = run("regress", sp, "--jobs", "2")
    check("5 passed, 0 failed" in p.stdout, f"after --update: {p.stdout}")
    run("regress", os.path.join(tmp, "nope.json"), code=3)

    # train --junit and check --junit: one test case each, a failure carrying the message
    jt = os.path.join(tmp, "t.xml")
    run("train", os.path.join(tmp, "xor.json"), "--out", os.path.join(tmp, "tx"), "-q", "--junit", jt,
        "--expect", os.path.join(tmp, "golden", "xor"))
    junit(jt, 1, 0)
    run("train", os.path.join(tmp, "xor.json"), "--out", os.path.join(tmp, "tx2"), "-q", "--junit", jt, "--set", "optimizer.lr=0.5",
        "--expect", os.path.join(tmp, "golden", "xor", "loss.csv"), code=1)
    root = junit(jt, 1, 1)
    check("at step 2" in next(root.iter("failure")).get("message", ""), "train --junit: the failure does not name the step")
    run("check", os.path.join(tmp, "xor.json"), "--fd", "--junit", jt)
    junit(jt, 1, 0)
    run("check", os.path.join(tmp, "xor.json"), "--replay", "--episodes", "3", "--junit", jt)
    junit(jt, 1, 0)

# the repository's goldens agree with the loss logs the other tests read
for d in sorted(os.listdir(os.path.join(ROOT, "tests/suite/golden"))):
    a = os.path.join(ROOT, "tests/suite/golden", d, "loss.csv")
    b = os.path.join(ROOT, "tests/golden", d + ".loss.csv")
    check(os.path.exists(b) and open(a, "rb").read() == open(b, "rb").read(), f"tests/suite/golden/{d}/loss.csv != tests/golden/{d}.loss.csv")

for f in fails:
    print("FAIL:", f)
print("regress:", "FAILED" if fails else "ok")
sys.exit(1 if fails else 0)
