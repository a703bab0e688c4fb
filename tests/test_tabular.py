#!/usr/bin/env python3
"""Tabular data as it comes (issue 41 items 1-3): CSV dialects, missing values and categories, end to end.

usage: test_tabular.py GRADRUN   (run from the repository root; numpy, torch, onnxruntime-node)

- the same table written in every dialect (',' ';' tab '|' runs of spaces, quote ' or ", quoted header
  names, doubled quotes, delimiters and line breaks inside quotes, a UTF-8 BOM, CRLF) reads to the
  same bits; a detected delimiter other than ',' is printed in one line;
- a classifier on strings and missing cells: the fill values (mean, most frequent), categories
  (strings and numbers, sorted) and standardization are those computed by hand with numpy on the
  TRAINING rows of the documented split; predict's view of the preprocessed rows equals them bit for
  bit; predict, the PyTorch export and the ONNX export (float64, onnxruntime) on the RAW rows equal a
  numpy forward pass; evaluate on the validation rows equals metrics.csv, on a raw file equals the
  accuracy of predict's named classes; the class column holds the label's names;
- median, a value fill, explicit categories with "encode": "ids", "unknown": "zeros", a threshold
  label, custom na_values;
- errors name the place: a missing label (the line), a category not seen in training (the line), a
  fill on a label, an unknown delimiter, a missing cell without a policy (with the hint).
"""
import csv
import io
import json
import math
import os
import shutil
import struct
import subprocess
import sys
import tempfile

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "tests", "support"))
from cli_support import Cli, read  # noqa: E402
from documented_split import split  # noqa: E402

cli = Cli(os.path.abspath(sys.argv[1]))
check = cli.check


# The documented split: tests/support/documented_split.py.


def seq_mean(v):  # Σ in row order / n, as gradrun sums
    s = 0.0
    for x in v:
        s = s + x
    return s / len(v)


def standardize(train_cols):
    """Per column mean and population std over the training rows, summed in row order (std 0 → 1)."""
    means, stds = [], []
    for col in train_cols.T:
        m = seq_mean(col)
        sq = 0.0
        for x in col:
            sq = sq + (x - m) * (x - m)
        sd = math.sqrt(sq / len(col))
        means.append(m)
        stds.append(sd if sd != 0.0 else 1.0)
    return np.array(means), np.array(stds)


def read_safetensors(path):
    data = read(path)
    n = struct.unpack("<Q", data[:8])[0]
    header = json.loads(data[8:8 + n])
    meta = header.pop("__metadata__", {})
    out = {}
    for k, v in header.items():
        a, b = v["data_offsets"]
        dt = {"F64": "<f8", "F32": "<f4"}[v["dtype"]]
        out[k] = np.frombuffer(data[8 + n + a:8 + n + b], dtype=dt).reshape(v["shape"])
    return out, meta


def write_npy(path, a):
    a = np.ascontiguousarray(a, dtype="<f8")
    header = "{'descr': '<f8', 'fortran_order': False, 'shape': %s, }" % (tuple(a.shape),)
    header += " " * ((64 - (10 + len(header) + 1) % 64) % 64) + "\n"
    with open(path, "wb") as f:
        f.write(b"\x93NUMPY\x01\x00" + struct.pack("<H", len(header)) + header.encode() + a.tobytes())


def spec_file(path, data, graph, loss="loss", metrics=None, predict=None, epochs=5, batch=10, seed=3, optimizer=None):
    s = {"gradrun": 1, "seed": seed, "data": data, "graph": graph, "loss": loss,
         "optimizer": optimizer or {"kind": "adam", "lr": 0.05}, "train": {"epochs": epochs, "batch_size": batch}}
    if metrics:
        s["metrics"] = metrics
    if predict:
        s["predict"] = predict
    with open(path, "w") as f:
        json.dump(s, f, indent=1)
    return path


def predict_csv(path):
    with open(path, newline="") as f:
        rows = list(csv.reader(f))
    return rows[0], rows[1:]


tmp = tempfile.mkdtemp(prefix="gr_tabular_")
T = lambda *p: os.path.join(tmp, *p)  # noqa: E731

# ---- the raw table: strings, quotes, missing cells -------------------------------------------
rng = np.random.default_rng(41)
N = 80
makes = ["General Motors", "Ford, Inc.", 'O"Brien', "chrysler"]
rows = []
for i in range(N):
    a = round(float(rng.normal(3, 2)), 3)
    b = round(float(rng.normal(-1, 0.5)), 4)
    make = makes[int(rng.integers(0, 4))]
    size = int(rng.integers(1, 4))
    label = "yes" if a + 2 * (make == "chrysler") - b > 4 else "no"
    cells = {"a": repr(a), "b": repr(b), "make": make, "size": str(size), "label": label}
    if i % 7 == 3:
        cells["a"] = ["", "NA", "nan", "?"][i % 4]
    if i % 11 == 5:
        cells["b"] = "N/A"
    if i % 13 == 2:
        cells["size"] = "null"
    rows.append(cells)
COLS = ["a", "b", "make", "size", "label"]


def write_table(path, delim, quote='"', bom=False, crlf=False, header_quoted=False, na=None):
    """The table in one dialect; cells that need it are quoted (a doubled quote inside)."""
    def cell(v, force=False):
        special = delim in v or quote in v or "\n" in v or (delim == " " and v == "") or force
        if v in ("", "NA", "nan", "?", "null", "N/A") and na:
            v = na
        if special or force:
            return quote + v.replace(quote, quote + quote) + quote
        return v
    end = "\r\n" if crlf else "\n"
    sep = "   " if delim == " " else delim
    lines = [sep.join(cell(c, header_quoted) for c in COLS)]
    for r in rows:
        lines.append(sep.join(cell(r[c]) for c in COLS))
    text = end.join(lines) + end
    with open(path, "w", encoding="utf-8", newline="") as f:
        f.write(("\ufeff" if bom else "") + text)
    return path


def parse_num(v):
    return float("nan") if v in ("", "NA", "nan", "?", "null", "N/A") else float(v)


raw_a = np.array([parse_num(r["a"]) for r in rows])
raw_b = np.array([parse_num(r["b"]) for r in rows])
raw_size = np.array([parse_num(r["size"]) for r in rows])
raw_make = [r["make"] for r in rows]
raw_label = [r["label"] for r in rows]

DATA_INPUTS = {
    "num": {"columns": ["a", "b"], "missing": "mean", "missing_indicator": True, "standardize": True},
    "make": {"column": "make", "categories": "auto", "unknown": "zeros"},
    "size": {"column": "size", "categories": "auto", "missing": "most_frequent", "missing_indicator": True},
    "y": {"column": "label", "categories": "auto"},
}
GRAPH = [
    {"id": "x1", "op": "concat", "inputs": ["num", "make"], "axis": 1},
    {"id": "x", "op": "concat", "inputs": ["x1", "size"], "axis": 1},
    {"id": "view", "op": "muls", "inputs": ["x"], "scalar": 1},
    {"id": "h", "layer": "dense", "inputs": ["x"], "units": 5, "activation": "tanh"},
    {"id": "logits", "layer": "dense", "inputs": ["h"], "units": 2},
    {"id": "loss", "op": "softmax_cross_entropy", "inputs": ["logits", "y"]},
]
METRICS = {"accuracy": {"logits": "logits", "labels": "y"}}
SEED, VAL = 3, 0.25

# ---- 1. dialects: every writing of the table reads to the same bits --------------------------
base = write_table(T("comma.csv"), ",")
variants = {
    "semicolon": (write_table(T("semi.csv"), ";", bom=True), {}, "';'"),
    "tab": (write_table(T("tab.tsv.csv"), "\t", crlf=True), {}, "'\\t'"),
    "pipe": (write_table(T("pipe.csv"), "|", header_quoted=True), {}, "'|'"),
    "spaces": (write_table(T("spaces.csv"), " "), {}, "' ' (runs of spaces"),
    "single_quote": (write_table(T("squote.csv"), ";", quote="'"), {"quote": "'", "delimiter": ";"}, None),
    "na_dash": (write_table(T("dash.csv"), ",", na="-"), {"na_values": ["-"]}, None),
}


def view_of(csv_path, extra, name):
    """Trains 1 epoch on csv_path (dialect keys `extra`), then predicts the preprocessed rows (node "view")."""
    data = {"csv": csv_path, "inputs": DATA_INPUTS, "validation": VAL, **extra}
    sp = spec_file(T(name + ".json"), data, GRAPH, metrics=METRICS, epochs=1)
    run_dir = T("run_" + name)
    p = cli.run("train", sp, "--out", run_dir, "--force")
    vs = spec_file(T(name + "_view.json"), data, GRAPH, metrics=METRICS, epochs=1, predict={"output": "view"})
    out = T(name + "_view.csv")
    cli.run("predict", vs, "--weights", run_dir, "--data", csv_path, "--out", out, "-q")
    return p, read(out) if os.path.exists(out) else b""


_, want_view = view_of(base, {}, "comma")
for name, (path, extra, shown) in variants.items():
    p, got = view_of(path, extra, name)
    check(got == want_view and got != b"", f"dialect {name}: the preprocessed rows differ from the comma file's")
    if shown:
        line = f"data: delimiter {shown}"
        check(sum(line in l for l in p.stderr.splitlines()) == 1 and "detected from the header" in p.stderr,
              f"dialect {name}: no one-line detection message {line!r}:\n{p.stderr}")
p = cli.run("train", T("comma.json"), "--out", T("run_comma2"), "--force")
check("delimiter" not in p.stderr, f"a comma file printed a detection line:\n{p.stderr}")

# A quoted cell spanning lines, with the delimiter inside: later rows keep their line numbers.
with open(T("multiline.csv"), "w") as f:
    f.write('a,b,make,size,label\n1,2,"Gen\neral, Motors",1,yes\n2,x,ford,2,no\n')
sp = spec_file(T("multiline.json"), {"csv": "multiline.csv", "inputs": DATA_INPUTS}, GRAPH, metrics=METRICS, batch=1)
p = cli.run("train", sp, "--out", T("run_ml"), code=2)
check('multiline.csv: line 4, column "b": cell "x" is not a number' in p.stderr, f"multi-line cell: line numbers:\n{p.stderr}")

# ---- 2. the classifier: preprocessing by hand on the training rows ---------------------------
sp = T("comma.json")
run_dir = T("run_comma")
train_rows, val_rows = split(N, SEED, VAL)
prep = json.load(open(os.path.join(run_dir, "run.json")))["preprocessing"]
byname = {i["name"]: i for i in prep["inputs"]}
fill_a = seq_mean([raw_a[r] for r in train_rows if not math.isnan(raw_a[r])])
fill_b = seq_mean([raw_b[r] for r in train_rows if not math.isnan(raw_b[r])])
check(byname["num"]["missing"] == "mean" and byname["num"]["fill"] == [fill_a, fill_b],
      f"num fill {byname['num'].get('fill')} != by hand {[fill_a, fill_b]}")
train_sizes = [raw_size[r] for r in train_rows if not math.isnan(raw_size[r])]
size_cats = sorted(set(train_sizes))
counts = [train_sizes.count(c) for c in size_cats]
size_fill = size_cats[counts.index(max(counts))]
check(byname["size"]["categories"] == size_cats and byname["size"]["fill"] == [size_fill],
      f"size categories/fill {byname['size'].get('categories')} {byname['size'].get('fill')} != {size_cats} {size_fill}")
make_cats = sorted(set(raw_make[r] for r in train_rows))
check(byname["make"]["categories"] == make_cats, f"make categories {byname['make'].get('categories')} != {make_cats}")
label_cats = sorted(set(raw_label[r] for r in train_rows))
check(byname["y"]["categories"] == label_cats, f"label categories {byname['y'].get('categories')} != {label_cats}")


def features(idx, num_stats=None):
    """The model's rows for raw rows idx, by hand: fill, indicators, one-hot, standardize."""
    a = np.array([fill_a if math.isnan(raw_a[r]) else raw_a[r] for r in idx])
    b = np.array([fill_b if math.isnan(raw_b[r]) else raw_b[r] for r in idx])
    num = np.stack([a, b, [float(math.isnan(raw_a[r])) for r in idx], [float(math.isnan(raw_b[r])) for r in idx]], 1)
    mk = np.array([[1.0 if raw_make[r] == c else 0.0 for c in make_cats] for r in idx])
    sz = np.array([[1.0 if (size_fill if math.isnan(raw_size[r]) else raw_size[r]) == c else 0.0 for c in size_cats]
                   + [float(math.isnan(raw_size[r]))] for r in idx])
    return num, mk, sz


num_train, _, _ = features(train_rows)
means, stds = standardize(num_train[:, :2])
means, stds = np.concatenate([means, [0.0, 0.0]]), np.concatenate([stds, [1.0, 1.0]])
check(byname["num"]["mean"] == list(means) and byname["num"]["std"] == list(stds), "num standardization differs from by hand")


def model_rows(idx):
    num, mk, sz = features(idx)
    return np.concatenate([(num - means) / stds, mk, sz], 1)


X_all = model_rows(range(N))
hdr, got = predict_csv(T("comma_view.csv"))
G = np.array([[float(v) for v in r] for r in got])
check(G.shape == X_all.shape and np.array_equal(G, X_all),
      f"predict's preprocessed rows differ from numpy's by hand (max {np.nanmax(np.abs(G - X_all)) if G.shape == X_all.shape else G.shape})")

# predict on the raw rows == numpy forward on gradrun's weights; class names
W, _ = read_safetensors(os.path.join(run_dir, "weights.safetensors"))


def forward(X):
    h = np.tanh(X @ W["h.W"] + W["h.b"])
    z = h @ W["logits.W"] + W["logits.b"]
    e = np.exp(z - z.max(1, keepdims=True))
    return e / e.sum(1, keepdims=True)


want = forward(X_all)
cli.run("predict", run_dir, "--data", base, "--out", T("pred.csv"), "-q")
hdr, got = predict_csv(T("pred.csv"))
P = np.array([[float(v) for v in r[:-1]] for r in got])
check(hdr[-1] == "class" and all(r[-1] in label_cats for r in got), f"predict's class column does not hold names: {got[:2]}")
check(np.allclose(P, want, rtol=0, atol=1e-12), f"predict vs numpy forward: max {np.abs(P - want).max()}")
check([r[-1] for r in got] == [label_cats[int(k)] for k in np.argmax(want, 1)], "predict's class names differ from the argmax's")

# evaluate: validation rows == metrics.csv; a raw file == predict's accuracy by name
ev = T("ev.json")
cli.run("evaluate", run_dir, "--json", ev, "-q")
last = open(os.path.join(run_dir, "metrics.csv")).read().strip().splitlines()[-1].split(",")
e = json.load(open(ev))
check(repr(e["loss"]) == repr(float(last[2])) and e.get("classes") == label_cats, f"evaluate {e} vs metrics.csv {last}")
cli.run("evaluate", run_dir, "--data", base, "--json", ev, "-q")
e = json.load(open(ev))
acc = sum(r[-1] == raw_label[i] for i, r in enumerate(got)) / N
check(e["accuracy"] == acc and e["rows"] == N, f"evaluate --data accuracy {e['accuracy']} != by predict's names {acc}")

# the PyTorch export on raw numbers (NaN where missing; string categories as their ids)
import torch  # noqa: E402
import importlib.util  # noqa: E402

cli.run("export", run_dir, "--format", "torch", "--out", T("torch"))
if cli.fails:
    sys.exit(cli.finish(""))
spec_py = importlib.util.spec_from_file_location("tab_export", T("torch", "model.py"))
mod = importlib.util.module_from_spec(spec_py)
spec_py.loader.exec_module(mod)
model = mod.Model()
state, _ = read_safetensors(T("torch", "state_dict.safetensors"))
model.load_state_dict({k: torch.from_numpy(v.copy()) for k, v in state.items()}, strict=True)
num_in = np.stack([raw_a, raw_b], 1)
make_in = np.array([[float(make_cats.index(m)) if m in make_cats else -1.0] for m in raw_make])
size_in = raw_size.reshape(-1, 1)
with torch.no_grad():
    T_out = model(torch.from_numpy(num_in), torch.from_numpy(make_in), torch.from_numpy(size_in)).numpy()
check(np.allclose(T_out, P, rtol=0, atol=1e-12), f"torch export vs predict: max {np.abs(T_out - P).max()}")

# the ONNX export (float64) in onnxruntime on the same raw numbers
onnx_dir = os.path.join(ROOT, "tools", "onnxrt", "node_modules", "onnxruntime-node")
if shutil.which("node") and os.path.isdir(onnx_dir):
    cli.run("export", run_dir, "--format", "onnx", "--dtype", "f64", "--out", T("m.onnx"))
    for name, a in (("num", num_in), ("make", make_in), ("size", size_in)):
        write_npy(T(name + ".npy"), a)
    r = subprocess.run(["node", os.path.join(ROOT, "tools", "onnxrt", "run.js"), T("m.onnx"),
                        *[f"{n}={T(n + '.npy')}" for n in ("num", "make", "size")]], capture_output=True, text=True)
    check(r.returncode == 0, f"onnxruntime: {r.stderr}")
    if r.returncode == 0:
        out = next(iter(json.loads(r.stdout).values()))
        O = np.array(out["data"]).reshape(out["dims"])
        check(np.allclose(O, P, rtol=0, atol=1e-12), f"onnx export vs predict: max {np.abs(O - P).max()}")
else:
    check(False, "tools/onnxrt/node_modules is missing (scripts/setup installs onnxruntime-node)")

# predict on new rows: a make never seen is a row of zeros ("unknown": "zeros"); the label is not needed
with open(T("new.csv"), "w") as f:
    f.write("a,b,make,size\n1.5,NA,Tesla,2\n?,-0.5,chrysler,\n")
cli.run("predict", run_dir, "--data", T("new.csv"), "--out", T("new_pred.csv"), "-q")
_, got = predict_csv(T("new_pred.csv"))
Xn = np.array([[(1.5 - means[0]) / stds[0], (fill_b - means[1]) / stds[1], 0.0, 1.0] + [0.0] * len(make_cats)
               + [1.0 if c == 2.0 else 0.0 for c in size_cats] + [0.0],
               [(fill_a - means[0]) / stds[0], (-0.5 - means[1]) / stds[1], 1.0, 0.0]
               + [1.0 if c == "chrysler" else 0.0 for c in make_cats] + [1.0 if c == size_fill else 0.0 for c in size_cats] + [1.0]])
Pn = np.array([[float(v) for v in r[:-1]] for r in got])
check(np.allclose(Pn, forward(Xn), rtol=0, atol=1e-12), f"new rows: predict vs by hand: {Pn} {forward(Xn)}")

# ---- 3. median, value fill, explicit categories as ids, threshold label, custom na_values -----
with open(T("t2.csv"), "w") as f:
    f.write("p\tq\tgrade\tscore\n")
    for i in range(40):
        p_ = "-" if i % 6 == 1 else repr(round(float(rng.normal()), 3))
        q_ = "missing" if i % 9 == 4 else repr(float(i % 5))
        grade = ["'low'", "'mid, or so'", "'high'"][i % 3]
        f.write(f"{p_}\t{q_}\t{grade}\t{i * 0.25}\n")
data2 = {"csv": "t2.csv", "delimiter": "\t", "quote": "'", "na_values": ["-", "missing"],
         "inputs": {"p": {"column": "p", "missing": "median", "standardize": True},
                    "q": {"column": "q", "missing": -1},
                    "g": {"column": "grade", "categories": ["low", "mid, or so", "high"], "encode": "ids"},
                    "t": {"column": "score", "threshold": 4.9}},
         "validation": 0.2}
graph2 = [{"id": "x1", "op": "concat", "inputs": ["p", "q"], "axis": 1},
          {"id": "x", "op": "concat", "inputs": ["x1", "g"], "axis": 1},
          {"id": "view", "op": "muls", "inputs": ["x"], "scalar": 1},
          {"id": "z", "layer": "dense", "inputs": ["x"], "units": 1},
          {"id": "l", "op": "bce_with_logits", "inputs": ["z", "t"]},
          {"id": "loss", "op": "mean", "inputs": ["l"]}]
sp2 = spec_file(T("t2.json"), data2, graph2, epochs=2, batch=8, seed=5)
cli.run("train", sp2, "--out", T("run2"), "--force", "-q")
sp2v = spec_file(T("t2v.json"), data2, graph2, epochs=2, batch=8, seed=5, predict={"output": "view"})
cli.run("predict", sp2v, "--weights", T("run2"), "--data", T("t2.csv"), "--out", T("t2_view.csv"), "-q")
lines = open(T("t2.csv")).read().splitlines()[1:]
cells = [l.split("\t") for l in lines]
tr, _ = split(40, 5, 0.2)
pv = np.array([float("nan") if c[0] == "-" else float(c[0]) for c in cells])
present = sorted(pv[r] for r in tr if not math.isnan(pv[r]))
med = present[len(present) // 2] if len(present) % 2 else (present[len(present) // 2 - 1] + present[len(present) // 2]) / 2
pf = np.where(np.isnan(pv), med, pv)
pm, ps = standardize(pf[tr].reshape(-1, 1))
qv = np.array([-1.0 if c[1] == "missing" else float(c[1]) for c in cells])
gv = np.array([["'low'", "'mid, or so'", "'high'"].index(c[2]) for c in cells], dtype=float)
want2 = np.stack([(pf - pm[0]) / ps[0], qv, gv], 1)
_, got = predict_csv(T("t2_view.csv"))
G2 = np.array([[float(v) for v in r] for r in got])
check(G2.shape == want2.shape and np.array_equal(G2, want2), f"median/value/ids view differs from by hand:\n{G2[:4]}\n{want2[:4]}")
prep2 = {i["name"]: i for i in json.load(open(T("run2", "run.json")))["preprocessing"]["inputs"]}
check(prep2["p"]["fill"] == [med] and prep2["q"]["fill"] == [-1] and prep2["t"]["threshold"] == 4.9 and
      prep2["g"]["encode"] == "ids", f"saved preprocessing: {prep2}")
check(prep2["t"]["row_shape"] == [1], "a threshold label is one 0/1 column")

# ---- the penguins example (specs/penguins.json): trained, predicted and exported on its raw table ---
pg_csv = os.path.join(ROOT, "datasets", "penguins.csv")
pg_run = T("run_penguins")
cli.run("train", os.path.join(ROOT, "specs", "penguins.json"), "--epochs", "5", "--out", pg_run, "-q")
cli.run("predict", pg_run, "--data", pg_csv, "--out", T("pg_pred.csv"), "-q")
with open(pg_csv, newline="") as f:
    pg_rows = list(csv.DictReader(f))
pg_prep = {i["name"]: i for i in json.load(open(os.path.join(pg_run, "run.json")))["preprocessing"]["inputs"]}
_, got = predict_csv(T("pg_pred.csv"))
check(len(got) == len(pg_rows) == 344 and {r[-1] for r in got} <= {"Adelie", "Chinstrap", "Gentoo"},
      f"penguins: predict's rows or class names: {len(got)} {got[:1]}")
na = lambda v: float("nan") if v == "NA" else float(v)  # noqa: E731
body = np.array([[na(r[c]) for c in ("bill_length_mm", "bill_depth_mm", "flipper_length_mm", "body_mass_g")] for r in pg_rows])
island = np.array([[float(pg_prep["island"]["categories"].index(r["island"]))] for r in pg_rows])
sex = np.array([[float("nan") if r["sex"] == "NA" else float(pg_prep["sex"]["categories"].index(r["sex"]))] for r in pg_rows])
check(np.isnan(body).any() and np.isnan(sex).any(), "penguins: the table has no missing cells")
cli.run("export", pg_run, "--format", "torch", "--out", T("pg_torch"))
spec_py = importlib.util.spec_from_file_location("pg_export", T("pg_torch", "model.py"))
mod = importlib.util.module_from_spec(spec_py)
spec_py.loader.exec_module(mod)
pg_model = mod.Model()
state, _ = read_safetensors(T("pg_torch", "state_dict.safetensors"))
pg_model.load_state_dict({k: torch.from_numpy(v.copy()) for k, v in state.items()}, strict=True)
with torch.no_grad():
    T_pg = pg_model(torch.from_numpy(body), torch.from_numpy(island), torch.from_numpy(sex)).numpy()
P_pg = np.array([[float(v) for v in r[:-1]] for r in got])
check(np.allclose(T_pg, P_pg, rtol=0, atol=1e-12), f"penguins: torch export vs predict: max {np.abs(T_pg - P_pg).max()}")
check([r[-1] for r in got] == [["Adelie", "Chinstrap", "Gentoo"][int(k)] for k in np.argmax(T_pg, 1)],
      "penguins: predict's class names differ from the export's argmax")

# ---- 4. errors name the place ----------------------------------------------------------------
with open(T("nolabel.csv"), "w") as f:
    f.write("a,b,make,size,label\n1,2,ford,1,yes\n2,3,ford,2,NA\n")
sp = spec_file(T("nolabel.json"), {"csv": "nolabel.csv", "inputs": DATA_INPUTS}, GRAPH, metrics=METRICS, batch=1)
p = cli.run("train", sp, "--out", T("r_nolabel"), code=2)
check('nolabel.csv: line 3, column "label"' in p.stderr and "cannot be missing" in p.stderr and len(p.stderr.splitlines()) == 1,
      f"a missing label:\n{p.stderr}")

bad = dict(DATA_INPUTS, y={"column": "label", "categories": "auto", "missing": "most_frequent"})
sp = spec_file(T("fill_label.json"), {"csv": "comma.csv", "inputs": bad}, GRAPH, metrics=METRICS)
p = cli.run("train", sp, "--out", T("r_fl"), code=2)
check("/data/inputs/y/missing" in p.stderr and "is a label" in p.stderr, f"a fill on a label:\n{p.stderr}")

strict = dict(DATA_INPUTS, make={"column": "make", "categories": "auto"})
sp = spec_file(T("strict.json"), {"csv": "comma.csv", "inputs": strict, "validation": VAL}, GRAPH, metrics=METRICS, epochs=1)
cli.run("train", sp, "--out", T("r_strict"), "--force", "-q")
p = cli.run("predict", T("r_strict"), "--data", T("new.csv"), "--out", T("never.csv"), code=2)
check('new.csv: line 2, column "make": "Tesla" is not one of the' in p.stderr and "unknown" in p.stderr and
      not os.path.exists(T("never.csv")), f"an unknown category:\n{p.stderr}")

sp = spec_file(T("delim.json"), {"csv": "comma.csv", "delimiter": ":", "inputs": DATA_INPUTS}, GRAPH, metrics=METRICS)
p = cli.run("train", sp, "--out", T("r_d"), code=2)
check("/data/delimiter" in p.stderr and "unknown delimiter" in p.stderr, f"an unknown delimiter:\n{p.stderr}")

plain = dict(DATA_INPUTS, num={"columns": ["a", "b"], "standardize": True})
sp = spec_file(T("plain.json"), {"csv": "comma.csv", "inputs": plain}, GRAPH, metrics=METRICS)
p = cli.run("train", sp, "--out", T("r_p"), code=2)
first_missing = next(i for i in range(N) if math.isnan(raw_a[i]) or math.isnan(raw_b[i]))
check(f"comma.csv: line {first_missing + 2}, column" in p.stderr and 'set "missing" on input "num"' in p.stderr,
      f"a missing cell without a policy:\n{p.stderr}")

if not cli.fails: shutil.rmtree(tmp, ignore_errors=True)
sys.exit(cli.finish("tabular: dialects, missing values, categories, predict/evaluate/exports on raw rows: ok"))
