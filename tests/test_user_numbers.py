#!/usr/bin/env python3
"""The numbers a person reads, through the CLI (issue 35; docs/use-a-model.md).

usage: test_user_numbers.py GRADRUN   (run from the repository root)

1. A one-logit binary classifier (moons: dense units 1 → bce_with_logits → mean): metrics.csv's
   val_accuracy equals `evaluate` on the validation rows bit for bit; on the whole file, evaluate's
   accuracy equals the accuracy of predict's `class` column against the labels, and numpy's
   mean((logit > 0) == label) with the logit recovered from predict's probability; both classes
   appear; class = 1 ⇔ probability > 0.5; the torch export returns predict's probabilities.
   Labels that are not 0/1, a one-column softmax_cross_entropy and accuracy on a sigmoid output
   exit 2 with one located line.
2. A standardized regression (diabetes): predict, evaluate's MAE/RMSE, metrics.csv's val_mae and
   the torch and ONNX exports are in the data's units, checked against numpy on the raw target
   column; R² is unit-free and matches numpy too.
3. Loss shapes: mse and bce_with_logits between [B,2] and [B,1] exit 2 naming both shapes.
4. The run is the model: predict from the run folder alone, with the spec file, and with an
   edited copy (epochs, optimizer, description, an absolute data path) give the same bytes; a
   changed layer width exits 2 naming /graph/0/units; evaluate and export take the folder alone.
5. Resume without SPEC: `train --resume RUN` (no spec, no --set) lands on the uninterrupted run's
   loss.csv and weights bytes, and so does the exact command the ctrl-C hint prints, in a folder
   whose path holds a space.
6. A device that cannot be had (--device cuda without a GPU) leaves no files: the next train into
   the folder needs no --force.
7. --weights RUN_DIR (and a run folder alone) uses weights.best.safetensors when early stopping
   wrote one, and says so; --which final the last epoch's.
"""
import csv
import json
import math
import os
import shlex
import signal
import struct
import subprocess
import sys
import tempfile

import numpy as np

GR = os.path.abspath(sys.argv[1])
ROOT = os.getcwd()
sys.path.insert(0, os.path.join(ROOT, "tests", "support"))
from cli_support import Cli  # noqa: E402  (run gradrun, collect failures)

cli = Cli(GR)
fails, run, check = cli.fails, cli.run, cli.check


def read(p, mode="r"):
    with open(p, mode) as f:
        return f.read()


def write_json(path, obj):
    with open(path, "w") as f:
        json.dump(obj, f, indent=1)
    return path


def load_spec(name):
    s = json.load(open(os.path.join(ROOT, "specs", name)))
    s["data"]["csv"] = os.path.join(ROOT, s["data"]["csv"].replace("../", ""))
    return s


def csv_rows(path):
    with open(path) as f:
        return list(csv.DictReader(f))


def last_metrics(run_dir):
    rows = csv_rows(os.path.join(run_dir, "metrics.csv"))
    return rows[-1]


def evaluate(*args):
    path = os.path.join(tmp, "eval.json")
    if os.path.exists(path):
        os.remove(path)
    p = run("evaluate", *args, "--json", path, "--quiet")
    return json.loads(read(path)) if p.returncode == 0 else {}


def bits(x):
    return struct.pack("<d", float(x))


def one_line_error(p, *needles):
    err = p.stderr.strip()
    check(err.count("\n") == 0, f"want one error line, got {err!r}")
    for n in needles:
        check(n in err, f"error {err!r} does not mention {n!r}")


with tempfile.TemporaryDirectory() as tmp:
    # ---- 1. one-logit binary classifier ----------------------------------------------------
    moons_csv = os.path.join(ROOT, "datasets/moons.csv")
    binary = {
        "gradrun": 1, "name": "moons-binary", "seed": 11,
        "data": {"csv": moons_csv, "inputs": {"x": {"columns": ["x1", "x2"], "standardize": True},
                                               "y": {"column": "label"}}, "validation": 0.3},
        "graph": [{"id": "z", "layer": "dense", "inputs": ["x"], "units": 1},  # linear: about 0.85, never 1.0
                  {"id": "l", "op": "bce_with_logits", "inputs": ["z", "y"]},
                  {"id": "loss", "op": "mean", "inputs": ["l"]}],
        "loss": "loss",
        "optimizer": {"kind": "adam", "lr": 0.05},
        "train": {"epochs": 20, "batch_size": 20},
        "metrics": {"accuracy": {"logits": "z", "labels": "y"}},
    }
    sp = write_json(os.path.join(tmp, "binary.json"), binary)
    rb = os.path.join(tmp, "binary-run")
    run("train", sp, "--out", rb, "--quiet")
    val_acc = float(last_metrics(rb)["val_accuracy"])
    check(0.6 < val_acc < 0.99, f"binary: val_accuracy {val_acc}: expected a real linear-model accuracy on moons")
    ev = evaluate(rb)
    check(bits(ev["accuracy"]) == bits(last_metrics(rb)["val_accuracy"]),
          f"binary: evaluate accuracy {ev['accuracy']} vs metrics.csv {val_acc}")
    pred = os.path.join(tmp, "binary-pred.csv")
    run("predict", rb, "--data", moons_csv, "--out", pred, "--quiet")
    rows = csv_rows(pred)
    labels = np.array([float(r["label"]) for r in csv_rows(moons_csv)])
    prob = np.array([float(r["z_0"]) for r in rows])
    cls = np.array([int(r["class"]) for r in rows])
    check(set(cls.tolist()) == {0, 1}, f"binary: predict's classes {sorted(set(cls.tolist()))}, want both 0 and 1")
    check(bool(np.all((prob > 0.5) == (cls == 1))), "binary: class is not (probability > 0.5)")
    ev_all = evaluate(rb, "--data", moons_csv)
    acc_classes = float(np.mean(cls == labels))
    logit = np.log(prob / (1.0 - prob))
    acc_numpy = float(np.mean((logit > 0) == (labels == 1)))
    check(abs(ev_all["accuracy"] - acc_classes) < 1e-15, f"binary: evaluate {ev_all['accuracy']} vs predict's classes {acc_classes}")
    check(abs(acc_numpy - acc_classes) < 1e-15, f"binary: numpy {acc_numpy} vs predict's classes {acc_classes}")
    check(0.6 < acc_classes < 0.99, f"binary: accuracy on the file {acc_classes}")
    # numpy's BCE over the whole file from the recovered logits: evaluate's loss
    bce = np.mean(np.maximum(logit, 0) - logit * labels + np.log1p(np.exp(-np.abs(logit))))
    check(abs(ev_all["loss"] - bce) < 1e-9, f"binary: evaluate loss {ev_all['loss']} vs numpy {bce}")
    # the torch export predicts the same probabilities
    try:
        import torch
        tdir = os.path.join(tmp, "binary-torch")
        run("export", rb, "--format", "torch", "--out", tdir)
        sys.path.insert(0, tdir)
        import model as binary_model  # noqa: E402
        m = binary_model.Model.from_dir(tdir)
        x = torch.tensor([[float(r["x1"]), float(r["x2"])] for r in csv_rows(moons_csv)], dtype=torch.float64)
        with torch.no_grad():
            got = m(x).numpy().reshape(-1)
        check(float(np.max(np.abs(got - prob))) < 1e-12, f"binary: torch export vs predict {np.max(np.abs(got - prob))}")
        sys.path.remove(tdir)
        del sys.modules["model"]
    except ImportError:
        fails.append("python3-torch is missing (scripts/setup installs it)")

    # labels that are not 0/1
    bad_csv = os.path.join(tmp, "three.csv")
    with open(bad_csv, "w") as f:
        f.write("x1,x2,label\n" + "".join(f"{i * 0.1},{i % 3},{i % 3}\n" for i in range(60)))
    bad = json.loads(json.dumps(binary))
    bad["data"]["csv"] = bad_csv
    p = run("train", write_json(os.path.join(tmp, "bad-labels.json"), bad), "--out", os.path.join(tmp, "bad1"), code=2)
    one_line_error(p, "/metrics/accuracy/labels", "not 0 or 1")
    # one-column softmax_cross_entropy is constant
    sce1 = json.loads(json.dumps(binary))
    sce1["graph"][1] = {"id": "l", "op": "softmax_cross_entropy", "inputs": ["z", "y"]}
    p = run("train", write_json(os.path.join(tmp, "sce1.json"), sce1), "--out", os.path.join(tmp, "bad2"), code=2)
    one_line_error(p, "/graph/1", "one column", "[20, 1]")
    # accuracy on a probability
    sig = json.loads(json.dumps(binary))
    sig["graph"].insert(1, {"id": "p", "op": "sigmoid", "inputs": ["z"]})
    sig["metrics"]["accuracy"]["logits"] = "p"
    p = run("train", write_json(os.path.join(tmp, "sig.json"), sig), "--out", os.path.join(tmp, "bad3"), code=2)
    one_line_error(p, "/metrics/accuracy/logits", "sigmoid")
    check(not os.path.exists(os.path.join(tmp, "bad1", "init.safetensors")), "a refused spec left files behind")

    # ---- 2. standardized regression in data units -------------------------------------------
    diab_csv = os.path.join(ROOT, "datasets/diabetes.csv")
    ds = load_spec("diabetes.json")
    ds["train"]["epochs"] = 8
    spd = write_json(os.path.join(tmp, "diabetes.json"), ds)
    rd = os.path.join(tmp, "diabetes-run")
    run("train", spd, "--out", rd, "--quiet")
    raw = csv_rows(diab_csv)
    y = np.array([float(r["progression"]) for r in raw])
    xcols = ["age", "sex", "bmi", "bp", "s1", "s2", "s3", "s4", "s5", "s6"]
    x = np.array([[float(r[c]) for c in xcols] for r in raw])
    dpred = os.path.join(tmp, "diabetes-pred.csv")
    run("predict", rd, "--data", diab_csv, "--out", dpred, "--quiet")
    yhat = np.array([float(r["pred_0"]) for r in csv_rows(dpred)])
    check(40 < float(np.mean(yhat)) < 260, f"regression: predictions' mean {np.mean(yhat)} is not in the target's units (y mean {np.mean(y)})")
    mae, rmse = float(np.mean(np.abs(yhat - y))), float(np.sqrt(np.mean((yhat - y) ** 2)))
    r2 = 1.0 - float(np.sum((y - yhat) ** 2)) / float(np.sum((y - y.mean()) ** 2))
    evd = evaluate(rd, "--data", diab_csv)
    for name, want in (("mae", mae), ("rmse", rmse), ("r2", r2)):
        check(abs(evd[name] - want) <= 1e-9 * max(1.0, abs(want)), f"regression: evaluate {name} {evd[name]} vs numpy {want}")
    check(mae > 5.0, f"regression: MAE {mae} looks like z-units")
    evv = evaluate(rd)
    check(bits(evv["mae"]) == bits(last_metrics(rd)["val_mae"]) and bits(evv["rmse"]) == bits(last_metrics(rd)["val_rmse"]),
          f"regression: metrics.csv val_mae/val_rmse {last_metrics(rd)['val_mae']}/{last_metrics(rd)['val_rmse']} vs evaluate {evv['mae']}/{evv['rmse']}")
    prep = json.loads(read(os.path.join(rd, "run.json")))["preprocessing"]
    yprep = [i for i in prep["inputs"] if i["name"] == "y"][0]
    check(len(yprep["mean"]) == 1 and 100 < yprep["mean"][0] < 200, f"regression: saved target mean {yprep['mean']}")
    try:
        import torch
        tdir = os.path.join(tmp, "diabetes-torch")
        run("export", rd, "--format", "torch", "--out", tdir)
        sys.path.insert(0, tdir)
        import model as diabetes_model  # noqa: E402
        m = diabetes_model.Model.from_dir(tdir)
        with torch.no_grad():
            got = m(torch.tensor(x, dtype=torch.float64)).numpy().reshape(-1)
        check(float(np.max(np.abs(got - yhat))) <= 1e-12 * float(np.max(np.abs(yhat))),
              f"regression: torch export vs predict {np.max(np.abs(got - yhat))}")
        sys.path.remove(tdir)
    except ImportError:
        pass  # reported above
    onnx_path = os.path.join(tmp, "diabetes.onnx")
    run("export", rd, "--format", "onnx", "--out", onnx_path)
    runner = os.path.join(ROOT, "tools/onnxrt/run.js")
    if os.path.exists(os.path.join(ROOT, "tools/onnxrt/node_modules/onnxruntime-node")):
        xnpy = os.path.join(tmp, "x.npy")
        np.save(xnpy, x.astype(np.float32))
        p = subprocess.run(["node", runner, onnx_path, "x=" + xnpy], capture_output=True, text=True)
        check(p.returncode == 0, f"regression: onnxruntime: {p.stderr}")
        if p.returncode == 0:
            got = np.array(json.loads(p.stdout)["pred"]["data"], dtype=np.float64)
            check(float(np.max(np.abs(got - yhat))) <= 2e-5 * float(np.max(np.abs(yhat))),
                  f"regression: ONNX vs predict {np.max(np.abs(got - yhat))}")
    else:
        fails.append("tools/onnxrt/node_modules is missing (scripts/setup installs onnxruntime-node)")

    # ---- 3. loss shapes ---------------------------------------------------------------------
    iris = load_spec("iris.json")
    wide = json.loads(json.dumps(iris))
    wide["data"]["inputs"]["y"] = {"column": "species"}  # [B, 1]
    wide["graph"] = [{"id": "pred", "layer": "dense", "inputs": ["x"], "units": 2},
                     {"id": "loss", "op": "mse", "inputs": ["pred", "y"]}]
    wide.pop("metrics", None)
    p = run("train", write_json(os.path.join(tmp, "mse-shapes.json"), wide), "--out", os.path.join(tmp, "bad4"), code=2)
    one_line_error(p, "/graph/1", "[30, 2]", "[30, 1]")
    wide["graph"] = [{"id": "pred", "layer": "dense", "inputs": ["x"], "units": 2},
                     {"id": "l", "op": "bce_with_logits", "inputs": ["pred", "y"]},
                     {"id": "loss", "op": "mean", "inputs": ["l"]}]
    p = run("train", write_json(os.path.join(tmp, "bce-shapes.json"), wide), "--out", os.path.join(tmp, "bad5"), code=2)
    one_line_error(p, "/graph/1", "[30, 2]", "[30, 1]")

    # ---- 4. the run is the model ------------------------------------------------------------
    ri = os.path.join(tmp, "iris-run")
    iris_spec = write_json(os.path.join(tmp, "iris.json"), iris)
    run("train", iris_spec, "--out", ri, "--epochs", "5", "--set", "optimizer.lr=0.02", "--quiet")
    check("0.02" in read(os.path.join(ri, "spec.json")), "spec.json does not hold the --set override")
    iris_csv = iris["data"]["csv"]
    outs = {}
    for tag, args in (("folder", [ri]), ("spec", [iris_spec, "--weights", ri])):
        outs[tag] = os.path.join(tmp, f"p-{tag}.csv")
        run("predict", *args, "--data", iris_csv, "--out", outs[tag], "--quiet")
    edited = json.loads(json.dumps(iris))
    edited["train"]["epochs"] = 999
    edited["optimizer"]["lr"] = 0.5
    edited["description"] = "an edited copy"
    edited["name"] = "renamed"
    edited_path = write_json(os.path.join(tmp, "edited.json"), edited)
    outs["edited"] = os.path.join(tmp, "p-edited.csv")
    run("predict", edited_path, "--weights", ri, "--data", iris_csv, "--out", outs["edited"], "--quiet")
    base = read(outs["folder"], "rb")
    for tag, path in outs.items():
        check(os.path.exists(path) and read(path, "rb") == base, f"run as model: predict via {tag} differs from the run folder's")
    changed = json.loads(json.dumps(iris))
    changed["graph"][0]["units"] = 32
    p = run("predict", write_json(os.path.join(tmp, "wider.json"), changed), "--weights", ri, "--data", iris_csv,
            "--out", os.path.join(tmp, "p-wider.csv"), code=2)
    one_line_error(p, "/graph/0/units")
    check(not os.path.exists(os.path.join(tmp, "p-wider.csv")), "a refused predict wrote its output")
    run("evaluate", ri, "--quiet")
    run("export", ri, "--format", "torch", "--out", os.path.join(tmp, "iris-torch"))

    # ---- 5. resume without SPEC -------------------------------------------------------------
    fast = json.loads(json.dumps(iris))
    fast["train"]["batch_size"] = 2  # 60 steps an epoch: long enough to interrupt
    fast_spec = write_json(os.path.join(tmp, "iris-b2.json"), fast)
    ref = os.path.join(tmp, "ref")
    run("train", fast_spec, "--out", ref, "--epochs", "600", "--set", "optimizer.lr=0.003", "--quiet")
    part = os.path.join(tmp, "part")
    run("train", fast_spec, "--out", part, "--epochs", "3", "--set", "optimizer.lr=0.003", "--quiet")
    run("train", "--resume", part, "--epochs", "600", "--quiet")
    for f in ("loss.csv", "weights.safetensors"):
        check(read(os.path.join(part, f), "rb") == read(os.path.join(ref, f), "rb"), f"resume without SPEC: {f} differs")
    spaced = os.path.join(tmp, "run with space")
    proc = subprocess.Popen([GR, "train", fast_spec, "--out", spaced, "--epochs", "600", "--set", "optimizer.lr=0.003"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    proc.stdout.readline()
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=300)
    if proc.returncode == 130:
        hint = err.strip().split("continue with: ", 1)[-1]
        check(hint.startswith("gradrun train --resume "), f"ctrl-C hint {hint!r}")
        cmd = shlex.split(hint)
        check(cmd[-1] == spaced, f"ctrl-C hint does not quote the folder: {hint!r}")
        p = subprocess.run([GR] + cmd[1:] + ["--quiet"], capture_output=True, text=True)
        check(p.returncode == 0, f"the ctrl-C hint's command failed: {p.stderr}")
        for f in ("loss.csv", "weights.safetensors"):
            check(os.path.exists(os.path.join(spaced, f)) and read(os.path.join(spaced, f), "rb") == read(os.path.join(ref, f), "rb"),
                  f"the ctrl-C hint's resume: {f} differs from the uninterrupted run")
    else:
        check(proc.returncode == 0, f"SIGINT run: exit {proc.returncode}: {err}")  # finished before the signal: nothing to resume

    # ---- 6. a device that cannot be had ------------------------------------------------------
    cu = os.path.join(tmp, "cuda-run")
    p = subprocess.run([GR, "train", iris_spec, "--out", cu, "--device", "cuda", "--epochs", "1", "--quiet"],
                       capture_output=True, text=True)
    if p.returncode == 3:
        left = os.listdir(cu) if os.path.exists(cu) else []
        check(not left, f"--device cuda without a GPU left {left}")
        run("train", iris_spec, "--out", cu, "--epochs", "1", "--quiet")
    else:
        check(p.returncode == 0, f"--device cuda: exit {p.returncode}: {p.stderr}")

    # ---- 7. the best weights of an early-stopped run ----------------------------------------
    moons = load_spec("moons.json")
    moons["train"]["epochs"] = 40
    ms = write_json(os.path.join(tmp, "moons.json"), moons)
    rm = os.path.join(tmp, "moons-run")
    run("train", ms, "--out", rm, "--quiet")
    check(os.path.exists(os.path.join(rm, "weights.best.safetensors")), "moons: no weights.best.safetensors")
    got = {}
    for tag, args in (("folder", [rm]), ("weights-dir", [ms, "--weights", rm]),
                      ("best-file", [ms, "--weights", os.path.join(rm, "weights.best.safetensors")]),
                      ("final", [rm, "--which", "final"]),
                      ("final-file", [ms, "--weights", os.path.join(rm, "weights.safetensors")])):
        got[tag] = os.path.join(tmp, f"m-{tag}.csv")
        p = run("predict", *args, "--data", moons_csv, "--out", got[tag])
        if tag in ("folder", "weights-dir"):
            check("weights.best.safetensors" in p.stderr, f"predict {tag}: does not say it used the best weights: {p.stderr!r}")
    check(read(got["folder"], "rb") == read(got["best-file"], "rb") == read(got["weights-dir"], "rb"), "best weights: predictions differ")
    check(read(got["final"], "rb") == read(got["final-file"], "rb"), "--which final: predictions differ")
    runj = json.loads(read(os.path.join(rm, "run.json")))
    if runj["early_stopping"]["best_epoch"] != runj["epochs"]:
        check(read(got["final"], "rb") != read(got["folder"], "rb"), "best and final weights predict the same bytes")

for f in fails:
    print("FAIL:", f)
print(f"user_numbers: {'FAILED' if fails else 'ok'} ({len(fails)} failures)")
sys.exit(1 if fails else 0)
