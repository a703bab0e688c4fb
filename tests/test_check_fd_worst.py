#!/usr/bin/env python3
"""check --fd names the worst FAILING element of a failing parameter (issue 37 item 6).

usage: test_check_fd_worst.py GRADRUN

p = [0, 1]; loss = sum(relu(p)) + sum(p·p·p·c) with c = [0, 1e4], checked with eps 0.1 and rtol
0.01. Element 0 sits on relu's kink: analytic 0, finite difference 0.5 (error 0.5, fails: rel 1).
Element 1: analytic 30001, finite difference 30101 (the cubic's eps² term, error 100 — the larger
absolute error, but within 0.01 × 30101 = 301). The old report named element 1, which passes.
"""
import json
import os
import subprocess
import sys
import tempfile

GR = os.path.abspath(sys.argv[1])
spec = {
    "gradrun": 1, "name": "kink",
    "consts": {"c": {"shape": [2], "values": [0, 10000]}},
    "params": {"p": {"shape": [2], "init": {"values": [0, 1]}}},
    "graph": [{"id": "r", "op": "relu", "inputs": ["p"]},
              {"id": "s", "op": "sum", "inputs": ["r"]},
              {"id": "q", "op": "mul", "inputs": ["p", "p"]},
              {"id": "q3", "op": "mul", "inputs": ["q", "p"]},
              {"id": "w", "op": "mul", "inputs": ["q3", "c"]},
              {"id": "t", "op": "sum", "inputs": ["w"]},
              {"id": "loss", "op": "add", "inputs": ["s", "t"]}],
    "loss": "loss",
}
with tempfile.TemporaryDirectory() as tmp:
    path = os.path.join(tmp, "kink.json")
    with open(path, "w") as f:
        json.dump(spec, f)
    p = subprocess.run([GR, "check", path, "--fd", "--eps", "0.1", "--rtol", "0.01"], capture_output=True, text=True)
    out = p.stdout
    fails = []
    if p.returncode != 1:
        fails.append(f"exit {p.returncode}, wanted 1 (a failing check): {p.stderr}")
    if "worst failing element 0: analytic 0," not in out:
        fails.append("the report does not name element 0 (the failing one):\n" + out)
    if "1 of 2 elements fail" not in out:
        fails.append("the report does not count the failing elements:\n" + out)
for f in fails:
    print("FAIL:", f)
print("check_fd_worst:", "FAILED" if fails else "ok")
sys.exit(1 if fails else 0)
