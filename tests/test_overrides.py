#!/usr/bin/python3
"""--set PATH=VALUE (issue 14 item 4): a run with overrides is bitwise the run of the edited spec.

    /usr/bin/python3 tests/test_overrides.py GRADRUN

Trains specs/xor.json for 20 epochs with `--set optimizer.lr=0.01 --set /train/epochs=20` and an
edited copy (lr 0.01, epochs 20) of the spec; loss.csv must be byte-identical and the weights'
tensors (header without its metadata, and data) too. run.json of the override run lists the
overrides. Also: suggestions for a misspelled command and flag. Standard library only.
"""
import json
import os
import struct
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def run(argv):
    return subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, timeout=300)


def tensors(path):
    with open(path, "rb") as f:
        data = f.read()
    n = struct.unpack("<Q", data[:8])[0]
    header = json.loads(data[8:8 + n])
    header.pop("__metadata__", None)
    return header, data[8 + n:]


def main(gradrun):
    failures = []
    with tempfile.TemporaryDirectory(prefix="gradrun-overrides-") as tmp:
        with open(os.path.join(ROOT, "specs", "xor.json")) as f:
            spec = json.load(f)
        spec["optimizer"]["lr"] = 0.01
        spec["train"]["epochs"] = 20
        edited = os.path.join(tmp, "xor_edited.json")
        with open(edited, "w") as f:
            json.dump(spec, f, indent=2)
        a, b = os.path.join(tmp, "set"), os.path.join(tmp, "edited")
        sets = ["--set", "optimizer.lr=0.01", "--set", "/train/epochs=20"]
        r1 = run([gradrun, "train", "specs/xor.json", "--quiet", "--out", a] + sets)
        r2 = run([gradrun, "train", edited, "--quiet", "--out", b])
        for r, what in ((r1, "with --set"), (r2, "edited spec")):
            if r.returncode != 0:
                failures.append("train %s exited %d: %s" % (what, r.returncode, r.stderr.strip()))
        if not failures:
            with open(os.path.join(a, "loss.csv"), "rb") as f1, open(os.path.join(b, "loss.csv"), "rb") as f2:
                la, lb = f1.read(), f2.read()
            if la != lb:
                failures.append("loss.csv differs between the --set run and the edited spec's run")
            if la.count(b"\n") != 21:
                failures.append("loss.csv has %d lines, expected 21 (20 epochs of 1 step + header)" % la.count(b"\n"))
            if tensors(os.path.join(a, "weights.safetensors")) != tensors(os.path.join(b, "weights.safetensors")):
                failures.append("weights differ between the --set run and the edited spec's run")
            with open(os.path.join(a, "run.json")) as f:
                recorded = json.load(f).get("overrides")
            if recorded != ["optimizer.lr=0.01", "/train/epochs=20"]:
                failures.append("run.json overrides is %r" % (recorded,))
            # A different lr through --set must change the run (the override is not ignored).
            r3 = run([gradrun, "train", "specs/xor.json", "--quiet", "--out", os.path.join(tmp, "other"),
                      "--set", "optimizer.lr=0.02", "--set", "train.epochs=20"])
            with open(os.path.join(tmp, "other", "loss.csv"), "rb") as f:
                if r3.returncode != 0 or f.read() == la:
                    failures.append("--set optimizer.lr=0.02 did not change the run")

    checks = [
        ([gradrun, "trian"], 'unknown command "trian"; did you mean "train"?'),
        ([gradrun, "evalute"], 'did you mean "evaluate"?'),
        ([gradrun, "train", "specs/xor.json", "--epoch", "5"], 'unknown option "--epoch" for "train"; did you mean "--epochs"?'),
        ([gradrun, "inspect", "specs/xor.json", "--set", "optimizer.lr=abc"],
         "specs/xor.json: --set optimizer.lr=abc: /optimizer/lr: expected a number"),
        ([gradrun, "inspect", "specs/xor.json", "--set", "graph.0.op=matmull"], 'did you mean "matmul"?'),
    ]
    for argv, want in checks:
        r = run(argv)
        lines = r.stderr.splitlines()
        if r.returncode != 2 or len(lines) != 1 or want not in r.stderr:
            failures.append("%s: exit %d, stderr %r; expected exit 2 and one line with %r" %
                            (" ".join(argv[1:]), r.returncode, r.stderr, want))
    r = run([gradrun, "inspect", "specs/xor.json", "--set", "optimizer.lr=0.5"])
    if r.returncode != 0:
        failures.append("inspect --set optimizer.lr=0.5 exited %d: %s" % (r.returncode, r.stderr.strip()))

    for f in failures:
        print("FAIL " + f)
    print("overrides: %s" % ("%d failed" % len(failures) if failures else "ok"))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main(os.path.abspath(sys.argv[1])))
