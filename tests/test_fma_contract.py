#!/usr/bin/python3
"""The dot-product contract (docs/numerics.md) against exact rational arithmetic.

    /usr/bin/python3 tests/test_fma_contract.py GRADRUN

Every dot product is acc = 0; acc = fma(a_k, b_k, acc) for k ascending, each fma one rounding of the
exact a·b + acc. This test does not use gradrun's definition: it computes each fma as the exact
rational a·b + acc (fractions.Fraction) rounded to the nearest double (int / int true division is
correctly rounded in CPython), and checks `gradrun grad` — the loss and both gradients of
sum(matmul(A, B) * W) + sum(bmm(A3, B3) * W3) — bit for bit, on the CPU tape and on the host device
engine. The inputs spread over 40 binades with random signs, so a separate multiply and add (the old
contract), another k order or a contraction the compiler chose would change many of the bits.
Shapes cover the CPU matmul's tiled path with ragged edges (37x29x23) and the batched one.
Standard library only.
"""
import json
import os
import random
import struct
import subprocess
import sys
import tempfile
from fractions import Fraction

GR = sys.argv[1]
M, K, N = 37, 29, 23       # matmul: tiles of 12 rows and 16 columns with ragged edges
BT, BM, BK, BN = 3, 5, 9, 4  # bmm


def value(rng):
    return rng.choice((-1.0, 1.0)) * rng.uniform(1.0, 2.0) * 2.0 ** rng.randint(-20, 20)


def fma(a, b, c):
    exact = Fraction(a) * Fraction(b) + Fraction(c)
    return float(exact.numerator / exact.denominator) if exact != 0 else 0.0


def dot(xs, ys):
    acc = 0.0
    for x, y in zip(xs, ys):
        acc = fma(x, y, acc)
    return acc


def matmul(a, b):  # lists of rows
    cols = list(zip(*b))
    return [[dot(row, col) for col in cols] for row in a]


def transpose(a):
    return [list(r) for r in zip(*a)]


def gr_sum(xs):
    acc = 0.0
    for x in xs:
        acc = acc + x
    return acc


def rows(flat, r, c):
    return [flat[i * c:(i + 1) * c] for i in range(r)]


def read_safetensors(path):
    data = open(path, "rb").read()
    n = struct.unpack("<Q", data[:8])[0]
    header = json.loads(data[8:8 + n])
    out = {}
    for name, t in header.items():
        if name == "__metadata__":
            continue
        lo, hi = t["data_offsets"]
        out[name] = list(struct.unpack("<%dd" % ((hi - lo) // 8), data[8 + n + lo:8 + n + hi]))
    return out


def bits(x):
    return struct.pack("<d", x + 0.0)  # 0 + x: the gradient slots start at +0.0


def main():
    rng = random.Random(20261201)
    A = [value(rng) for _ in range(M * K)]
    B = [value(rng) for _ in range(K * N)]
    W = [value(rng) for _ in range(M * N)]
    A3 = [value(rng) for _ in range(BT * BM * BK)]
    B3 = [value(rng) for _ in range(BT * BK * BN)]
    W3 = [value(rng) for _ in range(BT * BM * BN)]
    spec = {
        "gradrun": 1, "name": "fma-contract", "seed": 1,
        "consts": {"W": {"shape": [M, N], "values": W}, "W3": {"shape": [BT, BM, BN], "values": W3}},
        "params": {"A": {"shape": [M, K], "init": {"values": A}}, "B": {"shape": [K, N], "init": {"values": B}},
                   "A3": {"shape": [BT, BM, BK], "init": {"values": A3}},
                   "B3": {"shape": [BT, BK, BN], "init": {"values": B3}}},
        "graph": [{"id": "P", "op": "matmul", "inputs": ["A", "B"]},
                  {"id": "Q", "op": "mul", "inputs": ["P", "W"]},
                  {"id": "q", "op": "sum", "inputs": ["Q"]},
                  {"id": "P3", "op": "bmm", "inputs": ["A3", "B3"]},
                  {"id": "Q3", "op": "mul", "inputs": ["P3", "W3"]},
                  {"id": "q3", "op": "sum", "inputs": ["Q3"]},
                  {"id": "loss", "op": "add", "inputs": ["q", "q3"]}],
        "loss": "loss", "optimizer": {"kind": "sgd", "lr": 0.1}, "train": {"epochs": 1},
    }

    # The oracle: forward P = A·B, loss = sum(P*W) + sum(P3*W3); backward dP = W, dA = dP·Bᵀ, dB = Aᵀ·dP.
    a, b, w = rows(A, M, K), rows(B, K, N), rows(W, M, N)
    p = matmul(a, b)
    q = gr_sum([p[i][j] * w[i][j] for i in range(M) for j in range(N)])
    want = {"A": [x for r in matmul(w, transpose(b)) for x in r], "B": [x for r in matmul(transpose(a), w) for x in r]}
    q3, dA3, dB3 = [], [], []
    for t in range(BT):
        a3 = rows(A3[t * BM * BK:(t + 1) * BM * BK], BM, BK)
        b3 = rows(B3[t * BK * BN:(t + 1) * BK * BN], BK, BN)
        w3 = rows(W3[t * BM * BN:(t + 1) * BM * BN], BM, BN)
        p3 = matmul(a3, b3)
        q3 += [p3[i][j] * w3[i][j] for i in range(BM) for j in range(BN)]
        dA3 += [x for r in matmul(w3, transpose(b3)) for x in r]
        dB3 += [x for r in matmul(transpose(a3), w3) for x in r]
    want["A3"], want["B3"] = dA3, dB3
    want["loss"] = [q + gr_sum(q3)]

    # The same with a separate multiply and add: the test must tell the two contracts apart.
    old = sum(1 for i in range(M) for j in range(N)
              if p[i][j] != gr_sum([a[i][k] * b[k][j] for k in range(K)]))
    if old < M * N // 4:
        print("fma contract: the inputs do not separate fma from multiply-then-add (%d of %d differ)" % (old, M * N))
        return 1

    fails = []
    with tempfile.TemporaryDirectory(prefix="gradrun-fma-") as tmp:
        path = os.path.join(tmp, "spec.json")
        with open(path, "w") as f:
            json.dump(spec, f)
        for device in ("cpu", "host"):
            out = os.path.join(tmp, device + ".safetensors")
            r = subprocess.run([GR, "grad", path, "--device", device, "--out", out], capture_output=True, text=True)
            if r.returncode != 0:
                fails.append("%s: grad exited %d: %s" % (device, r.returncode, r.stderr.strip()))
                continue
            got = read_safetensors(out)
            for name, values in want.items():
                bad = [i for i, (g, v) in enumerate(zip(got[name], values)) if bits(g) != bits(v)]
                if len(got[name]) != len(values) or bad:
                    i = bad[0] if bad else 0
                    fails.append("%s: %s differs at %d of %d elements (first [%d]: got %r, exact-fma oracle %r)" %
                                 (device, name, len(bad), len(values), i, got[name][i], values[i]))
    if fails:
        print("fma contract: FAILED\n  " + "\n  ".join(fails))
        return 1
    print("fma contract: loss and gradients of matmul and bmm equal the exact-rational fma oracle bit for bit "
          "on cpu and host (%d of %d matmul outputs differ from multiply-then-add)" % (old, M * N))
    return 0


if __name__ == "__main__":
    sys.exit(main())
