#!/usr/bin/python3
"""f32 on every engine, through the CLI (issue 15 item 2).

    /usr/bin/python3 tests/test_f32_cli.py GRADRUN

Every example spec trains 2 epochs with --dtype f32 on the CPU tape, on --device host, on
--device host --fuse and with --device auto (no CUDA here: the CPU tape). Checked:
- loss.csv, metrics.csv (less seconds) and every weight tensor are the same bytes on each path;
- every weight, loss and the init file's values are floats (x == float32(x), checked with NumPy,
  outside gradrun): the run really computed in float, and rounded what it was given;
- the f32 loss curve is within 2e-5 relative of the f64 run's (step 1) and not equal to it — the
  outside check that the float arithmetic is right, not only the same on every path;
- 2 f32 epochs + --resume to 3 on --device host = 3 f32 epochs straight on the CPU tape, byte for
  byte; resuming an f32 run without --dtype f32 is refused (exit 2), as its bits would change;
- evaluate on an f32 run's weights computes in f32: its loss is the last val_loss of metrics.csv;
  predict on the CPU tape and on --device host write the same bytes;
- --dtype f32 with train.shards is refused with exit 2 (the sharded step is f64).
"""
import json
import os
import sys
import tempfile

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "tests", "support"))
from cli_support import Cli, read, tensors  # noqa: E402

cli = Cli(sys.argv[1])
check, run = cli.check, cli.run
EXAMPLES = ["xor", "linreg", "iris", "moons", "diabetes", "digits", "digits-autoencoder", "attention"]


def metrics_less_seconds(out):
    rows = [r.split(",") for r in read(os.path.join(out, "metrics.csv")).decode().splitlines()]
    at = rows[0].index("seconds")
    return [r[:at] + r[at + 1:] for r in rows]


def losses(out):
    return [float(r.split(",")[2]) for r in read(os.path.join(out, "loss.csv")).decode().splitlines()[1:]]


def all_floats(values):
    a = np.asarray(values, dtype=np.float64)
    return bool(np.array_equal(a, a.astype(np.float32).astype(np.float64), equal_nan=True))


def main():
    tmp = tempfile.mkdtemp(prefix="gr_f32_")
    for name in EXAMPLES:
        spec = os.path.join(ROOT, "specs", name + ".json")
        outs = {}
        for label, extra in [("cpu", ["--device", "cpu"]), ("host", ["--device", "host"]),
                             ("fused", ["--device", "host", "--fuse"]), ("auto", ["--device", "auto"]),
                             ("f64", ["--device", "cpu", "--dtype", "f64"])]:
            out = os.path.join(tmp, f"{name}-{label}")
            dtype = [] if label == "f64" else ["--dtype", "f32"]
            run("train", spec, "--out", out, "--epochs", "2", "-q", *dtype, *extra)
            outs[label] = out
        cpu = outs["cpu"]
        if not os.path.exists(os.path.join(cpu, "weights.safetensors")):
            check(False, f"{name}: the f32 CPU run wrote no weights")
            continue
        ref_w = tensors(os.path.join(cpu, "weights.safetensors"))
        for label in ("host", "fused", "auto"):
            o = outs[label]
            check(read(os.path.join(o, "loss.csv")) == read(os.path.join(cpu, "loss.csv")),
                  f"{name}: f32 {label}: loss.csv differs from the f32 CPU tape's")
            check(metrics_less_seconds(o) == metrics_less_seconds(cpu),
                  f"{name}: f32 {label}: metrics.csv differs from the f32 CPU tape's")
            check(tensors(os.path.join(o, "weights.safetensors")) == ref_w,
                  f"{name}: f32 {label}: weights differ from the f32 CPU tape's")
        for k, b in ref_w.items():
            check(all_floats(np.frombuffer(b, dtype="<f8")), f"{name}: f32 weight {k} holds values that are not floats")
        for k, b in tensors(os.path.join(cpu, "init.safetensors")).items():
            check(all_floats(np.frombuffer(b, dtype="<f8")), f"{name}: f32 init {k} holds values that are not floats")
        l32, l64 = losses(cpu), losses(outs["f64"])
        check(all_floats(l32), f"{name}: f32 losses that are not floats")
        check(l32 != l64, f"{name}: the f32 run's losses are the f64 run's (it did not compute in float)")
        rel = abs(l32[0] - l64[0]) / max(abs(l64[0]), 1e-30)
        check(rel <= 2e-5, f"{name}: f32 step 1 loss {l32[0]!r} is {rel:.3g} relative from f64's {l64[0]!r}")

    iris = os.path.join(ROOT, "specs", "iris.json")
    straight, half = os.path.join(tmp, "straight"), os.path.join(tmp, "half")
    run("train", iris, "--out", straight, "--epochs", "3", "--dtype", "f32", "-q")
    run("train", iris, "--out", half, "--epochs", "2", "--dtype", "f32", "-q")
    p = run("train", iris, "--resume", half, "--epochs", "3", "--dtype", "f64", "-q", code=2)
    check("--dtype f32" in p.stderr, "resuming an f32 run in f64: the refusal does not say how:\n" + p.stderr)
    # without --dtype a resume continues in the precision run.json records
    half2 = os.path.join(tmp, "half2")
    run("train", iris, "--out", half2, "--epochs", "2", "--dtype", "f32", "-q")
    run("train", "--resume", half2, "--epochs", "3", "-q")
    check(tensors(os.path.join(half2, "weights.safetensors")) == tensors(os.path.join(straight, "weights.safetensors")),
          "an f32 run resumed without --dtype differs from the straight f32 run")
    run("train", iris, "--resume", half, "--epochs", "3", "--dtype", "f32", "--device", "host", "-q")
    check(read(os.path.join(half, "loss.csv")) == read(os.path.join(straight, "loss.csv"))
          and tensors(os.path.join(half, "weights.safetensors")) == tensors(os.path.join(straight, "weights.safetensors")),
          "f32: 2 epochs + resume to 3 on the host device differ from 3 straight on the CPU tape")

    # evaluate and predict follow the weights' dtype (their __metadata__), so they reproduce the run.
    ev = os.path.join(tmp, "ev.json")
    run("evaluate", iris, "--weights", straight, "--json", ev, "-q")
    last = read(os.path.join(straight, "metrics.csv")).decode().strip().splitlines()[-1].split(",")
    got = json.loads(read(ev))["loss"] if os.path.exists(ev) else None
    check(got == float(last[2]), f"f32 evaluate loss {got!r} != metrics.csv val_loss {last[2]}")
    csv = os.path.join(ROOT, "datasets", "iris.csv")
    pc, ph = os.path.join(tmp, "pred_cpu.csv"), os.path.join(tmp, "pred_host.csv")
    run("predict", iris, "--weights", straight, "--data", csv, "--out", pc, "-q")
    run("predict", iris, "--weights", straight, "--data", csv, "--out", ph, "--device", "host", "-q")
    check(os.path.exists(pc) and os.path.exists(ph) and read(pc) == read(ph),
          "f32 predict: --device host differs from the CPU tape")

    p = run("train", iris, "--out", os.path.join(tmp, "shards"), "--dtype", "f32",
            "--set", "/train/shards=2", code=2)
    check("f64" in p.stderr, "f32 with shards: the refusal does not say why:\n" + p.stderr)
    return cli.finish(f"ok test_f32_cli: {len(EXAMPLES)} examples give the same f32 bytes on cpu, host, host --fuse "
                      "and auto; floats throughout; near f64")


if __name__ == "__main__":
    sys.exit(main())
