#!/usr/bin/python3
"""specs/words-transformer.json (issue 43 item 7): a character-level transformer on datasets/words.txt.

    /usr/bin/python3 tests/test_words_transformer.py GRADRUN

- Trains the spec on the CPU tape and checks its validation loss (evaluate, = metrics.csv's last
  val_loss) beats a count-based bigram model computed here on the same split: the windows and the
  positional split cut by tests/support/text_support.py, P(b | a) = (count(a, b) + 1) /
  (count(a) + V) over every (x, y) pair of the training windows, its mean −log P on every pair of
  the validation windows. The CPU run must also reproduce the golden loss log
  tests/golden/text/words-transformer.loss.csv (`--expect`). It is not in tests/golden/ itself,
  where ctest's example_* loop would replay all 12 epochs on host per-node and fused (about 4 min
  each): the engines are compared here on one epoch instead.
- f64 and f32: one epoch on the CPU tape, host per-node and host fused gives the same loss.csv and
  weights (bytes).
- Both exports reproduce `predict`'s next-token probabilities on 32 prompts cut from the validation
  windows (the exports end in the spec's softmax transform, as predict does): the torch module
  (float64) to 1e-12, the ONNX model in onnxruntime-node (tools/onnxrt) in f64 to 1e-12 and in f32
  to 1e-5 (needs torch and onnxruntime-node, as scripts/setup installs).
- `generate` from the trained model writes the same words on cpu (1 and 2 threads), host and host
  --fuse; the Python sampler reproduces them from `predict --logits` (the padding after the prompt
  is invisible to the causal model).
Prints the numbers (bigram and transformer validation loss, a sample) for README/docs.
"""
import csv
import importlib.util
import json
import math
import os
import shutil
import subprocess
import sys
import tempfile

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
GR = sys.argv[1]
sys.path.insert(0, os.path.join(ROOT, "tests", "support"))
from cli_support import Cli, read, tensors  # noqa: E402
import text_support as ts  # noqa: E402

cli = Cli(GR)
check, run = cli.check, cli.run
SPEC = os.path.join(ROOT, "specs", "words-transformer.json")
spec = json.load(open(SPEC))
T, validation = spec["data"]["context"], spec["data"]["validation"]
tmp = tempfile.mkdtemp(prefix="gr_words_")

# ---- the bigram baseline on the same split ------------------------------------------------------------
text = open(os.path.join(ROOT, "datasets", "words.txt"), encoding="utf-8").read()
vocab = ts.vocab_of(ts.tokens_of(text, "chars"))
V = len(vocab)
ids = [vocab.index(c) for c in text]
xs, ys = ts.windows(ids, T)
n_train, n_val = ts.split(len(xs), validation)
counts = [[0] * V for _ in range(V)]
for x, y in zip(xs[:n_train], ys[:n_train]):
    for a, b in zip(x, y):
        counts[a][b] += 1
nll, n = 0.0, 0
for x, y in zip(xs[n_train:], ys[n_train:]):
    for a, b in zip(x, y):
        nll -= math.log((counts[a][b] + 1) / (sum(counts[a]) + V))
        n += 1
bigram = nll / n

# ---- the transformer -------------------------------------------------------------------------------------
out = os.path.join(tmp, "run")
GOLDEN = os.path.join(ROOT, "tests", "golden", "text", "words-transformer.loss.csv")
run("train", SPEC, "--out", out, "--quiet", "--expect", GOLDEN)  # exit 0 checked by run()
ev = os.path.join(tmp, "ev.json")
run("evaluate", out, "--json", ev, "--quiet")
e = json.load(open(ev)) if os.path.exists(ev) else {"loss": math.inf, "rows": -1}
check(e["rows"] == n_val, "validation windows: evaluate %s, the split here %d" % (e["rows"], n_val))
check(e["loss"] < bigram, "the transformer's validation loss %r does not beat the bigram's %r" % (e["loss"], bigram))
print("bigram (add-one) validation loss %.4f nats over %d positions; transformer %.4f" % (bigram, n, e["loss"]))

# ---- f64 and f32: the same bytes on every engine (one epoch) ---------------------------------------------------
for dtype in ("f64", "f32"):
    runs = []
    for engine in ((), ("--device", "host"), ("--device", "host", "--fuse")):
        d = os.path.join(tmp, "%s-%d" % (dtype, len(runs)))
        run("train", SPEC, "--out", d, "--quiet", "--dtype", dtype, "--epochs", "1", *engine)
        runs.append(d)
    for d in runs[1:]:
        check(read(os.path.join(d, "loss.csv")) == read(os.path.join(runs[0], "loss.csv")),
              "%s %s: loss.csv differs from the CPU tape" % (dtype, d))
        check(tensors(os.path.join(d, "weights.safetensors")) == tensors(os.path.join(runs[0], "weights.safetensors")),
              "%s %s: weights differ from the CPU tape" % (dtype, d))

# ---- both exports against predict ------------------------------------------------------------------
prompts = ["".join(vocab[i] for i in xs[n_train + k][: 1 + k % T]) for k in range(32)]
pf, lo = os.path.join(tmp, "prompts.json"), os.path.join(tmp, "val-probs.csv")
json.dump(prompts, open(pf, "w"))
run("predict", out, "--data", pf, "--out", lo, "--quiet")
want = np.array([[float(v) for v in r[2:]] for r in list(csv.reader(open(lo, newline="")))[1:]]) if os.path.exists(lo) else None
check(want is not None and want.shape == (32, V), "predict: %s" % (None if want is None else want.shape,))
X = np.zeros((32, T))  # the prompts right-padded with id 0, as predict feeds them (docs/cli.md)
for k, pr in enumerate(prompts):
    X[k, : len(pr)] = [vocab.index(c) for c in pr]
last = [len(pr) - 1 for pr in prompts]
tdir = os.path.join(tmp, "torch")
run("export", out, "--format", "torch", "--out", tdir)
import torch  # noqa: E402  (scripts/setup installs python3-torch)
spec_mod = importlib.util.spec_from_file_location("words_model", os.path.join(tdir, "model.py"))
mod = importlib.util.module_from_spec(spec_mod)
spec_mod.loader.exec_module(mod)
with torch.no_grad():
    got = mod.Model.from_dir(tdir)(torch.tensor(X)).numpy()
got = got[np.arange(32), last]
err = np.abs(got - want).max() if want is not None else math.inf
check(err < 1e-12, "torch export vs predict: max |diff| %.3g" % err)
print("torch export vs predict: max |diff| %.2g" % err)
feeds = os.path.join(tmp, "feeds.json")
json.dump({"x": {"dims": [32, T], "data": X.reshape(-1).tolist()}}, open(feeds, "w"))
for dtype, tol in (("f64", 1e-12), ("f32", 1e-5)):
    model = os.path.join(tmp, "words-%s.onnx" % dtype)
    run("export", out, "--format", "onnx", "--dtype", dtype, "--out", model)
    r = subprocess.run(["node", os.path.join(ROOT, "tools", "onnxrt", "run.js"), model, feeds], capture_output=True, text=True)
    check(r.returncode == 0, "onnxruntime (%s): %s" % (dtype, r.stderr[-600:]))
    if r.returncode == 0 and want is not None:
        o = list(json.loads(r.stdout).values())[0]
        got = np.array(o["data"]).reshape(o["dims"])[np.arange(32), last]
        err = np.abs(got - want).max()
        check(err <= tol, "onnxruntime (%s) vs predict: max |diff| %.3g" % (dtype, err))
        print("onnxruntime %s vs predict: max |diff| %.2g" % (dtype, err))

# ---- generate ---------------------------------------------------------------------------------------------------
gen = os.path.join(tmp, "gen.json")
args = ("--prompt", "", "--tokens", "60", "--seed", "1", "--temperature", "0.8")
p = run("generate", out, "--json", gen, *args)
sample = p.stdout
made = json.load(open(gen))["ids"] if p.returncode == 0 else []
for engine in (("--threads", "1"), ("--threads", "2"), ("--device", "host"), ("--device", "host", "--fuse")):
    q = run("generate", out, *(args + engine))
    check(q.stdout == sample, "generate %s: not the CPU tape's text" % " ".join(engine))
prefixes = ["\n" + "".join(vocab[i] for i in made[:s]) for s in range(len(made))]
pf, lo = os.path.join(tmp, "prefixes.json"), os.path.join(tmp, "logits.csv")
json.dump(prefixes, open(pf, "w"))
run("predict", out, "--data", pf, "--logits", "--out", lo, "--quiet")
rows = list(csv.reader(open(lo, newline="")))[1:] if os.path.exists(lo) else []
mine = [ts.sample([float(v) for v in r[2:]], 0.8, 0, 1, s) for s, r in enumerate(rows)]
check(mine == made, "the Python sampler gives %s, gradrun %s" % (mine, made))
print("generated (seed 1, temperature 0.8): " + " ".join(sample.split()))

shutil.rmtree(tmp, ignore_errors=True)
sys.exit(cli.finish("words_transformer: beats the bigram (%.4f < %.4f), golden log, engines f64/f32 agree, exports = predict, generate reproduced" % (e["loss"], bigram)))
