#!/usr/bin/python3
"""SGD momentum / Nesterov and AdamW through the CLI (issue 16 item 3): every path, resume, errors.

    /usr/bin/python3 tests/test_optimizers_cli.py GRADRUN

tests/test_optimizer.cpp checks the trajectories against hand-written loops; this checks that the
spec reaches them and that the device optimizer (its kernels share kernels/gr_optim.h) lands on
the CPU tape's bytes: for each optimizer an iris MLP trains to the same loss.csv and weights on the
CPU tape, --device host and --fuse; 3 epochs + --resume to 6 equals 6 straight (the momentum
buffer travels in the checkpoint); each differs from plain SGD/Adam; bad settings are located
errors (exit 2); a scalar l2 decays dense weights only. Standard library only.
"""
import json
import os
import struct
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
GR = sys.argv[1]
fails = []


def check(ok, what):
    if not ok:
        fails.append(what)


def spec(opt):
    return {"gradrun": 1, "name": "opt", "seed": 9,
            "data": {"csv": os.path.join(ROOT, "datasets/iris.csv"),
                     "inputs": {"x": {"columns": ["sepal_length", "sepal_width", "petal_length", "petal_width"], "standardize": True},
                                "y": {"column": "species", "one_hot": 3}}, "validation": 0.2},
            "graph": [{"id": "h", "layer": "dense", "inputs": ["x"], "units": 16, "activation": "tanh"},
                      {"id": "logits", "layer": "dense", "inputs": ["h"], "units": 3},
                      {"id": "loss", "op": "softmax_cross_entropy", "inputs": ["logits", "y"]}],
            "loss": "loss", "optimizer": opt, "train": {"epochs": 6, "batch_size": 20}}


def train(tmp, name, s, *extra, code=0):
    path = os.path.join(tmp, name + ".json")
    json.dump(s, open(path, "w"))
    out = os.path.join(tmp, name)
    p = subprocess.run([GR, "train", path, "--out", out, "--force", "--quiet", *extra], capture_output=True, text=True)
    if p.returncode != code:
        fails.append(f"{name} {' '.join(extra)}: exit {p.returncode}, wanted {code}: {p.stderr.strip()}")
    return out, p


def read(out, f):
    return open(os.path.join(out, f), "rb").read()


def tensors(path):
    data = open(path, "rb").read()
    n = struct.unpack("<Q", data[:8])[0]
    header = json.loads(data[8:8 + n])
    header.pop("__metadata__", None)
    return header, data[8 + n:]


def main():
    with tempfile.TemporaryDirectory(prefix="gradrun-opt-") as tmp:
        base = {"sgd": train(tmp, "sgd", spec({"kind": "sgd", "lr": 0.1}))[0],
                "adam": train(tmp, "adam", spec({"kind": "adam", "lr": 0.01}))[0]}
        for name, opt, plain in (("momentum", {"kind": "sgd", "lr": 0.05, "momentum": 0.9}, None),
                                 ("nesterov", {"kind": "sgd", "lr": 0.05, "momentum": 0.9, "nesterov": True}, None),
                                 ("sgd-m0", {"kind": "sgd", "lr": 0.1, "momentum": 0.0}, "sgd"),
                                 ("adamw", {"kind": "adamw", "lr": 0.01, "weight_decay": 0.1}, None),
                                 ("adamw-wd0", {"kind": "adamw", "lr": 0.01, "weight_decay": 0.0}, "adam")):
            out, _ = train(tmp, name, spec(opt))
            if plain:  # momentum 0 / weight_decay 0: the plain optimizer's bytes
                check(read(out, "loss.csv") == read(base[plain], "loss.csv"), f"{name}: differs from plain {plain}")
                continue
            check(read(out, "loss.csv") != read(base["sgd"], "loss.csv") and read(out, "loss.csv") != read(base["adam"], "loss.csv"),
                  f"{name}: the same losses as a plain optimizer")
            for extra in (["--device", "host"], ["--device", "host", "--fuse"]):
                o2, _ = train(tmp, name + "-" + extra[-1].strip("-"), spec(opt), *extra)
                check(read(o2, "loss.csv") == read(out, "loss.csv"), f"{name} {' '.join(extra)}: loss.csv differs from the CPU tape")
                check(tensors(os.path.join(o2, "weights.safetensors")) == tensors(os.path.join(out, "weights.safetensors")),
                      f"{name} {' '.join(extra)}: weights differ from the CPU tape")
            r, _ = train(tmp, name + "-resumed", spec(opt), "--epochs", "3")
            p = subprocess.run([GR, "train", os.path.join(tmp, name + "-resumed.json"), "--resume", r, "--epochs", "6", "--quiet"],
                               capture_output=True, text=True)
            check(p.returncode == 0, f"{name}: resume: {p.stderr}")
            check(read(r, "loss.csv") == read(out, "loss.csv"), f"{name}: 3 epochs + resume differs from 6 straight")

        # a scalar l2 decays dense weights, not dense biases: the run equals the per-name dict
        # naming only the weights, byte for byte, and differs from one that also names the biases
        scalar, _ = train(tmp, "l2-scalar", spec({"kind": "adam", "lr": 0.01, "l2": 0.05}))
        weights, _ = train(tmp, "l2-weights", spec({"kind": "adam", "lr": 0.01, "l2": {"h.W": 0.05, "logits.W": 0.05}}))
        both, _ = train(tmp, "l2-all", spec({"kind": "adam", "lr": 0.01,
                                             "l2": {"h.W": 0.05, "logits.W": 0.05, "h.b": 0.05, "logits.b": 0.05}}))
        check(read(scalar, "loss.csv") == read(weights, "loss.csv"), "scalar l2: not the run of l2 on the dense weights only")
        check(read(scalar, "loss.csv") != read(both, "loss.csv"), "scalar l2: the biases' decay makes no difference here")

        for name, opt, pointer in (("m-adam", {"kind": "adam", "momentum": 0.9}, "/optimizer/momentum"),
                                   ("nesterov0", {"kind": "sgd", "nesterov": True}, "/optimizer/nesterov"),
                                   ("wd-adam", {"kind": "adam", "weight_decay": 0.1}, "/optimizer/weight_decay"),
                                   ("m-range", {"kind": "sgd", "momentum": 1.5}, "/optimizer/momentum"),
                                   ("kind", {"kind": "adamax"}, "/optimizer/kind")):
            _, p = train(tmp, "bad-" + name, spec(opt), code=2)
            check(pointer in p.stderr and len(p.stderr.splitlines()) == 1, f"bad {name}: {p.stderr!r}")

    if fails:
        print("optimizers: FAILED\n  " + "\n  ".join(fails))
        return 1
    print("optimizers: ok")
    return 0


if __name__ == "__main__":
    sys.exit(main())
