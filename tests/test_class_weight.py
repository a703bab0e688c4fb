#!/usr/bin/env python3
"""Class weights (issue 41 item 4): "class_weight" on softmax_cross_entropy, cross_entropy and
bce_with_logits, "pos_weight" on bce_with_logits, and "balanced".

usage: test_class_weight.py GRADRUN   (run from the repository root; numpy, torch; Skipped without torch)

- `gradrun grad` (the loss and every gradient on one batch of all rows) against PyTorch float64:
  F.cross_entropy(x, ids, weight=w) for softmax_cross_entropy (one-hot labels from string
  categories) and cross_entropy (ids), F.binary_cross_entropy_with_logits(x, y, weight=w0,
  pos_weight=w1/w0) for class_weight [w0, w1] and pos_weight p (relative 1e-12);
- cross_entropy's weighted loss and gradients have the same bits as softmax_cross_entropy's on the
  one-hot rows (the ids become exact one-hot rows);
- a weight list of ones gives the unweighted loss (relative 1e-15), and weights scaled by 10 the
  same loss (the weighted mean is scale-free);
- "balanced": run.json's overrides hold the list n / (k · count_c) over the TRAINING rows (the
  documented split), bit for bit, and spec.json keeps it, so evaluate on the run folder needs no
  data statistics; it trains the same bits on cpu, host and host --fuse; check --fd passes;
- predict on a weighted model still writes class names (the weighted loss predicts as the loss it
  weighs); errors: class_weight on another op, a bad list, a class without training rows.
"""
import csv
import json
import os
import struct
import sys
import tempfile

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "tests", "support"))
from cli_support import Cli, read, tensors  # noqa: E402
from documented_split import split  # noqa: E402

try:
    import torch
    import torch.nn.functional as F
except ImportError:
    print("SKIP: torch is not importable")
    sys.exit(77)

cli = Cli(os.path.abspath(sys.argv[1]))
check = cli.check
def f64(b):
    return np.frombuffer(b, dtype="<f8")


def close(a, b, rtol):
    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    return a.shape == b.shape and bool(np.all(np.abs(a - b) <= rtol * np.maximum(np.abs(b), 1e-300) + 1e-300))


W0 = [[0.3, -0.2, 0.5], [-0.4, 0.1, 0.25]]
B0 = [0.05, -0.1, 0.0]
CLASSES = ["cat", "dog", "emu"]


def write_data(tmp):
    rng = np.random.default_rng(11)
    n = 40
    x = rng.normal(size=(n, 2))
    ids = rng.choice(3, size=n, p=[0.6, 0.3, 0.1])
    ids[:3] = [0, 1, 2]  # every class present
    path = f"{tmp}/pets.csv"
    with open(path, "w") as f:
        f.write("a,b,kind,bin\n")
        for r in range(n):
            f.write(f"{x[r, 0]:.4f},{x[r, 1]:.4f},{CLASSES[ids[r]]},{1 if ids[r] == 2 else 0}\n")
    return path, np.array([[float(f"{v:.4f}") for v in row] for row in x]), ids


def spec_for(tmp, data, loss, weight=None, label="kind", encode="one_hot", validation=0.0, batch=40, name="s"):
    inputs = {"x": {"columns": ["a", "b"]}}
    if loss == "bce":
        inputs["y"] = {"column": "bin"}
        graph = [{"id": "xw", "op": "matmul", "inputs": ["x", "Wb"]}, {"id": "z", "op": "add", "inputs": ["xw", "bb"]},
                 {"id": "l", "op": "bce_with_logits", "inputs": ["z", "y"]}, {"id": "loss", "op": "mean", "inputs": ["l"]}]
        params = {"Wb": {"shape": [2, 1], "init": {"values": [[0.7], [-0.3]]}}, "bb": {"shape": [1], "init": {"values": [0.1]}}}
        if weight is not None:
            graph[2].update(weight)
        metrics = {"accuracy": {"logits": "z", "labels": "y"}}
    else:
        inputs["y"] = {"column": label, "categories": CLASSES, "encode": encode}
        op = "softmax_cross_entropy" if encode == "one_hot" else "cross_entropy"
        graph = [{"id": "xw", "op": "matmul", "inputs": ["x", "W"]}, {"id": "logits", "op": "add", "inputs": ["xw", "b"]},
                 {"id": "loss", "op": op, "inputs": ["logits", "y"]}]
        params = {"W": {"shape": [2, 3], "init": {"values": W0}}, "b": {"shape": [3], "init": {"values": B0}}}
        if weight is not None:
            graph[2].update(weight)
        metrics = {"accuracy": {"logits": "logits", "labels": "y"}}
    spec = {"gradrun": 1, "seed": 5, "data": {"csv": data, "inputs": inputs, "validation": validation},
            "params": params, "graph": graph, "loss": "loss", "optimizer": {"kind": "adam", "lr": 0.05},
            "train": {"epochs": 3, "batch_size": batch, "shuffle": False}, "metrics": metrics}
    path = f"{tmp}/{name}.json"
    with open(path, "w") as f:
        json.dump(spec, f)
    return path


def grad_of(tmp, spec, tag):
    out = f"{tmp}/{tag}.grad.safetensors"
    cli.run("grad", spec, "--out", out)
    return {k: f64(v) for k, v in tensors(out).items()} if os.path.exists(out) else {}


def torch_ce(x, ids, w):
    W = torch.tensor(W0, dtype=torch.float64, requires_grad=True)
    b = torch.tensor(B0, dtype=torch.float64, requires_grad=True)
    loss = F.cross_entropy(torch.tensor(x) @ W + b, torch.tensor(ids), weight=None if w is None else torch.tensor(w, dtype=torch.float64))
    loss.backward()
    return loss.item(), W.grad.numpy().ravel(), b.grad.numpy()


def torch_bce(x, y, w0, pos):
    W = torch.tensor([[0.7], [-0.3]], dtype=torch.float64, requires_grad=True)
    b = torch.tensor([0.1], dtype=torch.float64, requires_grad=True)
    z = torch.tensor(x) @ W + b
    t = torch.tensor(y, dtype=torch.float64).reshape(-1, 1)
    loss = F.binary_cross_entropy_with_logits(z, t, weight=torch.tensor([w0], dtype=torch.float64),
                                              pos_weight=torch.tensor([pos], dtype=torch.float64))
    loss.backward()
    return loss.item(), W.grad.numpy().ravel(), b.grad.numpy()


def main():
    tmp = tempfile.mkdtemp(prefix="gr-classweight-")
    data, x, ids = write_data(tmp)
    w = [0.5, 2.0, 7.5]
    # ---- softmax_cross_entropy and cross_entropy against torch ------------------------------------
    g_sce = grad_of(tmp, spec_for(tmp, data, "sce", {"class_weight": w}, name="sce"), "sce")
    g_ce = grad_of(tmp, spec_for(tmp, data, "sce", {"class_weight": w}, encode="ids", name="ce"), "ce")
    tl, tW, tb = torch_ce(x, ids, w)
    for tag, g in (("softmax_cross_entropy", g_sce), ("cross_entropy", g_ce)):
        check(g and close(g["loss"], [tl], 1e-12) and close(g["W"], tW, 1e-11) and close(g["b"], tb, 1e-11),
              f"{tag} class_weight {w}: gradrun loss {g.get('loss')} W {g.get('W')} vs torch {tl} {tW} {tb}")
    check(g_sce and g_ce and all(g_sce[k].tobytes() == g_ce[k].tobytes() for k in ("loss", "W", "b")),
          "cross_entropy's weighted loss/gradients differ from softmax_cross_entropy's on the one-hot rows")
    g_plain = grad_of(tmp, spec_for(tmp, data, "sce", None, name="plain"), "plain")
    g_ones = grad_of(tmp, spec_for(tmp, data, "sce", {"class_weight": [1, 1, 1]}, name="ones"), "ones")
    g_x10 = grad_of(tmp, spec_for(tmp, data, "sce", {"class_weight": [v * 10 for v in w]}, name="x10"), "x10")
    check(g_plain and g_ones and close(g_ones["loss"], g_plain["loss"], 1e-15), f"weights of ones: {g_ones.get('loss')} vs {g_plain.get('loss')}")
    check(g_x10 and close(g_x10["loss"], g_sce["loss"], 1e-15), f"weights x10: {g_x10.get('loss')} vs {g_sce.get('loss')}")
    check(not close(g_sce["loss"], g_plain["loss"], 1e-6), "the weights changed nothing")
    # ---- bce_with_logits: class_weight [w0, w1] and pos_weight -------------------------------------
    y = (ids == 2).astype(np.float64)
    g_b = grad_of(tmp, spec_for(tmp, data, "bce", {"class_weight": [0.8, 3.0]}, name="bce"), "bce")
    tl, tW, tb = torch_bce(x, y, 0.8, 3.0 / 0.8)
    check(g_b and close(g_b["loss"], [tl], 1e-12) and close(g_b["Wb"], tW, 1e-11) and close(g_b["bb"], tb, 1e-11),
          f"bce class_weight [0.8, 3]: {g_b.get('loss')} {g_b.get('Wb')} vs torch {tl} {tW} {tb}")
    g_p = grad_of(tmp, spec_for(tmp, data, "bce", {"pos_weight": 4.0}, name="bcepos"), "bcepos")
    tl, tW, tb = torch_bce(x, y, 1.0, 4.0)
    check(g_p and close(g_p["loss"], [tl], 1e-12) and close(g_p["Wb"], tW, 1e-11), f"bce pos_weight 4: {g_p.get('loss')} vs torch {tl}")
    # ---- "balanced": resolved on the training rows, saved, the same bits on every path --------------
    bal = spec_for(tmp, data, "sce", {"class_weight": "balanced"}, validation=0.25, batch=10, name="bal")
    train_rows, _ = split(len(ids), 5, 0.25)
    counts = [sum(1 for r in train_rows if ids[r] == c) for c in range(3)]
    want = [len(train_rows) / (3 * c) for c in counts]
    runs = {}
    for engine, flags in (("cpu", ["--device", "cpu"]), ("host", ["--device", "host"]), ("fused", ["--device", "host", "--fuse"])):
        runs[engine] = f"{tmp}/bal-{engine}"
        cli.run("train", bal, "--out", runs[engine], "--quiet", *flags)
    run = json.load(open(f"{runs['cpu']}/run.json"))
    item = [o for o in run.get("overrides", []) if o.startswith("/graph/2/class_weight=")]
    got = json.loads(item[0].split("=", 1)[1]) if item else None
    check(got is not None and [struct.pack("<d", v) for v in got] == [struct.pack("<d", v) for v in want],
          f"balanced weights in run.json {got} != n/(k*count) {want} (counts {counts})")
    spec_json = json.load(open(f"{runs['cpu']}/spec.json"))
    check(spec_json["graph"][2].get("class_weight") == got, f"spec.json class_weight {spec_json['graph'][2].get('class_weight')}")
    for engine in ("host", "fused"):  # the weights' tensors (their metadata names the engine)
        check(read(f"{runs['cpu']}/loss.csv") == read(f"{runs[engine]}/loss.csv"), f"balanced: loss.csv differs between cpu and {engine}")
        check(tensors(f"{runs['cpu']}/weights.safetensors") == tensors(f"{runs[engine]}/weights.safetensors"),
              f"balanced: the weights differ between cpu and {engine}")
    cli.run("check", bal, "--fd")
    p = cli.run("evaluate", runs["cpu"], "--json", f"{tmp}/bal-ev.json", "--quiet")
    rows = list(csv.DictReader(open(f"{runs['cpu']}/metrics.csv")))
    ev = json.load(open(f"{tmp}/bal-ev.json")) if os.path.exists(f"{tmp}/bal-ev.json") else {}
    check(ev and struct.pack("<d", ev["loss"]) == struct.pack("<d", float(rows[-1]["val_loss"])),
          f"balanced: evaluate's loss {ev.get('loss')} != metrics.csv val_loss {rows[-1]['val_loss']}")
    cli.run("predict", runs["cpu"], "--data", data, "--out", f"{tmp}/bal-pred.csv", "--quiet")
    pred = list(csv.DictReader(open(f"{tmp}/bal-pred.csv"))) if os.path.exists(f"{tmp}/bal-pred.csv") else []
    check(pred and set(r["class"] for r in pred) <= set(CLASSES) and len(pred[0]) == 4,
          f"predict on a weighted model: {pred[:2]}")
    # ---- errors ------------------------------------------------------------------------------------
    bad = spec_for(tmp, data, "sce", None, name="bad1")
    s = json.load(open(bad))
    s["graph"][0]["class_weight"] = [1, 2]
    json.dump(s, open(bad, "w"))
    p = cli.run("check", bad, "--fd", code=2)  # refused when the spec is read
    check("/graph/0/class_weight" in p.stderr and "class weights apply to" in p.stderr, f"class_weight on matmul: {p.stderr}")
    p = cli.run("check", spec_for(tmp, data, "sce", {"class_weight": [1, -2, 1]}, name="bad2"), "--fd", code=2)
    check("/graph/2/class_weight" in p.stderr, f"negative weight: {p.stderr}")
    p = cli.run("check", spec_for(tmp, data, "sce", {"class_weight": [1, 2]}, name="bad3"), "--fd", code=2)
    check("class_weight" in p.stderr, f"2 weights for 3 classes: {p.stderr}")
    return cli.finish(f"class weights: softmax_cross_entropy / cross_entropy / bce_with_logits (class_weight, pos_weight) == "
                      f"torch f64 (rel 1e-12); balanced {['%.6g' % v for v in want]} == n/(k*count) on the training rows; "
                      f"cpu == host == fused bits")


if __name__ == "__main__":
    sys.exit(main())
