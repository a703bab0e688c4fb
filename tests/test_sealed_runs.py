#!/usr/bin/env python3
"""Sealed run files (issue 36): one flipped bit anywhere in a checkpoint or a weights file is found.

usage: test_sealed_runs.py GRADRUN   (run from the repository root; standard library only)

- a 20-epoch iris run keeps two checkpoints (epoch 1 and epoch 20);
- one bit flipped in each region of checkpoint/state.safetensors (every tensor's bytes, every
  metadata key and value): `train --resume` falls back to previous.safetensors saying so, and ends
  bitwise equal to an uninterrupted run; with the previous one gone it exits 2 with one line naming
  the file;
- counters rewritten consistently but wrong and resealed would need the seal: an unsealed
  (gradrun-checkpoint-1) file with a wrong epoch is refused by the cross-checks;
- the first checkpoint comes after 100 steps when epoch 1 is longer (iris, batch 1);
- each region of init.safetensors: train --init and grad --init exit 2;
- under early stopping, each region of weights.best.safetensors (predict --which best) and the
  checkpoint's best/ tensors and best_epoch;
- one bit flipped in each region of weights.safetensors: predict, evaluate and export exit 2 with
  one line naming the file; the intact file predicts (exit 0).
"""
import json
import os
import shutil
import struct
import subprocess
import sys
import tempfile

GR = os.path.abspath(sys.argv[1])
ROOT = os.getcwd()
ENV = dict(os.environ, GRADRUN_NO_FSYNC="1")
fails = []


def check(cond, what):
    if not cond:
        fails.append(what)


def run(*args):
    return subprocess.run([GR, *args], capture_output=True, text=True, env=ENV)


def regions(path):
    """(name, offset) of a byte inside each tensor, each metadata key and each metadata value."""
    data = open(path, "rb").read()
    n = struct.unpack("<Q", data[:8])[0]
    header = json.loads(data[8:8 + n])
    text = data[8:8 + n]
    out = []
    for name, t in header.items():
        if name == "__metadata__":
            continue
        b, e = t["data_offsets"]
        out.append((f"tensor {name}", 8 + n + (b + e) // 2 // 8 * 8 + 6))  # a double's exponent byte
    for k, v in header.get("__metadata__", {}).items():
        kq = json.dumps(k).encode()
        at = text.find(kq + b":")
        assert at >= 0, k
        out.append((f"key {k}", 8 + at + 1 + len(k) // 2))
        vq = json.dumps(v).encode()
        vat = text.find(vq, at + len(kq))
        out.append((f"value of {k}", 8 + vat + 1 + max(0, len(v) // 2)))
    return out


def flipped(src, dst, offset, bit=0x01):
    data = bytearray(open(src, "rb").read())
    data[offset] ^= bit
    open(dst, "wb").write(bytes(data))


def spec_file(tmp):
    s = json.load(open(os.path.join(ROOT, "specs/iris.json")))
    s["data"]["csv"] = os.path.join(ROOT, "datasets/iris.csv")
    p = os.path.join(tmp, "iris.json")
    json.dump(s, open(p, "w"))
    return p


def one_line(p):
    lines = [l for l in p.stderr.splitlines() if l.strip()]
    return len(lines) == 1


with tempfile.TemporaryDirectory() as tmp:
    spec = spec_file(tmp)
    base, ref = os.path.join(tmp, "base"), os.path.join(tmp, "ref")
    p = run("train", spec, "--out", base, "--epochs", "20", "--quiet")
    check(p.returncode == 0, f"train: exit {p.returncode}: {p.stderr}")
    p = run("train", spec, "--out", ref, "--epochs", "25", "--quiet")
    check(p.returncode == 0, f"reference train: exit {p.returncode}: {p.stderr}")
    ckpt = os.path.join(base, "checkpoint")
    check(sorted(os.listdir(ckpt)) == ["previous.safetensors", "state.safetensors"], f"two checkpoints: {os.listdir(ckpt)}")
    ref_loss = open(os.path.join(ref, "loss.csv")).read()

    # An intact copy resumes to the reference bytes (the test can fail the other way too).
    ok = os.path.join(tmp, "ok")
    shutil.copytree(base, ok)
    p = run("train", "--resume", ok, "--epochs", "25", "--quiet")
    check(p.returncode == 0 and open(os.path.join(ok, "loss.csv")).read() == ref_loss, f"intact resume: {p.returncode} {p.stderr}")

    state = os.path.join(ckpt, "state.safetensors")
    places = regions(state)
    names = [n for n, _ in places]
    for want in ["tensor param/W1", "tensor adam_m/W1", "tensor adam_v/b2", "tensor loss_history", "tensor loss_epochs",
                 "tensor epoch_metrics", "value of epoch", "value of step", "value of adam_t", "value of target_epochs",
                 "value of seed", "value of run_identity", "value of gradrun.sha256", "value of step_in_epoch"]:
        check(want in names, f"the checkpoint has no {want}: {names}")
    for name, offset in places:
        # The newest flipped: an announced fallback to the previous checkpoint, then the reference bytes.
        d = os.path.join(tmp, "flip")
        shutil.rmtree(d, ignore_errors=True)
        shutil.copytree(base, d)
        flipped(state, os.path.join(d, "checkpoint/state.safetensors"), offset)
        p = run("train", "--resume", d, "--epochs", "25")
        check(p.returncode == 0 and "previous" in p.stderr and "state.safetensors" in p.stderr,
              f"checkpoint {name}: a flipped bit: exit {p.returncode}, no announced fallback: {p.stderr[-400:]}")
        check(p.returncode != 0 or open(os.path.join(d, "loss.csv")).read() == ref_loss,
              f"checkpoint {name}: the fallback's resume differs from an uninterrupted run")
        # No previous one: exit 2, one line naming the file.
        shutil.rmtree(d)
        shutil.copytree(base, d)
        if os.path.exists(os.path.join(d, "checkpoint/previous.safetensors")):
            os.remove(os.path.join(d, "checkpoint/previous.safetensors"))
        flipped(state, os.path.join(d, "checkpoint/state.safetensors"), offset)
        p = run("train", "--resume", d, "--epochs", "25", "--quiet")
        check(p.returncode == 2 and one_line(p) and "state.safetensors" in p.stderr,
              f"checkpoint {name}: a flipped bit without a previous checkpoint: exit {p.returncode}: {p.stderr}")

    weights = os.path.join(base, "weights.safetensors")
    data_csv = os.path.join(ROOT, "datasets/iris.csv")
    p = run("predict", base, "--data", data_csv, "--out", os.path.join(tmp, "p.csv"), "--quiet")
    check(p.returncode == 0, f"predict on intact weights: exit {p.returncode}: {p.stderr}")
    p = run("export", base, "--which", "final", "--format", "onnx", "--out", os.path.join(tmp, "m.onnx"))
    check(p.returncode == 0, f"export of intact weights: exit {p.returncode}: {p.stderr}")
    wplaces = regions(weights)
    check(any(n == "value of gradrun.sha256" for n, _ in wplaces), "weights.safetensors carries no seal")
    for i, (name, offset) in enumerate(wplaces):
        d = os.path.join(tmp, "wflip")
        shutil.rmtree(d, ignore_errors=True)
        shutil.copytree(base, d)
        flipped(weights, os.path.join(d, "weights.safetensors"), offset)
        cmds = [["predict", d, "--data", data_csv, "--out", os.path.join(tmp, "q.csv"), "--which", "final"]]
        if i % 4 == 0:  # evaluate and export read the same way; a sample of the regions
            cmds += [["evaluate", d, "--data", data_csv, "--which", "final"],
                     ["export", d, "--which", "final", "--format", "onnx", "--out", os.path.join(tmp, "m.onnx")]]
        for c in cmds:
            p = run(*c)
            check(p.returncode == 2 and one_line(p) and "weights.safetensors" in p.stderr,
                  f"weights {name}: {c[0]} on a flipped bit: exit {p.returncode}: {p.stderr}")

    # init.safetensors is sealed too, and --init (train, grad) checks a gradrun weights file's seal.
    init = os.path.join(base, "init.safetensors")
    p = run("train", spec, "--init", init, "--out", os.path.join(tmp, "init_ok"), "--epochs", "1", "--quiet")
    check(p.returncode == 0, f"--init from an intact init.safetensors: exit {p.returncode}: {p.stderr}")
    for name, offset in regions(init):
        f = os.path.join(tmp, "init_flipped.safetensors")
        flipped(init, f, offset)
        for c in (["train", spec, "--init", f, "--out", os.path.join(tmp, "init_new"), "--epochs", "1", "--quiet"],
                  ["grad", spec, "--init", f, "--out", os.path.join(tmp, "g.safetensors")]):
            p = run(*c)
            check(p.returncode == 2 and one_line(p) and "init_flipped.safetensors" in p.stderr,
                  f"init {name}: {c[0]} --init on a flipped bit: exit {p.returncode}: {p.stderr}")

    # Early stopping: weights.best.safetensors is sealed too (predict --which best), and the
    # checkpoint's best/ tensors and best_epoch are inside its seal.
    moons = os.path.join(tmp, "moons")
    p = run("train", os.path.join(ROOT, "specs/moons.json"), "--out", moons, "--quiet")
    best = os.path.join(moons, "weights.best.safetensors")
    moons_csv = os.path.join(ROOT, json.load(open(os.path.join(ROOT, "specs/moons.json")))["data"]["csv"].replace("../", ""))
    p = run("predict", moons, "--which", "best", "--data", moons_csv, "--out", os.path.join(tmp, "b.csv"))
    check(p.returncode == 0, f"predict --which best on intact weights: exit {p.returncode}: {p.stderr}")
    for name, offset in regions(best):
        d = os.path.join(tmp, "bflip")
        shutil.rmtree(d, ignore_errors=True)
        shutil.copytree(moons, d)
        flipped(best, os.path.join(d, "weights.best.safetensors"), offset)
        p = run("predict", d, "--which", "best", "--data", moons_csv, "--out", os.path.join(tmp, "b.csv"), "--quiet")
        check(p.returncode == 2 and one_line(p) and "weights.best.safetensors" in p.stderr,
              f"weights.best {name}: predict on a flipped bit: exit {p.returncode}: {p.stderr}")
    mstate = os.path.join(moons, "checkpoint/state.safetensors")
    mplaces = [(n, o) for n, o in regions(mstate) if n.startswith("tensor best/") or "best_epoch" in n]
    check(len(mplaces) >= 3, f"the moons checkpoint holds no best weights: {[n for n, _ in regions(mstate)]}")
    for name, offset in mplaces:
        d = os.path.join(tmp, "mflip")
        shutil.rmtree(d, ignore_errors=True)
        shutil.copytree(moons, d)
        if os.path.exists(os.path.join(d, "checkpoint/previous.safetensors")):
            os.remove(os.path.join(d, "checkpoint/previous.safetensors"))
        flipped(mstate, os.path.join(d, "checkpoint/state.safetensors"), offset)
        p = run("train", "--resume", d, "--epochs", "400", "--quiet")
        check(p.returncode == 2 and one_line(p) and "state.safetensors" in p.stderr,
              f"moons checkpoint {name}: a flipped bit: exit {p.returncode}: {p.stderr}")

    # A checkpoint from before seals (format 1) whose counters disagree: the cross-checks refuse it.
    legacy = os.path.join(tmp, "legacy")
    shutil.copytree(base, legacy)
    if os.path.exists(os.path.join(legacy, "checkpoint/previous.safetensors")):
        os.remove(os.path.join(legacy, "checkpoint/previous.safetensors"))
    sp = os.path.join(legacy, "checkpoint/state.safetensors")
    raw = open(sp, "rb").read()
    n = struct.unpack("<Q", raw[:8])[0]
    h = json.loads(raw[8:8 + n])
    h["__metadata__"].pop("gradrun.sha256", None)
    h["__metadata__"]["format"] = "gradrun-checkpoint-1"
    h["__metadata__"]["epoch"] = "19"
    text = json.dumps(h, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)
    open(sp, "wb").write(struct.pack("<Q", len(text)) + text + raw[8 + n:])
    p = run("train", "--resume", legacy, "--epochs", "25", "--quiet")
    check(p.returncode == 2 and one_line(p) and "epoch 19" in p.stderr, f"legacy checkpoint, epoch 19 of 20: exit {p.returncode}: {p.stderr}")

    # The first checkpoint: after epoch 1 or 100 steps, whichever is sooner. Batch 1: 120 steps an
    # epoch, so a one-epoch run keeps the step-100 checkpoint as the previous one.
    s1 = json.load(open(spec))
    s1["train"]["batch_size"] = 1
    spec1 = os.path.join(tmp, "iris1.json")
    json.dump(s1, open(spec1, "w"))
    one = os.path.join(tmp, "one")
    p = run("train", spec1, "--out", one, "--epochs", "1", "--quiet")
    prev = os.path.join(one, "checkpoint/previous.safetensors")
    meta = {}
    if os.path.exists(prev):
        raw = open(prev, "rb").read()
        meta = json.loads(raw[8:8 + struct.unpack("<Q", raw[:8])[0]]).get("__metadata__", {})
    check(p.returncode == 0 and meta.get("step") == "100" and meta.get("step_in_epoch") == "100",
          f"batch 1: no checkpoint at step 100 of epoch 1: {p.returncode} {meta.get('step')} {p.stderr}")

if fails:
    print(f"{len(fails)} failures:")
    for f in fails:
        print(" -", f)
    sys.exit(1)
print("sealed run files: ok")
