#!/usr/bin/python3
"""Diagnostics through spdlog (issue 14 item 8): --log-level, --log-file, --quiet.

    /usr/bin/python3 tests/test_diagnostics.py GRADRUN

Results stay on stdout (epoch lines, the summary); diagnostics (device choice, compile-cache hits,
timings, warnings, errors) go to stderr as "gradrun: ..." lines filtered by --log-level, and with
--log-file also to that file, every line timestamped. --quiet leaves only errors. Standard library only.
"""
import os
import re
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
GR = sys.argv[1] if len(sys.argv) > 1 else os.path.join(ROOT, "build/apps/gradrun/gradrun")
XOR = os.path.join(ROOT, "specs/xor.json")
STAMP = re.compile(r"^\[\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d{3}\] \[(trace|debug|info|warning|error)\] ")
fails = []


def check(ok, what):
    if not ok:
        fails.append(what)


def run(*args, code=0):
    p = subprocess.run([GR, *args], capture_output=True, text=True, timeout=300)
    if p.returncode != code:
        fails.append(f"{' '.join(args)}: exit {p.returncode}, wanted {code}\n{p.stderr}")
    return p


def main():
    with tempfile.TemporaryDirectory(prefix="gradrun-diag-") as tmp:
        out = os.path.join(tmp, "run")
        common = ["train", XOR, "--out", out, "--force", "--device", "host", "--epochs", "3"]

        # default (info): the device line is a diagnostic on stderr, results on stdout
        p = run(*common)
        check(any(l.startswith("gradrun: device: host") for l in p.stderr.splitlines()), f"no device line on stderr: {p.stderr!r}")
        check("device:" not in p.stdout, f"a diagnostic on stdout: {p.stdout!r}")
        check("trained xor: 12 steps" in p.stdout or "trained xor:" in p.stdout, f"no summary on stdout: {p.stdout!r}")
        check("debug:" not in p.stderr, f"debug lines at the default level: {p.stderr!r}")

        # --quiet: nothing on success, on either stream
        p = run(*common, "--quiet")
        check(p.stdout == "" and p.stderr == "", f"--quiet printed {p.stdout!r} {p.stderr!r}")

        # --log-level warning drops info; error-free runs print only results
        p = run(*common, "--log-level", "warning")
        check(p.stderr == "", f"--log-level warning printed {p.stderr!r}")

        # --log-level debug --log-file: cache hits or compiles, capture timing, epochs; timestamps in the file
        log = os.path.join(tmp, "diag.log")
        p = run(*common, "--log-level", "debug", "--log-file", log)
        text = open(log).read()
        lines = text.splitlines()
        check(lines and all(STAMP.match(l) for l in lines), f"log lines without a timestamp: {lines[:3]!r}")
        check(re.search(r"\[debug\] host backend: (compiled )?kernel module '\w+' (from the cache|in \d+ ms)", text) is not None,
              f"no kernel-cache line in the log: {text!r}")
        check("[debug] device: episode captured in" in text, f"no capture timing in the log: {text!r}")
        check("[info] device: host" in text, f"no device line in the log: {text!r}")
        check("[debug] epoch 3: mean train loss" in text, f"no epoch timing in the log: {text!r}")
        check("gradrun: debug: epoch 3" in p.stderr, f"debug not on stderr: {p.stderr!r}")

        # --quiet with --log-file: the console is quiet, the file still gets the chosen level (appended)
        p = run(*common, "--quiet", "--log-file", log)
        after = open(log).read()
        check(p.stderr == "" and after.startswith(text) and "[info] device: host" in after[len(text):],
              f"--quiet --log-file: stderr {p.stderr!r}, appended {after[len(text):]!r}")

        # warnings: more threads than cores
        p = run(*common, "--threads", "1024", "--log-level", "warning")
        check(re.search(r"^gradrun: warning: --threads 1024 is more than", p.stderr, re.M) is not None,
              f"no threads warning: {p.stderr!r}")

        # errors: one line on stderr, also in the file
        elog = os.path.join(tmp, "error.log")
        p = run("train", os.path.join(tmp, "missing.json"), "--log-file", elog, code=3)  # unreadable: 3 (docs/cli.md)
        check(len(p.stderr.splitlines()) == 1 and p.stderr.startswith("gradrun: error: "), f"error line: {p.stderr!r}")
        check("[error] " in open(elog).read(), "the error is not in the log file")

        # bad flags
        p = run(*common, "--log-level", "loud", code=2)
        check("--log-level loud" in p.stderr and "debug" in p.stderr, f"bad level: {p.stderr!r}")
        p = run(*common, "--log-file", os.path.join(elog, "log.txt"), code=3)  # under a regular file: cannot be made
        check(p.stderr.startswith("gradrun: error: --log-file") and len(p.stderr.splitlines()) == 1, f"bad log file: {p.stderr!r}")

    if fails:
        print("diagnostics: FAILED\n  " + "\n  ".join(fails))
        return 1
    print("diagnostics: ok")
    return 0


if __name__ == "__main__":
    sys.exit(main())
