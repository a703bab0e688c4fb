#!/usr/bin/env python3
"""A run's lifecycle (issue 14): interrupt, run folder states, divergence, resume.

usage: test_run_lifecycle.py GRADRUN   (run from the repository root; standard library only)

- SIGINT during a long run: exit 130, one line naming `--resume`, run.json status "interrupted",
  a checkpoint, loss.csv rows 1..N; `--resume DIR` (in place, to the stored target) ends with loss.csv
  and weights bitwise equal to an uninterrupted run (batch 2, so the stop is usually inside an epoch);
- a third SIGINT ends the process at once (a second is ignored until the checkpoint is written),
  leaving no temporary files;
- training into a folder holding a different run exits 2 unless --force, which replaces its files;
- Adam with lr 1e6 stops with status "diverged", exit 3, one line naming the step and optimizer.clip;
- resume: editing epochs and whitespace is fine, a changed lr is refused naming /optimizer/lr and
  --init, fewer epochs than done is refused saying so;
- a last partial validation batch that a fixed-shape graph cannot take is refused (exit 2);
- --expect stops at the first differing step (exit 1, no success line); metrics.csv numbers are in
  shortest round-trip form; run.json's final_loss is the last epoch's mean train loss.
"""
import json
import os
import signal
import subprocess
import sys
import tempfile
import time

GR = os.path.abspath(sys.argv[1])
ROOT = os.getcwd()
fails = []


def check(cond, what):
    if not cond:
        fails.append(what)


def run(*args, code=0):
    p = subprocess.run([GR, *args], capture_output=True, text=True)
    if p.returncode != code:
        fails.append(f"{' '.join(args)}: exit {p.returncode}, wanted {code}\n{p.stderr}")
    return p


def spec_file(tmp, name, indent=None, **changes):
    s = json.load(open(os.path.join(ROOT, "specs/iris.json")))
    s["data"]["csv"] = os.path.join(ROOT, "datasets/iris.csv")
    for path, value in changes.items():
        section, key = path.split("__")
        s[section][key] = value
    p = os.path.join(tmp, name)
    with open(p, "w") as f:
        json.dump(s, f, indent=indent)
    return p


def read(p, mode="r"):
    with open(p, mode) as f:
        return f.read()


def interrupt(spec, out, epochs, signals=1):
    p = subprocess.Popen([GR, "train", spec, "--out", out, "--epochs", str(epochs)], stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True)
    p.stdout.readline()  # the first epoch line: training is under way
    for _ in range(signals):
        p.send_signal(signal.SIGINT)
        time.sleep(0.01)
    out_text, err = p.communicate(timeout=120)
    return p.returncode, err


with tempfile.TemporaryDirectory() as tmp:
    spec = spec_file(tmp, "iris.json", train__batch_size=2)
    epochs = 1000  # 60 steps an epoch: a few seconds, long enough to interrupt
    ref = os.path.join(tmp, "ref")
    run("train", spec, "--out", ref, "--epochs", str(epochs), "--quiet")

    # 1. one SIGINT: a clean stop, then a resume to the same bytes
    out = os.path.join(tmp, "int")
    code, err = interrupt(spec, out, epochs)
    check(code == 130, f"SIGINT: exit {code}, wanted 130: {err}")
    check(err.count("\n") == 1 and "--resume " + out in err, f"SIGINT: want one line naming --resume: {err!r}")
    runj = json.loads(read(os.path.join(out, "run.json")))
    check(runj["status"] == "interrupted", f"status {runj['status']}")
    check(os.path.exists(os.path.join(out, "checkpoint/state.safetensors")), "no checkpoint after SIGINT")
    check(not os.path.exists(os.path.join(out, "weights.safetensors")), "weights written by an interrupted run")
    rows = read(os.path.join(out, "loss.csv")).splitlines()
    ref_rows = read(os.path.join(ref, "loss.csv")).splitlines()
    check(1 < len(rows) < len(ref_rows) and rows == ref_rows[: len(rows)], f"interrupted loss.csv: {len(rows)} lines, not a prefix")
    run("train", spec, "--resume", out, "--quiet")  # in place, to the stored target
    for f in ("loss.csv", "weights.safetensors"):
        check(read(os.path.join(out, f), "rb") == read(os.path.join(ref, f), "rb"), f"resumed {f} differs from an uninterrupted run")
    no_seconds = lambda d: [[x for i, x in enumerate(l.split(",")) if i != 4] for l in read(os.path.join(d, "metrics.csv")).splitlines()]
    check(no_seconds(out) == no_seconds(ref), "resumed metrics.csv (seconds aside) differs from an uninterrupted run")
    check(json.loads(read(os.path.join(out, "run.json")))["status"] == "complete", "resumed run not complete")

    # a third SIGINT: out at once, only complete files (tests/test_run_folder.py: the second)
    out2 = os.path.join(tmp, "int2")
    code, err = interrupt(spec, out2, epochs, signals=3)
    check(code in (130, -signal.SIGINT), f"three SIGINTs: exit {code}")
    run("train", "--resume", out2, "--quiet")  # removes NAME.tmp.PID a kill inside a write left
    leftovers = [n for _, _, names in os.walk(out2) for n in names if "tmp" in n]
    check(not leftovers, f"temporary files left: {leftovers}")

    # 2. a folder holding a different run
    other = spec_file(tmp, "other.json", optimizer__lr=0.02)
    p = run("train", other, "--out", ref, "--epochs", "2", "--quiet", code=2)
    check("--force" in p.stderr and p.stderr.count("\n") == 1, f"different run: {p.stderr!r}")
    run("train", other, "--out", ref, "--epochs", "2", "--quiet", "--force")
    check(not os.path.exists(os.path.join(ref, "checkpoint/state.safetensors")) or
          json.loads(read(os.path.join(ref, "run.json")))["target_epochs"] == 2, "--force kept the old run")
    check(len(read(os.path.join(ref, "loss.csv")).splitlines()) == 1 + 2 * 4, "--force: loss.csv not the new run's")

    # 5. divergence
    div = spec_file(tmp, "div.json", optimizer__lr=1e6)
    p = run("train", div, "--out", os.path.join(tmp, "div"), "--epochs", "5", "--quiet", code=3)
    check("diverged" in p.stderr and "step" in p.stderr and "optimizer.lr" in p.stderr and p.stderr.count("\n") == 1,
          f"divergence message: {p.stderr!r}")
    check(json.loads(read(os.path.join(tmp, "div/run.json")))["status"] == "diverged", "status not diverged")

    # 3. resume checks
    base = spec_file(tmp, "base.json")
    r3 = os.path.join(tmp, "r3")
    run("train", base, "--out", r3, "--epochs", "6", "--quiet")
    edited = spec_file(tmp, "edited.json", indent=7, train__epochs=3)  # other epochs, other whitespace
    run("train", edited, "--resume", r3, "--epochs", "8", "--quiet")
    check(json.loads(read(os.path.join(r3, "run.json")))["epochs"] == 8, "resume --epochs 8 did not reach 8")
    p = run("train", base, "--resume", r3, "--epochs", "4", "--quiet", code=2)
    check("8 epochs" in p.stderr and "fewer" in p.stderr, f"fewer epochs: {p.stderr!r}")
    lr = spec_file(tmp, "lr.json", optimizer__lr=0.05)
    p = run("train", lr, "--resume", r3, "--quiet", code=2)
    check("/optimizer/lr" in p.stderr and "--init" in p.stderr, f"changed lr: {p.stderr!r}")

    # 6. a last partial validation batch that fixed shapes cannot take is refused up front
    fixed = json.load(open(base))
    fixed["train"]["batch_size"] = 16  # 30 validation rows: a last batch of 14
    fixed["graph"].append({"id": "fixed", "op": "reshape", "inputs": ["logits"], "shape": [16, 3]})
    fixed["graph"] = [n if n["id"] != "loss" else {**n, "inputs": ["fixed", "y"]} for n in fixed["graph"]]
    fixed["graph"].sort(key=lambda n: n["id"] == "loss")
    with open(os.path.join(tmp, "fixed.json"), "w") as f:
        json.dump(fixed, f)
    p = run("train", os.path.join(tmp, "fixed.json"), "--out", os.path.join(tmp, "fixed"), "--quiet", code=2)
    check("/train/batch_size" in p.stderr and "validation" in p.stderr, f"partial validation batch: {p.stderr!r}")
    p = run("inspect", os.path.join(tmp, "fixed.json"))
    check("the last 14 of the 30 validation rows do not fit" in p.stdout, f"inspect of a partial batch: {p.stdout!r}")
    # ... and evaluate refuses rows it cannot count, where they come from a file, naming it
    fixed["train"]["batch_size"] = 15  # 120 training and 30 validation rows: whole batches
    fixed["graph"] = [n if n["id"] != "fixed" else {**n, "shape": [15, 3]} for n in fixed["graph"]]
    with open(os.path.join(tmp, "fixed15.json"), "w") as f:
        json.dump(fixed, f)
    run("train", os.path.join(tmp, "fixed15.json"), "--out", os.path.join(tmp, "fixed15"), "--epochs", "2", "--quiet")
    p = run("inspect", os.path.join(tmp, "fixed15.json"))
    check("do not fit" not in p.stdout, f"inspect of whole batches: {p.stdout!r}")
    rows31 = os.path.join(tmp, "rows31.csv")
    with open(rows31, "w") as f:
        f.write("".join(open(os.path.join(ROOT, "datasets/iris.csv")).readlines()[:32]))
    p = run("evaluate", os.path.join(tmp, "fixed15.json"), "--weights", os.path.join(tmp, "fixed15"), "--data", rows31, code=2)
    check("last batch of 1 of the 31 rows of " + rows31 in p.stderr and len(p.stderr.splitlines()) == 1,
          f"evaluate of a partial batch: {p.stderr!r}")
    p = run("evaluate", os.path.join(tmp, "fixed15.json"), "--weights", os.path.join(tmp, "fixed15"))
    check("(30 rows)" in p.stdout, f"evaluate of whole batches: {p.stdout!r}")

    # 6. --expect stops at the first differing step; metrics.csv numbers are shortest round-trip; the
    # final loss is the last epoch's mean train loss
    golden = read(os.path.join(r3, "loss.csv")).splitlines()
    step, epoch_, loss = golden[2].split(",")
    golden[2] = f"{step},{epoch_},{float(loss) * 2!r}"
    with open(os.path.join(tmp, "golden.csv"), "w") as f:
        f.write("\n".join(golden) + "\n")
    e = os.path.join(tmp, "expect")
    p = run("train", base, "--out", e, "--epochs", "8", "--expect", os.path.join(tmp, "golden.csv"), code=1)
    check("at step 2" in p.stderr and "trained" not in p.stdout, f"--expect: {p.stderr!r} {p.stdout!r}")
    check(len(read(os.path.join(e, "loss.csv")).splitlines()) == 3, "--expect did not stop at step 2")
    # a passing --expect says so, in one line
    p = run("train", base, "--out", os.path.join(tmp, "expect-ok"), "--epochs", "8", "--expect", os.path.join(r3, "loss.csv"))
    ok_lines = [l for l in p.stdout.splitlines() if l.strip().startswith("expect:")]
    check(len(ok_lines) == 1 and "bit for bit" in ok_lines[0], f"a passing --expect: {p.stdout!r}")
    metrics = [l.split(",") for l in read(os.path.join(r3, "metrics.csv")).splitlines()[1:]]
    for row in metrics:
        for x in row[1:4]:
            check(x == "nan" or "e" in x or x == repr(float(x)), f"metrics.csv number {x} is not in shortest form")
    final = json.loads(read(os.path.join(r3, "run.json")))["final_loss"]
    check(final == float(metrics[-1][1]), f"final_loss {final} is not the last epoch's train loss {metrics[-1][1]}")

if fails:
    print("\n".join(fails))
    sys.exit(1)
print("run lifecycle: ok")
