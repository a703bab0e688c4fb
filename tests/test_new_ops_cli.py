#!/usr/bin/python3
"""The ops layer_norm, max, cross_entropy and bce_with_logits through the CLI (issue 16 item 5).

    /usr/bin/python3 tests/test_new_ops_cli.py GRADRUN

- Identity: cross_entropy on integer class ids equals softmax_cross_entropy on the one-hot rows of
  the same ids bit for bit (the same row terms, documented in kernels/gr_ops_lane.h), so an iris run
  with ids trains to the same loss.csv bytes as the one-hot run, and its accuracy metric (labels as
  class ids) is the same too.
- Every path: an iris model with layer_norm, a max-subtraction and cross_entropy, and a moons model
  with bce_with_logits, train to identical loss.csv and weights bytes on the CPU tape,
  --device host and --device host --fuse.
- Outside oracle: the trained bce model's loss over the whole data file (`evaluate`) equals numpy's
  binary cross-entropy of the logits `predict` writes (a tolerance: numpy's log1p/exp are not ours).
- Dropout (a dense layer's `dropout`): the same loss.csv and weights bytes on the CPU tape with 1 and
  2 threads, --device host and --fuse; it changes training but is the identity in evaluate and
  predict (CPU and device).
- Bad class ids (3.5, 3 for 3 classes, -1) are one located line, exit 2, before training.
Standard library and numpy only.
"""
import csv
import json
import os
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
GR = sys.argv[1]
sys.path.insert(0, os.path.join(ROOT, "tests", "support"))
from cli_support import Cli, read, tensors  # noqa: E402

cli = Cli(GR)
check, run, fails = cli.check, cli.run, cli.fails


def iris_spec(ids, layer_ops, csv_path):
    y = {"column": "species"} if ids else {"column": "species", "one_hot": 3}
    graph = [
        {"id": "h1", "op": "matmul", "inputs": ["x", "W1"]},
        {"id": "h2", "op": "add", "inputs": ["h1", "b1"]},
    ]
    last = "h2"
    if layer_ops:
        graph += [
            {"id": "n", "op": "layer_norm", "inputs": ["h2"], "eps": 1e-3},
            {"id": "m", "op": "max", "inputs": ["n"], "axis": -1, "keepdims": True},
            {"id": "c", "op": "sub", "inputs": ["n", "m"]},
            {"id": "g", "op": "gelu", "inputs": ["c"]},
        ]
        last = "g"
    graph += [
        {"id": "z", "op": "matmul", "inputs": [last, "W2"]},
        {"id": "logits", "op": "add", "inputs": ["z", "b2"]},
        {"id": "loss", "op": "cross_entropy" if ids else "softmax_cross_entropy", "inputs": ["logits", "y"]},
    ]
    return {
        "gradrun": 1, "name": "ops", "seed": 7,
        "data": {"csv": csv_path, "inputs": {
            "x": {"columns": ["sepal_length", "sepal_width", "petal_length", "petal_width"], "standardize": True},
            "y": y}, "validation": 0.2},
        "params": {"W1": {"shape": [4, 8], "init": "xavier_uniform"}, "b1": {"shape": [8], "init": "zeros"},
                   "W2": {"shape": [8, 3], "init": {"kind": "normal", "std": 0.3}}, "b2": {"shape": [3], "init": "zeros"}},
        "graph": graph, "loss": "loss",
        "optimizer": {"kind": "adam", "lr": 0.02},
        "train": {"epochs": 12, "batch_size": 30},
        "metrics": {"accuracy": {"logits": "logits", "labels": "y"}},
    }


def moons_spec(csv_path):
    return {
        "gradrun": 1, "name": "bce", "seed": 3,
        "data": {"csv": csv_path, "inputs": {"x": {"columns": ["x1", "x2"]}, "y": {"columns": ["label"]}},
                 "validation": 0.25},
        "params": {"W1": {"shape": [2, 8], "init": "xavier_uniform"}, "b1": {"shape": [8], "init": "zeros"},
                   "W2": {"shape": [8, 1], "init": "xavier_uniform"}, "b2": {"shape": [1], "init": "zeros"}},
        "graph": [
            {"id": "h1", "op": "matmul", "inputs": ["x", "W1"]},
            {"id": "h2", "op": "add", "inputs": ["h1", "b1"]},
            {"id": "h3", "op": "tanh", "inputs": ["h2"]},
            {"id": "z", "op": "matmul", "inputs": ["h3", "W2"]},
            {"id": "logit", "op": "add", "inputs": ["z", "b2"]},
            {"id": "l", "op": "bce_with_logits", "inputs": ["logit", "y"]},
            {"id": "loss", "op": "mean", "inputs": ["l"]},
        ],
        "loss": "loss",
        "optimizer": {"kind": "sgd", "lr": 0.5, "momentum": 0.9},
        "train": {"epochs": 15, "batch_size": 25},
        "predict": {"output": "logit", "transform": "none"},
    }


def same_file(a, b):
    if not (os.path.exists(a) and os.path.exists(b)):
        return False
    return tensors(a) == tensors(b) if a.endswith(".safetensors") else read(a) == read(b)


def write(path, obj):
    with open(path, "w") as f:
        json.dump(obj, f)


def paths_agree(tmp, spec_path, tag):
    outs = {}
    for name, extra in (("cpu", []), ("host", ["--device", "host"]), ("fused", ["--device", "host", "--fuse"])):
        out = os.path.join(tmp, f"{tag}-{name}")
        run("train", spec_path, "--out", out, "--quiet", *extra)
        outs[name] = out
    base = outs["cpu"]
    for name in ("host", "fused"):
        for f in ("loss.csv", "weights.safetensors"):
            a, b = os.path.join(base, f), os.path.join(outs[name], f)
            check(same_file(a, b), f"{tag}: {f} differs between cpu and {name}")
    return base


def main():
    import numpy as np
    iris = os.path.join(ROOT, "datasets/iris.csv")
    moons = os.path.join(ROOT, "datasets/moons.csv")
    with tempfile.TemporaryDirectory(prefix="gradrun-ops-") as tmp:
        # cross_entropy(ids) == softmax_cross_entropy(one-hot), bit for bit, metrics included
        for layer_ops in (False, True):
            runs = []
            for ids in (True, False):
                sp = os.path.join(tmp, f"iris-{ids}-{layer_ops}.json")
                write(sp, iris_spec(ids, layer_ops, iris))
                out = os.path.join(tmp, f"iris-{ids}-{layer_ops}")
                run("train", sp, "--out", out, "--quiet")
                runs.append(out)
            for f in ("loss.csv", "weights.safetensors"):
                check(same_file(os.path.join(runs[0], f), os.path.join(runs[1], f)),
                      f"cross_entropy vs softmax_cross_entropy (layer ops {layer_ops}): {f} differs")
            m = [list(csv.DictReader(open(os.path.join(r, "metrics.csv")))) for r in runs]
            check([r["val_accuracy"] for r in m[0]] == [r["val_accuracy"] for r in m[1]],
                  "accuracy on class-id labels differs from one-hot labels")
            check(float(m[0][-1]["val_accuracy"]) > 0.8, f"iris with class ids did not learn: {m[0][-1]['val_accuracy']}")

        # every path, the layer ops model
        sp = os.path.join(tmp, "iris-ops.json")
        write(sp, iris_spec(True, True, iris))
        paths_agree(tmp, sp, "iris-ops")

        # bce_with_logits: every path, and numpy's first loss
        sp = os.path.join(tmp, "bce.json")
        write(sp, moons_spec(moons))
        base = paths_agree(tmp, sp, "bce")
        # numpy's binary cross-entropy over the logits `predict` writes for every row of the data,
        # against `evaluate`'s loss over the same rows (its row-weighted mean of batch means)
        pred = os.path.join(tmp, "pred.csv")
        run("predict", sp, "--weights", base, "--data", moons, "--out", pred)
        got = os.path.join(tmp, "eval.json")
        run("evaluate", sp, "--weights", base, "--data", moons, "--json", got, "--quiet")
        pr = list(csv.DictReader(open(pred)))
        x = np.array([float(r["logit"] if "logit" in r else list(r.values())[-1]) for r in pr])
        t = np.array([float(r["label"]) for r in csv.DictReader(open(moons))])
        numpy_loss = float(np.mean(np.maximum(x, 0) - x * t + np.log1p(np.exp(-np.abs(x)))))
        ev = json.load(open(got)) if os.path.exists(got) else {}
        loss = ev.get("loss", ev.get("val_loss"))
        check(loss is not None and abs(loss - numpy_loss) <= 1e-12 * max(1.0, abs(numpy_loss)),
              f"bce_with_logits: evaluate's loss {loss} vs numpy {numpy_loss}")
        check(len(x) == len(t), f"predict wrote {len(x)} rows for {len(t)} data rows")

        # dropout: a dense layer with dropout trains to the same bytes on every path and thread count;
        # it changes training (a run without it differs) but not evaluation (the identity there)
        def dropout_spec(rate):
            d = iris_spec(False, False, iris)
            layer = {"id": "h", "layer": "dense", "inputs": ["x"], "units": 16, "activation": "relu"}
            if rate is not None:
                layer["dropout"] = rate
            d["params"] = {"W2": {"shape": [16, 3], "init": {"kind": "normal", "std": 0.3}}, "b2": {"shape": [3], "init": "zeros"}}
            d["graph"] = [layer,
                          {"id": "z", "op": "matmul", "inputs": ["h", "W2"]},
                          {"id": "logits", "op": "add", "inputs": ["z", "b2"]},
                          {"id": "loss", "op": "softmax_cross_entropy", "inputs": ["logits", "y"]}]
            return d
        sp = os.path.join(tmp, "dropout.json")
        write(sp, dropout_spec(0.4))
        base = paths_agree(tmp, sp, "dropout")
        for threads in ("1", "2"):
            out = os.path.join(tmp, f"dropout-t{threads}")
            run("train", sp, "--out", out, "--quiet", "--threads", threads)
            for f in ("loss.csv", "weights.safetensors"):
                check(same_file(os.path.join(base, f), os.path.join(out, f)), f"dropout: {f} differs with --threads {threads}")
        sp_off = os.path.join(tmp, "nodropout.json")
        write(sp_off, dropout_spec(None))
        off = os.path.join(tmp, "nodropout")
        run("train", sp_off, "--out", off, "--quiet")
        check(read(os.path.join(off, "loss.csv")) != read(os.path.join(base, "loss.csv")), "dropout 0.4 did not change training")
        # the dropout run's weights evaluated through its own spec, and by a run of the spec without
        # dropout that starts from them with lr 1e-300 (too small to move any weight, so its first val_loss is those weights' loss, no dropout)
        got = os.path.join(tmp, "eval.json")
        run("evaluate", sp, "--weights", base, "--json", got, "--quiet")
        ev = json.load(open(got)) if os.path.exists(got) else {}
        still = os.path.join(tmp, "nodropout-lr0")
        run("train", sp_off, "--out", still, "--quiet", "--init", os.path.join(base, "weights.safetensors"),
            "--epochs", "1", "--set", "optimizer.lr=1e-300")
        mrows = list(csv.DictReader(open(os.path.join(still, "metrics.csv")))) if os.path.exists(still) else []
        check(bool(mrows) and "loss" in ev and float(mrows[0]["val_loss"]) == ev["loss"],
              f"dropout is not the identity in evaluate: {ev.get('loss')} vs {mrows[0]['val_loss'] if mrows else None}")
        pred = [os.path.join(tmp, f"pred-{i}.csv") for i in range(2)]
        run("predict", sp, "--weights", base, "--data", iris, "--out", pred[0])
        run("predict", sp, "--weights", base, "--data", iris, "--out", pred[1], "--device", "host")
        check(os.path.exists(pred[0]) and read(pred[0]) == read(pred[1] if os.path.exists(pred[1]) else pred[0] + "x"),
              "dropout: predict on the CPU and on --device host differ (the device must not drop at prediction)")

        # bad class ids: one located line, exit 2, before training
        for bad in ("3.5", "3", "-1"):
            path = os.path.join(tmp, f"bad-{bad}.csv")
            lines = open(iris).read().splitlines()
            parts = lines[7].split(",")
            parts[-1] = bad
            lines[7] = ",".join(parts)
            open(path, "w").write("\n".join(lines) + "\n")
            sp = os.path.join(tmp, f"bad-{bad}.json")
            bad_spec = iris_spec(True, False, path)
            del bad_spec["metrics"]  # the accuracy metric refuses 3.5 and -1 itself (a test of its own below)
            write(sp, bad_spec)
            p = run("train", sp, "--out", os.path.join(tmp, f"bad-{bad}"), code=2)
            err = p.stderr.strip().splitlines()
            check(len(err) == 1 and "/graph/" in err[0] and "class id" in err[0] and bad in err[0],
                  f"class id {bad}: wanted one located line, got {p.stderr!r}")
            check(not os.path.exists(os.path.join(tmp, f"bad-{bad}", "loss.csv")), f"class id {bad}: training started")
            write(sp, iris_spec(True, False, path))
            if bad != "3":
                p = run("train", sp, "--out", os.path.join(tmp, f"bad-m-{bad}"), code=2)
                check("/metrics/accuracy/labels" in p.stderr and "class id" in p.stderr, f"accuracy labels {bad}: {p.stderr!r}")

    return cli.finish("new ops through the CLI: cross_entropy == softmax_cross_entropy bitwise; cpu/host/fused agree; bad ids refused")


if __name__ == "__main__":
    sys.exit(main())
