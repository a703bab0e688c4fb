#!/usr/bin/env python3
"""receipt.json and `train --expect RUN_DIR|receipt.json` (issue 37 item 1; docs/cli.md).

usage: test_expect_receipt.py GRADRUN   (run from the repository root)

- every run writes receipt.json: data digests per split, spec/model/run identities, file digests
  (metrics.csv without seconds: equal for two runs of the same bits), provenance;
- --expect RUN_DIR and --expect RUN_DIR/receipt.json pass on the same run, say so, and run.json
  records {"expect": {"outcome": "passed"}};
- a validation-row edit fails before training naming the validation rows (the loss log alone would
  pass: the golden loss.csv is still met); a training label flip names the training rows; a
  changed optimizer value names the spec; a weights-only difference names the parameter with its
  max abs/rel difference; a loss difference names the step with abs and rel; run.json records
  "failed" with the detail;
- --rtol/--atol: an f32 run against the f64 golden passes within rtol 1e-4 (said in stdout and
  run.json) and fails bitwise or too tight;
- --expect LOSS_CSV keeps working;
- gradrun diff: equal runs exit 0; a planted one-op change is located by --at 1 at that node (the
  replay is checked against each run's own loss.csv); an lr change parts the parameters at step 2.
"""
import hashlib
import json
import os
import shutil
import struct
import subprocess
import sys
import tempfile

GR = os.path.abspath(sys.argv[1])
ROOT = os.getcwd()
sys.path.insert(0, os.path.join(ROOT, "tests", "support"))
from cli_support import Cli  # noqa: E402  (run gradrun, collect failures)

cli = Cli(GR)
fails, run, check = cli.fails, cli.run, cli.check


def read(p, mode="r"):
    with open(p, mode) as f:
        return f.read()


def expect_of(run_dir):
    return json.loads(read(os.path.join(run_dir, "run.json"))).get("expect", {})


with tempfile.TemporaryDirectory() as tmp:
    data = os.path.join(tmp, "iris.csv")
    shutil.copy(os.path.join(ROOT, "datasets/iris.csv"), data)
    spec = json.load(open(os.path.join(ROOT, "specs/iris.json")))
    spec["data"]["csv"] = "iris.csv"
    spec["train"]["epochs"] = 12
    sp = os.path.join(tmp, "iris.json")
    json.dump(spec, open(sp, "w"))
    golden = os.path.join(tmp, "golden")
    run("train", sp, "--out", golden, "-q")
    rc = json.loads(read(os.path.join(golden, "receipt.json")))
    for key in ("data", "files", "provenance", "spec_sha256", "model_sha256", "run_sha256"):
        check(key in rc, f"receipt.json lacks {key}")
    check({"loss.csv", "metrics.csv", "weights.safetensors"} <= set(rc.get("files", {})), f"receipt files {rc.get('files')}")
    check(rc["data"]["train_rows"] == 120 and rc["data"]["validation_rows"] == 30, f"receipt data {rc['data']}")
    # provenance names the commit the binary was built from: HEAD at build time, not at configure
    # time (a build folder outlives commits; cmake/git_commit.cmake). Run after a build of this tree.
    head = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True)
    want = head.stdout.strip() if head.returncode == 0 else ""
    got = rc.get("provenance", {}).get("git_commit")
    check(got == want, f"receipt git_commit {got!r}, but HEAD is {want!r} (rebuild after committing?)")

    # the same run passes, from the folder and from the receipt
    for tag, g in (("folder", golden), ("receipt", os.path.join(golden, "receipt.json"))):
        out = os.path.join(tmp, "same-" + tag)
        p = run("train", sp, "--out", out, "--expect", g)
        check(any(l.strip().startswith("expect:") and "equal" in l for l in p.stdout.splitlines()), f"{tag}: no passing line: {p.stdout!r}")
        check(expect_of(out).get("outcome") == "passed", f"{tag}: run.json expect {expect_of(out)}")
        mine = json.loads(read(os.path.join(out, "receipt.json")))
        check(mine["files"] == rc["files"], f"{tag}: file digests differ from an identical run's (metrics.csv seconds?)")

    # a validation-row edit: the golden loss.csv alone still passes; the receipt names the rows
    rows = read(data).splitlines()
    found = False
    for i in range(1, len(rows)):
        edited = rows[:i] + [",".join(rows[i].split(",")[:-2] + [str(float(rows[i].split(",")[-2]) + 0.1), rows[i].split(",")[-1]])] + rows[i + 1:]
        with open(os.path.join(tmp, "edited.csv"), "w") as f:
            f.write("\n".join(edited) + "\n")
        es = dict(spec, data=dict(spec["data"], csv="edited.csv"))
        esp = os.path.join(tmp, "edited.json")
        json.dump(es, open(esp, "w"))
        p = subprocess.run([GR, "train", esp, "--out", os.path.join(tmp, "edit"), "--force", "-q", "--expect", golden],
                           capture_output=True, text=True)
        if "validation rows differ" in p.stderr:
            found = True
            check(p.returncode == 1 and p.stderr.count("\n") == 1, f"validation edit: exit {p.returncode}: {p.stderr!r}")
            p2 = subprocess.run([GR, "train", esp, "--out", os.path.join(tmp, "edit2"), "-q", "--expect",
                                 os.path.join(golden, "loss.csv")], capture_output=True, text=True)
            # standardization uses the training rows only, so a validation edit leaves the loss log as it was
            check(p2.returncode == 0, f"a validation edit changed the loss log itself: {p2.stderr!r}")
            break
        check("training rows differ" in p.stderr and p.returncode == 1, f"row {i} edit: {p.stderr!r}")
    check(found, "no row edit was reported as a validation-row difference")

    # a label flip in every fifth row: training rows named
    flipped = [rows[0]] + [r if i % 5 else ",".join(r.split(",")[:-1] + [str((int(r.split(",")[-1]) + 1) % 3)])
                           for i, r in enumerate(rows[1:])]
    with open(os.path.join(tmp, "flipped.csv"), "w") as f:
        f.write("\n".join(flipped) + "\n")
    fs = dict(spec, data=dict(spec["data"], csv="flipped.csv"))
    json.dump(fs, open(os.path.join(tmp, "flipped.json"), "w"))
    p = run("train", os.path.join(tmp, "flipped.json"), "--out", os.path.join(tmp, "flip"), "-q", "--expect", golden, code=1)
    check("rows differ" in p.stderr, f"label flip: {p.stderr!r}")
    check(not os.path.exists(os.path.join(tmp, "flip")), "a failed input check left a run folder")

    # a changed optimizer value: the spec is named before any step
    p = run("train", sp, "--out", os.path.join(tmp, "lr"), "-q", "--set", "optimizer.lr=0.0100001", "--expect", golden, code=1)
    check("spec differs" in p.stderr, f"lr change: {p.stderr!r}")
    # ... while a loss log golden names the step with abs and rel
    p = run("train", sp, "--out", os.path.join(tmp, "lr2"), "-q", "--set", "optimizer.lr=0.0100001", "--expect",
            os.path.join(golden, "loss.csv"), code=1)
    check("at step 2" in p.stderr and "abs " in p.stderr and "rel " in p.stderr, f"loss difference: {p.stderr!r}")
    check(expect_of(os.path.join(tmp, "lr2")).get("outcome") == "failed", f"run.json expect {expect_of(os.path.join(tmp, 'lr2'))}")

    # a weights-only difference: the golden's W2 changed (and its receipt digest with it)
    g2 = os.path.join(tmp, "golden2")
    shutil.copytree(golden, g2)
    wpath = os.path.join(g2, "weights.safetensors")
    raw = bytearray(read(wpath, "rb"))
    n = struct.unpack("<Q", raw[:8])[0]
    header = json.loads(raw[8:8 + n])
    names = [k for k in header if k != "__metadata__"]
    b0, _ = header["W2"]["data_offsets"]
    v = struct.unpack("<d", raw[8 + n + b0:8 + n + b0 + 8])[0]
    raw[8 + n + b0:8 + n + b0 + 8] = struct.pack("<d", v + 1e-3)
    with open(wpath, "wb") as f:
        f.write(raw)
    h = hashlib.sha256()
    for k in sorted(names, key=lambda k: header[k]["data_offsets"][0]):
        b, e = header[k]["data_offsets"]
        h.update(raw[8 + n + b:8 + n + e])
    r2 = json.loads(read(os.path.join(g2, "receipt.json")))
    r2["files"]["weights.safetensors"] = h.hexdigest()
    with open(os.path.join(g2, "receipt.json"), "w") as f:
        json.dump(r2, f)
    out = os.path.join(tmp, "wonly")
    p = run("train", sp, "--out", out, "-q", "--expect", g2, code=1)
    check("weights.safetensors differs in 1 parameter" in p.stderr and "W2" in p.stderr and "0.001" in p.stderr,
          f"weights-only: {p.stderr!r}")
    check(expect_of(out).get("outcome") == "failed" and "W2" in expect_of(out).get("detail", ""), f"weights-only run.json {expect_of(out)}")

    # tolerances where bits cannot hold: an f32 run against the f64 golden fails bitwise, passes
    # within rtol 1e-4 (and says so, in stdout and run.json), fails within a too tight rtol
    run("train", sp, "--out", os.path.join(tmp, "f32a"), "-q", "--dtype", "f32", "--expect", golden, code=1)
    p = run("train", sp, "--out", os.path.join(tmp, "f32b"), "--dtype", "f32", "--expect", golden, "--rtol", "1e-4", "--atol", "1e-6")
    check("within rtol 0.0001" in p.stdout and "not bitwise" in p.stdout, f"tolerance pass line: {p.stdout!r}")
    check(expect_of(os.path.join(tmp, "f32b")).get("comparison", "").startswith("within rtol"), "run.json: no tolerance recorded")
    p = run("train", sp, "--out", os.path.join(tmp, "f32c"), "-q", "--dtype", "f32", "--expect", golden, "--rtol", "1e-10", code=1)
    check("at step 1" in p.stderr, f"too tight a tolerance: {p.stderr!r}")
    run("train", sp, "--out", os.path.join(tmp, "f32d"), "-q", "--rtol", "1e-4", code=2)  # a tolerance without --expect

    # a bare loss.csv golden keeps working
    run("train", sp, "--out", os.path.join(tmp, "bare"), "-q", "--expect", os.path.join(golden, "loss.csv"))

    # gradrun diff: the same run is the same (exit 0); a planted one-op change (h3 relu -> gelu) is
    # located by --at 1 at that node, and without --at at step 1 of the loss log
    p = run("diff", golden, os.path.join(tmp, "same-folder"))
    check("the same" in p.stdout, f"diff of equal runs: {p.stdout!r}")
    planted = json.loads(json.dumps(spec))
    for n in planted["graph"]:
        if n["id"] == "h3":
            n["op"] = "gelu"
    json.dump(planted, open(os.path.join(tmp, "planted.json"), "w"))
    pr = os.path.join(tmp, "planted")
    run("train", os.path.join(tmp, "planted.json"), "--out", pr, "-q")
    p = run("diff", golden, pr, code=1)
    check("loss.csv: first differs at step 1" in p.stdout and "W1" in p.stdout, f"diff: {p.stdout!r}")
    p = run("diff", golden, pr, "--at", "1", code=1)
    check('first node whose forward value differs is "h3"' in p.stdout, f"diff --at 1: {p.stdout!r}")
    p = run("diff", golden, os.path.join(tmp, "same-folder"), "--at", "25")
    check("bit-equal" in p.stdout and "note:" not in p.stdout, f"diff --at 25 of equal runs (the replay must be the run): {p.stdout!r}")
    # an lr change: equal at step 1 (lr acts in the update), the parameters differ entering step 2
    p = run("diff", golden, os.path.join(tmp, "lr2"), "--at", "2", code=1)
    check("already differs entering step 2" in p.stdout, f"diff --at 2 after an lr change: {p.stdout!r}")
    run("diff", golden, os.path.join(tmp, "nope"), code=2)

for f in fails:
    print("FAIL:", f)
print("expect_receipt:", "FAILED" if fails else "ok")
sys.exit(1 if fails else 0)
