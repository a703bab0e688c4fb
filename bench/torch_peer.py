#!/usr/bin/python3
"""bench/torch_peer.py — the PyTorch side of scripts/bench-peers: the same models, shapes and
optimizer as bench/peers/*.json and specs/digits.json, timed per optimizer step (batch gather,
zero_grad, forward, backward, Adam step), best of 5 windows after a warm-up.

Usage: /usr/bin/python3 bench/torch_peer.py MODEL THREADS [SECONDS] [DTYPE]
         MODEL: xor attention digits mlp784 mlp1024 autoencoder lenet digits-cnn words-transformer; DTYPE: f64 (default) or f32
Prints: model=<m> threads=<n> dtype=<d> blas_core=<c> blas_threads=<k> us_per_step=<t>
       /usr/bin/python3 bench/torch_peer.py gemm
Prints the BLAS torch has loaded and its single-thread GEMM speed (torch.mm, 512x512, best of
30): lib=<path> config=<openblas_get_config> core=<openblas_get_corename> dgemm_gflops=<x>
sgemm_gflops=<y>. scripts/bench-peers runs it once per OPENBLAS_CORETYPE to pick the kernel.

Threads: torch.set_num_threads(THREADS) and set_num_interop_threads(1). Debian's torch is built
with BLAS_INFO=generic and calls the system libblas.so.3 (OpenBLAS, pthread build), whose own
thread pool torch.set_num_threads does not touch (it stays at nproc), so the OpenBLAS pool is
also set to THREADS here through openblas_set_num_threads.
"""
import ctypes
import os
import sys
import time

import numpy as np
import torch

torch.set_num_interop_threads(1)  # before any inter-op work, or torch refuses


def openblas():
    """The OpenBLAS library loaded into this process (through torch's libblas.so.3), or None."""
    for line in open("/proc/self/maps"):
        path = line.split()[-1]
        if "libopenblas" in os.path.basename(path):
            lib = ctypes.CDLL(path)
            lib.openblas_get_corename.restype = ctypes.c_char_p
            lib.openblas_get_config.restype = ctypes.c_char_p
            return path, lib
    return None, None


def blas_libs():
    return sorted({l.split()[-1] for l in open("/proc/self/maps")
                   if any(s in os.path.basename(l.split()[-1]) for s in ("blas", "mkl", "blis"))})


if sys.argv[1] == "gemm":
    torch.set_num_threads(1)
    a = torch.randn(512, 512, dtype=torch.float64)
    a @ a  # loads and initialises the BLAS
    path, ob = openblas()
    if ob:
        ob.openblas_set_num_threads(1)
    gf = {}
    for name, dt in (("dgemm", torch.float64), ("sgemm", torch.float32)):
        x, y = torch.randn(512, 512, dtype=dt), torch.randn(512, 512, dtype=dt)
        for _ in range(3):
            torch.mm(x, y)
        best = 1e30
        for _ in range(30):
            t0 = time.perf_counter()
            torch.mm(x, y)
            best = min(best, time.perf_counter() - t0)
        gf[name] = 2 * 512 ** 3 / best / 1e9
    print("lib=%s config=%s core=%s dgemm_gflops=%.1f sgemm_gflops=%.1f" % (
        path or ",".join(blas_libs()) or "none",
        ob.openblas_get_config().decode().replace(" ", "_") if ob else "-",
        ob.openblas_get_corename().decode() if ob else "-", gf["dgemm"], gf["sgemm"]))
    sys.exit(0)

model_name, threads = sys.argv[1], int(sys.argv[2])
seconds = float(sys.argv[3]) if len(sys.argv) > 3 else 1.0
dtype_name = sys.argv[4] if len(sys.argv) > 4 else "f64"
dtype = {"f64": torch.float64, "f32": torch.float32}[dtype_name]
torch.set_num_threads(threads)
torch.manual_seed(0)
root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
T = lambda a: torch.tensor(a, dtype=dtype)


def mlp(sizes, act):
    layers = []
    for i in range(len(sizes) - 1):
        layers.append(torch.nn.Linear(sizes[i], sizes[i + 1]).to(dtype))
        if i < len(sizes) - 2:
            layers.append(act())
    return torch.nn.Sequential(*layers)


def gather_batches(X, Y, B):
    """Batch s of an epoch = rows perm[s*B:(s+1)*B], gathered by index each step (like gradrun)."""
    n = X.shape[0]
    perm = torch.randperm(n)
    steps = n // B

    def batches(step):
        rows = perm[(step % steps) * B:(step % steps + 1) * B]
        return X[rows], (X[rows] if Y is None else Y[rows])
    return batches


mse = lambda out, t: torch.mean((out - t) ** 2)

if model_name == "xor":  # bench/peers/xor.json: 2-16-1 tanh, MSE, Adam 0.01, the 4 rows each step
    x, y = T([[0, 0], [0, 1], [1, 0], [1, 1]]), T([[0], [1], [1], [0]])
    net = mlp([2, 16, 1], torch.nn.Tanh)
    opt = torch.optim.Adam(net.parameters(), lr=0.01)
    batches = lambda step: (x, y)
    loss_fn = mse
elif model_name in ("mlp784", "mlp1024", "attention", "autoencoder"):
    data = np.load(os.path.join(root, "bench", "peers", "data", model_name + ".npz"))
    X = T(data["x"])
    Y = T(data["y"]) if "y" in data else None
    loss_fn = mse
    if model_name == "mlp784":  # bench/peers/mlp784.json: 784-256-128-10 relu, MSE, Adam 1e-3, b64
        net, lr, B = mlp([784, 256, 128, 10], torch.nn.ReLU), 0.001, 64
        params = list(net.parameters())
    elif model_name == "mlp1024":  # bench/peers/mlp1024.json: 1024-1024-10 relu, MSE, Adam 1e-3, b256
        net, lr, B = mlp([1024, 1024, 10], torch.nn.ReLU), 0.001, 256
        params = list(net.parameters())
    elif model_name == "autoencoder":  # bench/peers/autoencoder.json: 6-64-32-64-6 tanh, MSE vs x, Adam 2e-3, b200
        net, lr, B = mlp([6, 64, 32, 64, 6], torch.nn.Tanh), 0.002, 200
        params = list(net.parameters())
    else:  # bench/peers/attention.json: b8 s16 w32, q/k/v matmuls, bmm, softmax, bmm, MSE, Adam 1e-3
        Wq, Wk, Wv = (torch.nn.Parameter(torch.empty(32, 32, dtype=dtype).uniform_(-0.3, 0.3)) for _ in range(3))
        params, lr, B = [Wq, Wk, Wv], 0.001, 8

        def net(x):
            xf = x.reshape(128, 32)
            q, k, v = ((xf @ W).reshape(8, 16, 32) for W in (Wq, Wk, Wv))
            att = torch.softmax(torch.bmm(q, k.transpose(1, 2)) * 0.17677669529663687, dim=-1)
            return torch.bmm(att, v)
    opt = torch.optim.Adam(params, lr=lr)
    batches = gather_batches(X, Y, B)
elif model_name == "digits":  # specs/digits.json: 64-64-10 relu, softmax CE, Adam 3e-3, L2 1e-4 on W, b64
    raw = np.loadtxt(os.path.join(root, "datasets", "digits.csv"), delimiter=",", skiprows=1)
    X = raw[:, :64]
    X = (X - X.mean(0)) / np.where(X.std(0) == 0, 1, X.std(0))
    X, labels = T(X[:1437]), torch.tensor(raw[:1437, 64].astype(np.int64))
    net = mlp([64, 64, 10], torch.nn.ReLU)
    decay = [p for n_, p in net.named_parameters() if n_.endswith("weight")]
    rest = [p for n_, p in net.named_parameters() if not n_.endswith("weight")]
    opt = torch.optim.Adam([{"params": decay, "weight_decay": 1e-4}, {"params": rest}], lr=0.003)
    batches = gather_batches(X, labels, 64)
    loss_fn = torch.nn.functional.cross_entropy
elif model_name == "lenet":  # bench/peers/lenet.json: LeNet-5 shape on synthetic 28x28, softmax CE, Adam 1e-3, b64
    data = np.load(os.path.join(root, "bench", "peers", "data", "lenet.npz"))
    X, labels = T(data["x"]), torch.tensor(np.argmax(data["y"], axis=1))
    F_ = torch.nn.functional
    net = torch.nn.Sequential(torch.nn.Conv2d(1, 6, 5, padding="same"), torch.nn.ReLU(), torch.nn.MaxPool2d(2),
                              torch.nn.Conv2d(6, 16, 5), torch.nn.ReLU(), torch.nn.MaxPool2d(2), torch.nn.Flatten(),
                              torch.nn.Linear(400, 120), torch.nn.ReLU(), torch.nn.Linear(120, 84), torch.nn.ReLU(),
                              torch.nn.Linear(84, 10)).to(dtype)
    opt = torch.optim.Adam(net.parameters(), lr=0.001)
    batches = gather_batches(X, labels, 64)
    loss_fn = torch.nn.functional.cross_entropy
elif model_name == "digits-cnn":  # specs/digits-cnn.json: conv 16 3x3 same relu, max pool 2, conv 32 3x3 same relu, dense 10
    raw = np.loadtxt(os.path.join(root, "datasets", "digits.csv"), delimiter=",", skiprows=1)
    X = raw[:, :64]
    X = (X - X.mean(0)) / np.where(X.std(0) == 0, 1, X.std(0))
    X, labels = T(X[:1437].reshape(-1, 1, 8, 8)), torch.tensor(raw[:1437, 64].astype(np.int64))
    net = torch.nn.Sequential(torch.nn.Conv2d(1, 16, 3, padding="same"), torch.nn.ReLU(), torch.nn.MaxPool2d(2),
                              torch.nn.Conv2d(16, 32, 3, padding="same"), torch.nn.ReLU(), torch.nn.Flatten(),
                              torch.nn.Linear(512, 10)).to(dtype)
    decay = [p for n_, p in net.named_parameters() if n_.endswith("weight")]
    rest = [p for n_, p in net.named_parameters() if not n_.endswith("weight")]
    opt = torch.optim.Adam([{"params": decay, "weight_decay": 1e-4}, {"params": rest}], lr=0.003)
    batches = gather_batches(X, labels, 64)
    loss_fn = torch.nn.functional.cross_entropy
elif model_name == "words-transformer":  # specs/words-transformer.json: char transformer, 2 pre-norm blocks, b32
    # Same shapes and ops as the spec: embedding [27,64] + positions [16,64]; per block layer_norm (no
    # affine, eps 1e-5), q/k/v/o nn.Linear(64, 64, bias=False), one head (scores = q·kᵀ · 0.125, an
    # explicit [16,16] causal mask filled with -inf before the softmax), residual, layer_norm,
    # nn.Linear(64,128) + GELU (tanh form, as the spec's gelu), nn.Linear(128,64), residual; final
    # layer_norm, nn.Linear(64,27), cross_entropy over the N·T positions; AdamW lr 3e-3 wd 0.1 with
    # the cosine schedule's rate set each step (as gradrun computes it on the host).
    text = open(os.path.join(root, "datasets", "words.txt")).read()
    chars = sorted(set(text))
    ids = torch.tensor([chars.index(c) for c in text], dtype=torch.int64)
    V, D, Tc, B = len(chars), 64, 16, 32
    n = (len(ids) - 1) // Tc  # non-overlapping windows: the data only feeds the batch gather
    X = ids[:n * Tc].reshape(n, Tc)
    Y = ids[1:n * Tc + 1].reshape(n, Tc)
    nn_, F_ = torch.nn, torch.nn.functional
    causal = torch.ones(Tc, Tc, dtype=torch.bool).triu(1)  # True above the diagonal: masked

    class Block(nn_.Module):
        def __init__(self):
            super().__init__()
            self.q, self.k, self.v, self.o = (nn_.Linear(D, D, bias=False) for _ in range(4))
            self.up, self.down = nn_.Linear(D, 2 * D), nn_.Linear(2 * D, D)

        def forward(self, h):
            a = F_.layer_norm(h, (D,), eps=1e-5)
            s = torch.bmm(self.q(a), self.k(a).transpose(1, 2)) * 0.125
            att = torch.softmax(s.masked_fill(causal, float("-inf")), dim=-1)
            r = h + self.o(torch.bmm(att, self.v(a)))
            return r + self.down(F_.gelu(self.up(F_.layer_norm(r, (D,), eps=1e-5)), approximate="tanh"))

    class Net(nn_.Module):
        def __init__(self):
            super().__init__()
            self.tok = nn_.Embedding(V, D)
            self.pos = nn_.Parameter(torch.randn(Tc, D) * 0.1)
            self.blocks = nn_.Sequential(Block(), Block())
            self.head = nn_.Linear(D, V)

        def forward(self, x):
            h = self.blocks(self.tok(x) + self.pos)
            return self.head(F_.layer_norm(h, (D,), eps=1e-5))

    net = Net().to(dtype)
    opt = torch.optim.AdamW(net.parameters(), lr=0.003, weight_decay=0.1)
    steps_total = 12 * (X.shape[0] // B)
    base_batches = gather_batches(X, Y, B)

    def batches(step):
        t = step % steps_total  # cosine from 3e-3 to 3e-4 over 12 epochs, as the spec's schedule
        opt.param_groups[0]["lr"] = 3e-4 + (3e-3 - 3e-4) * (1 + np.cos(np.pi * t / (steps_total - 1))) / 2
        return base_batches(step)
    loss_fn = lambda out, t: F_.cross_entropy(out.reshape(-1, out.shape[-1]), t.reshape(-1))
else:
    sys.exit("unknown model " + model_name)

path, ob = openblas()
if ob:
    ob.openblas_set_num_threads(threads)


def step(i):
    xb, yb = batches(i)
    opt.zero_grad(set_to_none=True)
    loss = loss_fn(net(xb), yb)
    loss.backward()
    opt.step()


for i in range(20):
    step(i)
best, i = 1e30, 20
for w in range(5):
    t0, k = time.perf_counter(), 0
    while time.perf_counter() - t0 < seconds / 5:
        for _ in range(10):
            step(i)
            i += 1
        k += 10
    best = min(best, 1e6 * (time.perf_counter() - t0) / k)
print("model=%s threads=%d dtype=%s blas_core=%s blas_threads=%s us_per_step=%.2f" % (
    model_name, threads, dtype_name, ob.openblas_get_corename().decode() if ob else "none",
    ob.openblas_get_num_threads() if ob else "-", best))
