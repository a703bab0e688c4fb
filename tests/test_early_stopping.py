#!/usr/bin/python3
"""train.early_stopping (issue 16 item 1): best weights, stopping within patience, resume, errors.

    /usr/bin/python3 tests/test_early_stopping.py GRADRUN

On specs/moons.json (val_loss, patience 15):
- metrics.csv says when to stop, independently of the trainer's code: the best epoch is the first
  minimum of val_loss under the strict-improvement rule, and the run must end exactly `patience`
  epochs after it, with run.json's best_epoch and stop_reason saying so;
- weights.best.safetensors holds the tensors of a run trained with --epochs BEST (the same seed and
  steps), byte for byte;
- --device host and --device host --fuse write the same loss.csv and best weights;
- a run stopped at epoch 20 and resumed to 400 ends on the same bytes (the best weights travel in
  the checkpoint);
- bad settings are located errors (exit 2). Standard library only.
"""
import json
import os
import struct
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
GR = sys.argv[1]
SPEC = os.path.join(ROOT, "specs/moons.json")
fails = []


def check(ok, what):
    if not ok:
        fails.append(what)


def run(*args, code=0):
    p = subprocess.run([GR, *args], capture_output=True, text=True, timeout=600)
    if p.returncode != code:
        fails.append(f"{' '.join(args)}: exit {p.returncode}, wanted {code}\n{p.stderr}")
    return p


def tensors(path):
    data = open(path, "rb").read()
    n = struct.unpack("<Q", data[:8])[0]
    header = json.loads(data[8:8 + n])
    header.pop("__metadata__", None)
    return {k: data[8 + n + v["data_offsets"][0]:8 + n + v["data_offsets"][1]] for k, v in header.items()}


def main():
    spec = json.load(open(SPEC))
    es = spec["train"]["early_stopping"]
    patience, min_delta = es["patience"], es.get("min_delta", 0.0)
    with tempfile.TemporaryDirectory(prefix="gradrun-es-") as tmp:
        out = os.path.join(tmp, "cpu")
        p = run("train", SPEC, "--out", out)
        rows = open(os.path.join(out, "metrics.csv")).read().splitlines()
        head = rows[0].split(",")
        val = [float(r.split(",")[head.index("val_loss")]) for r in rows[1:]]
        best, best_value = 0, None
        for i, v in enumerate(val, 1):
            if best_value is None or v < best_value - min_delta:
                best, best_value = i, v
        runj = json.load(open(os.path.join(out, "run.json")))
        check(len(val) == best + patience, f"ran {len(val)} epochs; best epoch {best}, patience {patience}")
        check(len(val) < spec["train"]["epochs"], "the run did not stop early, so the test proves nothing")
        check(runj["stop_reason"] == "early_stopping", f"stop_reason {runj['stop_reason']!r}")
        check(runj["early_stopping"]["best_epoch"] == best, f"run.json best_epoch {runj['early_stopping']['best_epoch']}, metrics say {best}")
        last = p.stdout.strip().splitlines()[-1]
        check("early stopping" in last and f"epoch {best}" in last, f"last line: {last!r}")

        # the best weights are those of a run that trains exactly `best` epochs
        short = os.path.join(tmp, "short")
        run("train", SPEC, "--out", short, "--epochs", str(best), "--quiet")
        check(tensors(os.path.join(out, "weights.best.safetensors")) == tensors(os.path.join(short, "weights.safetensors")),
              "weights.best.safetensors differs from the weights after the best epoch")
        check(tensors(os.path.join(out, "weights.best.safetensors")) != tensors(os.path.join(out, "weights.safetensors")),
              "the best and the last weights are the same: the test cannot tell them apart")

        # device paths
        for name, extra in (("host", ["--device", "host"]), ("fused", ["--device", "host", "--fuse"])):
            d = os.path.join(tmp, name)
            run("train", SPEC, "--out", d, "--quiet", *extra)
            check(open(os.path.join(d, "loss.csv"), "rb").read() == open(os.path.join(out, "loss.csv"), "rb").read(),
                  f"{name}: loss.csv differs")
            check(tensors(os.path.join(d, "weights.best.safetensors")) == tensors(os.path.join(out, "weights.best.safetensors")),
                  f"{name}: weights.best.safetensors differs")

        # resume: stop at 20 (before the early stop), continue to the spec's epochs
        r = os.path.join(tmp, "resumed")
        run("train", SPEC, "--out", r, "--epochs", "20", "--quiet")
        run("train", SPEC, "--resume", r, "--epochs", str(spec["train"]["epochs"]), "--quiet")
        check(open(os.path.join(r, "loss.csv"), "rb").read() == open(os.path.join(out, "loss.csv"), "rb").read(),
              "resumed: loss.csv differs")
        check(tensors(os.path.join(r, "weights.best.safetensors")) == tensors(os.path.join(out, "weights.best.safetensors")),
              "resumed: weights.best.safetensors differs")

        # errors
        def bad(name, change, pointer):
            s = json.loads(json.dumps(spec))
            s["data"]["csv"] = os.path.join(ROOT, "datasets/moons.csv")
            change(s)
            path = os.path.join(tmp, name + ".json")
            json.dump(s, open(path, "w"))
            p = run("train", path, "--out", os.path.join(tmp, name), code=2)
            check(pointer in p.stderr and len(p.stderr.splitlines()) == 1, f"{name}: {p.stderr!r}")
        bad("monitor", lambda s: s["train"]["early_stopping"].update(monitor="val_los"), "/train/early_stopping/monitor")
        bad("patience", lambda s: s["train"]["early_stopping"].update(patience=0), "/train/early_stopping/patience")
        bad("delta", lambda s: s["train"]["early_stopping"].update(min_delta=-1), "/train/early_stopping/min_delta")
        bad("accuracy", lambda s: (s.pop("metrics"), s["train"]["early_stopping"].update(monitor="val_accuracy")),
            "/train/early_stopping/monitor")
        bad("novalidation", lambda s: s["data"].pop("validation"), "/train/early_stopping/monitor")

    if fails:
        print("early stopping: FAILED\n  " + "\n  ".join(fails))
        return 1
    print("early stopping: ok")
    return 0


if __name__ == "__main__":
    sys.exit(main())
