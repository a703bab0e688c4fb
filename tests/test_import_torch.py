#!/usr/bin/python3
"""`gradrun import-torch` (issue 18 item 3): PyTorch state_dicts as --init files.

    /usr/bin/python3 tests/test_import_torch.py GRADRUN

- Round trip gradrun -> PyTorch -> gradrun: `export --format torch` writes state_dict.safetensors
  (plain parameters under their names, dense layers as nn.Linear [out, in]); importing it gives
  exactly the trained weights' bytes (iris: plain params; moons: dense layers, transposed back), and
  a run started from the import equals a run started from the weights file, byte for byte.
- PyTorch-native: an nn.Sequential in float32 (keys 0.weight, 0.bias, ...) mapped with --map and :T
  imports as the float32 values widened exactly; gradrun's prediction with those weights equals
  torch's float64 forward within 1e-12.
- Partial import: an unmapped head keeps the spec's init (the bytes of a run's init.safetensors).
- Errors: an unknown parameter, a missing tensor, a shape that needs :T (the hint), a bad --map
  item: exit 2, one line. numpy and torch only (the safetensors files are written by hand).
"""
import csv
import json
import os
import struct
import sys
import tempfile

import numpy as np
import torch

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
GR = sys.argv[1]
sys.path.insert(0, os.path.join(ROOT, "tests", "support"))
from cli_support import Cli, read, tensors  # noqa: E402

cli = Cli(GR)
check, run, fails = cli.check, cli.run, cli.fails


def save_safetensors(path, named):
    """named: [(name, float32/float64 numpy array)] -> a safetensors file (the format by hand)."""
    header, blobs, off = {}, [], 0
    for name, a in named:
        a = np.ascontiguousarray(a)
        dt = {np.dtype("float32"): "F32", np.dtype("float64"): "F64"}[a.dtype]
        b = a.astype(a.dtype.newbyteorder("<")).tobytes()
        header[name] = {"dtype": dt, "shape": list(a.shape), "data_offsets": [off, off + len(b)]}
        blobs.append(b)
        off += len(b)
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * (-len(h) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + b"".join(blobs))


def main():
    with tempfile.TemporaryDirectory(prefix="gradrun-import-") as tmp:
        # round trips through export --format torch
        for name, epochs in (("iris", "4"), ("moons", "3")):
            spec = os.path.join(ROOT, "specs", name + ".json")
            out = os.path.join(tmp, name)
            run("train", spec, "--out", out, "--epochs", epochs, "--quiet")
            exp = os.path.join(tmp, name + "-torch")
            run("export", spec, "--weights", out, "--which", "final", "--format", "torch", "--out", exp)
            init = os.path.join(tmp, name + "-init.safetensors")
            p = run("import-torch", os.path.join(exp, "state_dict.safetensors"), "--spec", spec, "--out", init)
            check("from the spec's init" not in p.stdout or " 0 from the spec's init" in p.stdout,
                  f"{name}: some parameters were not imported:\n{p.stdout}")
            if os.path.exists(init):
                check(tensors(init) == tensors(os.path.join(out, "weights.safetensors")),
                      f"{name}: the imported parameters differ from the trained weights")
            a, b = os.path.join(tmp, name + "-from-import"), os.path.join(tmp, name + "-from-weights")
            run("train", spec, "--out", a, "--epochs", "2", "--quiet", "--init", init)
            run("train", spec, "--out", b, "--epochs", "2", "--quiet", "--init", os.path.join(out, "weights.safetensors"))
            if os.path.exists(os.path.join(a, "loss.csv")) and os.path.exists(os.path.join(b, "loss.csv")):
                check(read(os.path.join(a, "loss.csv")) == read(os.path.join(b, "loss.csv")),
                      f"{name}: a run from the import differs from a run from the weights")

        # a PyTorch-native model in float32
        torch.manual_seed(0)
        net = torch.nn.Sequential(torch.nn.Linear(4, 16), torch.nn.ReLU(), torch.nn.Linear(16, 3))
        sd = {k: v.detach().numpy().astype(np.float32) for k, v in net.state_dict().items()}
        sd_path = os.path.join(tmp, "torch.safetensors")
        save_safetensors(sd_path, list(sd.items()) + [("unused.buffer", np.zeros(2, np.float32))])
        spec = os.path.join(ROOT, "specs", "iris.json")
        init = os.path.join(tmp, "native.safetensors")
        p = run("import-torch", sd_path, "--spec", spec, "--map", "0.weight=W1:T,0.bias=b1", "--map", "2.weight=W2:T, 2.bias=b2",
                "--out", init)
        check("unused.buffer" in p.stdout, f"the unused tensor is not reported:\n{p.stdout}")
        if os.path.exists(init):
            got = {k: np.frombuffer(v, dtype="<f8") for k, v in tensors(init).items()}
            want = {"W1": sd["0.weight"].T, "b1": sd["0.bias"], "W2": sd["2.weight"].T, "b2": sd["2.bias"]}
            for k, v in want.items():
                check(np.array_equal(got[k], v.astype(np.float64).ravel()), f"native import: {k} is not the float32 values widened")
            # gradrun's prediction with those weights (a spec without standardization, so torch sees the
            # same inputs) against torch's float64 forward of the same (widened) weights
            raw = json.load(open(spec))
            raw["data"]["csv"] = os.path.join(ROOT, "datasets", "iris.csv")
            raw["data"]["inputs"]["x"].pop("standardize", None)
            raw_spec = os.path.join(tmp, "iris-raw.json")
            json.dump(raw, open(raw_spec, "w"))
            init_raw = os.path.join(tmp, "native-raw.safetensors")
            run("import-torch", sd_path, "--spec", raw_spec, "--map", "0.weight=W1:T,0.bias=b1,2.weight=W2:T,2.bias=b2",
                "--out", init_raw)
            run_dir = os.path.join(tmp, "native-run")
            run("train", raw_spec, "--out", run_dir, "--epochs", "1", "--quiet", "--init", init_raw,
                "--set", "optimizer.lr=1e-300", "--set", "optimizer.l2=0")
            pred = os.path.join(tmp, "native-pred.csv")
            iris = os.path.join(ROOT, "datasets", "iris.csv")
            run("predict", raw_spec, "--weights", run_dir, "--data", iris, "--out", pred,
                "--set", "optimizer.lr=1e-300", "--set", "optimizer.l2=0")  # the spec the weights were trained from
            if os.path.exists(pred):
                rows = list(csv.DictReader(open(iris)))
                x = torch.tensor([[float(r[c]) for c in ("sepal_length", "sepal_width", "petal_length", "petal_width")]
                                  for r in rows], dtype=torch.float64)
                net64 = net.double()
                with torch.no_grad():
                    for k, v in net64.state_dict().items():
                        v.copy_(torch.tensor(sd[k].astype(np.float64)))
                    want_p = torch.softmax(net64(x), dim=-1).numpy()
                got_p = np.array([[float(v) for k, v in r.items() if k.startswith("logits_")] for r in csv.DictReader(open(pred))])
                check(got_p.shape == want_p.shape and np.abs(got_p - want_p).max() <= 1e-12,
                      f"native import: gradrun's predictions differ from torch's forward: {np.abs(got_p - want_p).max() if got_p.shape == want_p.shape else got_p.shape}")

        # errors: exit 2, one line
        for args, words in (
            (["--map", "0.weight=nope"], ["nope", "W1"]),
            (["--map", "missing.weight=W1:T"], ["missing.weight"]),
            (["--map", "0.weight=W1"], [":T"]),
            (["--map", "0.weight"], ["TORCH_NAME=PARAM"]),
        ):
            p = run("import-torch", sd_path, "--spec", spec, "--out", os.path.join(tmp, "bad.safetensors"), *args, code=2)
            lines = p.stderr.strip().splitlines()
            check(len(lines) == 1 and all(w in lines[0] for w in words), f"import-torch {args}: wanted one line with {words}, got {p.stderr!r}")
            check(not os.path.exists(os.path.join(tmp, "bad.safetensors")), f"import-torch {args}: wrote a file")

        # partial: only the trunk; the head keeps the spec's init (a run's init.safetensors)
        init = os.path.join(tmp, "partial.safetensors")
        p = run("import-torch", sd_path, "--spec", spec, "--map", "0.weight=W1:T,0.bias=b1", "--out", init)
        check("W2 <- the spec's init" in p.stdout and "b2 <- the spec's init" in p.stdout, f"partial import:\n{p.stdout}")
        fresh = os.path.join(tmp, "iris")  # trained above from the spec's init
        if os.path.exists(init):
            t, f0 = tensors(init), tensors(os.path.join(fresh, "init.safetensors"))
            check(t["W2"] == f0["W2"] and t["b2"] == f0["b2"], "partial import: the head is not the spec's init")

    return cli.finish("import-torch: round trips land on the trained bytes; torch float32 widens exactly; partial and errors ok")


if __name__ == "__main__":
    sys.exit(main())
