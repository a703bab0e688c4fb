#!/usr/bin/python3
"""`gradrun export --format torch`: the exported module reproduces the trained model in PyTorch.

    /usr/bin/python3 tests/test_export_torch.py GRADRUN

For specs/iris.json, digits.json and diabetes.json (copied to a temp dir, trained for 2 epochs):
export, load DIR/model.py and DIR/state_dict.safetensors into the installed torch with
load_state_dict (strict), run forward on every row of the data set's raw CSV and compare with a
NumPy re-implementation of the forward pass on gradrun's weights.safetensors and the preprocessing
saved in its metadata, to 1e-12 absolute (float64) — and with `gradrun predict` on the same CSV
when that command exists. Also: a prediction that is a loss node is refused naming the node (exit
2, nothing written), and weights from another spec are refused (exit 2).

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
    print("skipped: " + why)
    sys.exit(77)


def read_safetensors(path):
    with open(path, "rb") as f:
        data = f.read()
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + n])
    meta = header.pop("__metadata__", {})
    out = {}
    for name, t in header.items():
        assert t["dtype"] == "F64", (name, t["dtype"])
        b, e = t["data_offsets"]
        out[name] = np.frombuffer(data[8 + n + b:8 + n + e], dtype="<f8").reshape(t["shape"])
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


def main():
    gradrun = os.path.abspath(sys.argv[1])
    has_predict = run([gradrun, "predict", "--help"]).returncode == 0
    if not has_predict:
        print("note: this gradrun has no predict command; comparing with NumPy only")
    failures = []
    with tempfile.TemporaryDirectory() as tmp:
        for name in ("iris", "digits", "diabetes"):
            check_example(gradrun, tmp, name, failures, has_predict)
        check_refusals(gradrun, tmp, failures)
    for f in failures:
        print("FAIL " + f)
    print("%d failure(s)" % len(failures))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
