#!/usr/bin/python3
"""Weights and consts from files, frozen parameters (issue 18 items 1 and 2).

    /usr/bin/python3 tests/test_finetune_files.py GRADRUN

A 6-8-3 tanh MLP whose trunk (W1, b1) comes from a PyTorch nn.Linear state_dict written as
safetensors ([out, in], so "transpose": true) and is frozen; the head W2 from a .npy, b2 from an
.npz member, a const from an F32 safetensors tensor and another from an F64 one. Checked:
- the frozen trunk's bytes in weights.safetensors are the init file's (transposed) bytes;
- loss.csv and weights.safetensors are the same bytes on --device cpu, host and host --fuse;
- a PyTorch f64 loop (SGD momentum, coupled L2, global-norm clip written out as gradrun defines
  it, requires_grad=False on the trunk) gives the same losses and head weights to 1e-12: a
  frozen weight that were updated, decayed or counted in the clip norm would move them;
- run.json's init_files holds each file's path and hashlib's sha256; inspect lists the counts;
- resume: interrupted + resumed = uninterrupted bytes; a changed const file refuses the resume;
- each bad file (missing file / tensor / member, wrong shape, integer / F16 dtype, bad transpose,
  npy name) exits 2 with one line naming the pointer, the file and the tensor.
numpy is needed; the PyTorch oracle is skipped (exit 77 at the end) without torch.
"""
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "tests", "support"))
from cli_support import tensors, write_safetensors  # noqa: E402

GR = sys.argv[1]
SKIP = 77
fails = []


def check(ok, what):
    if not ok:
        fails.append(what)


def run(*args, code=0):
    p = subprocess.run([GR, *args], capture_output=True, text=True, timeout=600)
    if p.returncode != code:
        fails.append(f"{' '.join(args)}: exit {p.returncode}, wanted {code}\n{p.stderr}")
    return p


def read_tensors(path):
    return tensors(path)


def sha(path):
    return hashlib.sha256(open(path, "rb").read()).hexdigest()


EPOCHS, LR, MU, L2, CLIP = 12, 0.2, 0.9, 0.01, 0.3


def make_files(d):
    rng = np.random.default_rng(7)
    x = rng.normal(size=(48, 6))
    y = np.eye(3)[rng.integers(0, 3, size=48)]
    np.savez(os.path.join(d, "data.npz"), x=x, y=y)
    trunk_w = rng.normal(size=(8, 6)) * 0.5  # nn.Linear(6, 8).weight: [out, in]
    trunk_b = rng.normal(size=8) * 0.1
    write_safetensors(os.path.join(d, "trunk.safetensors"),
                      {"trunk.weight": ("F64", trunk_w), "trunk.bias": ("F64", trunk_b),
                       "steps": ("I64", np.array([3])), "scale": ("F32", np.array([1.5, 0.5, 1.0], dtype=np.float32))})
    head_w = rng.normal(size=(8, 3)) * 0.3
    np.save(os.path.join(d, "head_w.npy"), head_w)
    head_b = np.array([0.1, -0.2, 0.05])
    np.savez(os.path.join(d, "head.npz"), bias=head_b, counts=np.array([1, 2, 3]))
    np.save(os.path.join(d, "ints.npy"), np.arange(24).reshape(8, 3))
    shift = np.array([0.25, -0.125, 0.0])
    write_safetensors(os.path.join(d, "shift.safetensors"), {"shift": ("F64", shift)})
    write_safetensors(os.path.join(d, "half.safetensors"), {"h": ("F16", np.ones((8, 3)))})
    return dict(x=x, y=y, trunk_w=trunk_w, trunk_b=trunk_b, head_w=head_w, head_b=head_b,
                scale=np.array([1.5, 0.5, 1.0], dtype=np.float32).astype(np.float64), shift=shift)


def spec_dict():
    return {
        "gradrun": 1, "name": "finetune", "seed": 1,
        "data": {"npz": "data.npz", "inputs": {"x": {"tensor": "x"}, "y": {"tensor": "y"}}},
        "params": {
            "W1": {"shape": [6, 8], "init": {"file": "trunk.safetensors", "tensor": "trunk.weight", "transpose": True},
                   "trainable": False},
            "b1": {"shape": [8], "init": {"file": "trunk.safetensors", "tensor": "trunk.bias"}, "trainable": False},
            "W2": {"shape": [8, 3], "init": {"file": "head_w.npy"}},
            "b2": {"shape": [3], "init": {"file": "head.npz", "tensor": "bias"}},
        },
        "consts": {"scale": {"file": "trunk.safetensors", "tensor": "scale"},
                   "shift": {"file": "shift.safetensors", "tensor": "shift", "shape": [3]}},
        "graph": [
            {"id": "h1", "op": "matmul", "inputs": ["x", "W1"]},
            {"id": "h2", "op": "add", "inputs": ["h1", "b1"]},
            {"id": "h3", "op": "tanh", "inputs": ["h2"]},
            {"id": "z", "op": "matmul", "inputs": ["h3", "W2"]},
            {"id": "z2", "op": "add", "inputs": ["z", "b2"]},
            {"id": "z3", "op": "mul", "inputs": ["z2", "scale"]},
            {"id": "logits", "op": "add", "inputs": ["z3", "shift"]},
            {"id": "loss", "op": "softmax_cross_entropy", "inputs": ["logits", "y"]},
        ],
        "loss": "loss",
        "optimizer": {"kind": "sgd", "lr": LR, "momentum": MU, "l2": L2, "clip": CLIP},
        "train": {"epochs": EPOCHS, "batch_size": 48, "shuffle": False},
    }


def write_spec(d, spec, name="finetune.json"):
    path = os.path.join(d, name)
    json.dump(spec, open(path, "w"), indent=1)
    return path


def losses(out):
    return [float(r.split(",")[2]) for r in open(os.path.join(out, "loss.csv")).read().splitlines()[1:]]


def torch_oracle(v):
    """The same model in PyTorch f64; the optimizer written out as docs/spec.md and optimizer.h define it."""
    import torch
    t = lambda a, rg=False: torch.tensor(a, dtype=torch.float64, requires_grad=rg)
    lin = torch.nn.Linear(6, 8).double()
    with torch.no_grad():
        lin.weight.copy_(t(v["trunk_w"]))
        lin.bias.copy_(t(v["trunk_b"]))
    lin.weight.requires_grad_(False)
    lin.bias.requires_grad_(False)
    W2, b2 = t(v["head_w"], True), t(v["head_b"], True)
    x, y, scale, shift = t(v["x"]), t(v["y"]), t(v["scale"]), t(v["shift"])
    bufs = [torch.zeros_like(W2), torch.zeros_like(b2)]
    out = []
    for _ in range(EPOCHS):
        logits = (torch.tanh(lin(x)) @ W2 + b2) * scale + shift
        loss = -(y * torch.log_softmax(logits, dim=1)).sum(dim=1).mean()
        out.append(loss.item())
        gW, gb = torch.autograd.grad(loss, [W2, b2])
        sq = (gW * gW).sum() + (gb * gb).sum()  # the clip norm over the trainable parameters only
        norm = torch.sqrt(sq)
        cs = CLIP / norm if norm > CLIP else 1.0
        with torch.no_grad():
            for p, g, b in ((W2, gW, bufs[0]), (b2, gb, bufs[1])):
                ge = g * cs + L2 * p
                b.mul_(MU).add_(ge)
                p.sub_(LR * b)
    return out, W2.detach().numpy(), b2.detach().numpy()


def error_cases(d, base):
    """(description, spec edit, pointer, words the line must hold)."""
    def p(name, init):
        s = json.loads(json.dumps(base))
        s["params"][name]["init"] = init
        return s
    cases = [
        ("missing file", p("W1", {"file": "nope.safetensors", "tensor": "trunk.weight", "transpose": True}),
         "/params/W1/init", ["nope.safetensors", "trunk.weight"]),
        ("missing tensor", p("W1", {"file": "trunk.safetensors", "tensor": "trunk.wieght", "transpose": True}),
         "/params/W1/init", ["trunk.safetensors", "trunk.wieght"]),
        ("shape (no transpose)", p("W1", {"file": "trunk.safetensors", "tensor": "trunk.weight"}),
         "/params/W1/init", ["trunk.safetensors", "trunk.weight", "[8, 6]", "transpose"]),
        ("integer safetensors", p("b2", {"file": "trunk.safetensors", "tensor": "steps"}),
         "/params/b2/init", ["trunk.safetensors", "steps", "I64"]),
        ("F16 safetensors", p("W2", {"file": "half.safetensors", "tensor": "h"}),
         "/params/W2/init", ["half.safetensors", "\"h\"", "F16"]),
        ("integer npy", p("W2", {"file": "ints.npy"}), "/params/W2/init", ["ints.npy", "<i8"]),
        ("integer npz member", p("b2", {"file": "head.npz", "tensor": "counts"}),
         "/params/b2/init", ["head.npz", "counts", "<i8"]),
        ("missing npz member", p("b2", {"file": "head.npz", "tensor": "bias2"}), "/params/b2/init", ["head.npz", "bias2"]),
        ("npy name", p("W2", {"file": "head_w.npy", "tensor": "W2"}), "/params/W2/init", ["head_w.npy", "W2"]),
        ("transpose 1-D", p("b1", {"file": "trunk.safetensors", "tensor": "trunk.bias", "transpose": True}),
         "/params/b1/init", ["trunk.safetensors", "trunk.bias", "2-D"]),
        ("unknown extension", p("W2", {"file": "data.csv", "tensor": "x"}), "/params/W2/init", ["data.csv"]),
    ]
    s = json.loads(json.dumps(base))
    s["consts"]["shift"]["shape"] = [1, 3]
    cases.append(("const shape", s, "/consts/shift/shape", ["shift.safetensors", "shift", "[3]"]))
    s = json.loads(json.dumps(base))
    s["consts"]["shift"]["tensor"] = "nope"
    cases.append(("const tensor", s, "/consts/shift", ["shift.safetensors", "nope"]))
    return cases


def main():
    with tempfile.TemporaryDirectory(prefix="gradrun-ft-") as d:
        v = make_files(d)
        base = spec_dict()
        spec = write_spec(d, base)

        # ---- the three paths: same bytes; the frozen trunk unchanged ----
        outs = {}
        for name, flags in (("cpu", []), ("host", ["--device", "host"]), ("fuse", ["--device", "host", "--fuse"])):
            outs[name] = os.path.join(d, "run-" + name)
            run("train", spec, "--out", outs[name], "--quiet", *flags)
        w = {k: read_tensors(os.path.join(o, "weights.safetensors")) for k, o in outs.items()}
        for k in ("host", "fuse"):
            check(open(os.path.join(outs[k], "loss.csv"), "rb").read() == open(os.path.join(outs["cpu"], "loss.csv"), "rb").read(),
                  f"loss.csv differs between --device cpu and {k}")
            check(w[k] == w["cpu"], f"weights.safetensors tensors differ between --device cpu and {k}")
        check(w["cpu"]["W1"] == np.ascontiguousarray(v["trunk_w"].T).tobytes(), "frozen W1 is not the transposed file bytes")
        check(w["cpu"]["b1"] == v["trunk_b"].tobytes(), "frozen b1 is not the file's bytes")
        init = read_tensors(os.path.join(outs["cpu"], "init.safetensors"))
        check(init["W2"] == v["head_w"].tobytes() and init["b2"] == v["head_b"].tobytes(), "init.safetensors: head not from the files")
        check(w["cpu"]["W2"] != init["W2"], "the head did not train")

        # ---- the same trunk as a frozen dense layer with file inits: the same loss bits ----
        dense = json.loads(json.dumps(base))
        for k in ("W1", "b1"):
            del dense["params"][k]
        dense["graph"][:3] = [{"id": "h3", "layer": "dense", "inputs": ["x"], "units": 8, "activation": "tanh",
                               "init": {"W": base["params"]["W1"]["init"], "b": base["params"]["b1"]["init"]},
                               "trainable": False}]
        dspec = write_spec(d, dense, "dense.json")
        for name, flags in (("cpu", []), ("fuse", ["--device", "host", "--fuse"])):
            out = os.path.join(d, "dense-" + name)
            run("train", dspec, "--out", out, "--quiet", *flags)
            check(open(os.path.join(out, "loss.csv"), "rb").read() == open(os.path.join(outs["cpu"], "loss.csv"), "rb").read(),
                  f"a frozen dense layer ({name}) gives other losses than the frozen declared parameters")
            wd = read_tensors(os.path.join(out, "weights.safetensors"))
            check(wd.get("h3.W") == w["cpu"]["W1"] and wd.get("h3.b") == w["cpu"]["b1"], f"frozen dense layer ({name}) changed")

        # ---- run.json: each file's sha256 ----
        rj = json.load(open(os.path.join(outs["cpu"], "run.json")))
        got = {os.path.basename(f["path"]): f["sha256"] for f in rj.get("init_files", [])}
        want = {n: sha(os.path.join(d, n)) for n in ("trunk.safetensors", "head_w.npy", "head.npz", "shift.safetensors")}
        check(got == want, f"run.json init_files {got} != {want}")

        # ---- inspect: trainable vs frozen counts ----
        p = run("inspect", spec)
        check("total 83 parameters: 27 trainable, 56 frozen" in p.stdout, "inspect: no trainable/frozen counts:\n" + p.stdout)
        check(p.stdout.count("  frozen\n") == 2, "inspect: W1 and b1 not marked frozen")

        # ---- resume: interrupted + resumed = uninterrupted; a changed file refuses ----
        part = os.path.join(d, "run-part")
        run("train", spec, "--out", part, "--epochs", "5", "--quiet")
        run("train", spec, "--resume", part, "--epochs", str(EPOCHS), "--quiet")
        check(read_tensors(os.path.join(part, "weights.safetensors")) == w["cpu"], "resumed weights differ from the uninterrupted run")
        check(open(os.path.join(part, "loss.csv"), "rb").read() == open(os.path.join(outs["cpu"], "loss.csv"), "rb").read(),
              "resumed loss.csv differs")
        part2 = os.path.join(d, "run-part2")
        run("train", spec, "--out", part2, "--epochs", "5", "--quiet")
        shutil.copy(os.path.join(d, "shift.safetensors"), os.path.join(d, "shift.bak"))
        write_safetensors(os.path.join(d, "shift.safetensors"), {"shift": ("F64", v["shift"] + 1.0)})
        p = run("train", spec, "--resume", part2, "--epochs", str(EPOCHS), "--quiet", code=2)
        check("sha256" in p.stderr and len(p.stderr.strip().splitlines()) == 1,
              "a changed const file: the resume refusal does not say why in one line:\n" + p.stderr)
        shutil.move(os.path.join(d, "shift.bak"), os.path.join(d, "shift.safetensors"))

        # ---- located errors ----
        for what, s, pointer, words in error_cases(d, base):
            path = write_spec(d, s, "bad.json")
            p = run("train", path, "--out", os.path.join(d, "bad-run"), "--quiet", code=2)
            lines = p.stderr.strip().splitlines()
            check(len(lines) == 1, f"{what}: not one line:\n{p.stderr}")
            line = lines[0] if lines else ""
            check(f"bad.json: {pointer}" in line, f"{what}: pointer {pointer} missing: {line}")
            for word in words:
                check(word in line, f"{what}: {word!r} missing: {line}")

        # ---- the PyTorch oracle ----
        try:
            import torch  # noqa: F401
        except ImportError:
            torch = None
        if torch is not None:
            tl, tW2, tb2 = torch_oracle(v)
            gl = losses(outs["cpu"])
            check(len(gl) == len(tl), f"{len(gl)} gradrun steps vs {len(tl)} torch steps")
            for i, (a, b) in enumerate(zip(gl, tl)):
                check(abs(a - b) <= 1e-12 * max(1.0, abs(b)), f"step {i + 1}: loss {a!r} (gradrun) vs {b!r} (torch)")
            gW2 = np.frombuffer(w["cpu"]["W2"], dtype="<f8").reshape(8, 3)
            gb2 = np.frombuffer(w["cpu"]["b2"], dtype="<f8")
            check(np.allclose(gW2, tW2, rtol=0, atol=1e-12) and np.allclose(gb2, tb2, rtol=0, atol=1e-12),
                  f"trained head differs from torch by {np.abs(gW2 - tW2).max()}, {np.abs(gb2 - tb2).max()}")

    for f in fails:
        print("FAIL:", f)
    if fails:
        return 1
    if torch is None:
        print("skipped the PyTorch oracle: torch is not installed (everything else passed)")
        return SKIP
    print("ok: files, sha256, frozen trunk on every path, resume, errors, torch oracle")
    return 0


if __name__ == "__main__":
    sys.exit(main())
