#!/usr/bin/python3
"""batch_norm through the command line (issue 42): its running statistics as state, every engine,
resume, evaluate/predict in eval mode, both exports and import-torch.

    /usr/bin/python3 tests/test_batch_norm_cli.py GRADRUN

A spec dense -> batch_norm (momentum 0.2) -> mul/add params -> relu -> dense -> softmax
cross-entropy on the iris CSV:
- weights.safetensors and the checkpoint hold "bn.running_mean" / "bn.running_var", moved from their
  init (0 and 1); `inspect` lists them as state, outside the parameter count;
  the CPU tape with 1 and 4 threads, host per-node and host fused give the same loss.csv and the
  same tensor bytes, in f64 and in f32 (memcmp).
- Resume: 3 epochs then `--resume --epochs 6`, and a SIGINT mid-run then `--resume`, land on the
  uninterrupted run's loss.csv and weights bytes (running statistics included).
- `predict` uses the running statistics: a NumPy forward in eval mode from the weights file matches
  it within 1e-12 (batch statistics would be far off).
- `export --format torch`: the module (F.batch_norm, training=False, over its buffers) matches
  `predict` within 1e-12 in float64; `export --format onnx`: BatchNormalization with the running
  statistics as initializers, scale 1 and bias 0, in onnxruntime-node within 1e-5 relative + 1e-6.
- `import-torch`: a PyTorch state_dict with nn.BatchNorm1d's running_mean / running_var (and its
  num_batches_tracked, reported unused) becomes the init file's state, bytes for bytes.
- Refusals: train.shards 2 (batch statistics over a split batch), momentum 2, a last training batch
  of one row without drop_last (exit 2, one line).
Without torch: exit 77 (Skipped); without onnx/node/onnxruntime-node the ONNX part alone is
reported and the test exits 77 after every other check passed.
"""
import csv
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
GR = sys.argv[1]
sys.path.insert(0, os.path.join(ROOT, "tests", "support"))
from cli_support import Cli, read, tensors, write_safetensors  # noqa: E402

try:
    import numpy as np
    import torch
except ImportError as e:
    print("SKIPPED [torch]: batch_norm_cli -- needs /usr/bin/python3 with numpy and torch: %s" % e)
    sys.exit(77)

cli = Cli(GR)
check, run = cli.check, cli.run

SPEC = {
    "gradrun": 1, "name": "iris-bn", "seed": 42,
    "data": {"csv": os.path.join(ROOT, "datasets", "iris.csv"),
             "inputs": {"x": {"columns": ["sepal_length", "sepal_width", "petal_length", "petal_width"]},
                        "y": {"column": "species", "one_hot": 3}},
             "validation": 0.2},
    "params": {"gamma": {"shape": [16], "init": "ones"}, "beta": {"shape": [16], "init": "zeros"}},
    "graph": [
        {"id": "h", "layer": "dense", "inputs": ["x"], "units": 16},
        {"id": "bn", "op": "batch_norm", "inputs": ["h"], "momentum": 0.2},
        {"id": "s", "op": "mul", "inputs": ["bn", "gamma"]},
        {"id": "t", "op": "add", "inputs": ["s", "beta"]},
        {"id": "r", "op": "relu", "inputs": ["t"]},
        {"id": "logits", "layer": "dense", "inputs": ["r"], "units": 3},
        {"id": "loss", "op": "softmax_cross_entropy", "inputs": ["logits", "y"]},
    ],
    "loss": "loss",
    "optimizer": {"kind": "adam", "lr": 0.01},
    "train": {"epochs": 6, "batch_size": 20, "shuffle": True, "drop_last": True},
    "metrics": {"accuracy": {"logits": "logits", "labels": "y"}},
}


def write_spec(path, **changes):
    s = json.loads(json.dumps(SPEC))
    for k, v in changes.items():
        node = s
        keys = k.split("__")
        for key in keys[:-1]:
            node = node[key]
        node[keys[-1]] = v
    with open(path, "w") as f:
        json.dump(s, f)
    return path


def no_seconds(d):
    lines = read(os.path.join(d, "metrics.csv")).decode().splitlines()
    col = lines[0].split(",").index("seconds")
    return [[x for i, x in enumerate(line.split(",")) if i != col] for line in lines]


def same_run(a, b, what):
    check(read(os.path.join(a, "loss.csv")) == read(os.path.join(b, "loss.csv")), what + ": loss.csv differs")
    check(no_seconds(a) == no_seconds(b), what + ": metrics.csv (validation in eval mode; seconds aside) differs")
    ta, tb = tensors(os.path.join(a, "weights.safetensors")), tensors(os.path.join(b, "weights.safetensors"))
    check(ta == tb, what + ": weights differ in " + str(sorted(k for k in ta if ta.get(k) != tb.get(k))))


def f64(raw):
    return np.frombuffer(raw, dtype="<f8")


def read_csv(path):
    with open(path) as f:
        rows = list(csv.DictReader(f))
    return rows


def iris_x():
    rows = read_csv(os.path.join(ROOT, "datasets", "iris.csv"))
    return np.array([[float(r[c]) for c in ("sepal_length", "sepal_width", "petal_length", "petal_width")] for r in rows])


def predictions(spec, run_dir, out):
    run("predict", spec, "--weights", run_dir, "--data", os.path.join(ROOT, "datasets", "iris.csv"), "--out", out)
    rows = read_csv(out)
    return np.array([[float(r["logits_%d" % j]) for j in range(3)] for r in rows])


def softmax(z):
    e = np.exp(z - z.max(axis=1, keepdims=True))
    return e / e.sum(axis=1, keepdims=True)


def main():
    onnx_missing = None
    stats = {}
    with tempfile.TemporaryDirectory(prefix="gradrun-bn-") as tmp:
        spec = write_spec(os.path.join(tmp, "bn.json"))
        ref = os.path.join(tmp, "ref")
        run("train", spec, "--out", ref, "--threads", "1", "--quiet")
        w = tensors(os.path.join(ref, "weights.safetensors"))
        check("bn.running_mean" in w and "bn.running_var" in w, "weights lack the running statistics: " + str(sorted(w)))
        if "bn.running_mean" in w:
            rm, rv = f64(w["bn.running_mean"]), f64(w["bn.running_var"])
            check(rm.shape == (16,) and rv.shape == (16,), "running statistics of shape %s %s" % (rm.shape, rv.shape))
            check(np.all(rm != 0.0) and np.all(rv != 1.0) and np.all(rv > 0.0), "running statistics did not move: %s %s" % (rm, rv))
        insp = run("inspect", spec).stdout
        check("bn.running_mean" in insp and "state (running statistics)" in insp and "total 163 parameters; 32 state values" in insp,
              "inspect does not show the running statistics as state: " + insp[:600])
        ck = tensors(os.path.join(ref, "checkpoint", "state.safetensors"))
        check("param/bn.running_mean" in ck and "param/bn.running_var" in ck, "the checkpoint lacks the running statistics")

        # every engine: the same bytes
        for dtype in ("f64", "f32"):
            base = ref if dtype == "f64" else os.path.join(tmp, "cpu32")
            if dtype == "f32":
                run("train", spec, "--out", base, "--dtype", "f32", "--threads", "1", "--quiet")
            for name, args in (("threads4", ["--threads", "4"]), ("host", ["--device", "host"]),
                               ("fused", ["--device", "host", "--fuse"])):
                out = os.path.join(tmp, name + dtype)
                run("train", spec, "--out", out, "--dtype", dtype, *args, "--quiet")
                same_run(base, out, "%s %s vs the CPU tape" % (dtype, name))

        # resume at an epoch boundary, and after a SIGINT mid-epoch
        half = os.path.join(tmp, "half")
        run("train", spec, "--out", half, "--epochs", "3", "--quiet")
        run("train", spec, "--resume", half, "--epochs", "6", "--quiet")
        same_run(ref, half, "resume after 3 epochs")
        for engine in ([], ["--device", "host", "--fuse"]):
            long_spec = write_spec(os.path.join(tmp, "long.json"), train__batch_size=4, train__epochs=400)
            lref = os.path.join(tmp, "lref" + str(len(engine)))
            run("train", long_spec, "--out", lref, "--quiet", *engine)
            out = os.path.join(tmp, "int" + str(len(engine)))
            p = subprocess.Popen([GR, "train", long_spec, "--out", out, *engine], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                 text=True)
            p.stdout.readline()  # the first epoch line: training is under way
            p.send_signal(signal.SIGINT)
            p.communicate(timeout=300)
            check(p.returncode == 130, "SIGINT: exit %d, wanted 130" % p.returncode)
            n = len(read(os.path.join(out, "loss.csv")).splitlines())
            check(1 < n < len(read(os.path.join(lref, "loss.csv")).splitlines()), "SIGINT: loss.csv has %d lines" % n)
            run("train", long_spec, "--resume", out, "--quiet", *engine)
            same_run(lref, out, "resume after SIGINT " + " ".join(engine))

        # predict: eval mode over the running statistics
        pred = predictions(spec, ref, os.path.join(tmp, "pred.csv"))
        x = iris_x()
        h = x @ f64(w["h.W"]).reshape(4, 16) + f64(w["h.b"])
        bn = (h - f64(w["bn.running_mean"])) / np.sqrt(f64(w["bn.running_var"]) + 1e-5)
        r = np.maximum(bn * f64(w["gamma"]) + f64(w["beta"]), 0.0)
        want = softmax(r @ f64(w["logits.W"]).reshape(16, 3) + f64(w["logits.b"]))
        err = np.max(np.abs(pred - want))
        stats["predict vs numpy"] = err
        check(err <= 1e-12, "predict vs a NumPy eval-mode forward: max |diff| %.3g" % err)
        hb = (h - h.mean(axis=0)) / np.sqrt(h.var(axis=0) + 1e-5)
        batch = softmax(np.maximum(hb * f64(w["gamma"]) + f64(w["beta"]), 0) @ f64(w["logits.W"]).reshape(16, 3) + f64(w["logits.b"]))
        check(np.max(np.abs(pred - batch)) > 1e-6, "predict looks like batch statistics, not the running ones")
        ev = run("evaluate", spec, "--weights", ref)
        check("accuracy" in ev.stdout, "evaluate printed no accuracy: " + ev.stdout[-300:])

        # export --format torch
        exp = os.path.join(tmp, "torch")
        run("export", spec, "--weights", ref, "--format", "torch", "--out", exp)
        import importlib.util
        ms = importlib.util.spec_from_file_location("exported_bn", os.path.join(exp, "model.py"))
        mod = importlib.util.module_from_spec(ms)
        ms.loader.exec_module(mod)
        m = mod.Model.from_dir(exp)
        sd = m.state_dict()
        check("bn.running_mean" in sd and "bn.running_var" in sd, "the torch module's state_dict: " + str(list(sd)))
        with torch.no_grad():
            got = m(torch.tensor(x, dtype=torch.float64)).numpy()
        err = np.max(np.abs(got - pred))
        stats["torch vs predict"] = err
        check(err <= 1e-12, "export torch vs predict: max |diff| %.3g" % err)
        m.train()  # training mode must not change the exported prediction (it is eval by construction)
        with torch.no_grad():
            check(np.array_equal(m(torch.tensor(x, dtype=torch.float64)).numpy(), got), "the torch module changed in train()")
        # a run started from the exported state_dict (import-torch) carries the running statistics
        init = os.path.join(tmp, "imported.safetensors")
        run("import-torch", os.path.join(exp, "state_dict.safetensors"), "--spec", spec, "--out", init)
        ti = tensors(init)
        for k in ("bn.running_mean", "bn.running_var", "h.W", "gamma"):
            check(ti.get(k) == w[k], "import-torch round trip: %s differs" % k)

        # import-torch of a PyTorch-native BatchNorm1d state_dict (float32, with num_batches_tracked)
        torch.manual_seed(0)
        net = torch.nn.Sequential(torch.nn.Linear(4, 16), torch.nn.BatchNorm1d(16, affine=False, momentum=0.2))
        net.train()
        for _ in range(3):
            net(torch.randn(20, 4))
        st = {k: v.detach().numpy() for k, v in net.state_dict().items()}
        native = os.path.join(tmp, "native.safetensors")
        write_safetensors(native, {
            "h.weight": ("F32", st["0.weight"]), "h.bias": ("F32", st["0.bias"]),
            "bn.running_mean": ("F32", st["1.running_mean"]), "bn.running_var": ("F32", st["1.running_var"]),
            "bn.num_batches_tracked": ("I64", st["1.num_batches_tracked"].reshape(1)),
        })
        init2 = os.path.join(tmp, "native-init.safetensors")
        p = run("import-torch", native, "--spec", spec, "--out", init2)
        ti = tensors(init2)
        for k, tk in (("bn.running_mean", "1.running_mean"), ("bn.running_var", "1.running_var")):
            check(ti.get(k) == st[tk].astype("<f8").tobytes(), "import-torch: %s is not torch's %s widened" % (k, tk))
        warm = os.path.join(tmp, "warm")
        run("train", spec, "--init", init2, "--out", warm, "--epochs", "1", "--quiet")
        check(tensors(os.path.join(warm, "init.safetensors")).get("bn.running_var") == st["1.running_var"].astype("<f8").tobytes(),
              "a run from the import did not start from its running statistics")

        # export --format onnx
        if not shutil.which("node") or not os.path.isdir(os.path.join(ROOT, "tools", "onnxrt", "node_modules", "onnxruntime-node")):
            onnx_missing = "needs node and onnxruntime-node in tools/onnxrt/node_modules"
        else:
            model = os.path.join(tmp, "bn.onnx")
            run("export", spec, "--weights", ref, "--format", "onnx", "--out", model)
            try:
                import onnx
                mo = onnx.load(model)
                onnx.checker.check_model(mo, full_check=True)
                ops = [n.op_type for n in mo.graph.node]
                check("BatchNormalization" in ops, "the ONNX graph has no BatchNormalization: %s" % ops)
            except ImportError:
                pass
            feeds = os.path.join(tmp, "feeds.json")
            with open(feeds, "w") as f:
                json.dump({"x": x.tolist()}, f)
            rr = subprocess.run(["node", os.path.join(ROOT, "tools", "onnxrt", "run.js"), model, feeds], capture_output=True, text=True)
            check(rr.returncode == 0, "run.js: " + rr.stderr)
            if rr.returncode == 0:
                out = json.loads(rr.stdout)
                got = np.array(list(out.values())[0]["data"]).reshape(pred.shape)
                bad = np.abs(got - pred) > 1e-5 * np.abs(pred) + 1e-6
                stats["onnxruntime vs predict"] = np.max(np.abs(got - pred))
                check(not bad.any(), "onnxruntime vs predict: max |diff| %.3g" % np.max(np.abs(got - pred)))

        # refusals
        # 120 training rows in batches of 17 without drop_last: a last batch of 1 row has one value per channel
        for changes, want in (({"train__shards": 2}, "batch statistics"), ({"graph": None}, "momentum"),
                              ({"train__batch_size": 17, "train__drop_last": False}, "drop_last")):
            bad = os.path.join(tmp, "bad.json")
            if "graph" in changes:
                s = json.loads(json.dumps(SPEC))
                s["graph"][1]["momentum"] = 2
                with open(bad, "w") as f:
                    json.dump(s, f)
            else:
                write_spec(bad, **changes)
            p = run("train", bad, "--out", os.path.join(tmp, "never"), code=2)
            check(want in p.stderr and p.stderr.count("\n") == 1, "refusal: want one line naming %r, got %r" % (want, p.stderr))

    code = cli.finish("batch_norm cli: engines, resume, predict, exports and import-torch agree (max |diff|: " +
                      ", ".join("%s %.3g" % kv for kv in stats.items()) + ")")
    if code == 0 and onnx_missing:
        print("SKIPPED [onnx]: batch_norm_cli (the ONNX part) -- " + onnx_missing)
        if os.environ.get("GR_SKIP_LOG"):
            with open(os.environ["GR_SKIP_LOG"], "a") as log:
                log.write("onnx\tbatch_norm_cli\t" + onnx_missing + "\n")
        return 77
    return code


if __name__ == "__main__":
    sys.exit(main())
