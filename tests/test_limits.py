#!/usr/bin/python3
"""Resource limits: inputs that ask for more than the machine can give are refused before allocating.

    /usr/bin/python3 tests/test_limits.py GRADRUN [CASE...]

Every case runs `gradrun train` under a 4 GiB address-space limit (RLIMIT_AS, as `ulimit -v
4194304` sets it) with GRADRUN_MAX_MEMORY unset, and must exit 2 with exactly one printable
`gradrun: error:` line that names the file and the place and contains the expected words — not be
killed, not run out of memory, not report a bad_alloc. The inputs are made here: a parameter of
shape [1e9, 1e9] and one that fits Shape's limit but not the budget, a safetensors header claiming
1e12 elements, npz members claiming 3.5 GB (genuinely needing ~3.4 MB of compressed data, and lying
from 4 KB), a CSV with a million columns, and the budget set lower through GRADRUN_MAX_MEMORY.
Prints `ok   NAME` / `FAIL NAME: why`, then a summary; exits 1 on any failure.
"""
import json
import os
import resource
import shutil
import struct
import subprocess
import sys
import tempfile
import zlib

LIMIT = 4 << 30

MODEL = {
    "gradrun": 1, "seed": 1,
    "params": {"w": {"shape": [1], "init": "zeros"}},
    "graph": [{"id": "m", "op": "mul", "inputs": ["x", "w"]}, {"id": "loss", "op": "mean", "inputs": ["m"]}],
    "loss": "loss", "optimizer": {"kind": "sgd", "lr": 0.1}, "train": {"epochs": 1, "batch_size": 1},
}


def spec(d, name, data=None, params=None, graph=None):
    s = json.loads(json.dumps(MODEL))
    if data is not None:
        s["data"] = data
    if params is not None:
        s["params"] = params
    if graph is not None:
        s["graph"] = graph
    path = os.path.join(d, name + ".json")
    with open(path, "w") as f:
        json.dump(s, f)
    return path


def npz_claiming(path, usize, csize):
    """A zip whose one deflated member x.npy claims `usize` bytes from `csize` bytes of data."""
    name = b"x.npy"
    data = os.urandom(csize)
    crc = 0
    local = struct.pack("<IHHHHHIIIHH", 0x04034b50, 20, 0, 8, 0, 0, crc, csize, usize, len(name), 0) + name
    central = struct.pack("<IHHHHHHIIIHHHHHII", 0x02014b50, 20, 20, 0, 8, 0, 0, crc, csize, usize, len(name), 0, 0, 0, 0, 0,
                          0) + name
    cd_off = len(local) + csize
    eocd = struct.pack("<IHHHHIIH", 0x06054b50, 0, 0, 1, 1, len(central), cd_off, 0)
    with open(path, "wb") as f:
        f.write(local + data + central + eocd)


def safetensors_claiming(path):
    header = json.dumps({"x": {"dtype": "F64", "shape": [1000000, 1000000], "data_offsets": [0, 8000000000000]},
                         "y": {"dtype": "F64", "shape": [1, 1], "data_offsets": [0, 8]}}).encode()
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(header)) + header + b"\0" * 8)


def make_cases(d):
    cases = []  # name, spec path, expected words, extra env
    cases.append(("param_1e9_x_1e9", spec(d, "p1", params={"w": {"shape": [1000000000, 1000000000], "init": "zeros"}},
                                          graph=[{"id": "loss", "op": "sum", "inputs": ["w"]}]),
                  ["/params/w", "2^40"], {}))
    cases.append(("param_over_budget", spec(d, "p2", params={"w": {"shape": [20000, 20000], "init": "zeros"}},
                                            graph=[{"id": "loss", "op": "sum", "inputs": ["w"]}]),
                  ["/params/w", "memory limit", "ulimit -v"], {}))
    cases.append(("param_over_configured_budget", spec(d, "p3", params={"w": {"shape": [1000, 1000], "init": "zeros"}},
                                                       graph=[{"id": "loss", "op": "sum", "inputs": ["w"]}]),
                  ["/params/w", "memory limit of 1.0 MiB", "GRADRUN_MAX_MEMORY"], {"GRADRUN_MAX_MEMORY": "1M"}))
    safetensors_claiming(os.path.join(d, "huge.safetensors"))
    cases.append(("safetensors_1e12_elements", spec(d, "st", data={"safetensors": "huge.safetensors",
                                                                   "inputs": {"x": {"tensor": "x"}}}),
                  ["huge.safetensors", "x", "data_offsets"], {}))
    npz_claiming(os.path.join(d, "big.npz"), 3_500_000_000, 3_400_000)
    cases.append(("npz_member_3_5_GB", spec(d, "nz", data={"npz": "big.npz", "inputs": {"x": {"tensor": "x"}}}),
                  ["big.npz", "x.npy", "memory limit"], {}))
    npz_claiming(os.path.join(d, "bomb.npz"), 3_500_000_000, 4096)
    cases.append(("npz_member_lies_from_4_KB", spec(d, "nb", data={"npz": "bomb.npz", "inputs": {"x": {"tensor": "x"}}}),
                  ["bomb.npz", "x.npy", "implausible"], {}))
    with open(os.path.join(d, "wide.csv"), "w") as f:
        f.write(",".join("c%d" % i for i in range(1000000)) + "\n" + ",".join("1" for _ in range(1000000)) + "\n")
    cases.append(("csv_million_columns", spec(d, "wc", data={"csv": "wide.csv", "inputs": {"x": {"column": "c0"}}}),
                  ["wide.csv", "line 1", "1000000 columns", "GRADRUN_MAX_CSV_COLUMNS"], {}))
    with open(os.path.join(d, "rows.csv"), "w") as f:
        f.write("c0\n" + "1\n" * 200000)
    cases.append(("csv_over_configured_budget", spec(d, "rc", data={"csv": "rows.csv", "inputs": {"x": {"column": "c0"}}}),
                  ["rows.csv", "memory limit"], {"GRADRUN_MAX_MEMORY": "1M"}))
    return cases


def limit_address_space():
    resource.setrlimit(resource.RLIMIT_AS, (LIMIT, LIMIT))


def main():
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    gradrun, only = os.path.abspath(sys.argv[1]), set(sys.argv[2:])
    d = tempfile.mkdtemp(prefix="gr_limits_")
    failed = 0
    try:
        cases = [c for c in make_cases(d) if not only or c[0] in only]
        for name, path, words, extra in cases:
            env = {k: v for k, v in os.environ.items() if k != "GRADRUN_MAX_MEMORY"}
            env.update(extra)
            p = subprocess.run([gradrun, "train", path, "--out", os.path.join(d, "out-" + name), "--quiet"], cwd=d, env=env,
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, preexec_fn=limit_address_space, timeout=120)
            err = p.stderr.decode("utf-8", "replace")
            lines = err.splitlines()
            problems = []
            if p.returncode != 2:
                problems.append(f"exit {p.returncode}")
            if len(lines) != 1 or not lines[0].startswith("gradrun: error: "):
                problems.append(f"not one error line: {err[:300]!r}")
            else:
                problems += [f"missing {w!r} in {lines[0]!r}" for w in words if w not in lines[0]]
            print(("ok   " if not problems else "FAIL ") + name + ("" if not problems else ": " + "; ".join(problems)))
            failed += bool(problems)
        print(f"{len(cases) - failed} passed, {failed} failed (address space limited to {LIMIT >> 30} GiB)")
        return 1 if failed else 0
    finally:
        shutil.rmtree(d, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
