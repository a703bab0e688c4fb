#!/usr/bin/python3
"""bench/torch_peer.py — the PyTorch side of scripts/bench-peers: the same models, shapes and
optimizer as bench/peers/*.json and specs/digits.json, timed per optimizer step (batch gather,
zero_grad, forward, backward, Adam step), best of 5 windows after a warm-up.

Usage: /usr/bin/python3 bench/torch_peer.py MODEL THREADS [SECONDS] [DTYPE]
Prints: model=<m> threads=<n> dtype=<d> us_per_step=<t>
"""
import os
import sys
import time

import numpy as np
import torch

model_name, threads = sys.argv[1], int(sys.argv[2])
seconds = float(sys.argv[3]) if len(sys.argv) > 3 else 1.0
dtype = {"f64": torch.float64, "f32": torch.float32}[sys.argv[4] if len(sys.argv) > 4 else "f64"]
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


if model_name == "xor":
    x, y = T([[0, 0], [0, 1], [1, 0], [1, 1]]), T([[0], [1], [1], [0]])
    net = mlp([2, 16, 1], torch.nn.Tanh)
    opt = torch.optim.Adam(net.parameters(), lr=0.01)
    batches = lambda step: (x, y)
    loss_fn = lambda out, t: torch.mean((out - t) ** 2)
elif model_name in ("mlp784", "attention"):
    data = np.load(os.path.join(root, "bench", "peers", "data", model_name + ".npz"))
    X, Y = T(data["x"]), T(data["y"])
    B = 64 if model_name == "mlp784" else 8
    n = X.shape[0]
    if model_name == "mlp784":
        net = mlp([784, 256, 128, 10], torch.nn.ReLU)
        params = list(net.parameters())
        forward = net
    else:
        Wq, Wk, Wv = (torch.nn.Parameter(torch.empty(32, 32, dtype=dtype).uniform_(-0.3, 0.3)) for _ in range(3))
        params = [Wq, Wk, Wv]

        def forward(x):
            xf = x.reshape(128, 32)
            q, k, v = ((xf @ W).reshape(8, 16, 32) for W in (Wq, Wk, Wv))
            att = torch.softmax(torch.bmm(q, k.transpose(1, 2)) * 0.17677669529663687, dim=-1)
            return torch.bmm(att, v)
    opt = torch.optim.Adam(params, lr=0.001)
    perm = torch.randperm(n)
    batches = lambda step: (X[perm[(step % (n // B)) * B:(step % (n // B) + 1) * B]],
                            Y[perm[(step % (n // B)) * B:(step % (n // B) + 1) * B]])
    net = forward
    loss_fn = lambda out, t: torch.mean((out - t) ** 2)
elif model_name == "digits":
    raw = np.loadtxt(os.path.join(root, "datasets", "digits.csv"), delimiter=",", skiprows=1)
    X = raw[:, :64]
    X = (X - X.mean(0)) / np.where(X.std(0) == 0, 1, X.std(0))
    X, labels = T(X[:1437]), torch.tensor(raw[:1437, 64].astype(np.int64))
    net = mlp([64, 64, 10], torch.nn.ReLU)
    decay = [p for n_, p in net.named_parameters() if n_.endswith("weight")]
    rest = [p for n_, p in net.named_parameters() if not n_.endswith("weight")]
    opt = torch.optim.Adam([{"params": decay, "weight_decay": 1e-4}, {"params": rest}], lr=0.003)
    perm = torch.randperm(1437)
    batches = lambda step: (X[perm[(step % 22) * 64:(step % 22 + 1) * 64]], labels[perm[(step % 22) * 64:(step % 22 + 1) * 64]])
    loss_fn = torch.nn.functional.cross_entropy
else:
    sys.exit("unknown model " + model_name)


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
print("model=%s threads=%d dtype=%s us_per_step=%.2f" % (model_name, threads, sys.argv[4] if len(sys.argv) > 4 else "f64", best))
