#!/usr/bin/python3
"""`gradrun export --format torch`: the exported module reproduces the trained model in PyTorch.

    /usr/bin/python3 tests/test_export_torch.py GRADRUN

For specs/iris.json, digits.json and diabetes.json (copied to a temp dir, trained for 2 epochs):
export, load DIR/model.py and DIR/state_dict.safetensors into the installed torch with
load_state_dict (strict), run forward on every row of the data set's raw CSV and compare with a
NumPy re-implementation of the forward pass on gradrun's weights.safetensors and the preprocessing
saved in its metadata, to 1e-12 absolute (float64) — and with `gradrun predict` on the same CSV
when that command exists. A synthetic spec whose prediction uses every op the export maps is
matched against `gradrun predict` the same way. Also: a prediction that is a loss node is refused naming the node (exit
2, nothing written), and weights from another spec are refused (exit 2). An `--dtype f32` run of
iris and diabetes exports a float32 module whose F32 state_dict is the run's float weights exactly,
and whose predictions match `gradrun predict` (the f32 tape) to 2e-5 of the prediction's scale.

Without torch or numpy the test exits 77 (ctest: Skipped), or 1 when GR_REQUIRE_TORCH=1.
Prints `ok   NAME` / `FAIL NAME: why`; exits 1 on any failure.
"""
import csv
import importlib.util
import json
import os
import struct
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TOL = 1e-12

try:
    import numpy as np
    import torch
except ImportError as e:
    why = "needs /usr/bin/python3 with torch and numpy (Debian python3-torch, python3-numpy): %s" % e
    if os.environ.get("GR_REQUIRE_TORCH") == "1":
        print("FAIL import: " + why + " (GR_REQUIRE_TORCH=1)")
        sys.exit(1)
    # Exit 77: ctest reports Skipped, recorded in $GR_SKIP_LOG as kind "torch", which scripts/test
    # fails on, since scripts/setup installs python3-torch (tests/support/skip.h).
    print("SKIPPED [torch]: export_torch -- " + why)
    if os.environ.get("GR_SKIP_LOG"):
        with open(os.environ["GR_SKIP_LOG"], "a") as log:
            log.write("torch\texport_torch\t" + why + "\n")
    sys.exit(77)


def read_safetensors(path, dtype="F64"):
    with open(path, "rb") as f:
        data = f.read()
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + n])
    meta = header.pop("__metadata__", {})
    out = {}
    for name, t in header.items():
        assert t["dtype"] == dtype, (name, t["dtype"], dtype)
        b, e = t["data_offsets"]
        out[name] = np.frombuffer(data[8 + n + b:8 + n + e], dtype={"F64": "<f8", "F32": "<f4"}[dtype]).reshape(t["shape"])
    return out, meta


def read_csv(path):
    with open(path, newline="") as f:
        rows = list(csv.reader(f))
    head = rows[0]
    return {name: np.array([float(r[i]) for r in rows[1:]]) for i, name in enumerate(head)}


def numpy_forward(spec, weights, prep, cols):
    """The spec's forward graph in NumPy on the raw columns; returns (prediction, node id)."""
    env = {}
    for ip in prep["inputs"]:
        if ip["columns"] and all(c in cols for c in ip["columns"]):
            x = np.stack([cols[c] for c in ip["columns"]], axis=1)
            if ip["one_hot_classes"]:
                x = np.eye(len(ip["one_hot_classes"]))[x[:, 0].astype(int)]
            if ip["mean"]:
                x = (x - np.array(ip["mean"])) / np.array(ip["std"])
            env[ip["name"]] = x
    env.update(weights)
    act = {"relu": lambda z: np.maximum(z, 0), "tanh": np.tanh, "sigmoid": lambda z: 1 / (1 + np.exp(-z)),
           "none": lambda z: z}
    ops = {"matmul": lambda a, b: a @ b, "add": lambda a, b: a + b, "relu": lambda a: np.maximum(a, 0),
           "tanh": np.tanh}

    def softmax(z):
        e = np.exp(z - z.max(axis=-1, keepdims=True))
        return e / e.sum(axis=-1, keepdims=True)

    loss = next(n for n in spec["graph"] if n["id"] == spec["loss"])
    out = loss["inputs"][0]
    for n in spec["graph"]:
        if n["id"] == spec["loss"]:
            break
        xs = [env[i] for i in n["inputs"]]
        if n.get("layer") == "dense":
            env[n["id"]] = act[n.get("activation", "none")](xs[0] @ weights[n["id"] + ".W"] + weights[n["id"] + ".b"])
        else:
            env[n["id"]] = ops[n["op"]](*xs)
    y = env[out]
    if loss.get("op") == "mse":  # a standardized target: the prediction in the data's units (docs/cli.md)
        target = [i for i in loss["inputs"] if i != out][0]
        tp = [ip for ip in prep["inputs"] if ip["name"] == target]
        if tp and tp[0]["mean"]:
            y = y * np.array(tp[0]["std"]) + np.array(tp[0]["mean"])
    return (softmax(y) if loss.get("op") == "softmax_cross_entropy" else y), out


def load_module(path):
    spec = importlib.util.spec_from_file_location("exported_%d" % abs(hash(path)), path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def run(cmd, **kw):
    return subprocess.run(cmd, capture_output=True, text=True, **kw)


def check_example(gradrun, tmp, name, failures, has_predict):
    with open(os.path.join(ROOT, "specs", name + ".json")) as f:
        spec = json.load(f)
    data_csv = os.path.normpath(os.path.join(ROOT, "specs", spec["data"]["csv"]))
    spec["data"]["csv"] = data_csv
    spec["train"]["epochs"] = 2
    d = os.path.join(tmp, name)
    os.makedirs(d)
    spec_path = os.path.join(d, name + ".json")
    with open(spec_path, "w") as f:
        json.dump(spec, f)
    r = run([gradrun, "train", spec_path, "--quiet", "--out", os.path.join(d, "run")])
    if r.returncode != 0:
        return failures.append("%s: train exited %d: %s" % (name, r.returncode, r.stderr.strip()))
    out = os.path.join(d, "exp")
    r = run([gradrun, "export", spec_path, "--weights", os.path.join(d, "run"), "--format", "torch", "--out", out])
    if r.returncode != 0:
        return failures.append("%s: export exited %d: %s" % (name, r.returncode, r.stderr.strip()))
    weights, meta = read_safetensors(os.path.join(d, "run", "weights.safetensors"))
    prep = json.loads(meta["gradrun.preprocessing"])
    cols = read_csv(data_csv)
    want, node = numpy_forward(spec, weights, prep, cols)

    mod = load_module(os.path.join(out, "model.py"))
    model = mod.Model()
    state, _ = read_safetensors(os.path.join(out, "state_dict.safetensors"))
    model.load_state_dict({k: torch.from_numpy(v.copy()) for k, v in state.items()}, strict=True)
    for k, v in state.items():  # PyTorch layouts: nn.Linear weight [out, in] = W transposed
        if k.endswith(".weight"):
            if not np.array_equal(v, weights[k[:-len(".weight")] + ".W"].T):
                failures.append("%s: %s is not the transposed %s.W" % (name, k, k[:-7]))
    model.eval()
    args = []
    for inp in model.input_names:
        ip = next(p for p in prep["inputs"] if p["name"] == inp)
        args.append(torch.from_numpy(np.stack([cols[c] for c in ip["columns"]], axis=1)))
    with torch.no_grad():
        got = model(*args).numpy()
    if got.shape != want.shape:
        return failures.append("%s: torch gives %s, numpy %s" % (name, got.shape, want.shape))
    diff = float(np.max(np.abs(got - want)))
    print("%s %-9s torch vs numpy: max abs diff %.3g over %s" % ("ok  " if diff <= TOL else "FAIL", name, diff,
                                                                 list(got.shape)))
    if diff > TOL:
        failures.append("%s: torch vs numpy max abs diff %.3g > %g" % (name, diff, TOL))
    if has_predict:
        pred_csv = os.path.join(d, "pred.csv")
        r = run([gradrun, "predict", spec_path, "--weights", os.path.join(d, "run"), "--data", data_csv, "--out",
                 pred_csv])
        if r.returncode != 0:
            return failures.append("%s: predict exited %d: %s" % (name, r.returncode, r.stderr.strip()))
        pc = read_csv(pred_csv)
        pred = np.stack([pc["%s_%d" % (node, j)] for j in range(got.shape[1])], axis=1)
        pdiff = float(np.max(np.abs(got - pred)))
        print("%s %-9s torch vs gradrun predict: max abs diff %.3g" % ("ok  " if pdiff <= TOL else "FAIL", name, pdiff))
        if pdiff > TOL:
            failures.append("%s: torch vs gradrun predict max abs diff %.3g > %g" % (name, pdiff, TOL))


# Every op the export maps, in one prediction graph (elementwise rows through the op table's torch
# column, reductions with and without an axis, movement ops, bmm with a broadcast batch of 1, a
# const, a one-hot input read by the prediction). Reshape and slice shapes are literal, as in the
# spec, so torch runs on batches of the spec's batch size, like `predict --batch`.
OPS_GRAPH = [
    {"id": "n1", "op": "matmul", "inputs": ["x", "W"]}, {"id": "n2", "op": "add", "inputs": ["n1", "v"]},
    {"id": "n3", "op": "tanh", "inputs": ["n2"]}, {"id": "n4", "op": "sigmoid", "inputs": ["n3"]},
    {"id": "n5", "op": "mul", "inputs": ["n4", "k"]}, {"id": "n6", "op": "sub", "inputs": ["n5", "n3"]},
    {"id": "n7", "op": "neg", "inputs": ["n6"]}, {"id": "n8", "op": "adds", "inputs": ["n7"], "scalar": -0.5},
    {"id": "n9", "op": "muls", "inputs": ["n8"], "scalar": 2.0}, {"id": "n10", "op": "relu", "inputs": ["n9"]},
    {"id": "n11", "op": "exp", "inputs": ["n3"]}, {"id": "n12", "op": "log", "inputs": ["n11"]},
    {"id": "n13", "op": "sqrt", "inputs": ["n11"]}, {"id": "n14", "op": "div", "inputs": ["n12", "n13"]},
    {"id": "n15", "op": "add", "inputs": ["n14", "n10"]},
    {"id": "ln", "op": "layer_norm", "inputs": ["n15"], "eps": 0.01},
    {"id": "mx", "op": "max", "inputs": ["ln"], "axis": -1, "keepdims": True},
    {"id": "dr", "op": "dropout", "inputs": ["ln"], "rate": 0.3},
    {"id": "bc", "op": "bce_with_logits", "inputs": ["dr", "n4"]},
    {"id": "nn", "op": "add", "inputs": ["bc", "mx"]},
    {"id": "r", "op": "reshape", "inputs": ["nn"], "shape": [-1, 2, 2]},
    {"id": "tr", "op": "transpose", "inputs": ["r"]}, {"id": "bm", "op": "bmm", "inputs": ["tr", "U"]},
    {"id": "bk", "op": "reshape", "inputs": ["bm"], "shape": [-1, 4]},
    {"id": "sm", "op": "softmax", "inputs": ["bk"]}, {"id": "ls", "op": "log_softmax", "inputs": ["bk"], "axis": 1},
    {"id": "cc", "op": "concat", "inputs": ["sm", "ls"], "axis": 1},
    {"id": "cx", "op": "concat", "inputs": ["cc", "c"], "axis": -1},
    {"id": "sl", "op": "slice", "inputs": ["cx"], "starts": [0, 1], "stops": [8, -1]},
    {"id": "su", "op": "sum", "inputs": ["sl"], "axis": 1, "keepdims": True},
    {"id": "me", "op": "mean", "inputs": ["sl"], "axis": -1, "keepdims": True},
    {"id": "m2", "op": "mean", "inputs": ["sl"], "axis": 1}, {"id": "m3", "op": "reshape", "inputs": ["m2"], "shape": [-1, 1]},
    {"id": "p1", "op": "add", "inputs": ["su", "me"]}, {"id": "p2", "op": "add", "inputs": ["p1", "m3"]},
    {"id": "d", "layer": "dense", "inputs": ["p2"], "units": 1, "activation": "sigmoid"},
    {"id": "q", "op": "sum", "inputs": ["n3"]}, {"id": "q2", "op": "muls", "inputs": ["q"], "scalar": 0.01},
    {"id": "pred", "op": "add", "inputs": ["d", "q2"]},
    {"id": "loss", "op": "mse", "inputs": ["pred", "y"]},
]


def check_ops(gradrun, tmp, failures, has_predict):
    d = os.path.join(tmp, "ops")
    os.makedirs(d)
    rng = np.random.default_rng(7)
    n, batch = 40, 8
    data_csv = os.path.join(d, "ops.csv")
    with open(data_csv, "w") as f:
        f.write("a0,a1,a2,a3,lab,t\n")
        for _ in range(n):
            f.write("%r,%r,%r,%r,%d,%r\n" % (*rng.normal(size=4) * 3 + 1, rng.integers(0, 3), rng.normal()))
    spec = {"gradrun": 1, "name": "ops", "seed": 5,
            "data": {"csv": data_csv, "inputs": {"x": {"columns": ["a0", "a1", "a2", "a3"], "standardize": True},
                                                 "c": {"column": "lab", "one_hot": 3}, "y": {"column": "t"}}},
            "params": {"W": {"shape": [4, 4], "init": "xavier_uniform"}, "v": {"shape": [4], "init": "zeros"},
                       "U": {"shape": [1, 2, 2], "init": "xavier_uniform"}},
            "consts": {"k": {"shape": [4], "values": [0.5, -1.0, 2.0, 0.25]}},
            "graph": OPS_GRAPH, "loss": "loss", "optimizer": {"kind": "adam", "lr": 0.01},
            "train": {"epochs": 1, "batch_size": batch, "shuffle": False}}
    spec_path = os.path.join(d, "ops.json")
    with open(spec_path, "w") as f:
        json.dump(spec, f)
    r = run([gradrun, "train", spec_path, "--quiet", "--out", os.path.join(d, "run")])
    if r.returncode != 0:
        return failures.append("ops: train exited %d: %s" % (r.returncode, r.stderr.strip()))
    out = os.path.join(d, "exp")
    r = run([gradrun, "export", spec_path, "--weights", os.path.join(d, "run"), "--format", "torch", "--out", out])
    if r.returncode != 0:
        return failures.append("ops: export exited %d: %s" % (r.returncode, r.stderr.strip()))
    model = load_module(os.path.join(out, "model.py")).Model.from_dir(out)
    cols = read_csv(data_csv)
    raw = {"x": np.stack([cols[c] for c in ("a0", "a1", "a2", "a3")], axis=1), "c": cols["lab"].reshape(-1, 1)}
    with torch.no_grad():
        got = np.concatenate([model(*[torch.from_numpy(raw[i][s:s + batch]) for i in model.input_names]).numpy()
                              for s in range(0, n, batch)])
    if not has_predict:
        return print("note ops: no gradrun predict to compare with (exported and ran)")
    pred_csv = os.path.join(d, "pred.csv")
    r = run([gradrun, "predict", spec_path, "--weights", os.path.join(d, "run"), "--data", data_csv, "--out", pred_csv,
             "--batch", str(batch)])
    if r.returncode != 0:
        return failures.append("ops: predict exited %d: %s" % (r.returncode, r.stderr.strip()))
    want = read_csv(pred_csv)["pred_0"].reshape(-1, 1)
    diff = float(np.max(np.abs(got - want))) if got.shape == want.shape else float("inf")
    print("%s ops       torch vs gradrun predict (every mapped op): max abs diff %.3g" % ("ok  " if diff <= TOL else "FAIL",
                                                                                       diff))
    if diff > TOL:
        failures.append("ops: torch vs gradrun predict max abs diff %.3g > %g (shapes %s, %s)" % (diff, TOL, got.shape,
                                                                                               want.shape))


def check_refusals(gradrun, tmp, failures):
    d = os.path.join(tmp, "refuse")
    with open(os.path.join(ROOT, "specs", "iris.json")) as f:
        spec = json.load(f)
    spec["data"]["csv"] = os.path.normpath(os.path.join(ROOT, "specs", spec["data"]["csv"]))
    spec["train"]["epochs"] = 1
    # The declared prediction reads the loss node: a loss is not part of an exported forward graph.
    spec["graph"].append({"id": "p", "op": "add", "inputs": ["logits", "loss"]})
    spec["predict"] = {"output": "p", "transform": "none"}
    os.makedirs(d)
    spec_path = os.path.join(d, "ce.json")
    with open(spec_path, "w") as f:
        json.dump(spec, f)
    r = run([gradrun, "train", spec_path, "--quiet", "--out", os.path.join(d, "run")])
    if r.returncode != 0:
        return failures.append("refuse: train exited %d: %s" % (r.returncode, r.stderr.strip()))
    out = os.path.join(d, "exp")
    r = run([gradrun, "export", spec_path, "--weights", os.path.join(d, "run"), "--format", "torch", "--out", out])
    lines = r.stderr.strip().splitlines()
    if r.returncode != 2 or len(lines) != 1 or '"loss"' not in lines[0] or "/graph/5" not in lines[0] or os.path.exists(out):
        failures.append("refuse loss node: want exit 2, one line naming \"loss\" at /graph/5, no output; got %d %r" %
                        (r.returncode, r.stderr))
    else:
        print("ok   refused: " + lines[0])
    # Weights from another spec.
    other = os.path.join(tmp, "iris", "iris.json")
    r = run([gradrun, "export", other, "--weights", os.path.join(d, "run"), "--format", "torch", "--out", out])
    if r.returncode != 2 or os.path.exists(out):
        failures.append("other spec's weights: want exit 2, no output; got %d %r" % (r.returncode, r.stderr))
    else:
        print("ok   refused: " + r.stderr.strip())


# An f32 run (--dtype f32) exports a float32 module: the state_dict is F32 holding the run's float
# weights exactly, the module computes in float32, and its predictions are `gradrun predict`'s
# (which follows the weights' dtype, so computes on the f32 tape) to float rounding, not to 1e-12.
F32_TOL = 2e-5  # relative to the prediction's scale: float32 with a different summation order


def check_f32(gradrun, tmp, name, failures):
    with open(os.path.join(ROOT, "specs", name + ".json")) as f:
        spec = json.load(f)
    data_csv = os.path.normpath(os.path.join(ROOT, "specs", spec["data"]["csv"]))
    spec["data"]["csv"] = data_csv
    spec["train"]["epochs"] = 2
    d = os.path.join(tmp, name + "-f32")
    os.makedirs(d)
    spec_path = os.path.join(d, name + ".json")
    with open(spec_path, "w") as f:
        json.dump(spec, f)
    run_dir = os.path.join(d, "run")
    r = run([gradrun, "train", spec_path, "--quiet", "--dtype", "f32", "--out", run_dir])
    if r.returncode != 0:
        return failures.append("%s f32: train exited %d: %s" % (name, r.returncode, r.stderr.strip()))
    out = os.path.join(d, "exp")
    r = run([gradrun, "export", spec_path, "--weights", run_dir, "--format", "torch", "--out", out])
    if r.returncode != 0 or "float32" not in r.stdout:
        return failures.append("%s f32: export exited %d (%r): %s" % (name, r.returncode, r.stdout, r.stderr.strip()))
    weights, _ = read_safetensors(os.path.join(run_dir, "weights.safetensors"))
    state, _ = read_safetensors(os.path.join(out, "state_dict.safetensors"), "F32")
    for k, v in state.items():  # the floats, exactly (the weights file holds them widened to F64)
        w = weights[k[:-len(".weight")] + ".W"].T if k.endswith(".weight") else \
            weights[k[:-len(".bias")] + ".b"] if k.endswith(".bias") else None
        if w is not None and not np.array_equal(v.astype(np.float64), w):
            failures.append("%s f32: state_dict %s is not the run's float weights exactly" % (name, k))
    model = load_module(os.path.join(out, "model.py")).Model.from_dir(out)
    dtypes = {p.dtype for p in model.parameters()} | {b.dtype for b in model.buffers()}
    if dtypes != {torch.float32}:
        failures.append("%s f32: module parameters and buffers are %s, not float32" % (name, dtypes))
    cols = read_csv(data_csv)
    prep = json.loads(read_safetensors(os.path.join(run_dir, "weights.safetensors"))[1]["gradrun.preprocessing"])
    args = []
    for inp in model.input_names:
        ip = next(p for p in prep["inputs"] if p["name"] == inp)
        args.append(torch.from_numpy(np.stack([cols[c] for c in ip["columns"]], axis=1)))
    with torch.no_grad():
        got = model(*args)
    if got.dtype != torch.float32:
        return failures.append("%s f32: forward returns %s, not float32" % (name, got.dtype))
    got = got.numpy().astype(np.float64)
    pred_csv = os.path.join(d, "pred.csv")
    r = run([gradrun, "predict", spec_path, "--weights", run_dir, "--data", data_csv, "--out", pred_csv])
    if r.returncode != 0:
        return failures.append("%s f32: predict exited %d: %s" % (name, r.returncode, r.stderr.strip()))
    pc = read_csv(pred_csv)
    node = [c for c in pc if c.endswith("_0")][0][:-2]
    pred = np.stack([pc["%s_%d" % (node, j)] for j in range(got.shape[1])], axis=1)
    if not np.array_equal(pred.astype(np.float32).astype(np.float64), pred):
        failures.append("%s f32: gradrun predict of an f32 run does not print floats" % name)
    scale = max(1.0, float(np.max(np.abs(pred))))
    diff = float(np.max(np.abs(got - pred))) / scale
    ok = diff <= F32_TOL
    print("%s %-9s f32 export: torch float32 vs gradrun predict (f32 tape): max diff %.3g of scale %.3g" %
          ("ok  " if ok else "FAIL", name, diff, scale))
    if not ok:
        failures.append("%s f32: torch float32 vs gradrun predict max diff %.3g > %g" % (name, diff, F32_TOL))


def main():
    gradrun = os.path.abspath(sys.argv[1])
    has_predict = run([gradrun, "predict", "--help"]).returncode == 0
    if not has_predict:
        print("note: this gradrun has no predict command; comparing with NumPy only")
    failures = []
    with tempfile.TemporaryDirectory() as tmp:
        for name in ("iris", "digits", "diabetes"):
            check_example(gradrun, tmp, name, failures, has_predict)
        check_ops(gradrun, tmp, failures, has_predict)
        if has_predict:
            for name in ("iris", "diabetes"):
                check_f32(gradrun, tmp, name, failures)
        check_refusals(gradrun, tmp, failures)
    for f in failures:
        print("FAIL " + f)
    print("%d failure(s)" % len(failures))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
