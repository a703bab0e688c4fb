#!/usr/bin/python3
"""Checks gradrun's parameter init against the numpy reference in docs/spec.md, bit for bit.

Usage: /usr/bin/python3 tests/init_numpy.py GRADRUN_BINARY
Runs `gradrun train tests/specs/init_kinds.json --epochs 1`, then recomputes every parameter of
its init.safetensors with the code block tagged `init-reference` in docs/spec.md (executed as
written, so the docs cannot drift from the implementation) and compares the bytes.
"""
import json
import os
import re
import struct
import subprocess
import sys
import tempfile

try:
    import numpy as np
except ImportError:
    # Exit 77: ctest reports Skipped (SKIP_RETURN_CODE), and scripts/test fails on it, since
    # scripts/setup installs python3-numpy (tests/support/skip.h describes GR_SKIP_LOG).
    why = "numpy is not available to /usr/bin/python3"
    print("SKIPPED [numpy]: init_numpy -- " + why)
    if os.environ.get("GR_SKIP_LOG"):
        with open(os.environ["GR_SKIP_LOG"], "a") as log:
            log.write("numpy\tinit_numpy\t" + why + "\n")
    sys.exit(77)

root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
doc = open(os.path.join(root, "docs", "spec.md")).read()
block = re.search(r"```python init-reference\n(.*?)```", doc, re.S)
if not block:
    sys.exit("docs/spec.md has no ```python init-reference block")
ns = {}
exec(block.group(1), ns)

spec_path = os.path.join(root, "tests", "specs", "init_kinds.json")
spec = json.load(open(spec_path))
with tempfile.TemporaryDirectory() as out:
    subprocess.run([sys.argv[1], "train", spec_path, "--out", out, "--quiet"], check=True)
    raw = open(os.path.join(out, "init.safetensors"), "rb").read()
n = struct.unpack("<Q", raw[:8])[0]
header = json.loads(raw[8:8 + n])
data = raw[8 + n:]

passed = failed = 0
for index, (name, p) in enumerate(spec["params"].items()):
    want = ns["init_param"](p["init"], p["shape"], spec["seed"], index)
    info = header[name]
    lo, hi = info["data_offsets"]
    got = np.frombuffer(data[lo:hi], dtype="<f8").reshape(info["shape"])
    if want.shape == got.shape and want.astype("<f8").tobytes() == got.tobytes():
        passed += 1
        print("ok   %s" % name)
    else:
        failed += 1
        print("FAIL %s: numpy %r vs gradrun %r" % (name, want.ravel()[:4], got.ravel()[:4]))
print("%d passed, %d failed" % (passed, failed))
sys.exit(1 if failed else 0)
