#!/usr/bin/env python3
"""Class metrics (issue 41 item 5): evaluate's confusion matrix, per-class numbers, macro-F1, balanced
accuracy, ROC-AUC, PR-AUC and log loss; metrics.csv's val_f1 / val_auc; early stopping on them.

usage: test_class_metrics.py GRADRUN   (run from the repository root; numpy)

- a hand-computed binary case: a one-logit classifier whose logit is its input x exactly (W = 1,
  b = 0 kept by a learning rate of 1e-300), 8 rows with tied scores across the classes; every number
  against the fractions worked out by hand (ROC-AUC 12/16, AP 111/140, macro-F1 13/21, balanced
  accuracy 5/8) and log loss against the documented softplus formula, bit for bit;
- a trained binary classifier with string labels (class names "no"/"yes"): evaluate --data on raw
  rows against numpy on predict's probabilities and classes (confusion, precision, recall, F1,
  ROC-AUC with averaged ties, average precision, log loss from the logits); metrics.csv's last
  val_f1 / val_auc equal evaluate's macro_f1 / roc_auc on the validation rows bit for bit;
- the same model without metrics.accuracy (its loss, a mean of bce_with_logits, makes it a
  classifier): the same class metrics and val_f1 / val_auc;
- penguins (3 classes): the confusion matrix against predict's named classes;
- early stopping with monitor val_f1 keeps the best epoch by that column; val_auc on a 3-class
  model is refused (exit 2).
"""
import csv
import io
import json
import math
import os
import struct
import sys
import tempfile

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "tests", "support"))
from cli_support import Cli  # noqa: E402

cli = Cli(os.path.abspath(sys.argv[1]))
check = cli.check


def bits(v):
    return struct.pack("<d", float(v))


def softplus(z):
    return max(z, 0.0) + math.log1p(math.exp(-abs(z)))


def metrics_by_hand(truth, pred, score, k):
    """The documented definitions (lib/train/class_metrics.h), in the same order of operations."""
    cm = np.zeros((k, k), dtype=np.int64)
    for t, p in zip(truth, pred):
        cm[t, p] += 1
    out = {"confusion_matrix": cm.tolist()}
    sup, prd = cm.sum(axis=1), cm.sum(axis=0)
    prec, rec, f1 = [], [], []
    f1s, f1n, rs, rn = 0.0, 0, 0.0, 0
    for c in range(k):
        tp = int(cm[c, c])
        fp, fn = int(prd[c]) - tp, int(sup[c]) - tp
        prec.append(tp / (tp + fp) if tp + fp else 0.0)
        rec.append(tp / (tp + fn) if tp + fn else 0.0)
        f1.append(2 * tp / (2 * tp + fp + fn) if 2 * tp + fp + fn else 0.0)
        if sup[c] + prd[c] > 0:
            f1s, f1n = f1s + f1[-1], f1n + 1
        if sup[c] > 0:
            rs, rn = rs + rec[-1], rn + 1
    out.update(precision=prec, recall=rec, f1=f1, support=[int(s) for s in sup], macro_f1=f1s / f1n, balanced_accuracy=rs / rn)
    if k == 2:
        n = len(truth)
        order = sorted(range(n), key=lambda i: score[i])  # stable, ascending
        rank_sum, s = 0.0, 0
        while s < n:
            e = s
            while e < n and score[order[e]] == score[order[s]]:
                e += 1
            for i in range(s, e):
                if truth[order[i]] == 1:
                    rank_sum += (s + 1 + e) / 2.0
            s = e
        P, N = float(sup[1]), float(sup[0])
        out["roc_auc"] = (rank_sum - P * (P + 1.0) / 2.0) / (P * N)
        tot, tp, fp, e = 0.0, 0, 0, n
        while e > 0:
            s = e
            while s > 0 and score[order[s - 1]] == score[order[e - 1]]:
                s -= 1
            dtp = sum(1 for i in range(s, e) if truth[order[i]] == 1)
            fp += (e - s) - dtp
            tp += dtp
            if dtp:
                tot += dtp * (tp / (tp + fp))
            e = s
        out["pr_auc"] = tot / P
    return out


def compare(got, want, what):
    for key in ("confusion_matrix",):
        check(got[key] == want[key], f"{what}: {key} {got[key]} != {want[key]}")
    for i, pc in enumerate(got["per_class"]):
        for key in ("precision", "recall", "f1"):
            check(bits(pc[key]) == bits(want[key][i]), f"{what}: class {pc['class']} {key} {pc[key]!r} != {want[key][i]!r}")
        check(pc["support"] == want["support"][i], f"{what}: class {pc['class']} support {pc['support']} != {want['support'][i]}")
    for key in ("macro_f1", "balanced_accuracy", "roc_auc", "pr_auc"):
        if key in want:
            check(key in got and bits(got[key]) == bits(want[key]), f"{what}: {key} {got.get(key)!r} != {want[key]!r}")


def read_csv_rows(path):
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def main():
    tmp = tempfile.mkdtemp(prefix="gr-classmetrics-")

    # ---- 1. the hand-computed case --------------------------------------------------------------
    xs = [-2.0, -1.0, -1.0, 0.5, 0.5, 1.0, 2.0, 3.0]
    ys = ["no", "no", "yes", "no", "yes", "no", "yes", "yes"]
    with open(f"{tmp}/hand.csv", "w") as f:
        f.write("x,answer\n" + "".join(f"{x},{y}\n" for x, y in zip(xs, ys)))
    hand = {"gradrun": 1, "seed": 1,
            "data": {"csv": f"{tmp}/hand.csv",
                     "inputs": {"x": {"column": "x"}, "y": {"column": "answer", "categories": ["no", "yes"], "encode": "ids"}}},
            "params": {"W": {"shape": [1, 1], "init": {"values": [1.0]}}, "b": {"shape": [1], "init": "zeros"}},
            "graph": [{"id": "xw", "op": "matmul", "inputs": ["x", "W"]},
                      {"id": "logit", "op": "add", "inputs": ["xw", "b"]},
                      {"id": "l", "op": "bce_with_logits", "inputs": ["logit", "y"]},
                      {"id": "loss", "op": "mean", "inputs": ["l"]}],
            "loss": "loss", "optimizer": {"kind": "sgd", "lr": 1e-300},
            "train": {"epochs": 1, "batch_size": 4, "shuffle": False},
            "metrics": {"accuracy": {"logits": "logit", "labels": "y"}}}
    with open(f"{tmp}/hand.json", "w") as f:
        json.dump(hand, f)
    cli.run("train", f"{tmp}/hand.json", "--out", f"{tmp}/hand", "-q")
    p = cli.run("evaluate", f"{tmp}/hand", "--data", f"{tmp}/hand.csv", "--json", f"{tmp}/hand-ev.json")
    ev = json.load(open(f"{tmp}/hand-ev.json"))
    check(ev.get("class_names") == ["no", "yes"], f"hand: class_names {ev.get('class_names')}")
    check(ev.get("confusion_matrix") == [[2, 2], [1, 3]], f"hand: confusion {ev.get('confusion_matrix')} != [[2, 2], [1, 3]]")
    want = {"precision": [2 / 3, 3 / 5], "recall": [2 / 4, 3 / 4], "f1": [4 / 7, 6 / 9], "support": [4, 4],
            "macro_f1": (4 / 7 + 6 / 9) / 2, "balanced_accuracy": 0.625, "roc_auc": 12 / 16, "pr_auc": (1 + 1 + 3 / 5 + 4 / 7) / 4,
            "confusion_matrix": [[2, 2], [1, 3]]}
    compare(ev, want, "hand")
    check(abs(ev["macro_f1"] - 13 / 21) < 1e-15 and abs(ev["pr_auc"] - 111 / 140) < 1e-15, "hand: the fractions 13/21 and 111/140")
    ll = 0.0
    for x, y in zip(xs, ys):
        ll = ll + (softplus(-x) if y == "yes" else softplus(x))
    check(bits(ev.get("log_loss", 0)) == bits(ll / len(xs)), f"hand: log_loss {ev.get('log_loss')!r} != {ll / len(xs)!r}")
    check(bits(ev["accuracy"]) == bits(5 / 8), f"hand: accuracy {ev['accuracy']}")
    for word in ("macro_f1", "balanced_accuracy", "roc_auc", "pr_auc", "log_loss", "confusion matrix", "precision"):
        check(word in p.stdout, f"hand: evaluate's table lacks {word}:\n{p.stdout}")

    # ---- 2. a trained binary classifier on string labels ----------------------------------------
    rng = np.random.default_rng(5)
    n = 240
    a, b = rng.normal(size=n), rng.normal(size=n)
    yes = (a + 0.5 * b + rng.normal(scale=0.8, size=n)) > 0.4  # imbalanced, overlapping
    with open(f"{tmp}/bin.csv", "w") as f:
        f.write("a,b,label\n" + "".join(f"{x:.3f},{z:.3f},{'yes' if t else 'no'}\n" for x, z, t in zip(a, b, yes)))
    spec = {"gradrun": 1, "seed": 3,
            "data": {"csv": f"{tmp}/bin.csv", "validation": 0.25,
                     "inputs": {"x": {"columns": ["a", "b"], "standardize": True},
                                "y": {"column": "label", "categories": "auto", "encode": "ids"}}},
            "graph": [{"id": "h", "layer": "dense", "inputs": ["x"], "units": 8, "activation": "tanh"},
                      {"id": "logit", "layer": "dense", "inputs": ["h"], "units": 1},
                      {"id": "l", "op": "bce_with_logits", "inputs": ["logit", "y"]},
                      {"id": "loss", "op": "mean", "inputs": ["l"]}],
            "loss": "loss", "optimizer": {"kind": "adam", "lr": 0.01},
            "train": {"epochs": 6, "batch_size": 20},
            "metrics": {"accuracy": {"logits": "logit", "labels": "y"}}}
    with open(f"{tmp}/bin.json", "w") as f:
        json.dump(spec, f)
    cli.run("train", f"{tmp}/bin.json", "--out", f"{tmp}/bin", "-q")
    rows = read_csv_rows(f"{tmp}/bin/metrics.csv")
    check(rows and "val_f1" in rows[0] and "val_auc" in rows[0], f"binary: metrics.csv columns {list(rows[0]) if rows else None}")
    cli.run("evaluate", f"{tmp}/bin", "--json", f"{tmp}/bin-val.json", "-q")
    val = json.load(open(f"{tmp}/bin-val.json"))
    if rows and "val_f1" in rows[-1]:
        check(bits(float(rows[-1]["val_f1"])) == bits(val["macro_f1"]), f"binary: val_f1 {rows[-1]['val_f1']} != evaluate {val['macro_f1']}")
        check(bits(float(rows[-1]["val_auc"])) == bits(val["roc_auc"]), f"binary: val_auc {rows[-1]['val_auc']} != evaluate {val['roc_auc']}")
    cli.run("evaluate", f"{tmp}/bin", "--data", f"{tmp}/bin.csv", "--json", f"{tmp}/bin-ev.json", "-q")
    ev = json.load(open(f"{tmp}/bin-ev.json"))
    cli.run("predict", f"{tmp}/bin", "--data", f"{tmp}/bin.csv", "--out", f"{tmp}/bin-pred.csv", "-q")
    cli.run("predict", f"{tmp}/bin", "--data", f"{tmp}/bin.csv", "--out", f"{tmp}/bin-logit.csv", "-q",
            "--set", "predict={\"output\": \"logit\", \"transform\": \"none\"}")
    pred = read_csv_rows(f"{tmp}/bin-pred.csv")
    logit = read_csv_rows(f"{tmp}/bin-logit.csv")
    pcol = [k for k in pred[0] if k != "class"][0]
    lcol = [k for k in logit[0] if k != "class"][0]
    truth = [1 if t else 0 for t in yes]
    klass = [1 if r["class"] == "yes" else 0 for r in pred]
    score = [float(r[pcol]) for r in pred]
    want = metrics_by_hand(truth, klass, score, 2)
    compare(ev, want, "binary (numpy on predict's output)")
    ll = 0.0
    for t, r in zip(truth, logit):
        x = float(r[lcol])
        ll = ll + (softplus(-x) if t == 1 else softplus(x))
    check(bits(ev.get("log_loss", 0)) == bits(ll / n), f"binary: log_loss {ev.get('log_loss')!r} != {ll / n!r}")
    check(ev.get("class_names") == ["no", "yes"], f"binary: class names {ev.get('class_names')}")
    # A cross-check of the rank formula against the pairwise definition (ties count one half).
    pos = [s for s, t in zip(score, truth) if t == 1]
    neg = [s for s, t in zip(score, truth) if t == 0]
    pairs = sum((p > q) + 0.5 * (p == q) for p in pos for q in neg) / (len(pos) * len(neg))
    check(abs(pairs - ev["roc_auc"]) < 1e-12, f"binary: roc_auc {ev['roc_auc']} vs pairwise {pairs}")

    # The same classifier without metrics.accuracy: its loss (mean of bce_with_logits) makes it one.
    del spec["metrics"]
    with open(f"{tmp}/bin-nometric.json", "w") as f:
        json.dump(spec, f)
    cli.run("train", f"{tmp}/bin-nometric.json", "--out", f"{tmp}/bin-nm", "-q")
    cli.run("evaluate", f"{tmp}/bin-nm", "--data", f"{tmp}/bin.csv", "--json", f"{tmp}/bin-nm-ev.json", "-q")
    nm = json.load(open(f"{tmp}/bin-nm-ev.json"))
    for key in ("confusion_matrix", "per_class", "macro_f1", "balanced_accuracy", "roc_auc", "pr_auc", "log_loss", "class_names"):
        check(nm.get(key) == ev.get(key), f"binary without metrics.accuracy: {key} {nm.get(key)} != {ev.get(key)}")
    check("accuracy" not in nm, "binary without metrics.accuracy: an accuracy was reported")
    rows_nm = read_csv_rows(f"{tmp}/bin-nm/metrics.csv")
    check([r.get("val_f1") for r in rows_nm] == [r.get("val_f1") for r in rows] and [r.get("val_auc") for r in rows_nm] == [r.get("val_auc") for r in rows],
          "binary without metrics.accuracy: metrics.csv val_f1/val_auc differ from the declared classifier's")

    # ---- 3. penguins: 3 classes with names --------------------------------------------------------
    cli.run("train", "specs/penguins.json", "--out", f"{tmp}/peng", "--epochs", "3", "-q")
    cli.run("evaluate", f"{tmp}/peng", "--data", "datasets/penguins.csv", "--json", f"{tmp}/peng-ev.json", "-q")
    cli.run("predict", f"{tmp}/peng", "--data", "datasets/penguins.csv", "--out", f"{tmp}/peng-pred.csv", "-q")
    ev = json.load(open(f"{tmp}/peng-ev.json"))
    names = ev.get("class_names", [])
    check(names == ["Adelie", "Chinstrap", "Gentoo"], f"penguins: class names {names}")
    raw = read_csv_rows("datasets/penguins.csv")
    pred = read_csv_rows(f"{tmp}/peng-pred.csv")
    if names:
        want = metrics_by_hand([names.index(r["species"]) for r in raw], [names.index(r["class"]) for r in pred], None, 3)
        compare(ev, want, "penguins")
        check("roc_auc" not in ev, "penguins: roc_auc on 3 classes")

    # ---- 4. early stopping on val_f1; val_auc needs two classes -----------------------------------
    cli.run("train", "specs/penguins.json", "--out", f"{tmp}/peng-es", "--epochs", "30", "-q",
            "--set", 'train.early_stopping={"monitor": "val_f1", "patience": 3}')
    rows = read_csv_rows(f"{tmp}/peng-es/metrics.csv")
    run = json.load(open(f"{tmp}/peng-es/run.json"))
    f1 = [float(r["val_f1"]) for r in rows]
    best = max(range(len(f1)), key=lambda i: (f1[i], -i))
    check(run["early_stopping"]["best_epoch"] == best + 1 and run["early_stopping"]["monitor"] == "val_f1",
          f"early stopping on val_f1: best epoch {run['early_stopping']['best_epoch']}, the column's first maximum is {best + 1}")
    check(len(rows) < 30 and run["stop_reason"] == "early_stopping", f"early stopping on val_f1: {len(rows)} epochs, {run['stop_reason']}")
    p = cli.run("train", "specs/penguins.json", "--out", f"{tmp}/peng-auc", "-q",
                "--set", 'train.early_stopping={"monitor": "val_auc"}', code=2)
    check("val_auc needs a binary classifier" in p.stderr, f"val_auc on 3 classes: {p.stderr}")
    return cli.finish(f"class metrics: hand case (roc_auc 12/16, pr_auc 111/140, macro_f1 13/21) and a trained binary "
                      f"and 3-class model equal the definitions bit for bit; val_f1/val_auc == evaluate; early stopping on val_f1")


if __name__ == "__main__":
    sys.exit(main())
