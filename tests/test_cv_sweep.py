#!/usr/bin/env python3
"""gradrun cv and gradrun sweep (issue 41 items 6, 7).

usage: test_cv_sweep.py GRADRUN   (run from the repository root; standard library only)

cv (penguins, 3 folds, stratified by species):
- every fold's validation rows are the documented fold (spec/folds.h: the split's permutation,
  classes in first-appearance order dealt round-robin): each fold's per-class support in its
  evaluate.json equals the assignment recomputed here, the folds partition the 344 rows;
- cv.json's mean and population std equal the per-fold values' (summed in fold order), and the fold
  values equal each fold's own evaluate.json;
- --jobs 1 and --jobs 2 give the same bytes: cv.json, and in every fold loss.csv, weights, init,
  spec.json, receipt.json, evaluate.json and metrics.csv without its seconds column;
- a regression's folds are plain (j mod K over the permutation); a classifier without
  metrics.accuracy is stratified by its loss's labels.
sweep (2 x 2 grid on penguins):
- RUN/1..4 hold the combinations in order (first --grid slowest): each run's run.json overrides;
- sweep.csv is ranked by the metric (val_f1: higher first) and its values equal each run's
  metrics.csv last row; the best is printed; a progress line per run;
- --jobs 2 gives the same sweep.csv and run files as --jobs 1;
- a restart reruns nothing finished (weights untouched, "not rerun" for all), and reruns only a
  run that was left unfinished (its run.json status "running");
- a different grid in the same folder is refused (exit 2); a bad --metric is refused (exit 2).
"""
import csv
import json
import math
import os
import shutil
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "tests", "support"))
from cli_support import Cli, read  # noqa: E402
from documented_split import permutation  # noqa: E402

cli = Cli(os.path.abspath(sys.argv[1]))
check = cli.check
SPEC = "specs/penguins.json"


def folds_of(labels, k, seed, stratified):
    n = len(labels)
    perm = permutation(n, seed)
    fold = [0] * n
    if not stratified:
        for j, r in enumerate(perm):
            fold[r] = j % k + 1
        return fold
    order = []  # classes in first-appearance order
    for v in labels:
        if v not in order:
            order.append(v)
    members = {v: [] for v in order}
    for r in perm:
        members[labels[r]].append(r)
    c = 0
    for v in order:
        for r in members[v]:
            fold[r] = c % k + 1
            c += 1
    return fold


def metrics_sans_seconds(path):
    rows = list(csv.reader(open(path)))
    col = rows[0].index("seconds")
    return [r[:col] + r[col + 1:] for r in rows]


def same_run_files(a, b, what):
    for f in ("loss.csv", "weights.safetensors", "init.safetensors", "spec.json", "receipt.json", "evaluate.json"):
        pa, pb = os.path.join(a, f), os.path.join(b, f)
        if not os.path.exists(pa) and not os.path.exists(pb):
            continue
        check(os.path.exists(pa) and os.path.exists(pb) and read(pa) == read(pb), f"{what}: {f} differs between --jobs 1 and 2")
    check(metrics_sans_seconds(os.path.join(a, "metrics.csv")) == metrics_sans_seconds(os.path.join(b, "metrics.csv")),
          f"{what}: metrics.csv (seconds aside) differs between --jobs 1 and 2")


def mean_std(values):
    s = 0.0
    for v in values:
        s = s + v
    m = s / len(values)
    q = 0.0
    for v in values:
        q = q + (v - m) * (v - m)
    return m, math.sqrt(q / len(values))


def test_cv(tmp):
    a, b = f"{tmp}/cv-a", f"{tmp}/cv-b"
    p1 = cli.run("cv", SPEC, "--folds", "3", "--out", a, "--set", "train.epochs=4")
    cli.run("cv", SPEC, "--folds", "3", "--out", b, "--set", "train.epochs=4", "--jobs", "2", "-q")
    if not (os.path.exists(f"{a}/cv.json") and os.path.exists(f"{b}/cv.json")):
        check(False, f"cv wrote no cv.json:\n{p1.stdout}\n{p1.stderr}")
        return {"metrics": {"accuracy": {"mean": math.nan, "std": math.nan}}}
    check(read(f"{a}/cv.json") == read(f"{b}/cv.json"), "cv: cv.json differs between --jobs 1 and --jobs 2")
    for i in (1, 2, 3):
        same_run_files(f"{a}/fold-{i}", f"{b}/fold-{i}", f"cv fold-{i}")
    check("mean" in p1.stdout and "macro_f1" in p1.stdout and "fold-3" in p1.stdout, f"cv: summary table:\n{p1.stdout}")
    check(p1.stderr.count("folds done") == 3, f"cv: progress lines:\n{p1.stderr}")
    cv = json.load(open(f"{a}/cv.json"))
    check(cv["folds"] == 3 and cv["stratified"] is True and cv["labels"] == "species" and cv["runs"] == ["fold-1", "fold-2", "fold-3"],
          f"cv.json head: {cv['folds']} {cv['stratified']} {cv['labels']} {cv['runs']}")
    # The folds: the documented stratified assignment, checked through each fold's per-class support.
    species = [r["species"] for r in csv.DictReader(open("datasets/penguins.csv"))]
    fold = folds_of(species, 3, 7, True)
    check(sorted(cv["validation_rows"]) == sorted(fold.count(i) for i in (1, 2, 3)) and sum(cv["validation_rows"]) == len(species),
          f"cv: validation rows {cv['validation_rows']} vs {[fold.count(i) for i in (1, 2, 3)]}")
    for i in (1, 2, 3):
        ev = json.load(open(f"{a}/fold-{i}/evaluate.json"))
        names = ev["class_names"]
        want = [sum(1 for s, f in zip(species, fold) if f == i and s == c) for c in names]
        got = [pc["support"] for pc in ev["per_class"]]
        check(got == want, f"cv fold-{i}: class support {got} != the documented fold's {want}")
        for key in ("loss", "accuracy", "macro_f1", "balanced_accuracy"):
            check(cv["metrics"][key]["folds"][i - 1] == ev[key], f"cv fold-{i}: cv.json {key} {cv['metrics'][key]['folds'][i - 1]} != evaluate.json {ev[key]}")
        spec = json.load(open(f"{a}/fold-{i}/spec.json"))
        check(spec["data"].get("cv") == {"folds": 3, "fold": i}, f"cv fold-{i}: spec.json data.cv {spec['data'].get('cv')}")
    for key, s in cv["metrics"].items():
        m, sd = mean_std(s["folds"])
        check(s["mean"] == m and s["std"] == sd, f"cv: {key} mean/std {s['mean']}/{s['std']} != {m}/{sd}")
    for c in set(species):  # stratified: every class spread evenly (counts differ by at most one)
        counts = [sum(1 for s, f in zip(species, fold) if f == i and s == c) for i in (1, 2, 3)]
        check(max(counts) - min(counts) <= 1, f"cv: class {c} over folds {counts}")
    # Plain folds for a regression (no classifier labels): the permutation dealt j mod K.
    n_lin = sum(1 for _ in csv.DictReader(open("datasets/linreg.csv")))
    cli.run("cv", "specs/linreg.json", "--folds", "4", "--out", f"{tmp}/cv-plain", "--set", "train.epochs=1", "-q")
    plain = json.load(open(f"{tmp}/cv-plain/cv.json"))
    want = folds_of(list(range(n_lin)), 4, json.load(open("specs/linreg.json")).get("seed", 0), False)
    check(plain["stratified"] is False and plain["validation_rows"] == [want.count(i) for i in (1, 2, 3, 4)] and "mae" in plain["metrics"],
          f"cv plain: {plain['stratified']} {plain['validation_rows']} {list(plain['metrics'])}")
    # A classifier without metrics.accuracy: stratified by its loss's labels.
    spec = json.load(open(SPEC))
    del spec["metrics"]
    spec["data"]["csv"] = os.path.abspath("datasets/penguins.csv")
    with open(f"{tmp}/nometric.json", "w") as f:
        json.dump(spec, f)
    cli.run("cv", f"{tmp}/nometric.json", "--folds", "3", "--out", f"{tmp}/cv-nometric", "--set", "train.epochs=1", "-q")
    nm = json.load(open(f"{tmp}/cv-nometric/cv.json"))
    check(nm["stratified"] is True and nm["labels"] == "species" and nm["validation_rows"] == cv["validation_rows"] and "macro_f1" in nm["metrics"],
          f"cv without metrics.accuracy: {nm['stratified']} {nm['labels']} {nm['validation_rows']} {list(nm['metrics'])}")
    cli.run("cv", SPEC, "--folds", "1", "--out", f"{tmp}/cv-bad", code=2)
    return cv


def test_sweep(tmp):
    a, b = f"{tmp}/sw-a", f"{tmp}/sw-b"
    args = ["--grid", "optimizer.lr=0.01,0.003", "--grid", "train.batch_size=23,46", "--metric", "val_f1", "--set", "train.epochs=3"]
    p1 = cli.run("sweep", SPEC, *args, "--out", a)
    cli.run("sweep", SPEC, *args, "--out", b, "--jobs", "2", "-q")
    check(read(f"{a}/sweep.csv") == read(f"{b}/sweep.csv"), "sweep: sweep.csv differs between --jobs 1 and 2")
    combos = [("0.01", "23"), ("0.01", "46"), ("0.003", "23"), ("0.003", "46")]
    for i, (lr, bs) in enumerate(combos, 1):
        same_run_files(f"{a}/{i}", f"{b}/{i}", f"sweep run {i}")
        run = json.load(open(f"{a}/{i}/run.json"))
        check(run["overrides"] == ["train.epochs=3", f"optimizer.lr={lr}", f"train.batch_size={bs}"], f"sweep run {i}: overrides {run['overrides']}")
    rows = list(csv.DictReader(open(f"{a}/sweep.csv")))
    check([r["rank"] for r in rows] == ["1", "2", "3", "4"] and len(rows) == 4, f"sweep.csv: {rows}")
    vals = [float(r["val_f1"]) for r in rows]
    check(vals == sorted(vals, reverse=True), f"sweep.csv not ranked by val_f1 (higher first): {vals}")
    for r in rows:
        last = list(csv.DictReader(open(f"{a}/{r['run']}/metrics.csv")))[-1]
        check(r["val_f1"] == last["val_f1"] and (r["optimizer.lr"], r["train.batch_size"]) == combos[int(r["run"]) - 1],
              f"sweep.csv row {r} vs run's metrics.csv val_f1 {last['val_f1']}")
    check(f"best: run {rows[0]['run']}" in p1.stdout, f"sweep: best not printed:\n{p1.stdout}")
    check(p1.stderr.count("runs done") == 4, f"sweep: progress lines:\n{p1.stderr}")
    # A restart: nothing finished is rerun.
    stamp = {i: os.stat(f"{a}/{i}/weights.safetensors").st_mtime_ns for i in range(1, 5)}
    p2 = cli.run("sweep", SPEC, *args, "--out", a)
    check(p2.stderr.count("not rerun") == 4, f"sweep restart: {p2.stderr}")
    check(all(os.stat(f"{a}/{i}/weights.safetensors").st_mtime_ns == stamp[i] for i in range(1, 5)), "sweep restart rewrote a finished run")
    check(read(f"{a}/sweep.csv") == read(f"{b}/sweep.csv"), "sweep restart: sweep.csv changed")
    # Run 3 left unfinished (as a killed run leaves it): only it is trained again, to the same bytes.
    run3 = json.load(open(f"{a}/3/run.json"))
    run3["status"] = "running"
    with open(f"{a}/3/run.json", "w") as f:
        json.dump(run3, f)
    os.remove(f"{a}/3/weights.safetensors")
    p3 = cli.run("sweep", SPEC, *args, "--out", a, "--jobs", "2")
    check(p3.stderr.count("not rerun") == 3 and "run 3: trained" in p3.stderr, f"sweep restart after a kill: {p3.stderr}")
    check(all(os.stat(f"{a}/{i}/weights.safetensors").st_mtime_ns == stamp[i] for i in (1, 2, 4)), "sweep: a finished run was rerun")
    check(os.path.exists(f"{a}/3/weights.safetensors") and read(f"{a}/3/weights.safetensors") == read(f"{b}/3/weights.safetensors"),
          "sweep: the rerun run 3 does not have the same weights")
    check(read(f"{a}/sweep.csv") == read(f"{b}/sweep.csv"), "sweep after the rerun: sweep.csv differs")
    p = cli.run("sweep", SPEC, "--grid", "optimizer.lr=0.5", "--out", a, code=2)
    check("different sweep" in p.stderr, f"sweep: another grid in the same folder: {p.stderr}")
    cli.run("sweep", SPEC, "--grid", "optimizer.lr=0.5", "--metric", "val_nonsense", "--out", f"{tmp}/sw-bad", code=2)
    return rows


def main():
    tmp = tempfile.mkdtemp(prefix="gr-cvsweep-")
    try:
        cv = test_cv(tmp)
        rows = test_sweep(tmp)
    finally:
        if not cli.fails:
            shutil.rmtree(tmp, ignore_errors=True)
    return cli.finish(f"cv: 3 stratified folds == the documented assignment, accuracy {cv['metrics']['accuracy']['mean']:.4f} "
                      f"+- {cv['metrics']['accuracy']['std']:.4f}, --jobs 1 == --jobs 2 byte for byte; sweep: 4 runs ranked "
                      f"(best run {rows[0]['run']}, val_f1 {rows[0]['val_f1']}), --jobs 1 == 2, restarts rerun only unfinished runs")


if __name__ == "__main__":
    sys.exit(main())
