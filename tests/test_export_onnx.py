#!/usr/bin/python3
"""`gradrun export --format onnx`: the exported model passes onnx.checker and reproduces
`gradrun predict` in a real ONNX runtime (onnxruntime-node, tools/onnxrt/run.js).

    /usr/bin/python3 tests/test_export_onnx.py GRADRUN

For specs/iris.json, digits.json and diabetes.json (copied to a temp dir, trained for 2 epochs):
export to FILE.onnx, run onnx.checker.check_model (full_check: shape inference too), check that the
batch dimension is the symbolic "batch", feed every row of the data set's RAW CSV (the model
standardizes) to onnxruntime-node and compare with `gradrun predict` on the same CSV:
|onnx − predict| <= 1e-5·|predict| + 1e-6 elementwise (the model computes in float32, predict in
float64). iris is run a second time in batches of 7 (a last partial batch), which a symbolic batch
allows. A synthetic spec whose prediction uses every op the export maps (a fixed batch: it sums
over all rows) is matched the same way in batches of the spec's batch size. Also: a prediction that
reads a loss node is refused naming the node (exit 2, one line, nothing written).

`--dtype f64`: each of those models exported again as float64 (every input, initializer and output
tensor(double); every operator's opset-13 schema in onnx.defs allows tensor(double)) matches
`predict` within 1e-12 relative plus 1e-15 absolute, as does a spec with the remaining elementwise
ops (abs, pow, sin, cos), max and dropout; `--dtype` with `--format torch` is exit 2.
Fortran order: iris's raw rows saved as a Fortran-order .npy run through run.js (NAME=FILE.npy)
give exactly the outputs of the C-order file, and match `predict` on the same Fortran-order file
(float32 and float64 models).

Needs /usr/bin/python3 with onnx and numpy (Debian python3-onnx, python3-numpy), node, and
onnxruntime-node in tools/onnxrt/node_modules (scripts/setup installs all of them); without them
the test exits 77 (ctest: Skipped), recorded in $GR_SKIP_LOG as kind "onnx", which scripts/test
fails on; or 1 when GR_REQUIRE_ONNX=1.
Prints `ok   NAME` / `FAIL NAME: why`; exits 1 on any failure.
"""
import csv
import json
import os
import shutil
import struct
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RUN_JS = os.path.join(ROOT, "tools", "onnxrt", "run.js")
ORT_DIR = os.path.join(ROOT, "tools", "onnxrt", "node_modules", "onnxruntime-node")
REL, ABS = 1e-5, 1e-6
REL64, ABS64 = 1e-12, 1e-15  # --dtype f64: onnxruntime's exp/tanh/... are not gradrun's, so not bit-equal


def skip(why):
    if os.environ.get("GR_REQUIRE_ONNX") == "1":
        print("FAIL import: " + why + " (GR_REQUIRE_ONNX=1)")
        sys.exit(1)
    # Exit 77: ctest reports Skipped; scripts/test fails on a skip of kind "onnx", since
    # scripts/setup installs python3-onnx and onnxruntime-node (tests/support/skip.h).
    print("SKIPPED [onnx]: export_onnx -- " + why)
    if os.environ.get("GR_SKIP_LOG"):
        with open(os.environ["GR_SKIP_LOG"], "a") as log:
            log.write("onnx\texport_onnx\t" + why + "\n")
    sys.exit(77)


try:
    import numpy as np
    import onnx
except ImportError as e:
    skip("needs /usr/bin/python3 with onnx and numpy (Debian python3-onnx, python3-numpy; scripts/setup): %s" % e)
if not shutil.which("node"):
    skip("needs node to run onnxruntime-node")
if not os.path.isdir(ORT_DIR):
    skip("needs onnxruntime-node in tools/onnxrt/node_modules (scripts/setup installs it)")


def run(cmd, **kw):
    return subprocess.run(cmd, capture_output=True, text=True, **kw)


def read_prep(path):
    with open(path, "rb") as f:
        (n,) = struct.unpack("<Q", f.read(8))
        header = json.loads(f.read(n))
    return json.loads(header["__metadata__"]["gradrun.preprocessing"])


def read_csv(path):
    with open(path, newline="") as f:
        rows = list(csv.reader(f))
    return {name: np.array([float(r[i]) for r in rows[1:]]) for i, name in enumerate(rows[0])}


def onnx_run(model_path, feeds, tmp, batch=0):
    """feeds: {input name: [rows, ...] array, or a .npy path}; returns {output name: array}."""
    if all(isinstance(v, str) for v in feeds.values()):
        args = ["%s=%s" % (k, v) for k, v in feeds.items()]
    else:
        in_json = os.path.join(tmp, "feeds.json")
        with open(in_json, "w") as f:
            json.dump({k: {"dims": list(v.shape), "data": v.reshape(-1).tolist()} for k, v in feeds.items()}, f)
        args = [in_json]
    cmd = ["node", RUN_JS, model_path] + args + (["--batch", str(batch)] if batch else [])
    r = run(cmd)
    if r.returncode != 0:
        raise RuntimeError("run.js exited %d: %s" % (r.returncode, r.stderr.strip()))
    return {k: np.array(v["data"], dtype=np.float64).reshape(v["dims"]) for k, v in json.loads(r.stdout).items()}


def check_model(path, f64=False):
    """onnx.checker with shape inference; returns (input dims, output name) as the model declares them.
    f64: every real tensor is DOUBLE, and every operator takes tensor(double) at opset 13 (onnx.defs)."""
    m = onnx.load(path)
    onnx.checker.check_model(m, full_check=True)
    assert m.opset_import[0].version == 13, m.opset_import
    dims = {i.name: [d.dim_param or d.dim_value for d in i.type.tensor_type.shape.dim] for i in m.graph.input}
    want = onnx.TensorProto.DOUBLE if f64 else onnx.TensorProto.FLOAT
    types = [v.type.tensor_type.elem_type for v in list(m.graph.input) + list(m.graph.output)]
    types += [t.data_type for t in m.graph.initializer if t.data_type != onnx.TensorProto.INT64]
    assert set(types) == {want}, "element types %s, want %s" % (sorted(set(types)), want)
    if f64:
        for op in sorted({n.op_type for n in m.graph.node}):
            schema = onnx.defs.get_schema(op, 13)
            assert any("tensor(double)" in tc.allowed_type_strs for tc in schema.type_constraints), op + ": no double"
    return dims, m.graph.output[0].name


def compare(label, got, want, failures, stats, rel_tol=REL, abs_tol=ABS):
    if got.shape != want.shape:
        return failures.append("%s: onnx gives %s, predict %s" % (label, got.shape, want.shape))
    err = np.abs(got - want)
    # float rounding scales with the output's magnitude (a regression in data units: diabetes ~150),
    # so the absolute term is relative to the prediction's scale, as export_torch's f32 check does
    abs_tol = abs_tol * max(1.0, float(np.max(np.abs(want))))
    bad = err > rel_tol * np.abs(want) + abs_tol
    rel = float(np.max(err / np.maximum(np.abs(want), abs_tol / rel_tol)))
    stats.append((label, rel))
    print("%s %-22s onnx vs gradrun predict: max rel diff %.3g, max abs diff %.3g over %s" %
          ("ok  " if not bad.any() else "FAIL", label, rel, float(np.max(err)), list(got.shape)))
    if bad.any():
        failures.append("%s: %d element(s) beyond %g relative + %g absolute (max abs diff %.3g)" %
                        (label, int(bad.sum()), rel_tol, abs_tol, float(np.max(err))))


def predictions(gradrun, spec_path, run_dir, data_csv, out_csv, node, width, batch=None):
    cmd = [gradrun, "predict", spec_path, "--weights", run_dir, "--data", data_csv, "--out", out_csv]
    if batch:
        cmd += ["--batch", str(batch)]
    r = run(cmd)
    if r.returncode != 0:
        raise RuntimeError("predict exited %d: %s" % (r.returncode, r.stderr.strip()))
    pc = read_csv(out_csv)
    return np.stack([pc["%s_%d" % (node, j)] for j in range(width)], axis=1)


def check_example(gradrun, tmp, name, failures, stats):
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
    run_dir = os.path.join(d, "run")
    r = run([gradrun, "train", spec_path, "--quiet", "--out", run_dir])
    if r.returncode != 0:
        return failures.append("%s: train exited %d: %s" % (name, r.returncode, r.stderr.strip()))
    model = os.path.join(d, name + ".onnx")
    r = run([gradrun, "export", spec_path, "--weights", run_dir, "--format", "onnx", "--out", model])
    if r.returncode != 0:
        return failures.append("%s: export exited %d: %s" % (name, r.returncode, r.stderr.strip()))
    try:
        dims, out_name = check_model(model)
    except Exception as e:  # noqa: BLE001 - any checker complaint is a failure
        return failures.append("%s: onnx.checker: %s" % (name, e))
    print("ok   %-22s onnx.checker (full): inputs %s → %s" % (name, dims, out_name))
    if any(v[0] != "batch" for v in dims.values()):
        failures.append("%s: the batch dimension is not symbolic: %s" % (name, dims))
    prep = read_prep(os.path.join(run_dir, "weights.safetensors"))
    cols = read_csv(data_csv)
    feeds = {}
    for ip in prep["inputs"]:
        if ip["name"] in dims:
            feeds[ip["name"]] = np.stack([cols[c] for c in ip["columns"]], axis=1)
    try:
        got = onnx_run(model, feeds, d)[out_name]
        want = predictions(gradrun, spec_path, run_dir, data_csv, os.path.join(d, "pred.csv"), out_name, got.shape[1])
    except RuntimeError as e:
        return failures.append("%s: %s" % (name, e))
    compare(name, got, want, failures, stats)
    if name == "iris":  # a symbolic batch runs in any batch size, including a last partial batch
        compare("iris (batches of 7)", onnx_run(model, feeds, d, batch=7)[out_name], want, failures, stats)
    model64 = export_f64(gradrun, spec_path, run_dir, d, name, failures)
    if model64:
        try:
            compare(name + " f64", onnx_run(model64, feeds, d)[out_name], want, failures, stats, REL64, ABS64)
        except RuntimeError as e:
            failures.append("%s f64: %s" % (name, e))
    if name == "iris":
        models = {"f32": model, "f64": model64} if model64 else {"f32": model}
        check_fortran(gradrun, d, spec_path, run_dir, feeds["x"], models, out_name, failures, stats)


def export_f64(gradrun, spec_path, run_dir, d, name, failures, warns=()):
    """`export --dtype f64` next to the float32 model, checked (check_model f64); its path or None.
    warns: the words its stderr must hold (the operators onnxruntime runs differently); else none."""
    model = os.path.join(d, name + ".f64.onnx")
    r = run([gradrun, "export", spec_path, "--weights", run_dir, "--format", "onnx", "--dtype", "f64", "--out", model])
    if r.returncode != 0:
        return failures.append("%s: export --dtype f64 exited %d: %s" % (name, r.returncode, r.stderr.strip()))
    if "float64" not in r.stdout:
        return failures.append("%s: export --dtype f64 does not say float64: %s" % (name, r.stdout.strip()))
    if bool(r.stderr.strip()) != bool(warns) or any(w not in r.stderr for w in warns):
        return failures.append("%s: export --dtype f64: want warnings naming %s, got %r" % (name, list(warns), r.stderr))
    try:
        check_model(model, f64=True)
    except Exception as e:  # noqa: BLE001 - any checker complaint is a failure
        return failures.append("%s f64: %s" % (name, e))
    print("ok   %-22s onnx.checker (full), --dtype f64: every tensor DOUBLE, every operator takes it" % name)
    return model


def check_fortran(gradrun, d, spec_path, run_dir, x, models, out_name, failures, stats):
    """The raw rows as a C-order and a Fortran-order .npy: run.js reads both as the same rows (as
    gradrun's lib/io/npy.cpp does), so the outputs are equal, and match predict on the Fortran file."""
    c_path, f_path = os.path.join(d, "x_c.npy"), os.path.join(d, "x_f.npy")
    np.save(c_path, np.ascontiguousarray(x))
    np.save(f_path, np.asfortranarray(x))
    with open(f_path, "rb") as f:
        if b"'fortran_order': True" not in f.read(128):
            return failures.append("fortran: numpy did not write a Fortran-order file")
    try:
        want = predictions(gradrun, spec_path, run_dir, f_path, os.path.join(d, "pred_f.csv"), out_name, 3)
        for dtype, model in models.items():
            got_c = onnx_run(model, {"x": c_path}, d)[out_name]
            got_f = onnx_run(model, {"x": f_path}, d)[out_name]
            if not np.array_equal(got_c, got_f):
                failures.append("fortran %s: run.js gives other outputs for the Fortran-order file" % dtype)
            tol = (REL64, ABS64) if dtype == "f64" else (REL, ABS)
            compare("iris fortran .npy %s" % dtype, got_f, want, failures, stats, *tol)
    except RuntimeError as e:
        failures.append("fortran: %s" % e)


# Every op the ONNX export maps, in one prediction graph (the same graph as test_export_torch.py):
# each elementwise row, sum/mean with and without axis/keepdims, reshape, transpose, bmm with a
# broadcast batch, slice, concat, softmax, log_softmax, a const, a dense layer and a one-hot input.
OPS_GRAPH = [
    {"id": "n1", "op": "matmul", "inputs": ["x", "W"]}, {"id": "n2", "op": "add", "inputs": ["n1", "v"]},
    {"id": "n3", "op": "tanh", "inputs": ["n2"]}, {"id": "n4", "op": "sigmoid", "inputs": ["n3"]},
    {"id": "n5", "op": "mul", "inputs": ["n4", "k"]}, {"id": "n6", "op": "sub", "inputs": ["n5", "n3"]},
    {"id": "n7", "op": "neg", "inputs": ["n6"]}, {"id": "n8", "op": "adds", "inputs": ["n7"], "scalar": -0.5},
    {"id": "n9", "op": "muls", "inputs": ["n8"], "scalar": 2.0}, {"id": "n10", "op": "relu", "inputs": ["n9"]},
    {"id": "n11", "op": "exp", "inputs": ["n3"]}, {"id": "n12", "op": "log", "inputs": ["n11"]},
    {"id": "n13", "op": "sqrt", "inputs": ["n11"]}, {"id": "n14", "op": "div", "inputs": ["n12", "n13"]},
    {"id": "n15", "op": "add", "inputs": ["n14", "n10"]},
    {"id": "r", "op": "reshape", "inputs": ["n15"], "shape": [-1, 2, 2]},
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


def check_ops(gradrun, tmp, failures, stats):
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
    run_dir = os.path.join(d, "run")
    r = run([gradrun, "train", spec_path, "--quiet", "--out", run_dir])
    if r.returncode != 0:
        return failures.append("ops: train exited %d: %s" % (r.returncode, r.stderr.strip()))
    model = os.path.join(d, "ops.onnx")
    r = run([gradrun, "export", spec_path, "--weights", run_dir, "--format", "onnx", "--out", model])
    if r.returncode != 0:
        return failures.append("ops: export exited %d: %s" % (r.returncode, r.stderr.strip()))
    try:
        dims, out_name = check_model(model)
    except Exception as e:  # noqa: BLE001
        return failures.append("ops: onnx.checker: %s" % e)
    print("ok   %-22s onnx.checker (full): inputs %s → %s" % ("ops", dims, out_name))
    if any(v[0] != batch for v in dims.values()):
        failures.append("ops: a graph summing over all rows must have a fixed batch of %d: %s" % (batch, dims))
    cols = read_csv(data_csv)
    feeds = {"x": np.stack([cols[c] for c in ("a0", "a1", "a2", "a3")], axis=1), "c": cols["lab"].reshape(-1, 1)}
    try:
        got = onnx_run(model, feeds, d, batch=batch)[out_name]
        want = predictions(gradrun, spec_path, run_dir, data_csv, os.path.join(d, "pred.csv"), out_name, 1, batch)
    except RuntimeError as e:
        return failures.append("ops: %s" % e)
    compare("ops (every mapped op)", got, want, failures, stats)
    model64 = export_f64(gradrun, spec_path, run_dir, d, "ops", failures, warns=("FusedMatMul",))
    if model64:
        try:
            compare("ops f64", onnx_run(model64, feeds, d, batch=batch)[out_name], want, failures, stats, REL64, ABS64)
        except RuntimeError as e:
            failures.append("ops f64: %s" % e)


# The ops OPS_GRAPH leaves out (its graph is shared with test_export_torch.py): abs, pow, sin, cos,
# max, and dropout (the identity in a prediction) as an op and in a dense layer. onnxruntime has no
# float64 Cos kernel, so the float64 model is run with neg in its place (the export warns about Cos).
MORE_GRAPH = [
    {"id": "h", "layer": "dense", "inputs": ["x"], "units": 6, "activation": "tanh", "dropout": 0.25},
    {"id": "a", "op": "abs", "inputs": ["h"]}, {"id": "p", "op": "pow", "inputs": ["a"], "scalar": 1.5},
    {"id": "s", "op": "sin", "inputs": ["p"]}, {"id": "c", "op": "cos", "inputs": ["h"]},
    {"id": "sc", "op": "add", "inputs": ["s", "c"]}, {"id": "dr", "op": "dropout", "inputs": ["sc"], "rate": 0.1},
    {"id": "m", "op": "max", "inputs": ["dr"], "axis": -1, "keepdims": True},
    {"id": "pred", "layer": "dense", "inputs": ["m"], "units": 1},
    {"id": "loss", "op": "mse", "inputs": ["pred", "y"]},
]


def check_more_ops(gradrun, tmp, failures, stats, cos):
    """MORE_GRAPH on diabetes' first 4 columns, float32 and float64, against predict."""
    label = "more ops" if cos else "more ops (neg for cos)"
    d = os.path.join(tmp, "more-%s" % cos)
    os.makedirs(d)
    graph = [dict(n, op="neg") if not cos and n.get("op") == "cos" else n for n in MORE_GRAPH]
    data_csv = os.path.join(ROOT, "datasets", "diabetes.csv")
    cols = read_csv(data_csv)
    names = list(cols)[:4]
    spec = {"gradrun": 1, "name": "more", "seed": 3,
            "data": {"csv": data_csv, "inputs": {"x": {"columns": names, "standardize": True},
                                                 "y": {"columns": [list(cols)[-1]], "standardize": True}}},
            "graph": graph, "loss": "loss", "optimizer": {"kind": "adam", "lr": 0.01},
            "train": {"epochs": 2, "batch_size": 32}, "predict": {"output": "pred", "transform": "none"}}
    spec_path = os.path.join(d, "more.json")
    with open(spec_path, "w") as f:
        json.dump(spec, f)
    run_dir = os.path.join(d, "run")
    r = run([gradrun, "train", spec_path, "--quiet", "--out", run_dir])
    if r.returncode != 0:
        return failures.append("%s: train exited %d: %s" % (label, r.returncode, r.stderr.strip()))
    feeds = {"x": np.stack([cols[c] for c in names], axis=1)}
    try:
        want = predictions(gradrun, spec_path, run_dir, data_csv, os.path.join(d, "pred.csv"), "pred", 1)
    except RuntimeError as e:
        return failures.append("%s: %s" % (label, e))
    model = os.path.join(d, "more.onnx")
    r = run([gradrun, "export", spec_path, "--weights", run_dir, "--format", "onnx", "--out", model])
    if r.returncode != 0:
        return failures.append("%s: export exited %d: %s" % (label, r.returncode, r.stderr.strip()))
    model64 = export_f64(gradrun, spec_path, run_dir, d, label, failures, warns=("Cos",) if cos else ())
    try:
        check_model(model)
        compare(label, onnx_run(model, feeds, d)["pred"], want, failures, stats)
        if model64 and not cos:
            compare(label + " f64", onnx_run(model64, feeds, d)["pred"], want, failures, stats, REL64, ABS64)
    except (RuntimeError, AssertionError, onnx.checker.ValidationError) as e:
        failures.append("%s: %s" % (label, e))
    if not cos:
        return
    # --dtype is the ONNX model's element type; a torch export keeps the run's precision
    r = run([gradrun, "export", spec_path, "--weights", run_dir, "--format", "torch", "--dtype", "f64",
             "--out", os.path.join(d, "torch")])
    lines = r.stderr.strip().splitlines()
    if r.returncode != 2 or len(lines) != 1 or "--dtype" not in lines[0] or os.path.exists(os.path.join(d, "torch")):
        failures.append("export --format torch --dtype f64: want exit 2, one line, nothing written; got %d %r" %
                        (r.returncode, r.stderr))


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
    out = os.path.join(d, "exp", "model.onnx")
    r = run([gradrun, "export", spec_path, "--weights", os.path.join(d, "run"), "--format", "onnx", "--out", out])
    lines = r.stderr.strip().splitlines()
    if (r.returncode != 2 or len(lines) != 1 or '"loss"' not in lines[0] or "/graph/5" not in lines[0] or
            "onnx" not in lines[0] or os.path.exists(out) or os.path.exists(os.path.dirname(out))):
        failures.append("refuse loss node: want exit 2, one line naming \"loss\" at /graph/5, no output; got %d %r" %
                        (r.returncode, r.stderr))
    else:
        print("ok   refused: " + lines[0])


def main():
    gradrun = os.path.abspath(sys.argv[1])
    failures, stats = [], []
    with tempfile.TemporaryDirectory() as tmp:
        for name in ("iris", "digits", "diabetes"):
            check_example(gradrun, tmp, name, failures, stats)
        check_ops(gradrun, tmp, failures, stats)
        for cos in (True, False):
            check_more_ops(gradrun, tmp, failures, stats, cos)
        check_refusals(gradrun, tmp, failures)
    for f in failures:
        print("FAIL " + f)
    if stats:
        print("max relative difference over all comparisons: %.3g (%s)" % max((s[1], s[0]) for s in stats))
    print("%d failure(s)" % len(failures))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
