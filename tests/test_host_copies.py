#!/usr/bin/python3
"""Host copies of consts and frozen parameters on device runs, through the CLI (issue 18 item 4).

    /usr/bin/python3 tests/test_host_copies.py GRADRUN

A fine-tune whose base dominates: a 256x256 const "mix" from a safetensors file, a frozen
256-256 tanh trunk from .npy files, and a small trainable 4-way head, with a validation split and
an accuracy metric, so every epoch evaluates on the CPU tape between device episodes. A device run
drops the host copies of mix and the trunk's W after the capture and downloads them back for each
evaluation and for the files. Checked:
- --device host, host --fuse and host under the adversarial schedule say they dropped them
  (two 512 KiB blocks), the CPU tape does not; an f32 host run drops them too and its files are
  the f32 CPU tape's bytes, its trunk the file's values rounded to float (NumPy's rounding);
- loss.csv, metrics.csv (less seconds) and every weight tensor are the CPU tape's bytes on each
  device path: a restore that brought back other bytes (or none) moves val_loss and the head;
- the frozen trunk in weights.safetensors is the .npy file's bytes (an oracle outside gradrun);
- inspect names what a device run keeps on the device only (count and size);
- 2 epochs + --resume to 4 on the host device = 4 epochs straight, byte for byte;
- train.shards 2 (the sharded step, one process) on the host device = on the CPU tape.
"""
import json
import os
import sys
import tempfile

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "tests", "support"))
from cli_support import Cli, read, tensors, write_safetensors  # noqa: E402

cli = Cli(sys.argv[1])
check, run = cli.check, cli.run
read_tensors = tensors
DROP_LINE = "host copies of consts and frozen parameters dropped"


def metrics_less_seconds(out):
    rows = [r.split(",") for r in read(os.path.join(out, "metrics.csv")).decode().splitlines()]
    at = rows[0].index("seconds")
    return [r[:at] + r[at + 1:] for r in rows]


def main():
    d = tempfile.mkdtemp(prefix="gr_host_copies_")
    rng = np.random.default_rng(11)
    x = rng.normal(size=(96, 256))
    y = np.eye(4)[rng.integers(0, 4, size=96)]
    np.savez(os.path.join(d, "data.npz"), x=x, y=y)
    write_safetensors(os.path.join(d, "base.safetensors"), {"mix": ("F64", rng.normal(size=(256, 256)) / 16.0)})
    trunk_w = rng.normal(size=(256, 256)) / 16.0
    np.save(os.path.join(d, "trunk_w.npy"), trunk_w)
    np.save(os.path.join(d, "trunk_b.npy"), rng.normal(size=256) * 0.1)
    spec = {
        "gradrun": 1, "name": "host-copies", "seed": 4,
        "data": {"npz": "data.npz", "inputs": {"x": {"tensor": "x"}, "y": {"tensor": "y"}}, "validation": 0.25},
        "consts": {"mix": {"file": "base.safetensors", "tensor": "mix"}},
        "graph": [
            {"id": "h", "op": "matmul", "inputs": ["x", "mix"]},
            {"id": "trunk", "layer": "dense", "inputs": ["h"], "units": 256, "activation": "tanh", "trainable": False,
             "init": {"W": {"file": "trunk_w.npy"}, "b": {"file": "trunk_b.npy"}}},
            {"id": "logits", "layer": "dense", "inputs": ["trunk"], "units": 4},
            {"id": "loss", "op": "softmax_cross_entropy", "inputs": ["logits", "y"]},
        ],
        "loss": "loss",
        "optimizer": {"kind": "adam", "lr": 0.01},
        "train": {"epochs": 4, "batch_size": 24, "shuffle": True, "drop_last": True},
        "metrics": {"accuracy": {"logits": "logits", "labels": "y"}},
    }
    path = os.path.join(d, "spec.json")
    json.dump(spec, open(path, "w"), indent=1)

    def train(name, *extra, env=None):
        out = os.path.join(d, name)
        p = run("train", path, "--out", out, "--force", *extra, env=env)
        return out, p.stderr

    p = run("inspect", path)
    check("device runs keep 2 const / frozen tensor(s) of 1.0 MiB on the device only" in p.stdout,
          "inspect does not say which host copies a device run drops:\n" + p.stdout)
    small = dict(spec, consts={}, graph=[dict(spec["graph"][1], inputs=["x"])] + spec["graph"][2:])
    small_path = os.path.join(d, "small.json")
    json.dump(small, open(small_path, "w"))
    p = run("inspect", small_path)  # the trunk's W [256,256] alone: one tensor of 512 KiB (human_bytes: 524288 bytes)
    check("keep 1 const / frozen tensor(s) of 524288 bytes" in p.stdout, "inspect, trunk only:\n" + p.stdout)

    cpu, cpu_err = train("cpu")
    check(DROP_LINE not in cpu_err, "the CPU tape has nothing to drop, yet said so:\n" + cpu_err)
    ref_w = read_tensors(os.path.join(cpu, "weights.safetensors"))
    check(ref_w.get("trunk.W") == np.ascontiguousarray(trunk_w, dtype="<f8").tobytes(),
          "the frozen trunk in the CPU run's weights is not trunk_w.npy's bytes")
    adversarial = dict(os.environ, GR_HOST_SCHEDULE="adversarial:1")
    for name, extra, env in [("host", ["--device", "host"], None), ("fused", ["--device", "host", "--fuse"], None),
                             ("adversarial", ["--device", "host"], adversarial)]:
        out, err = train(name, *extra, env=env)
        check(DROP_LINE in err and "(1.0 MiB)" in err,
              f"{name}: no line saying the two 512 KiB host copies were dropped:\n{err}")
        check(read(os.path.join(out, "loss.csv")) == read(os.path.join(cpu, "loss.csv")),
              f"{name}: loss.csv differs from the CPU tape's")
        check(metrics_less_seconds(out) == metrics_less_seconds(cpu),
              f"{name}: metrics.csv (val_loss, accuracies) differs from the CPU tape's")
        w = read_tensors(os.path.join(out, "weights.safetensors"))
        for k in ref_w:
            check(w.get(k) == ref_w[k], f"{name}: weight {k} differs from the CPU tape's")

    # Resume on the device: the checkpoint is written from restored copies, the resumed run drops again.
    half, _ = train("half", "--device", "host", "--epochs", "2")
    p = run("train", path, "--resume", half, "--device", "host", "--epochs", "4")
    check(DROP_LINE in p.stderr, "the resumed device run did not drop its host copies:\n" + p.stderr)
    check(read(os.path.join(half, "loss.csv")) == read(os.path.join(cpu, "loss.csv")),
          "2 epochs + resume to 4 on the host device: loss.csv differs from 4 straight")
    check(read_tensors(os.path.join(half, "weights.safetensors")) == ref_w,
          "2 epochs + resume to 4 on the host device: the weights differ from 4 straight")

    # The sharded step (train.shards, one process) on the device drops and restores the same way.
    scpu, _ = train("shards-cpu", "--set", "/train/shards=2")
    shost, err = train("shards-host", "--set", "/train/shards=2", "--device", "host")
    check(DROP_LINE in err, "the sharded step on the host device did not drop its host copies:\n" + err)
    check(read(os.path.join(shost, "loss.csv")) == read(os.path.join(scpu, "loss.csv"))
          and metrics_less_seconds(shost) == metrics_less_seconds(scpu)
          and read_tensors(os.path.join(shost, "weights.safetensors")) == read_tensors(os.path.join(scpu, "weights.safetensors")),
          "shards 2: the host device's files differ from the CPU tape's")

    # f32: the tape holds floats from the start, so the device's float copies widen back exactly.
    f32cpu, _ = train("f32-cpu", "--device", "cpu", "--dtype", "f32")
    f32, err = train("f32", "--device", "host", "--dtype", "f32")
    check(DROP_LINE in err, "an f32 device run did not drop its host copies:\n" + err)
    check(read(os.path.join(f32, "loss.csv")) == read(os.path.join(f32cpu, "loss.csv"))
          and metrics_less_seconds(f32) == metrics_less_seconds(f32cpu)
          and read_tensors(os.path.join(f32, "weights.safetensors")) == read_tensors(os.path.join(f32cpu, "weights.safetensors")),
          "f32: the host device's files differ from the f32 CPU tape's")
    want = np.frombuffer(ref_w["trunk.W"], dtype="<f8").astype(np.float32).astype("<f8").tobytes()
    check(read_tensors(os.path.join(f32, "weights.safetensors")).get("trunk.W") == want,
          "f32: the frozen trunk is not the file's values rounded to float")

    return cli.finish("ok test_host_copies: cpu, host, host --fuse, adversarial, resume, shards and f32 agree; "
                      "the trunk is the file's bytes")


if __name__ == "__main__":
    sys.exit(main())
