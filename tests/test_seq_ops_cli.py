#!/usr/bin/python3
"""Sequence ops through the command line (issue 43): causal softmax, matmul with a batched left
input, dense layers on [N,T,D], cross_entropy on [N,T,V] with ids [N,T], per-position predict.

    /usr/bin/python3 tests/test_seq_ops_cli.py GRADRUN

- specs/attention-causal.json and a data spec (a CSV of sequences: x [B,T,D] through "shape", ids
  y [B,T]; dense on [B,T,D] -> causal self-attention -> dense to [B,T,V] -> cross_entropy) train to
  the same loss.csv and weight bytes on the CPU tape (1 and 4 threads), host per-node and host fused,
  in f64 and in f32 (byte comparison, no tolerance).
- Masked entries are exactly 0: `predict` of the attention probabilities (CPU tape and host replay) has +0.0
  above the diagonal; `grad` of a score bias that reaches only masked entries is exactly 0 there on
  every engine, and nonzero on the visible ones.
- `predict` of the [B,T,V] logits writes one line per (row, position) with V probabilities summing
  to 1 and the argmax class; a NumPy forward from the weights file (its own causal mask) agrees
  within 1e-12; the device engines' predictions are the same bytes.
- `export --format torch` (masked_fill) reproduces predict within 1e-12; `export --format onnx`
  (an Add of a 0/-inf mask before Softmax): onnx.checker, the mask initializer's values, and the
  model's output against predict with onnx's reference evaluator (onnx >= 1.13) when there.
- Refusals, one located line each: "causal" on an op without it, a causal softmax over axis 0 or a
  rank-1 input, cross_entropy with ids of the wrong shape, a dense layer on a rank-1 input.
Without numpy/torch: exit 77.
"""
import csv
import importlib.util
import json
import os
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
GR = sys.argv[1]
sys.path.insert(0, os.path.join(ROOT, "tests", "support"))
from cli_support import Cli, read, tensors  # noqa: E402

try:
    import numpy as np
    import torch
except ImportError as e:
    print("SKIPPED [torch]: seq_ops_cli -- needs /usr/bin/python3 with numpy and torch: %s" % e)
    sys.exit(77)

cli = Cli(GR)
check, run = cli.check, cli.run

B, T, D, V = 24, 5, 3, 4  # rows, positions, features per position, classes


def make_csv(path):
    rng = np.random.default_rng(7)
    x = np.array([float("%.6f" % v) for v in rng.uniform(-1, 1, size=B * T * D)]).reshape(B, T, D)  # as the CSV holds it
    # next-class task: the class of position t depends on the prefix (a causal model can learn it)
    y = (np.floor((np.cumsum(x[:, :, 0], axis=1) + 3.0) / 1.5).clip(0, V - 1)).astype(int)
    with open(path, "w") as f:
        f.write(",".join(["x%d" % i for i in range(T * D)] + ["y%d" % t for t in range(T)]) + "\n")
        for r in range(B):
            f.write(",".join(["%.6f" % v for v in x[r].reshape(-1)] + [str(c) for c in y[r]]) + "\n")
    return x, y


def seq_spec(data):
    return {
        "gradrun": 1, "name": "seq", "seed": 3,
        "data": {"csv": data,
                 "inputs": {"x": {"columns": ["x%d" % i for i in range(T * D)], "shape": [T, D]},
                            "y": {"columns": ["y%d" % t for t in range(T)]}},
                 "validation": 0.25},
        "graph": [
            {"id": "h", "layer": "dense", "inputs": ["x"], "units": 6, "activation": "tanh"},
            {"id": "ht", "op": "transpose", "inputs": ["h"]},
            {"id": "scores", "op": "bmm", "inputs": ["h", "ht"]},
            {"id": "att", "op": "softmax", "inputs": ["scores"], "causal": True},
            {"id": "ctx", "op": "bmm", "inputs": ["att", "h"]},
            {"id": "logits", "layer": "dense", "inputs": ["ctx"], "units": V},
            {"id": "loss", "op": "cross_entropy", "inputs": ["logits", "y"]},
        ],
        "loss": "loss",
        "optimizer": {"kind": "adam", "lr": 0.03},
        "train": {"epochs": 8, "batch_size": 6, "shuffle": True},
    }


def write(path, spec):
    with open(path, "w") as f:
        json.dump(spec, f)
    return path


def same_run(a, b, what):
    check(read(os.path.join(a, "loss.csv")) == read(os.path.join(b, "loss.csv")), what + ": loss.csv differs")
    ta, tb = tensors(os.path.join(a, "weights.safetensors")), tensors(os.path.join(b, "weights.safetensors"))
    check(ta == tb, what + ": weights differ in " + str(sorted(k for k in ta if ta.get(k) != tb.get(k))))


def engines(spec, tmp, tag):
    """Train on every engine and dtype; returns the f64 CPU run folder."""
    ref = None
    for dtype in ("f64", "f32"):
        base = os.path.join(tmp, "%s-cpu-%s" % (tag, dtype))
        run("train", spec, "--out", base, "--dtype", dtype, "--threads", "1", "--quiet")
        if dtype == "f64":
            ref = base
        for name, args in (("threads4", ["--threads", "4"]), ("host", ["--device", "host"]),
                           ("fused", ["--device", "host", "--fuse"])):
            out = os.path.join(tmp, "%s-%s-%s" % (tag, name, dtype))
            run("train", spec, "--out", out, "--dtype", dtype, *args, "--quiet")
            same_run(base, out, "%s %s %s vs the CPU tape" % (tag, dtype, name))
    return ref


def f64(raw, shape):
    return np.frombuffer(raw, dtype="<f8").reshape(shape)


def softmax(z, mask=None):
    if mask is not None:
        z = np.where(mask, -np.inf, z)
    e = np.exp(z - z.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


def numpy_forward(w, x):
    h = np.tanh(x @ f64(w["h.W"], (D, 6)) + f64(w["h.b"], (6,)))
    scores = h @ h.transpose(0, 2, 1)
    att = softmax(scores, np.triu(np.ones((T, T), dtype=bool), 1))
    logits = (att @ h) @ f64(w["logits.W"], (6, V)) + f64(w["logits.b"], (V,))
    return att, logits


def read_positions(path):
    with open(path) as f:
        rows = list(csv.DictReader(f))
    probs = np.array([[float(r["logits_%d" % j]) for j in range(V)] for r in rows])
    where = [(int(r["row"]), int(r["position"])) for r in rows]
    classes = [int(r["class"]) for r in rows]
    return where, probs, classes


def main():
    stats = {}
    with tempfile.TemporaryDirectory(prefix="gradrun-seq-") as tmp:
        # 1. the causal attention example: every engine, both dtypes
        engines(os.path.join(ROOT, "specs", "attention-causal.json"), tmp, "attention-causal")

        # 2. a sequence model on data
        data = os.path.join(tmp, "seq.csv")
        x, y = make_csv(data)
        spec = write(os.path.join(tmp, "seq.json"), seq_spec(data))
        ref = engines(spec, tmp, "seq")
        losses = [float(line.split(",")[2]) for line in read(os.path.join(ref, "loss.csv")).decode().splitlines()[1:]]
        check(losses[-1] < losses[0], "the sequence model did not learn: %s" % losses[:3])
        w = tensors(os.path.join(ref, "weights.safetensors"))
        check(sorted(w) == ["h.W", "h.b", "logits.W", "logits.b"], "weights: %s" % sorted(w))
        check(len(w["h.W"]) == D * 6 * 8, "a dense layer on [B,T,D] has W [D, units]: %d bytes" % len(w["h.W"]))

        # predict: per-position probabilities, against NumPy, the same bytes on the device engines
        out = os.path.join(tmp, "pred.csv")
        run("predict", ref, "--data", data, "--out", out)
        where, probs, classes = read_positions(out)
        check(where == [(r, t) for r in range(B) for t in range(T)], "predict lines are not (row, position) in order")
        att_np, logits_np = numpy_forward(w, x)
        want = softmax(logits_np).reshape(B * T, V)
        err = float(np.max(np.abs(probs - want)))
        stats["predict vs numpy"] = err
        check(err <= 1e-12, "predict vs a NumPy forward with its own causal mask: max |diff| %.3g" % err)
        check(np.max(np.abs(probs.sum(axis=1) - 1.0)) < 1e-12, "per-position probabilities do not sum to 1")
        check(classes == list(np.argmax(logits_np.reshape(B * T, V), axis=1)), "per-position classes are not the argmax")
        for dev in (["--device", "host"],):  # predict replays per node (it has no --fuse)
            o = os.path.join(tmp, "pred-%d.csv" % len(dev))
            if run("predict", ref, "--data", data, "--out", o, *dev).returncode == 0:
                check(read(o) == read(out), "predict %s differs from the CPU tape's bytes" % " ".join(dev))
        npy = os.path.join(tmp, "pred.npy")
        run("predict", ref, "--data", data, "--out", npy)
        check(np.load(npy).shape == (B, T, V), "predict .npy shape %s" % (np.load(npy).shape,))

        # the attention probabilities: exactly +0.0 above the diagonal on every engine
        att_spec = seq_spec(data)
        att_spec["predict"] = {"output": "att", "transform": "none"}
        aspec = write(os.path.join(tmp, "att.json"), att_spec)
        for dev in ([], ["--device", "host"]):
            o = os.path.join(tmp, "att-%d.npy" % len(dev))
            if run("predict", aspec, "--weights", ref, "--data", data, "--out", o, *dev).returncode != 0:
                continue
            a = np.load(o).reshape(B, T, T)
            upper = a[:, np.triu(np.ones((T, T), dtype=bool), 1)]
            check(np.all(upper == 0.0) and not np.any(np.signbit(upper)), "masked attention entries are not +0.0 (%s)" % dev)
            err = float(np.max(np.abs(a - att_np)))
            check(err <= 1e-12, "attention probabilities vs NumPy: %.3g" % err)

        # backward: a score bias that reaches masked entries gets exactly 0 there, on every engine
        g_spec = {
            "gradrun": 1, "name": "mask-grad", "seed": 1,
            "consts": {"S": {"shape": [2, 4, 4], "values": list(np.linspace(-1, 1, 32))},
                       "C": {"shape": [2, 4, 4], "values": list(np.linspace(2, -1, 32))}},
            "params": {"P": {"shape": [4, 4], "init": "xavier_uniform"}},
            "graph": [{"id": "s", "op": "add", "inputs": ["S", "P"]},
                      {"id": "a", "op": "softmax", "inputs": ["s"], "causal": True},
                      {"id": "m", "op": "mul", "inputs": ["a", "C"]},
                      {"id": "loss", "op": "sum", "inputs": ["m"]}],
            "loss": "loss",
        }
        gs = write(os.path.join(tmp, "grad.json"), g_spec)
        grads = []
        for dtype in ("f64", "f32"):
            for dev in ([], ["--device", "host"], ["--device", "host", "--fuse"]):
                o = os.path.join(tmp, "g-%s-%d.safetensors" % (dtype, len(dev)))
                if run("grad", gs, "--out", o, "--dtype", dtype, *dev).returncode != 0:
                    continue
                gt = tensors(o)
                key = [k for k in gt if k.endswith("P")]
                check(len(key) == 1, "grad output names: %s" % sorted(gt))
                if len(key) == 1:
                    grads.append((dtype, gt[key[0]]))
                    gp = np.frombuffer(gt[key[0]], dtype="<f8" if dtype == "f64" else "<f4").reshape(4, 4)
                    upper = gp[np.triu(np.ones((4, 4), dtype=bool), 1)]
                    check(np.all(upper == 0.0), "%s %s: masked gradient entries %s" % (dtype, dev, upper))
                    check(np.all(gp[np.tril(np.ones((4, 4), dtype=bool), -1)] != 0.0), "visible gradient entries are 0")
        for dtype in ("f64", "f32"):
            same = {g for d, g in grads if d == dtype}
            check(len(same) == 1, "%s gradients differ between engines" % dtype)

        # export --format torch: masked_fill before softmax, the same probabilities as predict
        exp = os.path.join(tmp, "torch")
        run("export", ref, "--format", "torch", "--out", exp)
        ms = importlib.util.spec_from_file_location("exported_seq", os.path.join(exp, "model.py"))
        mod = importlib.util.module_from_spec(ms)
        ms.loader.exec_module(mod)
        m = mod.Model.from_dir(exp)
        with torch.no_grad():
            got = m(torch.tensor(x.reshape(B, T * D), dtype=torch.float64)).numpy()
        err = float(np.max(np.abs(got.reshape(B * T, V) - probs)))
        stats["torch vs predict"] = err
        check(err <= 1e-12, "export torch vs predict: max |diff| %.3g" % err)

        # export --format onnx: Add(mask) → Softmax, through onnx's reference evaluator
        model = os.path.join(tmp, "seq.onnx")
        run("export", ref, "--format", "onnx", "--dtype", "f64", "--out", model)
        try:
            import onnx
            from onnx import numpy_helper
        except ImportError:
            onnx = None
        if onnx is not None:
            mo = onnx.load(model)
            onnx.checker.check_model(mo, full_check=True)
            ops = [n.op_type for n in mo.graph.node]
            check("Softmax" in ops and ops.count("MatMul") >= 2, "ONNX ops: %s" % ops)
            masks = [numpy_helper.to_array(i) for i in mo.graph.initializer if i.name.endswith("_causal_mask")]
            want_mask = np.where(np.triu(np.ones((T, T), dtype=bool), 1), -np.inf, 0.0)
            check(len(masks) == 1 and np.array_equal(masks[0], want_mask), "the ONNX causal mask: %s" % masks)
            try:
                from onnx.reference import ReferenceEvaluator  # onnx >= 1.13
            except ImportError:
                ReferenceEvaluator = None
            if ReferenceEvaluator is not None:
                ev = ReferenceEvaluator(mo)
                name = mo.graph.input[0].name
                shape = [d.dim_value or B for d in mo.graph.input[0].type.tensor_type.shape.dim]
                res = ev.run(None, {name: x.reshape(shape)})[0]
                err = float(np.max(np.abs(np.asarray(res).reshape(B * T, V) - probs)))
                stats["onnx vs predict"] = err
                check(err <= 1e-9, "onnx reference evaluator vs predict: max |diff| %.3g" % err)

        # ... and through onnxruntime-node (tools/onnxrt/run.js), as tests/test_export_onnx.py runs it
        import shutil
        import subprocess
        if shutil.which("node") and os.path.isdir(os.path.join(ROOT, "tools", "onnxrt", "node_modules", "onnxruntime-node")):
            model32 = os.path.join(tmp, "seq32.onnx")
            run("export", ref, "--format", "onnx", "--out", model32)  # float32, the default
            feeds = os.path.join(tmp, "feeds.json")
            with open(feeds, "w") as f:
                json.dump({"x": x.reshape(B, T * D).tolist()}, f)
            rr = subprocess.run(["node", os.path.join(ROOT, "tools", "onnxrt", "run.js"), model32, feeds], capture_output=True,
                                text=True)
            check(rr.returncode == 0, "run.js: " + rr.stderr)
            if rr.returncode == 0:
                got = np.array(list(json.loads(rr.stdout).values())[0]["data"]).reshape(B * T, V)
                err = float(np.max(np.abs(got - probs)))
                stats["onnxruntime (float32) vs predict"] = err
                check(err <= 1e-5, "onnxruntime vs predict: max |diff| %.3g" % err)
        else:
            print("note: the onnxruntime check needs node and onnxruntime-node in tools/onnxrt/node_modules")

        # refusals: exit 2, one located line
        bad_cases = []
        s = seq_spec(data)
        s["graph"][0] = {"id": "h", "layer": "dense", "inputs": ["x"], "units": 6}
        s["graph"].insert(1, {"id": "hr", "op": "relu", "inputs": ["h"], "causal": True})
        bad_cases.append((s, "/graph/1/causal", 'op "relu" has no attribute "causal"'))
        s = seq_spec(data)
        s["graph"][3]["axis"] = 0
        bad_cases.append((s, "/graph/3/axis", "last axis"))
        s = seq_spec(data)
        s["graph"][3]["axis"] = -2
        bad_cases.append((s, "/graph/3", "causal needs the last axis"))
        s = seq_spec(data)
        s["graph"][3]["causal"] = "yes"
        bad_cases.append((s, "/graph/3/causal", "expected true or false"))
        s = seq_spec(data)
        s["graph"][6]["inputs"] = ["logits", "x"]
        bad_cases.append((s, "/graph/6", "ids [N,T]"))
        s = seq_spec(data)
        s["graph"].insert(6, {"id": "flat", "op": "sum", "inputs": ["logits"]})
        s["graph"].insert(7, {"id": "d1", "layer": "dense", "inputs": ["flat"], "units": 2})
        bad_cases.append((s, "/graph/7", "a dense layer needs"))
        for i, (s, where_, want) in enumerate(bad_cases):
            p = run("train", write(os.path.join(tmp, "bad%d.json" % i), s), "--out", os.path.join(tmp, "never"), code=2)
            check(where_ in p.stderr and want in p.stderr and p.stderr.count("\n") == 1,
                  "refusal %d: want one line with %r and %r, got %r" % (i, where_, want, p.stderr))

    return cli.finish("seq ops cli: causal softmax, batched matmul, dense on sequences, cross_entropy [N,T,V] and "
                      "per-position predict agree on every engine (max |diff|: " +
                      ", ".join("%s %.3g" % kv for kv in stats.items()) + ")")


if __name__ == "__main__":
    sys.exit(main())
