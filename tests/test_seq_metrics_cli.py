#!/usr/bin/python3
"""Accuracy and the class metrics on a sequence (issue 43): "metrics": {"accuracy": ...} on logits
[N, T, V] with next-token ids [N, T].

    /usr/bin/python3 tests/test_seq_metrics_cli.py GRADRUN

With tests/specs/text_seq_metrics.json (one causal attention head over token and position
embeddings, context 8, on datasets/words.txt):
- `evaluate --json` on the validation split: rows × positions counted, and accuracy, macro-F1,
  balanced accuracy and the confusion matrix equal (==, not within a tolerance) what NumPy computes
  by hand from `predict --logits` on every prefix of every validation window (causal: the logits at
  position t are the prompt x[0..t]'s next-token logits): argmax over V per position, the first on
  ties; accuracy = hits / (N·T); macro-F1 the mean of 2tp/(2tp+fp+fn) over the classes that occur,
  summed in class order. The text report prints them too.
- metrics.csv (val_accuracy, train_accuracy, val_f1), the epoch log and run.json
  (final_val_accuracy) carry them; metrics.csv's last val_accuracy and val_f1 are evaluate's;
  receipt.json pins metrics.csv (its digest is the same on every engine of a dtype).
- metrics.csv is the same bytes (the seconds column aside) on the CPU tape (1 and 2 threads), host
  per-node and host fused, f64 and f32; metrics do not change the loss (loss.csv with and without
  the metric are the same bytes).
- A CSV of sequences (ids [B, 4] from columns, embedding → dense → cross_entropy): evaluate --data's
  accuracy over B·4 positions equals the share of predict's per-position classes that match.
- Refusal: integer label columns that are no one-hot rows, fed to softmax_cross_entropy (exit 2 at
  /metrics/accuracy/labels): only a cross_entropy's labels may be several class ids per row.
- Refusal: an accuracy whose labels do not match the sequence's logits (kt [B, 16, 8] with ids [B, 8]):
  exit 2, located at /metrics/accuracy.
"""
import csv
import json
import os
import shutil
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
GR = sys.argv[1]
sys.path.insert(0, os.path.join(ROOT, "tests", "support"))
from cli_support import Cli, read  # noqa: E402
import text_support as ts  # noqa: E402

try:
    import numpy as np
except ImportError as e:
    print("SKIPPED [numpy]: seq_metrics_cli -- needs /usr/bin/python3 with numpy: %s" % e)
    sys.exit(77)

cli = Cli(GR)
check, run = cli.check, cli.run
SPEC = os.path.join(ROOT, "tests", "specs", "text_seq_metrics.json")
WORDS = os.path.join(ROOT, "datasets", "words.txt")
T = 8
tmp = tempfile.mkdtemp(prefix="gr_seqm_")


def train(name, *extra):
    out = os.path.join(tmp, name)
    run("train", SPEC, "--out", out, "--quiet", *extra)
    return out


def no_seconds(path):
    """metrics.csv without its seconds column (wall time is the one thing engines may not share)."""
    rows = list(csv.reader(open(path, newline="")))
    k = rows[0].index("seconds")
    return [r[:k] + r[k + 1:] for r in rows]


# ---- the validation windows, as tests/support/text_support.py cuts them ------------------------------
text = open(WORDS, encoding="utf-8").read()
vocab = ts.vocab_of(ts.tokens_of(text, "chars"))
V = len(vocab)
ids = [vocab.index(c) for c in text]
xs, ys = ts.windows(ids, T)
n_train, n_val = ts.split(len(xs), 0.05)
vx, vy = xs[n_train:], ys[n_train:]

f64 = os.path.join(tmp, "f64")
p = run("train", SPEC, "--out", f64)  # not quiet: the epoch log
check("val_accuracy" in p.stdout and "val_f1" in p.stdout and "train_accuracy" in p.stdout,
      "the epoch log lacks val_accuracy / val_f1 / train_accuracy:\n" + p.stdout[-2000:])

# ---- evaluate against NumPy on predict --logits ------------------------------------------------------
ev = os.path.join(tmp, "ev.json")
p = run("evaluate", f64, "--json", ev)
e = json.load(open(ev))
check(e["rows"] == n_val and e.get("positions") == n_val * T, "evaluate counts %s rows, %s positions; want %d, %d" %
      (e["rows"], e.get("positions"), n_val, n_val * T))
check("accuracy" in p.stdout and "macro_f1" in p.stdout and "× %d positions" % T in p.stdout,
      "evaluate's text report lacks accuracy / macro_f1 / positions:\n" + p.stdout[:1500])

prompts = ["".join(vocab[i] for i in x[:t + 1]) for x in vx for t in range(T)]
pf, out = os.path.join(tmp, "prompts.json"), os.path.join(tmp, "logits.csv")
json.dump(prompts, open(pf, "w"))
run("predict", f64, "--data", pf, "--logits", "--out", out, "--quiet")
rows = list(csv.reader(open(out, newline="")))
z = np.array([[float(v) for v in r[2:]] for r in rows[1:]])
check(z.shape == (n_val * T, V), "predict --logits gave %s, want %s" % (z.shape, (n_val * T, V)))
pred = np.argmax(z, axis=1)  # the first of equal maxima, as gradrun's argmax
truth = np.array(vy).reshape(-1)
hits = int((pred == truth).sum())
accuracy = hits / (n_val * T)
check(e.get("accuracy") == accuracy, "evaluate accuracy %r, NumPy on predict --logits %r (%d of %d)" %
      (e.get("accuracy"), accuracy, hits, n_val * T))
check(0.15 < accuracy < 1.0, "a trained next-character accuracy of %r is implausible" % accuracy)
conf = np.zeros((V, V), dtype=np.int64)
np.add.at(conf, (truth, pred), 1)
check(e.get("confusion_matrix") == conf.tolist(), "evaluate's confusion matrix differs from NumPy's")
f1_sum, f1_n, rec_sum, rec_n = 0.0, 0, 0.0, 0
for c in range(V):
    tp, fp, fn = int(conf[c, c]), int(conf[:, c].sum() - conf[c, c]), int(conf[c, :].sum() - conf[c, c])
    if tp + fn + tp + fp > 0:
        f1_sum, f1_n = f1_sum + (2 * tp / (2 * tp + fp + fn) if 2 * tp + fp + fn else 0.0), f1_n + 1
    if tp + fn > 0:
        rec_sum, rec_n = rec_sum + tp / (tp + fn), rec_n + 1
check(e.get("macro_f1") == f1_sum / f1_n, "evaluate macro_f1 %r, NumPy %r" % (e.get("macro_f1"), f1_sum / f1_n))
check(e.get("balanced_accuracy") == rec_sum / rec_n, "evaluate balanced_accuracy %r, NumPy %r" % (e.get("balanced_accuracy"), rec_sum / rec_n))
check(e.get("class_names") == [json.dumps(t)[1:-1] for t in vocab] or len(e.get("class_names", [])) == V,
      "class_names are not the %d tokens: %s" % (V, e.get("class_names")))

# ---- metrics.csv, receipt --------------------------------------------------------------------------
m = list(csv.DictReader(open(os.path.join(f64, "metrics.csv"))))
check(float(m[-1]["val_accuracy"]) == e["accuracy"], "metrics.csv val_accuracy %s != evaluate %r" % (m[-1]["val_accuracy"], e["accuracy"]))
check("val_f1" in m[-1] and float(m[-1]["val_f1"]) == e["macro_f1"], "metrics.csv val_f1 %s != evaluate %r" % (m[-1].get("val_f1"), e["macro_f1"]))
check(all(0.0 < float(r["train_accuracy"]) < 1.0 for r in m), "metrics.csv train_accuracy: %s" % [r["train_accuracy"] for r in m])
run_json = json.load(open(os.path.join(f64, "run.json")))
check(run_json.get("final_val_accuracy") == e["accuracy"], "run.json final_val_accuracy %r != %r" % (run_json.get("final_val_accuracy"), e["accuracy"]))


def metrics_digest(d):
    """receipt.json's SHA-256 of metrics.csv (its seconds column aside): what pins the metrics for CI."""
    return json.load(open(os.path.join(d, "receipt.json")))["files"].get("metrics.csv")


check(metrics_digest(f64) is not None, "receipt.json does not pin metrics.csv")

# ---- every engine: the same metrics.csv bytes; the metric leaves the loss alone -----------------------
base = no_seconds(os.path.join(f64, "metrics.csv"))
for name, extra in (("t1", ("--threads", "1")), ("t2", ("--threads", "2")), ("host", ("--device", "host")),
                    ("fused", ("--device", "host", "--fuse"))):
    d = train("f64_" + name, *extra)
    check(no_seconds(os.path.join(d, "metrics.csv")) == base, "f64 %s: metrics.csv differs from the CPU tape's" % name)
    check(metrics_digest(d) == metrics_digest(f64), "f64 %s: receipt.json's metrics.csv digest differs" % name)
f32 = train("f32", "--dtype", "f32")
b32 = no_seconds(os.path.join(f32, "metrics.csv"))
check(b32 != base, "f32 metrics.csv equals f64's: the dtype did not reach training")
for name, extra in (("host", ("--device", "host")), ("fused", ("--device", "host", "--fuse")), ("t1", ("--threads", "1"))):
    d = train("f32_" + name, "--dtype", "f32", *extra)
    check(no_seconds(os.path.join(d, "metrics.csv")) == b32, "f32 %s: metrics.csv differs from the f32 CPU tape's" % name)
    check(metrics_digest(d) == metrics_digest(f32), "f32 %s: receipt.json's metrics.csv digest differs" % name)
plain = train("nometric", "--set", "metrics={}")
check(read(os.path.join(plain, "loss.csv")) == read(os.path.join(f64, "loss.csv")), "the accuracy metric changed loss.csv")

# ---- refusal -----------------------------------------------------------------------------------------
p = run("train", SPEC, "--out", os.path.join(tmp, "bad"), "--set", "metrics.accuracy.logits=kt", code=2)  # [B, 16, 8] vs ids [B, 8]
check("/metrics/accuracy" in p.stderr and "[B, T, C]" in p.stderr, "an accuracy on kt [B,16,8] with ids [B,8]: not refused, located:\n" + p.stderr)

# ---- a CSV of sequences: ids [B, 4] from columns, accuracy over B·4 positions == predict's classes ----
rng = np.random.default_rng(3)
B, TT, VV = 96, 4, 5
cx = rng.integers(0, VV, size=(B, TT))
cy = (cx + 1) % VV  # learnable: the next id
cy[::7, 2] = 0      # with some noise
csv_path = os.path.join(tmp, "seq.csv")
with open(csv_path, "w") as f:
    f.write(",".join(["x%d" % t for t in range(TT)] + ["y%d" % t for t in range(TT)]) + "\n")
    for r in range(B):
        f.write(",".join(str(v) for v in list(cx[r]) + list(cy[r])) + "\n")
seq_spec = {
    "gradrun": 1, "name": "csv_seq_metrics", "seed": 3,
    "data": {"csv": csv_path, "validation": 0.25,
             "inputs": {"x": {"columns": ["x%d" % t for t in range(TT)]}, "y": {"columns": ["y%d" % t for t in range(TT)]}}},
    "params": {"tok": {"shape": [VV, 8], "init": {"kind": "normal", "std": 0.5}}},
    "graph": [{"id": "emb", "op": "embedding", "inputs": ["x", "tok"]},
              {"id": "logits", "layer": "dense", "inputs": ["emb"], "units": VV},
              {"id": "loss", "op": "cross_entropy", "inputs": ["logits", "y"]}],
    "loss": "loss",
    "metrics": {"accuracy": {"logits": "logits", "labels": "y"}},
    "optimizer": {"kind": "adam", "lr": 0.05},
    "train": {"epochs": 3, "batch_size": 8, "shuffle": False},
}
sp = os.path.join(tmp, "csv_seq.json")
json.dump(seq_spec, open(sp, "w"))
cs = os.path.join(tmp, "csv_seq")
run("train", sp, "--out", cs, "--quiet")
run("evaluate", cs, "--json", ev, "--quiet")
e = json.load(open(ev)) if os.path.exists(ev) else {}
vrows = os.path.join(tmp, "val.csv")
shutil.copy(csv_path, vrows)  # every row: predict and evaluate --data read the same file
pout = os.path.join(tmp, "pred.csv")
run("predict", cs, "--data", vrows, "--out", pout, "--quiet")
pr = list(csv.DictReader(open(pout, newline=""))) if os.path.exists(pout) else []
cls = np.array([int(r["class"]) for r in pr]).reshape(B, TT) if len(pr) == B * TT else np.zeros((B, TT), dtype=int)
run("evaluate", cs, "--data", csv_path, "--json", ev, "--quiet")
e_all = json.load(open(ev)) if os.path.exists(ev) else {}
want = int((cls == cy).sum()) / (B * TT)
check(e_all.get("positions") == B * TT and e_all.get("accuracy") == want,
      "CSV sequence: evaluate --data accuracy %r over %s positions, predict's classes give %r" % (e_all.get("accuracy"), e_all.get("positions"), want))
check(e.get("accuracy") is not None and float(list(csv.DictReader(open(os.path.join(cs, "metrics.csv"))))[-1]["val_accuracy"]) == e["accuracy"],
      "CSV sequence: metrics.csv val_accuracy != evaluate's %r" % e.get("accuracy"))
# integer labels that are no one-hot rows beside logits [B, C]: refused (their ids pass the data check)
flat = dict(seq_spec, params={}, graph=[{"id": "logits", "layer": "dense", "inputs": ["x"], "units": TT},
                             {"id": "loss", "op": "softmax_cross_entropy", "inputs": ["logits", "y"]}])
json.dump(flat, open(sp, "w"))
p = run("train", sp, "--out", os.path.join(tmp, "bad2"), code=2)
check("/metrics/accuracy/labels" in p.stderr and "is not a label input" in p.stderr, "ids [B, 4] against logits [B, 4]: not refused as no one-hot labels:\n" + p.stderr)

shutil.rmtree(tmp, ignore_errors=True)
sys.exit(cli.finish("seq_metrics_cli: accuracy, macro-F1 and confusion over N·T positions equal NumPy on predict --logits; "
                    "metrics.csv the same bytes on every engine and dtype: ok"))
