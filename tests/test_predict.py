#!/usr/bin/env python3
"""gradrun predict / evaluate end to end on the classifier examples, iris and digits (docs/use-a-model.md).

usage: test_predict.py GRADRUN   (run from the repository root)

- evaluate on the run's validation rows equals the last line of metrics.csv bit for bit;
- predict on the training CSV reproduces the accuracy evaluate reports on the same file;
- predict gives the same bytes for several batch sizes (with a partial last batch), on the CPU tape
  and on the device replay engine (--device host), and for the same rows as CSV or as a .npy tensor;
- a CSV missing a column, a tensor of the wrong width, weights of another model and a bad
  "predict" key exit 2 with one located line and write nothing.
"""
import json
import os
import shutil
import struct
import subprocess
import sys
import tempfile

GR = os.path.abspath(sys.argv[1])
SPEC = "specs/iris.json"
CSV = "datasets/iris.csv"
fails = []


def run(*args, code=0):
    p = subprocess.run([GR, *args], capture_output=True, text=True)
    if p.returncode != code:
        fails.append(f"{' '.join(args)}: exit {p.returncode}, wanted {code}\n{p.stderr}")
    return p


def check(cond, what):
    if not cond:
        fails.append(what)


def same(a, b):  # bit equality of two doubles
    return struct.pack("<d", a) == struct.pack("<d", b)


def write_npy(path, rows):
    header = "{'descr': '<f8', 'fortran_order': False, 'shape': (%d, %d), }" % (len(rows), len(rows[0]))
    header += " " * ((64 - (10 + len(header) + 1) % 64) % 64) + "\n"
    with open(path, "wb") as f:
        f.write(b"\x93NUMPY\x01\x00" + struct.pack("<H", len(header)) + header.encode())
        for r in rows:
            f.write(struct.pack("<%dd" % len(r), *r))


tmp = tempfile.mkdtemp(prefix="gr_predict_")
run_dir = os.path.join(tmp, "run")
run("train", SPEC, "--epochs", "6", "--out", run_dir, "-q")

# The preprocessing is saved in run.json and in the weights' metadata, identically.
run_json = json.load(open(os.path.join(run_dir, "run.json")))
prep = run_json["preprocessing"]
check([i["name"] for i in prep["inputs"]] == ["x", "y"], f"preprocessing inputs: {prep}")
check(len(prep["inputs"][0]["mean"]) == 4 and prep["inputs"][1]["one_hot_classes"] == ["0", "1", "2"], f"preprocessing: {prep}")
with open(os.path.join(run_dir, "weights.safetensors"), "rb") as f:
    n = struct.unpack("<Q", f.read(8))[0]
    meta = json.loads(f.read(n))["__metadata__"]
check(json.loads(meta["gradrun.preprocessing"]) == prep, "weights metadata and run.json preprocessing differ")

def classifier_checks(spec_path, run_dir, label_column, batches):
    """evaluate == metrics.csv; predict's accuracy == evaluate's on the training CSV; batch-independent bytes."""
    spec = json.load(open(spec_path))
    csv = os.path.normpath(os.path.join(os.path.dirname(spec_path), spec["data"]["csv"]))
    ev = os.path.join(tmp, "ev.json")
    run("evaluate", spec_path, "--weights", run_dir, "--json", ev, "-q")
    last = open(os.path.join(run_dir, "metrics.csv")).read().strip().splitlines()[-1].split(",")
    e = json.load(open(ev))
    check(same(e["loss"], float(last[2])), f"{spec_path}: evaluate loss {e['loss']!r} != metrics.csv val_loss {last[2]}")
    check(same(e["accuracy"], float(last[3])), f"{spec_path}: evaluate accuracy {e['accuracy']!r} != val_accuracy {last[3]}")
    ev_all = os.path.join(tmp, "ev_all.json")
    run("evaluate", spec_path, "--weights", os.path.join(run_dir, "weights.safetensors"), "--data", csv, "--json", ev_all, "-q")
    outs = {}
    for b in batches:
        outs[b] = os.path.join(tmp, f"pred_{b}.csv")
        run("predict", spec_path, "--weights", run_dir, "--data", csv, "--out", outs[b], "--batch", b, "-q")
    text = open(outs[batches[0]]).read()
    lines = text.strip().splitlines()
    width = len(lines[0].split(",")) - 1
    check(lines[0] == ",".join([f"logits_{j}" for j in range(width)] + ["class"]), f"header {lines[0]}")
    data = open(csv).read().strip().splitlines()
    col = data[0].split(",").index(label_column)
    labels = [int(float(r.split(",")[col])) for r in data[1:]]
    classes = [int(r.split(",")[-1]) for r in lines[1:]]
    check(len(classes) == len(labels), f"{spec_path}: {len(classes)} prediction rows for {len(labels)} data rows")
    acc = sum(c == y for c, y in zip(classes, labels)) / len(labels)
    want = json.load(open(ev_all))["accuracy"]
    check(same(acc, want), f"{spec_path}: predict accuracy {acc!r} != evaluate {want!r}")
    for row in lines[1:]:
        check(abs(sum(float(v) for v in row.split(",")[:-1]) - 1) < 1e-12, f"softmax row does not sum to 1: {row}")
    for b in batches[1:]:
        check(open(outs[b]).read() == text, f"{spec_path}: predict --batch {b} differs from --batch {batches[0]}")
    host = os.path.join(tmp, "pred_host.csv")  # the device replay engine on the host backend, last batch padded
    run("predict", spec_path, "--weights", run_dir, "--data", csv, "--out", host, "--device", "host", "-q")
    check(os.path.exists(host) and open(host).read() == text, f"{spec_path}: predict --device host differs from the CPU tape")
    print(f"{spec_path}: evaluate == metrics.csv (loss {e['loss']!r}, accuracy {e['accuracy']!r}); "
          f"predict accuracy {acc!r} == evaluate on {len(labels)} rows; batches {batches} and --device host identical")
    return text


text = classifier_checks(SPEC, run_dir, "species", ["30", "7", "150"])
digits_run = os.path.join(tmp, "digits")
run("train", "specs/digits.json", "--epochs", "2", "--out", digits_run, "-q")
classifier_checks("specs/digits.json", digits_run, "digit", ["64", "13", "1797"])

# The same rows as a tensor file give the same bytes.
feats = [[float(v) for v in r.split(",")[:4]] for r in open(CSV).read().strip().splitlines()[1:]]
npy = os.path.join(tmp, "x.npy")
write_npy(npy, feats)
out_npy = os.path.join(tmp, "pred_npy.csv")
run("predict", SPEC, "--weights", run_dir, "--data", npy, "--out", out_npy, "-q")
check(os.path.exists(out_npy) and open(out_npy).read() == text, "predict on x.npy differs from the CSV")


def refused(what, *args):
    out = os.path.join(tmp, "refused.csv")
    p = run(*args, "--out", out, code=2)
    err = p.stderr.strip().splitlines()
    check(len(err) == 1 and ": " in err[0], f"{what}: want one located line, got {p.stderr!r}")
    check(not os.path.exists(out), f"{what}: wrote {out}")


missing = os.path.join(tmp, "missing.csv")
with open(missing, "w") as f:
    for r in open(CSV).read().strip().splitlines():
        f.write(",".join(r.split(",")[:3] + r.split(",")[4:]) + "\n")  # no petal_width
refused("missing column", "predict", SPEC, "--weights", run_dir, "--data", missing)
wide = os.path.join(tmp, "x.npy")
write_npy(wide, [r + [0.0] for r in feats])
refused("wrong width", "predict", SPEC, "--weights", run_dir, "--data", wide)
other = os.path.join(tmp, "other.json")
spec = json.load(open(SPEC))
spec["data"]["csv"] = os.path.abspath(CSV)
spec["seed"] = 7  # not part of the model: these weights serve a spec that differs only there
json.dump(spec, open(other, "w"))
run("predict", other, "--weights", run_dir, "--data", CSV, "--out", os.path.join(tmp, "seed7.csv"), "--quiet")
spec["data"]["inputs"]["x"]["standardize"] = False  # another model: its inputs are read differently
json.dump(spec, open(other, "w"))
refused("another model's weights", "predict", other, "--weights", run_dir, "--data", CSV)
spec["data"]["inputs"]["x"]["standardize"] = True
spec["predict"] = {"output": "nope"}
json.dump(spec, open(other, "w"))
p = run("inspect", other, code=2)
check("/predict/output" in p.stderr, f"bad predict key: {p.stderr!r}")

shutil.rmtree(tmp)
if fails:
    print("FAILED:\n" + "\n".join(fails))
    sys.exit(1)
print("ok")
