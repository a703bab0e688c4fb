#!/usr/bin/python3
"""Text data, `predict` on prompts and `generate` through the command line (issue 43 items 5–6).

    /usr/bin/python3 tests/test_text_cli.py GRADRUN

With tests/specs/text_tiny.json (context 1, logits linear in the token id: the data path alone,
with ops that exist without an embedding) on datasets/words.txt:
- vocab.json (and the weights' preprocessing "text") is the sorted set of the file's characters;
  `evaluate` on the validation split and on another text file equals a NumPy forward of the saved
  weights on the windows and the positional split that tests/support/text_support.py cuts
  (within 1e-12: an independent reading of the same file); the row counts are its.
- Training lands on the same loss.csv and weight bytes on the CPU tape (1 and 2 threads), host
  per-node and host fused, f64 and f32 (f32 CPU ≡ f32 host).
- `generate` writes the same text and ids on every engine and thread count (per dtype), and the
  Python sampler (gr_exp ported op for op, the counter-based generator) reproduces every token from
  `predict --logits` on the prefixes: default, temperature 0.7 with top-k 5, temperature 0 (greedy).
- `predict` writes probabilities equal to the Python softmax (gr_exp, ascending sum) of its
  logits, bit for bit; the prompt file may be lines or a JSON array.
- "vocab": "words" splits on blanks; generate joins words with spaces.
- Exports carry the vocabulary (torch: DIR/vocab.json; onnx: FILE.vocab.json).
- Refusals, exit 2 with a located line: a prompt token outside the vocabulary, a text shorter than
  its context, an unknown vocabulary kind, "inputs" beside "text", malformed UTF-8, generate on a
  model not trained on text.
"""
import csv
import io
import json
import os
import shutil
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
GR = sys.argv[1]
sys.path.insert(0, os.path.join(ROOT, "tests", "support"))
from cli_support import Cli, read, tensors  # noqa: E402
import text_support as ts  # noqa: E402

try:
    import numpy as np
except ImportError as e:
    print("SKIPPED [numpy]: text_cli -- needs /usr/bin/python3 with numpy: %s" % e)
    sys.exit(77)

cli = Cli(GR)
check, run = cli.check, cli.run
SPEC = os.path.join(ROOT, "tests", "specs", "text_tiny.json")
WORDS = os.path.join(ROOT, "datasets", "words.txt")
tmp = tempfile.mkdtemp(prefix="gr_text_")


def train(out, *extra):
    run("train", SPEC, "--out", out, "--quiet", *extra)
    return out


def weights_of(run_dir):
    import struct
    data = read(os.path.join(run_dir, "weights.safetensors"))
    n = struct.unpack("<Q", data[:8])[0]
    header = json.loads(data[8:8 + n])
    out = {}
    for k, v in header.items():
        if k == "__metadata__":
            continue
        a, b = v["data_offsets"]
        out[k] = np.frombuffer(data[8 + n + a:8 + n + b], dtype="<f8" if v["dtype"] == "F64" else "<f4").reshape(v["shape"]).astype(np.float64)
    return out, json.loads(header["__metadata__"]["gradrun.preprocessing"])


def tiny_loss(w, xs, ys):
    """The spec's forward: logits = (0.04·x)·W + b, mean cross-entropy of the next ids."""
    x = np.array(xs, dtype=np.float64).reshape(-1, 1)
    y = np.array(ys).reshape(-1)
    z = (x * 0.04) @ w["W"] + w["b"]
    z = z - z.max(axis=1, keepdims=True)
    lp = z - np.log(np.exp(z).sum(axis=1, keepdims=True))
    return float(-lp[np.arange(len(y)), y].mean())


# ---- the data: vocabulary, windows, split ---------------------------------------------------------
text = open(WORDS, encoding="utf-8").read()
vocab = ts.vocab_of(ts.tokens_of(text, "chars"))
ids = [vocab.index(c) for c in text]
xs, ys = ts.windows(ids, 1)
n_train, n_val = ts.split(len(xs), 0.1)

f64 = train(os.path.join(tmp, "f64"))
saved = json.load(open(os.path.join(f64, "vocab.json")))
check(saved == {"kind": "chars", "context": 1, "tokens": vocab}, "vocab.json is not the sorted characters of words.txt: %s" % saved)
w, prep = weights_of(f64)
check(prep.get("text", {}).get("tokens") == vocab, "the weights' preprocessing does not carry the vocabulary")
ev = os.path.join(tmp, "ev.json")
run("evaluate", f64, "--json", ev, "--quiet")
e = json.load(open(ev))
check(e["rows"] == n_val, "validation rows %s, the positional split has %d" % (e["rows"], n_val))
want = tiny_loss(w, xs[n_train:], ys[n_train:])
check(abs(e["loss"] - want) <= 1e-12 * abs(want), "evaluate's validation loss %r, NumPy on the last %d windows %r" % (e["loss"], n_val, want))
metrics = list(csv.DictReader(open(os.path.join(f64, "metrics.csv"))))
check(float(metrics[-1]["val_loss"]) == e["loss"], "evaluate %r != metrics.csv's last val_loss %s" % (e["loss"], metrics[-1]["val_loss"]))
other = os.path.join(tmp, "other.txt")
with open(other, "w") as f:
    f.write("zebra\nquick\nfox\n")
run("evaluate", f64, "--data", other, "--json", ev, "--quiet")
e = json.load(open(ev))
oids = [vocab.index(c) for c in open(other).read()]
ox, oy = ts.windows(oids, 1)
check(e["rows"] == len(ox), "evaluate --data rows %s, want %d" % (e["rows"], len(ox)))
want = tiny_loss(w, ox, oy)
check(abs(e["loss"] - want) <= 1e-12 * abs(want), "evaluate --data loss %r, NumPy %r" % (e["loss"], want))

# ---- every engine trains to the same bytes ----------------------------------------------------------
def same_run(a, b, what):
    check(read(os.path.join(a, "loss.csv")) == read(os.path.join(b, "loss.csv")), what + ": loss.csv differs")
    check(tensors(os.path.join(a, "weights.safetensors")) == tensors(os.path.join(b, "weights.safetensors")), what + ": weights differ")


same_run(f64, train(os.path.join(tmp, "f64_t1"), "--threads", "1"), "cpu f64 1 thread vs auto")
same_run(f64, train(os.path.join(tmp, "f64_host"), "--device", "host"), "host f64 vs cpu")
same_run(f64, train(os.path.join(tmp, "f64_fused"), "--device", "host", "--fuse"), "host --fuse f64 vs cpu")
f32 = train(os.path.join(tmp, "f32"), "--dtype", "f32")
same_run(f32, train(os.path.join(tmp, "f32_host"), "--device", "host", "--dtype", "f32"), "host f32 vs cpu f32")
same_run(f32, train(os.path.join(tmp, "f32_fused"), "--device", "host", "--dtype", "f32", "--fuse"), "host --fuse f32 vs cpu f32")


# ---- generate: the same text everywhere, and the Python sampler's -----------------------------------
def generate(run_dir, *args):
    out = os.path.join(tmp, "gen.json")
    p = run("generate", run_dir, "--json", out, *args)
    return p.stdout, json.load(open(out)) if p.returncode == 0 else {}


def logits_of(run_dir, prompts):
    pf, out = os.path.join(tmp, "prompts.json"), os.path.join(tmp, "logits.csv")
    json.dump(prompts, open(pf, "w"))
    run("predict", run_dir, "--data", pf, "--logits", "--out", out, "--quiet")
    rows = list(csv.reader(open(out, newline="")))
    return rows[0], [[float(v) for v in r[2:]] for r in rows[1:]], [r[0] for r in rows[1:]]


for run_dir, dtype in ((f64, "f64"), (f32, "f32")):
    for opts in ((), ("--temperature", "0.7", "--top-k", "5", "--seed", "11"), ("--temperature", "0"), ("--prompt", "qu", "--seed", "5")):
        args = ("--tokens", "40") + opts
        if "--prompt" not in opts:
            args += ("--prompt", "")
        text0, j0 = generate(run_dir, *args)
        for engine in (("--threads", "1"), ("--threads", "2"), ("--device", "host"), ("--device", "host", "--fuse")):
            t, j = generate(run_dir, *(args + engine))
            check(t == text0 and j == j0, "%s generate %s %s: not the cpu text\n%r\n%r" % (dtype, " ".join(opts), " ".join(engine), t, text0))
        if not j0:
            continue
        temperature = float(opts[opts.index("--temperature") + 1]) if "--temperature" in opts else 1.0
        top_k = int(opts[opts.index("--top-k") + 1]) if "--top-k" in opts else 0
        seed = int(opts[opts.index("--seed") + 1]) if "--seed" in opts else 0
        prompt = opts[opts.index("--prompt") + 1] if "--prompt" in opts else ""
        start = prompt if prompt else "\n"
        made = j0["ids"]
        prefixes = [start + "".join(vocab[i] for i in made[:s]) for s in range(len(made))]
        _, z, _ = logits_of(run_dir, prefixes)
        mine = [ts.sample(z[s], temperature, top_k, seed, s) for s in range(len(made))]
        check(mine == made, "%s generate %s: the Python sampler gives %s, gradrun %s" % (dtype, " ".join(opts), mine, made))
        check(j0["text"] == prompt + "".join(vocab[i] for i in made), "%s generate: text is not prompt + decoded ids" % dtype)
        check(text0 == j0["text"] + ("" if j0["text"].endswith("\n") else "\n"), "%s generate: stdout is not the text" % dtype)

# ---- predict: probabilities are the softmax of the logits ---------------------------------------------
plines = os.path.join(tmp, "prompts.txt")
with open(plines, "w") as f:
    f.write("ab\nq\n\nzz\n")
pout = os.path.join(tmp, "p.csv")
run("predict", f64, "--data", plines, "--out", pout, "--quiet")
rows = list(csv.reader(open(pout, newline="")))
check(rows[0][:2] == ["prompt", "next"] and rows[0][2:] == [json.dumps(t)[1:-1] for t in vocab], "predict header %s" % rows[0])
check([r[0] for r in rows[1:]] == ["ab", "q", "", "zz"], "predict prompts %s" % [r[0] for r in rows[1:]])
header, z, _ = logits_of(f64, ["ab", "q", "\n", "zz"])
for r, zr in zip(rows[1:], z):
    p = [float(v) for v in r[2:]]
    check(p == ts.probabilities(zr), "predict %r: probabilities are not the softmax of its logits" % r[0])
    check(r[1] == header[2 + max(range(len(zr)), key=lambda i: (zr[i], -i))], "predict %r: next is not the argmax" % r[0])
pdev = os.path.join(tmp, "pdev.csv")
run("predict", f64, "--data", plines, "--out", pdev, "--device", "host", "--quiet")
check(read(pdev) == read(pout), "predict --device host differs from the CPU tape")

# ---- words --------------------------------------------------------------------------------------------
wtext = os.path.join(tmp, "w.txt")
with open(wtext, "w") as f:
    f.write("the cat sat on the mat\nthe dog sat on the log\n" * 20)
wvocab = ts.vocab_of(ts.tokens_of(open(wtext).read(), "words"))
wspec = json.load(open(SPEC))
wspec["data"] = {"text": wtext, "context": 1, "vocab": "words", "tokens": "tok", "targets": "nxt"}
wspec["params"]["W"]["shape"] = [1, len(wvocab)]
wspec["params"]["b"]["shape"] = [len(wvocab)]
wspec["graph"][0]["inputs"] = ["tok"]
wspec["graph"][3]["inputs"] = ["logits", "nxt"]
wpath = os.path.join(tmp, "words.json")
json.dump(wspec, open(wpath, "w"))
wrun = os.path.join(tmp, "wrun")
run("train", wpath, "--out", wrun, "--quiet")
check(json.load(open(os.path.join(wrun, "vocab.json")))["tokens"] == wvocab, "words vocabulary")
t, j = generate(wrun, "--prompt", "the cat", "--tokens", "6", "--seed", "2")
check(j.get("text") == "the cat " + " ".join(wvocab[i] for i in j.get("ids", [])), "words generate joins with spaces: %r" % j.get("text"))

# ---- exports carry the vocabulary ------------------------------------------------------------------------
run("export", f64, "--format", "torch", "--out", os.path.join(tmp, "torch"))
check(json.load(open(os.path.join(tmp, "torch", "vocab.json")))["tokens"] == vocab, "torch export: vocab.json")
run("export", f64, "--format", "onnx", "--out", os.path.join(tmp, "m.onnx"))
check(json.load(open(os.path.join(tmp, "m.vocab.json")))["tokens"] == vocab, "onnx export: m.vocab.json")

# ---- refusals ----------------------------------------------------------------------------------------------
def refused(args, *needles):
    p = run(*args, code=2)
    lines = p.stderr.strip().splitlines()
    check(len(lines) == 1 and all(s in p.stderr for s in needles), "%s: wanted one line with %s, got %r" % (" ".join(args), needles, p.stderr))


refused(("generate", f64, "--prompt", "Abc", "--tokens", "3"), "--prompt", "line 1", 'token "A" is not in the model\'s vocabulary')
def bad_spec(name, data):
    s = json.load(open(SPEC))
    s["data"] = data
    path = os.path.join(tmp, name + ".json")
    json.dump(s, open(path, "w"))
    return path


short = os.path.join(tmp, "short.txt")
open(short, "w").write("abc")
refused(("train", bad_spec("short", {"text": short, "context": 3}), "--out", os.path.join(tmp, "x")), "/data/context", "needs at least 4")
refused(("train", bad_spec("kind", {"text": short, "context": 1, "vocab": "bytes"}), "--out", os.path.join(tmp, "x")), "/data/vocab", "unknown vocabulary")
refused(("train", bad_spec("inputs", {"text": short, "context": 1, "inputs": {}}), "--out", os.path.join(tmp, "x")), "/data", "inputs")
badutf = os.path.join(tmp, "bad.txt")
open(badutf, "wb").write(b"ab\ncd\n\xff\n")
refused(("train", bad_spec("utf", {"text": badutf, "context": 1}), "--out", os.path.join(tmp, "x")), "line 3", "malformed UTF-8")
# A text with more distinct characters than the example's embedding table (27 rows): the located id
# error says what to resize.
wide = os.path.join(tmp, "wide.txt")
open(wide, "w").write("the Quick brown fox, 0123456789 JUMPS over the lazy dog!\n" * 40)
ws = json.load(open(os.path.join(ROOT, "specs", "words-transformer.json")))
ws["data"]["text"] = wide
wide_spec = os.path.join(tmp, "wide.json")
json.dump(ws, open(wide_spec, "w"))
refused(("train", wide_spec, "--out", os.path.join(tmp, "x")), "/graph/0/inputs/0", "embedding's table has 27 rows",
        "more distinct tokens", "gradrun inspect")
iris = os.path.join(tmp, "iris")
run("train", os.path.join(ROOT, "specs", "iris.json"), "--out", iris, "--quiet", "--epochs", "1")
refused(("generate", iris, "--tokens", "3"), "not trained on text data")

shutil.rmtree(tmp, ignore_errors=True)
sys.exit(cli.finish("text_cli: vocabulary, windows, split, engines, generate and its Python sampler, predict, exports, refusals: ok"))
