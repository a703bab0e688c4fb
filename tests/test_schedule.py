#!/usr/bin/python3
"""optimizer.schedule (issue 16 item 2): the per-step learning rate, on every path.

    /usr/bin/python3 tests/test_schedule.py GRADRUN

On an iris MLP (Adam, 12 epochs of 6 steps):
- loss.csv's lr column equals the schedule computed here from its definition (docs/spec.md):
  step and warmup exactly (they are a few rounded products and one division), cosine within 1e-15
  relative (Python's math.cos against the project's gr_cos, both faithful);
- {"kind": "constant"} trains to the bytes of no schedule; a step decay equals the constant run in
  its first epoch and differs after, so the rate reaches the optimizer;
- the CPU tape, --device host and --fuse write the same loss.csv; 5 epochs then --resume to 12
  equals 12 straight;
- bad schedules are located errors (exit 2). Standard library only.
"""
import json
import math
import os
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
GR = sys.argv[1]
fails = []
EPOCHS, BATCH, ROWS = 12, 20, 120  # iris: 150 rows, validation 0.2 → 120 training rows, 6 steps per epoch
SPE = ROWS // BATCH


def check(ok, what):
    if not ok:
        fails.append(what)


def spec(schedule):
    s = {"gradrun": 1, "name": "sched", "seed": 5,
         "data": {"csv": os.path.join(ROOT, "datasets/iris.csv"),
                  "inputs": {"x": {"columns": ["sepal_length", "sepal_width", "petal_length", "petal_width"], "standardize": True},
                             "y": {"column": "species", "one_hot": 3}}, "validation": 0.2},
         "graph": [{"id": "h", "layer": "dense", "inputs": ["x"], "units": 16, "activation": "tanh"},
                   {"id": "logits", "layer": "dense", "inputs": ["h"], "units": 3},
                   {"id": "loss", "op": "softmax_cross_entropy", "inputs": ["logits", "y"]}],
         "loss": "loss", "optimizer": {"kind": "adam", "lr": 0.02},
         "train": {"epochs": EPOCHS, "batch_size": BATCH}}
    if schedule is not None:
        s["optimizer"]["schedule"] = schedule
    return s


def train(tmp, name, s, *extra, code=0):
    path = os.path.join(tmp, name + ".json")
    json.dump(s, open(path, "w"))
    out = os.path.join(tmp, name)
    p = subprocess.run([GR, "train", path, "--out", out, "--force", "--quiet", *extra], capture_output=True, text=True)
    if p.returncode != code:
        fails.append(f"{name} {' '.join(extra)}: exit {p.returncode}, wanted {code}: {p.stderr.strip()}")
    return out, p


def rows(out):
    lines = open(os.path.join(out, "loss.csv")).read().splitlines()
    return lines[0], [l.split(",") for l in lines[1:]]


def expected_lr(sch, lr, t, e):
    base = lr
    if sch["kind"] == "step":
        f = 1.0
        for _ in range(e // sch.get("every", 1)):
            f = f * sch.get("gamma", 0.1)
        base = lr * f
    elif sch["kind"] == "cosine":
        total = sch.get("epochs", EPOCHS) * SPE
        p = 0.0 if total == 1 else min(1.0, (t - 1) / (total - 1))
        mn = sch.get("min_lr", 0.0)
        base = mn + (lr - mn) * ((1.0 + math.cos(math.pi * p)) / 2.0)
    w = sch.get("warmup", {}).get("steps", 0)
    if w and t <= w:
        base = base * (t / w)
    return base


def main():
    with tempfile.TemporaryDirectory(prefix="gradrun-sched-") as tmp:
        plain, _ = train(tmp, "plain", spec(None))
        const, _ = train(tmp, "const", spec({"kind": "constant"}))
        h, r = rows(const)
        check(h == "step,epoch,loss,lr", f"header {h!r}")
        check([x[:3] for x in r] == rows(plain)[1], "a constant schedule changed the losses")
        check(all(float(x[3]) == 0.02 for x in r), "constant: lr column is not 0.02")

        for name, sch in (("step", {"kind": "step", "every": 3, "gamma": 0.5}),
                          ("cosine", {"kind": "cosine", "min_lr": 0.001, "warmup": {"steps": 8}}),
                          ("warm", {"kind": "step", "every": 1, "gamma": 0.9, "warmup": {"steps": 15}})):
            out, _ = train(tmp, name, spec(sch))
            _, r = rows(out)
            check(len(r) == EPOCHS * SPE, f"{name}: {len(r)} steps")
            for x in r:
                t, e, got = int(x[0]), int(x[1]) - 1, float(x[3])
                want = expected_lr(sch, 0.02, t, e)
                ok = got == want if sch["kind"] != "cosine" else abs(got - want) <= 1e-15 * want
                if not ok:
                    fails.append(f"{name}: step {t} lr {got!r}, the definition gives {want!r}")
                    break
            # every path, the same bytes
            for extra in (["--device", "host"], ["--device", "host", "--fuse"]):
                o2, _ = train(tmp, name + "-" + extra[-1].strip("-"), spec(sch), *extra)
                check(open(os.path.join(o2, "loss.csv"), "rb").read() == open(os.path.join(out, "loss.csv"), "rb").read(),
                      f"{name} {' '.join(extra)}: loss.csv differs from the CPU tape")
            if name == "step":  # the rate reaches the optimizer: epoch 1-3 as constant, then different
                _, r0 = rows(plain)
                check([x[:3] for x in r[:3 * SPE]] == r0[:3 * SPE], "step: the first 3 epochs differ from the constant run")
                check([x[:3] for x in r[3 * SPE + 1:]] != r0[3 * SPE + 1:], "step: the decay did not change the losses")
            if name == "cosine":  # resume across the schedule
                s = spec(sch)
                res, _ = train(tmp, "resume", s, "--epochs", "5")
                path = os.path.join(tmp, "resume.json")
                p = subprocess.run([GR, "train", path, "--resume", res, "--epochs", str(EPOCHS), "--quiet"], capture_output=True, text=True)
                check(p.returncode == 0, f"resume: {p.stderr}")
                check(open(os.path.join(res, "loss.csv"), "rb").read() == open(os.path.join(out, "loss.csv"), "rb").read(),
                      "cosine: 5 epochs + resume differs from 12 straight")

        for name, sch, pointer in (("kind", {"kind": "exponential"}, "/optimizer/schedule/kind"),
                                   ("key", {"kind": "cosine", "gamma": 0.5}, "/optimizer/schedule"),
                                   ("warm0", {"kind": "constant", "warmup": {"steps": 0}}, "/optimizer/schedule/warmup/steps"),
                                   ("gamma", {"kind": "step", "gamma": -1}, "/optimizer/schedule/gamma")):
            _, p = train(tmp, "bad-" + name, spec(sch), code=2)
            check(pointer in p.stderr and len(p.stderr.splitlines()) == 1, f"bad {name}: {p.stderr!r}")

    if fails:
        print("schedule: FAILED\n  " + "\n  ".join(fails))
        return 1
    print("schedule: ok")
    return 0


if __name__ == "__main__":
    sys.exit(main())
