#!/usr/bin/env python3
"""The run folder's durability contract (issue 36, docs/cli.md "Durability").

usage: test_run_folder.py GRADRUN   (run from the repository root; standard library only)

- one writer per folder: two identical trains into one --out at once: exactly one exits 0, the other
  exits 2 at once naming the holder's PID and command; `--resume` and a different run (`--force`)
  while a train runs: exit 2; the folder afterwards is the winner's run, complete;
- signals: two SIGINT/SIGTERM in a row end with exit 130 and a checkpoint that resumes to an
  uninterrupted run's bytes; a third may end the process at once, leaving only whole files (and
  temporary ones that the next resume removes, landing on the same bytes);
- a truthful run.json: SIGKILL at each rename (strace) leaves `running`, read as killed-or-unknown
  by a refused run, and a folder that resumes to the uninterrupted bytes; disk full at each write
  (a 1 MiB tmpfs, where mounting is permitted) ends with exit 3 and status failed reporting the
  checkpoint's epoch and step (or exit 0 and complete), and the folder resumes to the same bytes;
- durable writes: with strace installed, each write fsyncs file and folder, and GRADRUN_NO_FSYNC=1
  none; NAME.tmp.PID files of dead PIDs are removed by the next train into the folder, a live
  PID's stay;
"""
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time

GR = os.path.abspath(sys.argv[1])
ROOT = os.getcwd()
ENV = dict(os.environ, GRADRUN_NO_FSYNC="1")
skips = []  # (kind, why): parts that could not run here (tests/support/skip.h kinds)
fails = []


def check(cond, what):
    if not cond:
        fails.append(what)


def run(*args, env=ENV):
    return subprocess.run([GR, *args], capture_output=True, text=True, env=env)


def start(*args, env=ENV):
    return subprocess.Popen([GR, *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)


def spec_file(tmp, name="iris.json", **train):
    s = json.load(open(os.path.join(ROOT, "specs/iris.json")))
    s["data"]["csv"] = os.path.join(ROOT, "datasets/iris.csv")
    s["train"].update(train)
    p = os.path.join(tmp, name)
    json.dump(s, open(p, "w"))
    return p


def run_json(d):
    return json.load(open(os.path.join(d, "run.json")))


with tempfile.TemporaryDirectory() as tmp:
    spec = spec_file(tmp, batch_size=2)  # 60 steps an epoch
    long_epochs = "10000"  # a few seconds

    # 1. Two writers into one folder.
    out = os.path.join(tmp, "two")
    a = start("train", spec, "--out", out, "--epochs", long_epochs, "--quiet")
    b = start("train", spec, "--out", out, "--epochs", long_epochs, "--quiet")
    deadline = time.time() + 60
    while a.poll() is None and b.poll() is None and time.time() < deadline:
        time.sleep(0.02)
    loser, winner = (a, b) if a.poll() is not None else (b, a)
    l_err = loser.communicate()[1]
    check(loser.returncode == 2 and f"PID {winner.pid}" in l_err and "train" in l_err and len(l_err.strip().splitlines()) == 1,
          f"the second writer: exit {loser.returncode}, wanted 2 naming PID {winner.pid}: {l_err}")
    # While the winner runs: a resume and a different run with --force are refused too.
    p = run("train", "--resume", out, "--quiet")
    check(p.returncode == 2 and f"PID {winner.pid}" in p.stderr, f"--resume while a train runs: exit {p.returncode}: {p.stderr}")
    p = run("train", spec, "--out", out, "--epochs", "5", "--seed", "7", "--force", "--quiet")
    check(p.returncode == 2 and f"PID {winner.pid}" in p.stderr, f"--force while a train runs: exit {p.returncode}: {p.stderr}")
    w_err = winner.communicate(timeout=120)[1]
    check(winner.returncode == 0, f"the first writer: exit {winner.returncode}: {w_err}")
    r = run_json(out)
    check(r["status"] == "complete" and r["epochs"] == int(long_epochs), f"after two writers: {r['status']} {r['epochs']}")
    # Once the holder has ended, the folder is free again.
    p = run("train", "--resume", out, "--epochs", str(int(long_epochs) + 1), "--quiet")
    check(p.returncode == 0, f"a resume after the holder ended: exit {p.returncode}: {p.stderr}")

    # 2. Durable writes: fsync before each rename and on the folder after (strace counts them, where
    # installed); GRADRUN_NO_FSYNC=1 skips them. Temporary files of dead PIDs are removed at the
    # next start, those of live ones stay.
    if shutil.which("strace"):
        for env, want in ((dict(os.environ), True), (ENV, False)):
            d = os.path.join(tmp, "fsync")
            shutil.rmtree(d, ignore_errors=True)
            p = subprocess.run(["strace", "-f", "-e", "trace=fsync,fdatasync", GR, "train", spec, "--out", d, "--epochs", "2",
                                "--quiet"], capture_output=True, text=True, env=env)
            n = p.stderr.count("fsync(")
            check(p.returncode == 0 and (n >= 2 * 8 if want else n == 0),
                  f"fsync calls with GRADRUN_NO_FSYNC={'1' if not want else 'unset'}: {n} (exit {p.returncode})")
    stale = os.path.join(tmp, "stale")
    p = run("train", spec, "--out", stale, "--epochs", "2", "--quiet")
    dead = subprocess.Popen(["true"])
    dead.wait()
    os.makedirs(os.path.join(stale, "checkpoint"), exist_ok=True)
    leftovers = [f"loss.csv.tmp.{dead.pid}", f"checkpoint/state.safetensors.tmp.{dead.pid}"]
    alive = f"metrics.csv.tmp.{os.getpid()}"
    for f in leftovers + [alive]:
        open(os.path.join(stale, f), "w").write("torn")
    p = run("train", "--resume", stale, "--epochs", "3", "--quiet")
    check(p.returncode == 0, f"resume over stale temporaries: exit {p.returncode}: {p.stderr}")
    for f in leftovers:
        check(not os.path.exists(os.path.join(stale, f)), f"a dead PID's temporary file {f} was not removed")
    check(os.path.exists(os.path.join(stale, alive)), "a live PID's temporary file was removed")

    # 3. Signals: a second SIGINT/SIGTERM during the stop is noted and ignored until the checkpoint
    # is on disk (exit 130, a resumable folder that resumes to an uninterrupted run's bytes); a
    # third ends the process at once, leaving no temporary file.
    ref = os.path.join(tmp, "ref")
    p = run("train", spec, "--out", ref, "--epochs", "300", "--quiet")

    def interrupt(out, sigs):
        proc = start("train", spec, "--out", out, "--epochs", "300", env=dict(os.environ))  # fsync on: a longer stop
        proc.stdout.readline()  # the first epoch line: training is under way
        for sig in sigs:
            proc.send_signal(sig)
            time.sleep(0.001)
        err = proc.communicate(timeout=120)[1]
        return proc.returncode, err

    for i, sigs in enumerate([(signal.SIGINT, signal.SIGINT), (signal.SIGTERM, signal.SIGINT), (signal.SIGINT, signal.SIGTERM)]):
        out = os.path.join(tmp, f"sig{i}")
        code, err = interrupt(out, sigs)
        check(code == 130 and "--resume" in err, f"two signals {sigs}: exit {code}, wanted 130 naming --resume: {err}")
        check(run_json(out)["status"] == "interrupted", f"two signals: run.json status {run_json(out)['status']}")
        p = run("train", "--resume", out, "--quiet")
        check(p.returncode == 0 and open(os.path.join(out, "loss.csv")).read() == open(os.path.join(ref, "loss.csv")).read(),
              f"two signals {sigs}: the resume differs from an uninterrupted run: {p.returncode} {p.stderr}")
    out = os.path.join(tmp, "sig3")
    code, err = interrupt(out, (signal.SIGINT, signal.SIGINT, signal.SIGINT))
    check(code in (130, -signal.SIGINT), f"three SIGINTs: exit {code}")
    # A kill inside a write may leave NAME.tmp.PID (never a torn NAME); the next train removes it.
    p = run("train", "--resume", out, "--quiet")
    leftovers = [n for _, _, names in os.walk(out) for n in names if ".tmp." in n]
    check(p.returncode == 0 and not leftovers, f"three SIGINTs, then a resume: exit {p.returncode}, temporary files {leftovers}: {p.stderr}")
    check(open(os.path.join(out, "loss.csv")).read() == open(os.path.join(ref, "loss.csv")).read(),
          "three SIGINTs, then a resume: loss.csv differs from an uninterrupted run")

    # 4. A truthful run.json. (a) SIGKILL at each rename (strace fault injection, where installed):
    # run.json says running, which another run's refusal reads as killed-or-unknown; the folder
    # resumes (or, before the first checkpoint, trains again) to the uninterrupted bytes.
    spec30 = spec_file(tmp, "iris30.json")  # 4 steps an epoch
    ref30 = os.path.join(tmp, "ref30")
    run("train", spec30, "--out", ref30, "--epochs", "200", "--quiet")
    ref_files = {f: open(os.path.join(ref30, f), "rb").read() for f in ("loss.csv", "weights.safetensors")}
    ref_weights_sha = run_json(ref30)["weights_sha256"]

    def lands_on_reference(d, what):
        if any(os.path.exists(os.path.join(d, "checkpoint", f)) for f in ("state.safetensors", "previous.safetensors")):
            p = run("train", "--resume", d, "--quiet")
        else:
            p = run("train", spec30, "--out", d, "--epochs", "200", "--quiet")
        r = run_json(d) if os.path.exists(os.path.join(d, "run.json")) else {}
        check(p.returncode == 0 and r.get("status") == "complete" and r.get("weights_sha256") == ref_weights_sha and
              open(os.path.join(d, "loss.csv"), "rb").read() == ref_files["loss.csv"],
              f"{what}: the folder does not resume to the uninterrupted run: exit {p.returncode} {p.stderr}")

    if shutil.which("strace"):
        renames = 0
        for n in range(1, 40):
            d = os.path.join(tmp, f"kill{n}")
            p = subprocess.run(["strace", "-f", "-o", "/dev/null", "-e", "trace=rename", "-e", f"inject=rename:signal=SIGKILL:when={n}",
                                GR, "train", spec30, "--out", d, "--epochs", "200", "--quiet"], capture_output=True, text=True, env=ENV)
            if p.returncode == 0:  # fewer renames than n: the run completed
                break
            renames = n
            r = run_json(d) if os.path.exists(os.path.join(d, "run.json")) else {"status": "running"}
            check(r["status"] == "running", f"SIGKILL at rename {n}: run.json says {r['status']}")
            if n == 3:
                q = run("train", spec30, "--out", d, "--epochs", "200", "--seed", "9", "--quiet")
                check(q.returncode == 2 and "killed-or-unknown" in q.stderr, f"another run over a killed one: {q.returncode} {q.stderr}")
            lands_on_reference(d, f"SIGKILL at rename {n}")
        check(renames >= 10, f"only {renames} renames were killed")
    else:
        skips.append(("build", "strace is not installed: the fsync counts and the kills at each rename did not run"))

    # (b) Disk full at each write (a small tmpfs, where this process may mount one): exit 3 with
    # status failed and the checkpoint's counters (what a resume continues from), or exit 0 with
    # status complete; after room is made, the folder resumes to the uninterrupted bytes.
    mnt = os.path.join(tmp, "mnt")
    os.makedirs(mnt)
    if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", mnt], capture_output=True).returncode != 0:
        skips.append(("build", "cannot mount a tmpfs here: the disk-full cases did not run"))
    else:
        try:
            seen = set()
            for free_kb in range(0, 200, 4):
                subprocess.run(["sh", "-c", f"rm -rf '{mnt}'/*"])
                st = os.statvfs(mnt)
                with open(os.path.join(mnt, "filler"), "wb") as f:
                    f.write(b"\0" * (st.f_bavail * st.f_frsize - free_kb * 1024))
                d = os.path.join(mnt, "run")
                p = run("train", spec30, "--out", d, "--epochs", "200", "--quiet")
                what = f"disk full with {free_kb} KiB free"
                r = run_json(d) if os.path.exists(os.path.join(d, "run.json")) else None
                if p.returncode == 0:
                    check(r["status"] == "complete", f"{what}: exit 0, status {r['status']}")
                    seen.add("complete")
                    break
                check(p.returncode == 3 and "No space left" in p.stderr and len(p.stderr.strip().splitlines()) == 1,
                      f"{what}: exit {p.returncode}: {p.stderr}")
                m = re.search(r"/run/([^:]+): ", p.stderr)
                seen.add(m.group(1).rsplit("/", 1)[-1] if m else "?")
                if r is None:
                    continue  # stopped before its first run.json
                check(r["status"] == "failed", f"{what}: status {r['status']}, wanted failed: {p.stderr}")
                res = r.get("resumable")
                check(r["epochs"] == (res["epoch"] if res else 0) and r["episodes"] == (res["step"] if res else 0),
                      f"{what}: run.json reports epochs {r['epochs']}, episodes {r['episodes']}, resumable {res}")
                if res:
                    ck = os.path.join(d, "checkpoint")
                    f = os.path.join(ck, "state.safetensors")
                    f = f if os.path.exists(f) else os.path.join(ck, "previous.safetensors")
                    raw = open(f, "rb").read()
                    meta = json.loads(raw[8:8 + int.from_bytes(raw[:8], "little")])["__metadata__"]
                    check(meta["step"] == str(res["step"]) and meta["epoch"] == str(res["epoch"]),
                          f"{what}: run.json's resumable step {res['step']} is not the checkpoint's {meta['step']}")
                os.remove(os.path.join(mnt, "filler"))
                lands_on_reference(d, what)
            for f in ("state.safetensors", "loss.csv", "metrics.csv", "loss.svg", "weights.safetensors", "run.json", "complete"):
                check(f in seen, f"disk full: no case failed at {f}: {sorted(seen)}")
        finally:
            subprocess.run(["umount", mnt])

if fails:
    print(f"{len(fails)} failures:")
    for f in fails:
        print(" -", f)
    sys.exit(1)
if skips:  # a part that could not run is Skipped in ctest (exit 77), with its reason in GR_SKIP_LOG
    for kind, why in skips:
        print(f"SKIPPED [{kind}]: {why}")
        if os.environ.get("GR_SKIP_LOG"):
            with open(os.environ["GR_SKIP_LOG"], "a") as f:
                f.write(f"{kind}\trun_folder\t{why}\n")
    sys.exit(77)
print("run folder: ok")
