#!/usr/bin/python3
"""embedding through the command line (issue 43): train/evaluate/predict/export on every engine.

    /usr/bin/python3 tests/test_embedding_cli.py GRADRUN

A tiny sequence classifier: 3 token ids per row (vocabulary 7, CSV columns t0..t2, ids [B, 3]) →
`embedding` into a table E [7, 4] → reshape [B, 12] → dense 3 → cross_entropy with class ids (the
class is t0 mod 3, learnable only through the table). Checks:
- train on the CPU tape (1 and 3 threads), host per-node and host fused, in f64 and in f32: the
  same loss.csv and weights bytes per dtype (memcmp); training learns (the last loss < half the
  first); `check --fd` passes and `check --replay` (host, fused, f32) agrees bit for bit;
  `inspect`'s fusion plan lists the embedding as a per-node gather (opaque).
- predict on cpu and host: the same bytes, matching a NumPy forward from the weights file (table
  rows gathered by hand) within 1e-12; evaluate of each engine's run: the same report.
- export --format torch (F.embedding) reproduces predict within 1e-12 in float64; import-torch of its
  state_dict gives the trained bytes back; export --format onnx (Gather over Cast ids) in
  onnxruntime-node reproduces predict (f32 1e-5 rel + 1e-6, f64 1e-12 rel + 1e-15) when node is there.
- Refusals, one located line each: a data id outside [0, 7) (training: /graph/0/inputs/0 naming the
  file's row, the column and the file; predict: the same), ids that are a parameter or a computed node
  (/graph/N/inputs/0), a table that is not [V, D]; emit-cuda refuses embedding, naming it.
Without torch: exit 77 (Skipped).
"""
import csv
import importlib.util
import json
import os
import shutil
import subprocess
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
    print("SKIPPED [torch]: embedding_cli -- needs /usr/bin/python3 with numpy and torch: %s" % e)
    sys.exit(77)

cli = Cli(GR)
check, run = cli.check, cli.run
V, T, D = 7, 3, 4


def write_data(path, rows, bad=None):
    rng = np.random.default_rng(7)
    with open(path, "w") as f:
        f.write("t0,t1,t2,y\n")
        for r in range(rows):
            t = rng.integers(0, V, size=T)
            if bad is not None and r == bad[0]:
                t[bad[1]] = bad[2]
            f.write("%d,%d,%d,%d\n" % (t[0], t[1], t[2], t[0] % 3))


def spec(tmp, name, data, graph=None, params=None, **train):
    s = {
        "gradrun": 1, "name": "embed-" + name, "seed": 5,
        "data": {"csv": data, "inputs": {"x": {"columns": ["t0", "t1", "t2"]}, "y": {"column": "y"}},
                 "validation": 0.25},
        "params": params if params is not None else {"E": {"shape": [V, D], "init": {"kind": "normal", "std": 0.5}}},
        "graph": graph if graph is not None else [
            {"id": "e", "op": "embedding", "inputs": ["x", "E"]},
            {"id": "flat", "op": "reshape", "inputs": ["e"], "shape": [-1, T * D]},
            {"id": "logits", "layer": "dense", "inputs": ["flat"], "units": 3},
            {"id": "loss", "op": "cross_entropy", "inputs": ["logits", "y"]},
        ],
        "loss": "loss",
        "optimizer": {"kind": "adam", "lr": 0.05},
        "metrics": {"accuracy": {"logits": "logits", "labels": "y"}},
        "train": dict({"epochs": 8, "batch_size": 16, "shuffle": True, "drop_last": True}, **train),
    }
    if graph is not None:
        del s["metrics"]
    path = os.path.join(tmp, name + ".json")
    json.dump(s, open(path, "w"))
    return path


def forward_numpy(w, x):
    """The spec's prediction from the weights file: softmax(reshape(E[x]) · W + b)."""
    e = w["E"][x.astype(np.int64)].reshape(len(x), T * D)
    z = e @ w["logits.W"] + w["logits.b"]
    z = z - z.max(axis=1, keepdims=True)
    p = np.exp(z)
    return p / p.sum(axis=1, keepdims=True)


def weights_f64(path):
    data = read(path)
    n = int.from_bytes(data[:8], "little")
    header = json.loads(data[8:8 + n])
    header.pop("__metadata__", None)
    out = {}
    for k, v in header.items():
        dt = {"F64": "<f8", "F32": "<f4"}[v["dtype"]]
        b = data[8 + n + v["data_offsets"][0]:8 + n + v["data_offsets"][1]]
        out[k] = np.frombuffer(b, dtype=dt).astype(np.float64).reshape(v["shape"])
    return out


def main():
    with tempfile.TemporaryDirectory(prefix="gradrun-embed-") as tmp:
        data = os.path.join(tmp, "tokens.csv")
        write_data(data, 96)
        s = spec(tmp, "model", data)
        rows = np.array([[float(v) for v in r[:3]] for r in list(csv.reader(open(data)))[1:]])

        # 1. every engine, both dtypes: the same bytes
        engines = [("cpu1", ["--device", "cpu", "--threads", "1"]), ("cpu3", ["--device", "cpu", "--threads", "3"]),
                   ("host", ["--device", "host"]), ("fused", ["--device", "host", "--fuse"])]
        runs = {}
        for dtype in ("f64", "f32"):
            for name, flags in engines:
                out = os.path.join(tmp, "run-%s-%s" % (dtype, name))
                run("train", s, "--out", out, "--quiet", "--dtype", dtype, *flags)
                runs[(dtype, name)] = out
            ref = runs[(dtype, "cpu1")]
            for name, _ in engines[1:]:
                o = runs[(dtype, name)]
                check(os.path.exists(os.path.join(o, "loss.csv")) and
                      read(os.path.join(o, "loss.csv")) == read(os.path.join(ref, "loss.csv")),
                      "%s %s: loss.csv bytes differ from the CPU tape's" % (dtype, name))
                check(os.path.exists(os.path.join(o, "weights.safetensors")) and
                      tensors(os.path.join(o, "weights.safetensors")) == tensors(os.path.join(ref, "weights.safetensors")),
                      "%s %s: weights bytes differ from the CPU tape's" % (dtype, name))
        r64 = runs[("f64", "cpu1")]
        losses = [float(r["loss"]) for r in csv.DictReader(open(os.path.join(r64, "loss.csv")))]
        check(len(losses) > 2 and losses[-1] < 0.5 * losses[0], "training learns: loss %s -> %s" % (losses[:1], losses[-1:]))
        w = tensors(os.path.join(r64, "weights.safetensors"))
        check(w.get("E") != tensors(os.path.join(r64, "init.safetensors")).get("E"), "the table trained")

        # check --fd (the table's gradient by central differences) and check --replay (lockstep bytes)
        run("check", s, "--fd")  # exit 0: every checked element within the tolerance
        for flags in (["--device", "host"], ["--device", "host", "--fuse"], ["--device", "host", "--dtype", "f32"]):
            run("check", s, "--replay", "--episodes", "5", *flags)
        out = run("inspect", s).stdout
        check("embedding" in out and "per-node embedding gathers" in out, "inspect: the fusion plan names the per-node gather: " + out[-600:])

        # 2. evaluate / predict on every engine: the same bytes; predict = a NumPy forward
        # (predict takes --device; a fused predict is the run's spec with "device": {"fuse": true})
        preds = {}
        for name, flags in [("cpu", ["--device", "cpu"]), ("host", ["--device", "host"])]:
            for dtype in ("f64", "f32"):
                rd = runs[(dtype, "cpu1")]
                p = os.path.join(tmp, "pred-%s-%s.csv" % (dtype, name))
                run("predict", rd, "--data", data, "--out", p, *flags)
                preds[(dtype, name)] = read(p) if os.path.exists(p) else b""
        for dtype in ("f64", "f32"):
            check(preds[(dtype, "host")] == preds[(dtype, "cpu")] and preds[(dtype, "cpu")],
                  "%s predict on host: bytes differ from the CPU tape's" % dtype)
            # evaluate of the runs trained on each engine: the same report (the same weights' bytes)
            evs = [run("evaluate", runs[(dtype, name)], "--data", data).stdout for name, _ in engines]
            check(len(set(evs)) == 1 and "accuracy" in evs[0], "%s evaluate differs across engines: %s" % (dtype, evs[:1]))
        pred64 = os.path.join(tmp, "pred-f64-cpu.csv")
        want = np.array([[float(v) for v in r[:3]] for r in list(csv.reader(open(pred64)))[1:]])
        got = forward_numpy(weights_f64(os.path.join(r64, "weights.safetensors")), rows)
        check(want.shape == got.shape and float(np.max(np.abs(got - want))) <= 1e-12,
              "predict vs NumPy gather: max |diff| %.3g" % float(np.max(np.abs(got - want))) if want.shape == got.shape else "predict shape")

        # 3. export torch (F.embedding) = predict; import-torch round trip
        ex = os.path.join(tmp, "ex")
        run("export", r64, "--format", "torch", "--out", ex)
        model_py = os.path.join(ex, "model.py")
        check(os.path.exists(model_py) and "embedding(" in open(model_py).read(), "export torch: F.embedding in model.py")
        if os.path.exists(model_py):
            sm = importlib.util.spec_from_file_location("embed_model", model_py)
            mod = importlib.util.module_from_spec(sm)
            sm.loader.exec_module(mod)
            model = mod.Model.from_dir(ex)
            with torch.no_grad():
                tg = model(torch.tensor(rows, dtype=torch.float64)).numpy()
            check(tg.shape == want.shape and float(np.max(np.abs(tg - want))) <= 1e-12,
                  "export torch vs predict: max |diff| %.3g" % float(np.max(np.abs(tg - want))))
            imp = os.path.join(tmp, "imported.safetensors")
            run("import-torch", os.path.join(ex, "state_dict.safetensors"), "--spec", s, "--out", imp, "--quiet")
            check(os.path.exists(imp) and tensors(imp) == tensors(os.path.join(r64, "weights.safetensors")),
                  "import-torch round trip: the trained bytes")

        # 4. export onnx (Gather) in onnxruntime-node
        run_js = os.path.join(ROOT, "tools", "onnxrt", "run.js")
        if shutil.which("node") and os.path.isdir(os.path.join(ROOT, "tools", "onnxrt", "node_modules", "onnxruntime-node")):
            feed = os.path.join(tmp, "feed.json")
            json.dump({"x": rows.tolist()}, open(feed, "w"))
            for dtype, rel, ab, rd in (("f32", 1e-5, 1e-6, r64), ("f64", 1e-12, 1e-15, r64)):
                mp = os.path.join(tmp, "m-%s.onnx" % dtype)
                run("export", rd, "--format", "onnx", "--dtype", dtype, "--out", mp)
                r = subprocess.run(["node", run_js, mp, feed], capture_output=True, text=True)
                if r.returncode != 0:
                    check(False, "onnxruntime %s: %s" % (dtype, r.stderr.strip()))
                    continue
                outs = json.loads(r.stdout)
                og = np.array(next(iter(outs.values()))["data"]).reshape(want.shape)
                bad = np.abs(og - want) > rel * np.abs(want) + ab
                check(not bad.any(), "export onnx %s vs predict: max |diff| %.3g" % (dtype, float(np.max(np.abs(og - want)))))
        else:
            print("note: no node/onnxruntime-node (tools/onnxrt/node_modules): the ONNX check did not run")

        # 5. refusals, located
        bad_data = os.path.join(tmp, "bad.csv")
        write_data(bad_data, 96, bad=(5, 2, V))
        p = run("train", spec(tmp, "bad", bad_data), "--out", os.path.join(tmp, "bad-run"), code=2)
        check("/graph/0/inputs/0" in p.stderr and "row 5, column 2 of " + bad_data + " (the training rows) has id 7" in p.stderr
              and "[0, 7)" in p.stderr, "data id out of range, located: " + p.stderr)
        write_data(bad_data, 96, bad=(3, 1, -1))
        p = run("predict", r64, "--data", bad_data, "--out", os.path.join(tmp, "bad-pred.csv"), code=2)
        check("row 3, column 1 of " + bad_data + " has id -1" in p.stderr,
              "predict: data id out of range, located: " + p.stderr)
        par = spec(tmp, "param-ids", data, params={"E": {"shape": [V, D]}, "P": {"shape": [4, 3]}},
                   graph=[{"id": "e", "op": "embedding", "inputs": ["P", "E"]},
                          {"id": "loss", "op": "sum", "inputs": ["e"]}])
        p = run("inspect", par, code=2)
        check("/graph/0/inputs/0" in p.stderr and "a parameter" in p.stderr, "parameter ids refused: " + p.stderr)
        comp = spec(tmp, "computed-ids", data,
                    graph=[{"id": "z", "op": "muls", "inputs": ["x"], "scalar": 1.0},
                           {"id": "e", "op": "embedding", "inputs": ["z", "E"]},
                           {"id": "loss", "op": "sum", "inputs": ["e"]}])
        p = run("inspect", comp, code=2)
        check("/graph/1/inputs/0" in p.stderr and "a computed node" in p.stderr, "computed ids refused: " + p.stderr)
        flat = spec(tmp, "flat-table", data, params={"E": {"shape": [V * D]}},
                    graph=[{"id": "e", "op": "embedding", "inputs": ["x", "E"]},
                           {"id": "loss", "op": "sum", "inputs": ["e"]}])
        p = run("inspect", flat, code=2)
        check("/graph/0" in p.stderr and "table [V,D]" in p.stderr, "a 1-D table refused: " + p.stderr)
        em = os.path.join(tmp, "emit.json")
        json.dump({"gradrun": 1, "params": {"E": {"shape": [1, 1], "init": {"values": [1.5]}}},
                   "consts": {"ids": {"shape": [1], "values": [0]}},
                   "graph": [{"id": "y", "op": "embedding", "inputs": ["ids", "E"]},
                             {"id": "loss", "op": "sum", "inputs": ["y"]}],
                   "loss": "loss", "emit": {"signature": "params"}}, open(em, "w"))
        p = run("emit-cuda", em, "--out", os.path.join(tmp, "emit.cu"), code=None)
        check(p.returncode != 0 and "embedding" in p.stderr, "emit-cuda refuses embedding: %d %s" % (p.returncode, p.stderr))
        print("embedding_cli: loss %.4f -> %.4f over %d steps" % (losses[0], losses[-1], len(losses)))
    return cli.finish("ok   embedding_cli")


if __name__ == "__main__":
    sys.exit(main())
