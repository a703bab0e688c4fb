#!/usr/bin/python3
"""The window ops' documented orders (docs/numerics.md: conv2d, max_pool2d, avg_pool2d) against exact
rational arithmetic, without gradrun's definition.

    /usr/bin/python3 tests/test_window_contract.py GRADRUN

conv2d: y = fma chain from +0 over (c, i, j) ascending (a padded tap is fma(w, 0, acc)); dw = fma chain
over (n, oh, ow) ascending; dx per cell = Σ over the taps (i, j) ascending of (fma chain over the
group's f ascending), each fma computed here as the exact rational a·b + acc rounded to the nearest
double. avg_pool2d: (Σ ascending) / (kh·kw), its gradient Σ over the windows ascending of g / (kh·kw);
max_pool2d: the first largest cell, its gradient summed over the windows ascending. The slot of x
receives max_pool2d's sum, then avg_pool2d's, then conv2d's (the reverse walk). `gradrun grad`'s loss
and gradients must equal this bit for bit on the CPU tape (im2col + matmul) and the host device
engine (the per-node kernels). Inputs over 40 binades with random signs, stride, padding, dilation
and groups. Standard library only.
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
N, C, H, W = 2, 4, 6, 5
F, G, KH, KW = 6, 2, 3, 2
CONV = dict(stride=(2, 1), pad=(1, 1), dil=(1, 2))
AVG = dict(kernel=(3, 3), stride=(2, 2), pad=(1, 1))
MAX = dict(kernel=(2, 3), stride=(1, 2), pad=(1, 1))


def value(rng):
    return rng.choice((-1.0, 1.0)) * rng.uniform(1.0, 2.0) * 2.0 ** rng.randint(-20, 20)


def fma(a, b, c):
    exact = Fraction(a) * Fraction(b) + Fraction(c)
    return float(exact.numerator / exact.denominator) if exact != 0 else 0.0


def out_size(n, k, s, p, d=1):
    return (n + 2 * p - d * (k - 1) - 1) // s + 1


def xat(x, n, c, ih, iw):
    if 0 <= ih < H and 0 <= iw < W:
        return x[((n * C + c) * H + ih) * W + iw]
    return None


def conv(x, w, gy):
    (sh, sw), (ph, pw), (dh, dw) = CONV["stride"], CONV["pad"], CONV["dil"]
    oh_n, ow_n = out_size(H, KH, sh, ph, dh), out_size(W, KW, sw, pw, dw)
    cg, fg = C // G, F // G
    y = []
    for n in range(N):
        for f in range(F):
            c0 = f // fg * cg
            for oh in range(oh_n):
                for ow in range(ow_n):
                    acc = 0.0
                    for c in range(cg):
                        for i in range(KH):
                            for j in range(KW):
                                v = xat(x, n, c0 + c, oh * sh - ph + i * dh, ow * sw - pw + j * dw)
                                acc = fma(w[((f * cg + c) * KH + i) * KW + j], 0.0 if v is None else v, acc)
                    y.append(acc)
    g = lambda n, f, oh, ow: gy[((n * F + f) * oh_n + oh) * ow_n + ow]
    dw_ = []
    for f in range(F):
        c0 = f // fg * cg
        for c in range(cg):
            for i in range(KH):
                for j in range(KW):
                    acc = 0.0
                    for n in range(N):
                        for oh in range(oh_n):
                            for ow in range(ow_n):
                                v = xat(x, n, c0 + c, oh * sh - ph + i * dh, ow * sw - pw + j * dw)
                                acc = fma(g(n, f, oh, ow), 0.0 if v is None else v, acc)
                    dw_.append(acc)
    dx = []
    for n in range(N):
        for ca in range(C):
            grp, c = ca // cg, ca % cg
            for ih in range(H):
                for iw in range(W):
                    acc = 0.0
                    for i in range(KH):
                        num_h = ih + ph - i * dh
                        if num_h < 0 or num_h % sh or num_h // sh >= oh_n:
                            continue
                        for j in range(KW):
                            num_w = iw + pw - j * dw
                            if num_w < 0 or num_w % sw or num_w // sw >= ow_n:
                                continue
                            d = 0.0
                            for fl in range(fg):
                                f = grp * fg + fl
                                d = fma(w[((f * cg + c) * KH + i) * KW + j], g(n, f, num_h // sh, num_w // sw), d)
                            acc = acc + d
                    dx.append(acc)
    return y, dw_, dx


def pool(x, gy, p, is_max):
    (kh, kw), (sh, sw), (ph, pw) = p["kernel"], p["stride"], p["pad"]
    oh_n, ow_n = out_size(H, kh, sh, ph), out_size(W, kw, sw, pw)
    y, win = [], {}
    for n in range(N):
        for c in range(C):
            for oh in range(oh_n):
                for ow in range(ow_n):
                    best, acc = None, 0.0
                    for i in range(kh):
                        for j in range(kw):
                            ih, iw = oh * sh - ph + i, ow * sw - pw + j
                            v = xat(x, n, c, ih, iw)
                            if is_max:
                                if v is not None and (best is None or v > x[best]):
                                    best = ((n * C + c) * H + ih) * W + iw
                            else:
                                acc = acc + (0.0 if v is None else v)
                    y.append(x[best] if is_max else acc / (kh * kw))
                    win[(n, c, oh, ow)] = best
    dx = []
    for n in range(N):
        for c in range(C):
            for ih in range(H):
                for iw in range(W):
                    acc = 0.0
                    for oh in range(oh_n):
                        for ow in range(ow_n):
                            if not (oh * sh - ph <= ih < oh * sh - ph + kh and ow * sw - pw <= iw < ow * sw - pw + kw):
                                continue
                            gv = gy[((n * C + c) * oh_n + oh) * ow_n + ow]
                            if is_max:
                                if win[(n, c, oh, ow)] == ((n * C + c) * H + ih) * W + iw:
                                    acc = acc + gv
                            else:
                                acc = acc + gv / (kh * kw)
                    dx.append(acc)
    return y, dx


def gr_sum(xs):
    acc = 0.0
    for x in xs:
        acc = acc + x
    return acc


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
    rng = random.Random(20261203)
    X = [value(rng) for _ in range(N * C * H * W)]
    Wc = [value(rng) for _ in range(F * (C // G) * KH * KW)]
    sizes = {
        "M1": [N, F, out_size(H, KH, 2, 1, 1), out_size(W, KW, 1, 1, 2)],
        "M2": [N, C, out_size(H, 3, 2, 1), out_size(W, 3, 2, 1)],
        "M3": [N, C, out_size(H, 2, 1, 1), out_size(W, 3, 2, 1)],
    }
    M = {k: [value(rng) for _ in range(s[0] * s[1] * s[2] * s[3])] for k, s in sizes.items()}
    spec = {
        "gradrun": 1, "name": "window-contract", "seed": 1,
        "consts": {k: {"shape": sizes[k], "values": M[k]} for k in sizes},
        "params": {"X": {"shape": [N, C, H, W], "init": {"values": X}},
                   "Wc": {"shape": [F, C // G, KH, KW], "init": {"values": Wc}}},
        "graph": [{"id": "c", "op": "conv2d", "inputs": ["X", "Wc"], "stride": [2, 1], "padding": 1, "dilation": [1, 2],
                   "groups": G},
                  {"id": "c1", "op": "mul", "inputs": ["c", "M1"]},
                  {"id": "q1", "op": "sum", "inputs": ["c1"]},
                  {"id": "a", "op": "avg_pool2d", "inputs": ["X"], "kernel": 3, "stride": 2, "padding": 1},
                  {"id": "a1", "op": "mul", "inputs": ["a", "M2"]},
                  {"id": "q2", "op": "sum", "inputs": ["a1"]},
                  {"id": "m", "op": "max_pool2d", "inputs": ["X"], "kernel": [2, 3], "stride": [1, 2], "padding": 1},
                  {"id": "m1", "op": "mul", "inputs": ["m", "M3"]},
                  {"id": "q3", "op": "sum", "inputs": ["m1"]},
                  {"id": "s", "op": "add", "inputs": ["q1", "q2"]},
                  {"id": "loss", "op": "add", "inputs": ["s", "q3"]}],
        "loss": "loss", "optimizer": {"kind": "sgd", "lr": 0.1}, "train": {"epochs": 1},
    }
    yc, dWc, dx_conv = conv(X, Wc, M["M1"])
    ya, dx_avg = pool(X, M["M2"], AVG, False)
    ym, dx_max = pool(X, M["M3"], MAX, True)
    q1 = gr_sum([a * b for a, b in zip(yc, M["M1"])])
    q2 = gr_sum([a * b for a, b in zip(ya, M["M2"])])
    q3 = gr_sum([a * b for a, b in zip(ym, M["M3"])])
    dX = [((0.0 + m) + a) + c for m, a, c in zip(dx_max, dx_avg, dx_conv)]  # reverse walk: max, avg, conv
    want = {"loss": [(q1 + q2) + q3], "X": dX, "Wc": [0.0 + v for v in dWc]}

    # The conv with a separate multiply and add: the inputs must tell the two contracts apart.
    global fma
    exact_fma = fma
    fma = lambda a, b, c: c + a * b
    plain_y = conv(X, Wc, M["M1"])[0]
    fma = exact_fma
    differ = sum(1 for a, b in zip(yc, plain_y) if a != b)
    if differ < len(yc) // 4:
        print("window contract: the inputs do not separate fma from multiply-then-add (%d of %d differ)" % (differ, len(yc)))
        return 1
    fails = []
    with tempfile.TemporaryDirectory(prefix="gradrun-window-") as tmp:
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
                if name not in got:
                    fails.append("%s: no %s in the output (has %s)" % (device, name, ", ".join(sorted(got))))
                    continue
                bad = [i for i, (g, v) in enumerate(zip(got[name], values)) if bits(g) != bits(v)]
                if len(got[name]) != len(values) or bad:
                    i = bad[0] if bad else 0
                    fails.append("%s: %s differs at %d of %d elements (first [%d]: got %r, exact-fma oracle %r)" %
                                 (device, name, len(bad), len(values), i, got[name][i], values[i]))
    if fails:
        print("window contract: FAILED\n  " + "\n  ".join(fails))
        return 1
    print("window contract: loss and gradients of conv2d (groups, stride, padding, dilation), avg_pool2d and "
          "max_pool2d equal the exact-rational oracle bit for bit on cpu and host (%d of %d conv outputs differ from "
          "multiply-then-add)" % (differ, len(yc)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
