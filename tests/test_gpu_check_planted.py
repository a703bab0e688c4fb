#!/usr/bin/env python3
"""A planted mismatch is a failure naming its step, not "no GPU" (issue 39 items 4 and 8).

usage: test_gpu_check_planted.py BUILD_DIR      (a build configured with -DGR_TEST_PLANT_MISMATCH=ON)

Runs scripts/gpu-check's comparison steps on the host backend with the build as it is
(--compare-only: no probe, no build) for iris, with GRADRUN_TEST_FLIP_BIT=grk_add_fwd: the per-node
add kernel flips the lowest bit of its output element 0. gpu-check must exit 1; its summary must name
the step `check --replay --device host iris` with the first differing node (the add node "h2",
element 0); the fused step, whose kernels are generated and do not call grk_add_fwd, must pass; the
table must end with the counts; the closing line must be a failure, not the no-GPU stop (exit 2);
gpu-report.md must carry the difference in iris's f64 host per-node cell.
"""
import os
import re
import subprocess
import sys
import tempfile

build = os.path.abspath(sys.argv[1])
top = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
with tempfile.TemporaryDirectory() as tmp:
    env = dict(os.environ, GR_BUILD_DIR=build)
    env.pop("OUT", None)
    p = subprocess.run([os.path.join(top, "scripts", "gpu-check"), "--compare-only", "--examples", "iris",
                        "--plant", "grk_add_fwd", "--report", tmp], cwd=top, env=env, capture_output=True, text=True)
    summary = open(os.path.join(tmp, "summary.txt")).read() if os.path.exists(os.path.join(tmp, "summary.txt")) else ""
    report = open(os.path.join(tmp, "gpu-report.md")).read() if os.path.exists(os.path.join(tmp, "gpu-report.md")) else ""
fails = []
if p.returncode != 1:
    fails.append(f"exit {p.returncode}, wanted 1 (a failure)")
want = 'FAIL check --replay --device host iris: REPLAY DIFFERS: episode 1: node 7 (add [30, 16], spec node "h2") value element 0:'
if want not in summary:
    fails.append("the summary does not name the failed step and its first differing node: " + want)
if not re.search(r"^check --replay --device host --fuse iris +PASS ", summary, re.M):
    fails.append("the fused comparison (no grk_add_fwd) did not pass")
if not re.search(r"^\d+ passed, [1-9]\d* failed, \d+ not run", summary, re.M):
    fails.append("no counts line (N passed, M failed, K not run)")
closing = summary.strip().splitlines()[-1] if summary.strip() else ""
if not closing.startswith("gpu-check: FAILED:") or "STOPPED" in closing:
    fails.append("closing line is not a failure: " + closing)
if not re.search(r"^\| iris \| f64 \| not run[^|]*\| not run[^|]*\| \*\*FAIL\(1\)\*\*: REPLAY DIFFERS", report, re.M):
    fails.append("gpu-report.md lacks the difference in iris's f64 host per-node cell")
if fails:
    print("stdout:\n" + p.stdout[-4000:] + "\nstderr:\n" + p.stderr[-2000:])
    for f in fails:
        print("FAIL: " + f)
    sys.exit(1)
print("planted mismatch reported as a failure naming its step:\n  " + want)
