#!/usr/bin/python3
"""metrics.csv's columns (issue 16 item 4) against independent oracles (docs/cli.md defines them).

    /usr/bin/python3 tests/test_metrics.py GRADRUN

- the header: the old columns first, in their order, then train_accuracy,grad_norm,val_mae,val_rmse,val_r2;
- a 2-output regression (an MLP, Adam with optimizer.clip): val_mae, val_rmse and val_r2 of the last
  epoch against numpy over `gradrun predict`'s output on the validation rows (the split recomputed
  from docs/spec.md's definition); `gradrun evaluate` prints and writes the same bits;
- grad_norm: a full-batch spec without shuffle has one step per epoch, so epoch k's grad_norm is
  sqrt(Σ g·g) (docs/numerics.md's 16 lanes and their fold, summed here in Python floats) of
  `gradrun grad --init` at the parameters before epoch k: the bits, for k = 1 and 2;
- iris: train_accuracy of the last epoch is the share of training rows whose `gradrun predict`
  class is the label; the regression columns are nan;
- --device host and --device host --fuse write metrics.csv with the same bytes as the CPU tape
  (the seconds column aside), with and without clip;
- a run resumed at an epoch boundary writes the uninterrupted run's metrics.csv (seconds aside);
- early stopping on train_accuracy stops `patience` epochs after the first best train_accuracy;
- a declared metrics.regression whose target is not a data input is a located error (exit 2).
Needs numpy (exit 77 without it).
"""
import csv
import json
import math
import os
import struct
import subprocess
import sys
import tempfile

try:
    import numpy as np
except ImportError:
    print("SKIPPED [numpy]: metrics -- numpy is not available to /usr/bin/python3")
    sys.exit(77)

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
GR = os.path.abspath(sys.argv[1])
HEADER = "epoch,train_loss,val_loss,val_accuracy,seconds,train_accuracy,grad_norm,val_mae,val_rmse,val_r2"
fails = []


def check(ok, what):
    if not ok:
        fails.append(what)


def run(*args, code=0):
    p = subprocess.run([GR, *args], capture_output=True, text=True, timeout=900)
    if p.returncode != code:
        fails.append(f"{' '.join(args)}: exit {p.returncode}, wanted {code}\n{p.stderr}")
    return p


def metrics(out):
    rows = list(csv.DictReader(open(os.path.join(out, "metrics.csv"))))
    return rows


def without_seconds(out):
    """metrics.csv's text with the seconds column (wall time) removed."""
    lines = open(os.path.join(out, "metrics.csv")).read().splitlines()
    col = lines[0].split(",").index("seconds")
    return "\n".join(",".join(x for i, x in enumerate(l.split(",")) if i != col) for l in lines) + "\n"


def tensors(path):
    data = open(path, "rb").read()
    n = struct.unpack("<Q", data[:8])[0]
    header = json.loads(data[8:8 + n])
    meta = header.pop("__metadata__", {})
    out = {}
    for k, v in header.items():
        assert v["dtype"] == "F64", v
        raw = data[8 + n + v["data_offsets"][0]:8 + n + v["data_offsets"][1]]
        out[k] = list(struct.unpack(f"<{len(raw) // 8}d", raw))
    return out, meta


# The validation split of docs/spec.md: random_permutation(rows, seed, stream 2^32), Fisher-Yates
# from the last index down with j = bits(seed, stream, i) mod (i + 1); the first ⌊f·rows⌋ entries
# are the validation rows. bits() is the SplitMix64 construction of docs/spec.md's init reference.
def mix64(z):
    m = (1 << 64) - 1
    z = (z + 0x9E3779B97F4A7C15) & m
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & m
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & m
    return z ^ (z >> 31)


def split(rows, seed, fraction):
    key = mix64(mix64(seed) ^ (1 << 32))
    perm = list(range(rows))
    for i in range(rows - 1, 0, -1):
        j = mix64(key ^ i) % (i + 1)
        perm[i], perm[j] = perm[j], perm[i]
    k = int(math.floor(fraction * rows))
    val = sorted(perm[:k])
    return val, sorted(set(range(rows)) - set(val))


def write_regression(tmp):
    """A 2-input, 2-output regression CSV (80 rows) and its spec (dict)."""
    path = os.path.join(tmp, "reg.csv")
    with open(path, "w") as f:
        f.write("a,b,y1,y2\n")
        for i in range(80):
            a, b = math.sin(0.37 * i), math.cos(0.11 * i * i)
            f.write(f"{a!r},{b!r},{2 * a - b + 0.1 * math.sin(7.0 * i)!r},{a * b + 0.5!r}\n")
    return {
        "gradrun": 1, "name": "reg2", "seed": 5,
        "data": {"csv": "reg.csv", "inputs": {"x": {"columns": ["a", "b"], "standardize": True},
                                               "y": {"columns": ["y1", "y2"]}}, "validation": 0.25},
        "graph": [
            {"id": "h", "layer": "dense", "inputs": ["x"], "units": 8, "activation": "tanh"},
            {"id": "pred", "layer": "dense", "inputs": ["h"], "units": 2},
            {"id": "loss", "op": "mse", "inputs": ["pred", "y"]},
        ],
        "loss": "loss",
        "optimizer": {"kind": "adam", "lr": 0.02, "clip": 0.5},
        "train": {"epochs": 6, "batch_size": 20},
    }


def save(tmp, name, spec):
    path = os.path.join(tmp, name)
    json.dump(spec, open(path, "w"), indent=1)
    return path


def same(a, b):
    return a == b or (math.isnan(a) and math.isnan(b))


def regression(tmp):
    spec = write_regression(tmp)
    path = save(tmp, "reg.json", spec)
    outs = {}
    for name, flags in (("cpu", []), ("host", ["--device", "host"]), ("fuse", ["--device", "host", "--fuse"])):
        outs[name] = os.path.join(tmp, "reg-" + name)
        run("train", path, "--out", outs[name], "--quiet", *flags)
    cpu = outs["cpu"]
    head = open(os.path.join(cpu, "metrics.csv")).readline().strip()
    check(head == HEADER, f"metrics.csv header {head!r}, wanted {HEADER!r}")
    for name in ("host", "fuse"):
        check(without_seconds(outs[name]) == without_seconds(cpu), f"regression: metrics.csv of {name} differs from the CPU tape's:\n"
              f"{without_seconds(outs[name])}\n{without_seconds(cpu)}")
    rows = metrics(cpu)
    last = rows[-1]
    for r in rows:
        check(r["train_accuracy"] == "nan", "regression: train_accuracy is not nan")
        g = float(r["grad_norm"])
        check(math.isfinite(g) and g > 0, f"regression: grad_norm {g} is not a positive number")

    # The oracle: numpy over predict's output on the validation rows.
    data = list(csv.DictReader(open(os.path.join(tmp, "reg.csv"))))
    val, _ = split(len(data), spec["seed"], 0.25)
    run("predict", path, "--weights", cpu, "--data", os.path.join(tmp, "reg.csv"), "--out", os.path.join(tmp, "pred.csv"))
    pred = np.array([[float(r["pred_0"]), float(r["pred_1"])] for r in csv.DictReader(open(os.path.join(tmp, "pred.csv")))])[val]
    y = np.array([[float(r["y1"]), float(r["y2"])] for r in data])[val]
    d = pred - y
    want = {"val_mae": np.abs(d).mean(), "val_rmse": math.sqrt((d * d).mean()),
            "val_r2": np.mean(1.0 - (d * d).sum(axis=0) / ((y - y.mean(axis=0)) ** 2).sum(axis=0)),
            "val_loss": (d * d).mean()}
    for k, v in want.items():
        got = float(last[k])
        check(abs(got - v) <= 1e-12 * max(1.0, abs(v)), f"regression: {k} {got!r}, numpy over predict's output says {v!r}")
    # evaluate: the same bits, printed and in --json.
    j = os.path.join(tmp, "eval.json")
    p = run("evaluate", path, "--weights", cpu, "--json", j)
    e = json.load(open(j))
    for k in ("mae", "rmse", "r2"):
        check(k in e and e[k] == float(last["val_" + k]), f"evaluate {k} {e.get(k)!r} != metrics.csv val_{k} {last['val_' + k]}")
        check(any(l.split()[:1] == [k] for l in p.stdout.splitlines()), f"evaluate does not print {k}: {p.stdout!r}")
    print(f"regression: val_mae {last['val_mae']} val_rmse {last['val_rmse']} val_r2 {last['val_r2']} == numpy; "
          "cpu/host/fuse metrics.csv equal")

    # A declared regression whose target is a node: exit 2 at its pointer.
    bad = dict(spec, metrics={"regression": {"output": "pred", "target": "h"}})
    p = run("train", save(tmp, "bad.json", bad), "--out", os.path.join(tmp, "bad"), "--quiet", code=2)
    check("/metrics/regression/target" in p.stderr, f"bad metrics.regression: {p.stderr!r}")


def norm(grads, names):
    # docs/numerics.md "Gradient norm": 16 lanes, element e of each parameter (registration order)
    # into lane e % 16, one rounding per operation; then the pairwise fold 8, 4, 2, 1.
    lane = [0.0] * 16
    for name in names:
        for e, g in enumerate(grads[name]):
            lane[e % 16] = lane[e % 16] + g * g
    w = 8
    while w >= 1:
        for j in range(w):
            lane[j] = lane[j] + lane[j + w]
        w //= 2
    return math.sqrt(lane[0])


def grad_norm(tmp):
    spec = write_regression(tmp)
    spec["train"] = {"epochs": 3, "batch_size": 60, "shuffle": False}  # 60 training rows: one step per epoch
    spec["optimizer"] = {"kind": "sgd", "lr": 0.1, "momentum": 0.9}
    path = save(tmp, "full.json", spec)
    out = os.path.join(tmp, "full")
    run("train", path, "--out", out, "--quiet")
    rows = metrics(out)
    names = ["h.W", "h.b", "pred.W", "pred.b"]
    one = os.path.join(tmp, "full1")
    run("train", path, "--out", one, "--quiet", "--epochs", "1")
    for epoch, init in ((1, os.path.join(out, "init.safetensors")), (2, os.path.join(one, "weights.safetensors"))):
        g = os.path.join(tmp, f"grad{epoch}.safetensors")
        run("grad", path, "--init", init, "--out", g)
        grads, _ = tensors(g)
        check(sorted(grads) == sorted(names + ["loss"]), f"grad tensors {sorted(grads)}")
        want = norm(grads, names)
        got = float(rows[epoch - 1]["grad_norm"])
        check(got == want, f"grad_norm of epoch {epoch}: {got!r}, sqrt(sum g*g) of gradrun grad: {want!r}")
    check(float(rows[0]["grad_norm"]) != float(rows[1]["grad_norm"]), "grad_norm does not change between epochs")
    print(f"grad_norm: epochs 1 and 2 ({rows[0]['grad_norm']}, {rows[1]['grad_norm']}) == sqrt(sum g*g) of gradrun grad")


def iris(tmp):
    spec_path = os.path.join(ROOT, "specs/iris.json")
    spec = json.load(open(spec_path))
    outs = {}
    for name, flags in (("cpu", []), ("host", ["--device", "host"]), ("fuse", ["--device", "host", "--fuse"])):
        outs[name] = os.path.join(tmp, "iris-" + name)
        run("train", spec_path, "--out", outs[name], "--quiet", "--epochs", "12", *flags)
    cpu = outs["cpu"]
    for name in ("host", "fuse"):
        check(without_seconds(outs[name]) == without_seconds(cpu), f"iris: metrics.csv of {name} differs from the CPU tape's")
    rows = metrics(cpu)
    for r in rows:
        for k in ("val_mae", "val_rmse", "val_r2"):
            check(r[k] == "nan", f"iris: {k} is {r[k]}, not nan")
    csv_path = os.path.join(ROOT, "datasets/iris.csv")
    data = list(csv.DictReader(open(csv_path)))
    _, train = split(len(data), spec.get("seed", 0), spec["data"]["validation"])
    run("predict", spec_path, "--weights", cpu, "--data", csv_path, "--out", os.path.join(tmp, "iris-pred.csv"))
    pred = list(csv.DictReader(open(os.path.join(tmp, "iris-pred.csv"))))
    prep = json.load(open(os.path.join(cpu, "run.json")))["preprocessing"]
    label = [k for k, v in spec["data"]["inputs"].items() if "one_hot" in v][0]
    column = spec["data"]["inputs"][label]["column"]
    classes = [c for c in prep["inputs"] if c["name"] == label][0]["one_hot_classes"]  # class c at position c
    correct = sum(1 for i in train if float(classes[int(pred[i]["class"])]) == float(data[i][column]))
    want = correct / len(train)
    got = float(rows[-1]["train_accuracy"])
    check(got == want, f"iris: train_accuracy {got!r}, predict on the training rows says {want!r} ({correct}/{len(train)})")
    print(f"iris: train_accuracy {got} == predict's ({correct}/{len(train)}); cpu/host/fuse metrics.csv equal")

    # Resume at an epoch boundary: the same rows as the uninterrupted run.
    part = os.path.join(tmp, "iris-part")
    run("train", spec_path, "--out", part, "--quiet", "--epochs", "5")
    run("train", spec_path, "--resume", part, "--quiet", "--epochs", "12")
    check(without_seconds(part) == without_seconds(cpu), "iris: a resumed run's metrics.csv differs from the uninterrupted run's")

    # Early stopping on train_accuracy.
    es = dict(spec, train=dict(spec["train"], epochs=80, early_stopping={"monitor": "train_accuracy", "patience": 4}))
    es["data"] = dict(spec["data"], csv=csv_path)
    out = os.path.join(tmp, "iris-es")
    run("train", save(tmp, "iris-es.json", es), "--out", out, "--quiet")
    acc = [float(r["train_accuracy"]) for r in metrics(out)]
    best = 0
    for i, a in enumerate(acc):
        if a > acc[best]:
            best = i
    runj = json.load(open(os.path.join(out, "run.json")))
    want_stop = min(best + 1 + 4, 80)
    check(len(acc) == want_stop, f"train_accuracy early stopping ran {len(acc)} epochs, wanted {want_stop} (best epoch {best + 1})")
    check(runj["early_stopping"]["best_epoch"] == best + 1, f"best_epoch {runj['early_stopping']['best_epoch']}, wanted {best + 1}")


def main():
    with tempfile.TemporaryDirectory(prefix="gradrun-metrics-") as tmp:
        regression(tmp)
        grad_norm(tmp)
        iris(tmp)
    for f in fails:
        print("FAIL:", f)
    sys.exit(1 if fails else 0)


main()
