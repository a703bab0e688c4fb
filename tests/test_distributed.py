#!/usr/bin/env python3
"""Data-parallel training (train.shards, mpirun; docs/distributed.md), through the CLI.

  test_distributed.py GRADRUN

For S = 4 shards, `gradrun train` (one process), `mpirun -np 1`, `-np 2` and `-np 4` must write the
same loss.csv and weight bytes, for iris, digits, a data-driven attention block and a dropout MLP;
the device engine (--device host, per node and fused) must land on the same bytes; a run stopped
at R = 4 (at an epoch boundary, and by SIGINT inside an epoch) resumes at R = 2 on the bytes of an
uninterrupted run. S = 1 under mpirun -np 1 is the plain step (the golden digits log). The sharded
step is also checked against the plain one, a separately tested path: its gradient is the
full-batch gradient up to rounding, so losses agree to ~1e-12 after a few steps. Failures: a rank
with bad input or a killed rank ends the whole job (non-zero exit, the rank named, no hang); bad
process counts and batch sizes are refused with one located line.

Without mpirun or an MPI build, exits 77 (ctest: Skipped), recorded in $GR_SKIP_LOG as kind "mpi".
"""
import csv
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "tests", "support"))
from cli_support import Cli, read, tensors  # noqa: E402

MPIRUN = shutil.which("mpirun")
MPI_FLAGS = ["--oversubscribe"] + (["--allow-run-as-root"] if os.geteuid() == 0 else [])


def skip(why):
    print("SKIPPED: " + why)
    if os.environ.get("GR_SKIP_LOG"):
        with open(os.environ["GR_SKIP_LOG"], "a") as log:
            log.write("mpi\tdistributed\t%s\n" % why)
    sys.exit(77)


def attention_spec(tmp):
    """bench/peers' attention block (sequence 16, width 32) on 64 random rows, with reshapes that take
    any row count, so train.shards can split its batch of 8."""
    import numpy as np
    r = np.random.default_rng(32)
    np.savez(os.path.join(tmp, "attention.npz"), x=r.standard_normal((64, 16, 32)), y=r.standard_normal((64, 16, 32)))
    graph = [{"id": "xf", "op": "reshape", "inputs": ["x"], "shape": [-1, 32]}]
    for w in "qkv":
        graph.append({"id": w, "op": "matmul", "inputs": ["xf", "W" + w]})
        graph.append({"id": w + "3", "op": "reshape", "inputs": [w], "shape": [-1, 16, 32]})
    graph += [{"id": "kt", "op": "transpose", "inputs": ["k3"]},
              {"id": "scores", "op": "bmm", "inputs": ["q3", "kt"]},
              {"id": "scaled", "op": "muls", "inputs": ["scores"], "scalar": 0.17677669529663687},
              {"id": "att", "op": "softmax", "inputs": ["scaled"], "axis": -1},
              {"id": "out", "op": "bmm", "inputs": ["att", "v3"]},
              {"id": "loss", "op": "mse", "inputs": ["out", "y"]}]
    spec = {"gradrun": 1, "name": "attention-shards", "seed": 3,
            "data": {"npz": "attention.npz", "inputs": {"x": {"tensor": "x"}, "y": {"tensor": "y"}}},
            "params": {"W" + w: {"shape": [32, 32], "init": "xavier_uniform"} for w in "qkv"},
            "graph": graph, "loss": "loss", "optimizer": {"kind": "adam", "lr": 0.001},
            "train": {"batch_size": 8}}
    path = os.path.join(tmp, "attention.json")
    with open(path, "w") as f:
        json.dump(spec, f)
    return path


def losses(path):
    with open(path) as f:
        return [float(r["loss"]) for r in csv.DictReader(f)]


def main():
    cli = Cli(sys.argv[1])
    g = cli.gradrun
    if not MPIRUN:
        skip("mpirun is not installed (scripts/setup installs openmpi-bin)")
    tmp = tempfile.mkdtemp(prefix="gr-dist-")

    def mpirun(np_, *args, code=0, timeout=300):
        p = subprocess.run([MPIRUN, *MPI_FLAGS, "-np", str(np_), g, *args], capture_output=True, text=True, timeout=timeout)
        if code is not None and p.returncode != code:
            cli.fails.append(f"mpirun -np {np_} {' '.join(args)}: exit {p.returncode}, wanted {code}\n{p.stderr[-2000:]}")
        return p

    probe = mpirun(2, "train", "specs/iris.json", "--set", "train.shards=2", "--out",
                   os.path.join(tmp, "probe"), "--epochs", "1", "-q", code=None)
    if "built without MPI" in probe.stderr:
        skip("this gradrun was built without MPI (scripts/setup installs libopenmpi-dev)")

    def same(a, b, what):
        cli.check(read(os.path.join(a, "loss.csv")) == read(os.path.join(b, "loss.csv")), what + ": loss.csv differs")
        ta, tb = tensors(os.path.join(a, "weights.safetensors")), tensors(os.path.join(b, "weights.safetensors"))
        cli.check(ta and ta == tb, what + ": weights differ")

    # --- S = 4: one process, mpirun -np 1, 2, 4 (and the device engine) on the same bytes ----------
    cases = [
        ("iris", "specs/iris.json", ["--set", "train.batch_size=32", "--epochs", "4"]),
        ("digits", "specs/digits.json", ["--epochs", "2"]),
        ("attention", attention_spec(tmp), ["--epochs", "2"]),
        ("dropout", "specs/digits.json", ["--set", "/graph/0/dropout=0.25", "--epochs", "2"]),
    ]
    for name, spec, extra in cases:
        args = [spec, "--set", "train.shards=4", "-q", *extra]
        ref = os.path.join(tmp, name + "-1")
        cli.run("train", *args, "--out", ref)
        for np_ in (1, 2, 4):
            out = os.path.join(tmp, f"{name}-np{np_}")
            mpirun(np_, "train", *args, "--out", out)
            same(ref, out, f"{name} S=4 mpirun -np {np_}")
        run = json.load(open(os.path.join(tmp, f"{name}-np4", "run.json")))
        cli.check(run.get("shards") == 4 and run.get("processes") == 4 and "MPI" in str(run.get("mpi")),
                  f"{name}: run.json lacks shards/processes/mpi: {run.get('shards')} {run.get('processes')} {run.get('mpi')}")
        cli.check(not os.path.exists(os.path.join(tmp, f"{name}-np4", "checkpoint", "state.safetensors.tmp")), "leftover tmp")
    for dev in (["--device", "host"], ["--device", "host", "--fuse"]):
        out = os.path.join(tmp, "digits-dev" + str(len(dev)))
        mpirun(2, "train", "specs/digits.json", "--set", "train.shards=4", "--epochs", "2", "-q", *dev, "--out", out)
        same(os.path.join(tmp, "digits-1"), out, "digits S=4 mpirun -np 2 " + " ".join(dev))
    # dropout: the shards draw their own masks, so dropout changes the run
    cli.check(read(os.path.join(tmp, "dropout-1", "loss.csv")) != read(os.path.join(tmp, "digits-1", "loss.csv")),
              "dropout did not change the sharded run")

    # --- the outside check: the sharded step is the full-batch step up to rounding -----------------
    plain = os.path.join(tmp, "digits-plain")
    cli.run("train", "specs/digits.json", "--epochs", "2", "-q", "--out", plain)
    a, b = losses(os.path.join(plain, "loss.csv")), losses(os.path.join(tmp, "digits-1", "loss.csv"))
    worst = max(abs(x - y) / abs(x) for x, y in zip(a[:10], b[:10]))
    cli.check(len(a) == len(b) and worst < 1e-12, f"S=4 vs the plain step: relative loss difference {worst:.3g} in 10 steps")
    cli.check(a != b, "S=4 and S=1 wrote identical logs: the shards did not change the summation order")

    # --- S = 1: mpirun -np 1 is the plain step (the golden digits log) ------------------------------
    mpirun(1, "train", "specs/digits.json", "-q", "--expect", "tests/golden/digits.loss.csv", "--out", os.path.join(tmp, "golden"))

    # --- resume across process counts: stopped at R = 4, resumed at R = 2 ---------------------------
    r4 = os.path.join(tmp, "resume")
    mpirun(4, "train", "specs/digits.json", "--set", "train.shards=4", "--epochs", "1", "-q", "--out", r4)
    mpirun(2, "train", "specs/digits.json", "--set", "train.shards=4", "--epochs", "2", "-q", "--resume", r4)
    same(os.path.join(tmp, "digits-1"), r4, "stopped at R=4 after epoch 1, resumed at R=2")
    # SIGINT inside an epoch: every rank stops at the same step; rank 0 writes the checkpoint.
    si = os.path.join(tmp, "sigint")
    args = ["train", "specs/digits.json", "--set", "train.shards=4", "-q", "--epochs", "100000"]
    p = subprocess.Popen([MPIRUN, *MPI_FLAGS, "-np", "4", g, *args, "--out", si], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.time() + 60
    while time.time() < deadline and not os.path.exists(os.path.join(si, "checkpoint", "state.safetensors")):
        time.sleep(0.1)
    time.sleep(0.5)
    p.send_signal(signal.SIGINT)
    _, err = p.communicate(timeout=120)
    run = json.load(open(os.path.join(si, "run.json")))
    cli.check(run["status"] == "interrupted", f"SIGINT: status {run['status']}\n{err[-1500:]}")
    cli.check(err.count("interrupted at step") == 1, "SIGINT: the interrupted line should come once (rank 0):\n" + err[-1500:])
    epochs = run["epochs"] + 2
    mpirun(2, "train", "specs/digits.json", "--set", "train.shards=4", "-q", "--epochs", str(epochs), "--resume", si)
    whole = os.path.join(tmp, "whole")
    cli.run("train", "specs/digits.json", "--set", "train.shards=4", "-q", "--epochs", str(epochs), "--out", whole)
    same(whole, si, f"SIGINT at R=4 (epoch {run['epochs'] + 1}), resumed at R=2")

    # --- failures end the job: one line naming the rank, no hang ------------------------------------
    bad = subprocess.run([MPIRUN, *MPI_FLAGS, "-np", "1", g, "train", "specs/digits.json", "--set", "train.shards=2", "-q", "--out",
                          os.path.join(tmp, "bad"), ":", "-np", "1", g, "train", os.path.join(tmp, "missing.json"), "--set",
                          "train.shards=2", "-q", "--out", os.path.join(tmp, "bad")], capture_output=True, text=True, timeout=120)
    cli.check(bad.returncode != 0 and "rank 1 of 2: " in bad.stderr and "missing.json" in bad.stderr,
              f"bad input on rank 1: exit {bad.returncode}\n{bad.stderr[-1500:]}")
    killed = os.path.join(tmp, "killed")
    p = subprocess.Popen([MPIRUN, *MPI_FLAGS, "-np", "2", g, *args, "--out", killed], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.time() + 60
    while time.time() < deadline and not os.path.exists(os.path.join(killed, "checkpoint", "state.safetensors")):
        time.sleep(0.1)
    victims = subprocess.run(["pgrep", "-f", "-n", "gradrun train.*" + killed], capture_output=True, text=True).stdout.split()
    cli.check(bool(victims), "no rank process found to kill")
    for pid in victims:
        os.kill(int(pid), signal.SIGKILL)
    try:
        _, err = p.communicate(timeout=120)
        cli.check(p.returncode != 0 and "rank" in err, f"a killed rank: exit {p.returncode}\n{err[-1500:]}")
    except subprocess.TimeoutExpired:
        p.kill()
        cli.fails.append("a killed rank left the job hanging")
    # the last complete checkpoint is intact: resumed (one process) it lands on an uninterrupted run
    raw = read(os.path.join(killed, "checkpoint", "state.safetensors"))
    n = int.from_bytes(raw[:8], "little")
    meta = json.loads(raw[8:8 + n])["__metadata__"]
    epochs = int(meta["epoch"]) + (1 if int(meta["step_in_epoch"]) > 0 else 0) + 1
    cli.run("train", "specs/digits.json", "--set", "train.shards=4", "-q", "--epochs", str(epochs), "--resume", killed)
    whole = os.path.join(tmp, "whole-killed")
    cli.run("train", "specs/digits.json", "--set", "train.shards=4", "-q", "--epochs", str(epochs), "--out", whole)
    same(whole, killed, "the checkpoint left by a killed job, resumed")

    # --- refusals -----------------------------------------------------------------------------------
    p = mpirun(3, "train", "specs/digits.json", "--set", "train.shards=4", "-q", "--out", os.path.join(tmp, "np3"), code=None)
    cli.check(p.returncode != 0 and "3 processes cannot share 4 shards" in p.stderr, "np 3 of 4 shards:\n" + p.stderr[-800:])
    p = cli.run("train", "specs/digits.json", "--set", "train.shards=5", "-q", "--out", os.path.join(tmp, "s5"), code=2)
    cli.check("/train/shards" in p.stderr and "equal shards" in p.stderr, "shards not dividing the batch:\n" + p.stderr)
    p = cli.run("train", "specs/attention.json", "--set", "train.shards=2", "-q", "--out", os.path.join(tmp, "nodata"), code=2)
    cli.check("/train/shards" in p.stderr and "no data" in p.stderr, "shards without data:\n" + p.stderr)
    p = cli.run("inspect", "specs/digits.json", "--set", "train.shards=4")
    cli.check("shards: 4 of 16 rows" in p.stdout and "R=2" in p.stdout and "R=4" in p.stdout, "inspect:\n" + p.stdout)

    if not cli.fails:
        shutil.rmtree(tmp, ignore_errors=True)
    return cli.finish("ok: S=4 on 1, 2 and 4 processes (iris, digits, attention, dropout, host, fused) on the same bytes; "
                      "resume 4 -> 2; failures end the job")


if __name__ == "__main__":
    sys.exit(main())
