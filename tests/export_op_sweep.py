#!/usr/bin/python3
"""Both exports of single ops: scripts/check-new-op's export sweep.

    /usr/bin/python3 tests/export_op_sweep.py GRADRUN OP [OP ...]

Per op (an elementwise unary op without a scalar, a row op such as layer_norm, or a fold reduction
such as max, over the last axis with keepdims): a spec x [B,4] -> dense(6, tanh) -> OP -> dense(1)
-> mse, trained for one epoch; then
  torch  `gradrun export --format torch`, the module loaded into torch (strict state_dict) and run
         on every data row, matched against `gradrun predict` to 1e-12 absolute (float64);
  onnx   `gradrun export --format onnx`: either a model that onnx.checker accepts (its operators
         printed; the elementwise ops' come from the op table's onnx column), or a refusal that exits
         2, writes nothing and names the node and the op (an op without an opset-13 operator).
Prints `export torch: ops matched: ...` and `export onnx: ops exported or refused by name: ...`;
exits 1 on any failure, 77 (Skipped) without torch and numpy.
"""
import csv
import importlib.util
import json
import os
import re
import subprocess
import sys
import tempfile

try:
    import numpy as np
    import torch
except ImportError as e:
    why = "needs /usr/bin/python3 with torch and numpy (Debian python3-torch, python3-numpy): %s" % e
    print("SKIPPED [torch]: export_op_sweep -- " + why)
    if os.environ.get("GR_SKIP_LOG"):  # scripts/test: torch comes from scripts/setup, so this skip fails it
        with open(os.environ["GR_SKIP_LOG"], "a") as log:
            log.write("torch\texport_op_sweep\t" + why + "\n")
    sys.exit(77)

TOL = 1e-12


def run(cmd):
    return subprocess.run(cmd, capture_output=True, text=True)


def read_csv(path):
    with open(path, newline="") as f:
        rows = list(csv.reader(f))
    return {name: np.array([float(r[i]) for r in rows[1:]]) for i, name in enumerate(rows[0])}


def load_module(path):
    spec = importlib.util.spec_from_file_location("exported_%d" % abs(hash(path)), path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def is_fold(op):
    """Whether the op table row of `op` is a fold reduction (Class Reduction, Fwd column `fold`)."""
    table = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "kernels", "gr_op_table.h")
    m = re.search(r'X\(\w+,\s*"%s",\s*\d+,\s*(\w+),\s*[^,]+,\s*\w+,\s*(\w+),' % re.escape(op), open(table).read())
    return bool(m) and m.group(1) == "Reduction" and m.group(2) == "fold"


def sweep(gradrun, op, tmp, failures, torch_ok, onnx_ok):
    d = os.path.join(tmp, op)
    os.makedirs(d)
    rng = np.random.default_rng(11)
    n, batch = 32, 8
    data_csv = os.path.join(d, "data.csv")
    with open(data_csv, "w") as f:
        f.write("a0,a1,a2,a3,t\n")
        for _ in range(n):
            f.write("%r,%r,%r,%r,%r\n" % (*rng.normal(size=4), rng.normal()))
    node = {"id": "z", "op": op, "inputs": ["h"]}
    # attributes at their defaults (a row op's eps: 1e-5); a fold reduction over the last axis, kept
    if is_fold(op):
        node.update({"axis": -1, "keepdims": True})
    spec = {"gradrun": 1, "name": "sweep_" + op, "seed": 3,
            "data": {"csv": data_csv, "inputs": {"x": {"columns": ["a0", "a1", "a2", "a3"]}, "y": {"column": "t"}}},
            "graph": [{"id": "h", "layer": "dense", "inputs": ["x"], "units": 6, "activation": "tanh"}, node,
                      {"id": "pred", "layer": "dense", "inputs": ["z"], "units": 1, "activation": "none"},
                      {"id": "loss", "op": "mse", "inputs": ["pred", "y"]}],
            "loss": "loss", "optimizer": {"kind": "adam", "lr": 0.01},
            "train": {"epochs": 1, "batch_size": batch, "shuffle": False}}
    spec_path = os.path.join(d, "spec.json")
    with open(spec_path, "w") as f:
        json.dump(spec, f)
    r = run([gradrun, "train", spec_path, "--quiet", "--out", os.path.join(d, "run")])
    if r.returncode != 0:
        return failures.append("%s: train exited %d: %s" % (op, r.returncode, r.stderr.strip()))
    # torch: the exported module against gradrun predict
    out = os.path.join(d, "torch")
    r = run([gradrun, "export", spec_path, "--weights", os.path.join(d, "run"), "--format", "torch", "--out", out])
    if r.returncode != 0:
        failures.append("%s: export torch exited %d: %s" % (op, r.returncode, r.stderr.strip()))
    else:
        model = load_module(os.path.join(out, "model.py")).Model.from_dir(out)
        cols = read_csv(data_csv)
        x = np.stack([cols[c] for c in ("a0", "a1", "a2", "a3")], axis=1)
        with torch.no_grad():
            got = np.concatenate([model(torch.from_numpy(x[s:s + batch])).numpy() for s in range(0, n, batch)])
        pred_csv = os.path.join(d, "pred.csv")
        r = run([gradrun, "predict", spec_path, "--weights", os.path.join(d, "run"), "--data", data_csv, "--out", pred_csv])
        if r.returncode != 0:
            failures.append("%s: predict exited %d: %s" % (op, r.returncode, r.stderr.strip()))
        else:
            want = read_csv(pred_csv)["pred_0"].reshape(-1, 1)
            diff = float(np.max(np.abs(got - want))) if got.shape == want.shape else float("inf")
            print("%s %-12s torch export vs gradrun predict: max abs diff %.3g" % ("ok  " if diff <= TOL else "FAIL", op, diff))
            if diff <= TOL:
                torch_ok.append(op)
            else:
                failures.append("%s: torch export vs predict max abs diff %.3g > %g" % (op, diff, TOL))
    # onnx: exported with the op's operator, or refused naming the node and the op
    model = os.path.join(d, "model.onnx")
    r = run([gradrun, "export", spec_path, "--weights", os.path.join(d, "run"), "--format", "onnx", "--out", model])
    if r.returncode == 0:
        if not os.path.exists(model):
            return failures.append("%s: export onnx exited 0 without %s" % (op, model))
        try:
            import onnx
            m = onnx.load(model)
            onnx.checker.check_model(m)
            types = sorted({nd.op_type for nd in m.graph.node})
        except ImportError:
            types = ["(no onnx package: not checked)"]
        except Exception as e:  # a model the checker rejects
            return failures.append("%s: onnx.checker rejects the exported model: %s" % (op, e))
        print("ok   %-12s onnx export written and checked, operators: %s" % (op, " ".join(types)))
        onnx_ok.append(op + "(exported)")
    elif r.returncode == 2 and '"z"' in r.stderr and op in r.stderr and not os.path.exists(model):
        print("ok   %-12s onnx export refused, named: %s" % (op, r.stderr.strip().splitlines()[-1]))
        onnx_ok.append(op + "(refused)")
    else:
        failures.append("%s: export onnx: want success or a named refusal (exit 2), got %d: %s" %
                        (op, r.returncode, r.stderr.strip()))


def main():
    if len(sys.argv) < 3:
        print("usage: export_op_sweep.py GRADRUN OP [OP ...]")
        return 2
    gradrun, ops = sys.argv[1], sys.argv[2:]
    failures, torch_ok, onnx_ok = [], [], []
    with tempfile.TemporaryDirectory(prefix="gr_export_sweep_") as tmp:
        for op in ops:
            sweep(gradrun, op, tmp, failures, torch_ok, onnx_ok)
    print("export torch: ops matched: " + " ".join(torch_ok))
    print("export onnx: ops exported or refused by name: " + " ".join(onnx_ok))
    for f in failures:
        print("FAIL " + f)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
