#!/usr/bin/python3
"""`gradrun inspect`: the graph table lists every graph node, dropout included, and its fusion
column and row-fusible count are those of the fusion plan it prints (issue 19 item 7.1).

    /usr/bin/python3 tests/test_inspect.py GRADRUN

- Dropout: a dense layer with `"dropout"` shows it in its op (`dense(relu)+dropout`) and its tape
  ids cover the dropout node; a `dropout` op is a row of its own.
- Agreement, for every example spec and two dropout specs: each graph node's `tape` ids are the
  tape nodes the plan numbers; its fusion column is `row...` exactly when all of them lie in the
  plan's row segments, `head` when they are a segment's backward head, `-` when none is fused; the
  summary's "N are row-fusible" counts the `row` rows; every node of a row segment belongs to a row
  whose column says row.
Standard library only.
"""
import json
import os
import re
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "tests", "support"))
from cli_support import Cli  # noqa: E402

cli = Cli(sys.argv[1])
check, run = cli.check, cli.run

IRIS_X = ["sepal_length", "sepal_width", "petal_length", "petal_width"]


def dropout_spec(csv_path, tail_dropout):
    graph = [{"id": "h", "layer": "dense", "inputs": ["x"], "units": 8, "activation": "relu", "dropout": 0.3},
             {"id": "d", "op": "dropout", "inputs": ["h"], "rate": 0.2},
             {"id": "z", "op": "matmul", "inputs": ["d", "W2"]},
             {"id": "logits", "op": "add", "inputs": ["z", "b2"]}]
    if tail_dropout:  # a dense layer with dropout feeding the loss directly
        graph = graph[:1] + [{"id": "logits", "layer": "dense", "inputs": ["h"], "units": 3, "dropout": 0.1}]
    graph.append({"id": "loss", "op": "softmax_cross_entropy", "inputs": ["logits", "y"]})
    return {"gradrun": 1, "name": "dropout", "seed": 7,
            "data": {"csv": csv_path, "inputs": {"x": {"columns": IRIS_X, "standardize": True},
                                                 "y": {"column": "species", "one_hot": 3}}, "validation": 0.2},
            "params": {} if tail_dropout else {"W2": {"shape": [8, 3], "init": "xavier_uniform"},
                                               "b2": {"shape": [3], "init": "zeros"}},
            "graph": graph, "loss": "loss", "optimizer": {"kind": "adam", "lr": 0.02},
            "train": {"epochs": 2, "batch_size": 30}}


def parse(out, label):
    """The graph rows {id: (op, tape ids, fusion)}, the row-fusible count and the plan's node sets."""
    lines = out.splitlines()
    try:
        start = lines.index("graph:") + 2
    except ValueError:
        check(False, f"{label}: no graph table:\n{out}")
        return None
    header = lines[start - 1].split()
    if header[-2:] != ["tape", "fusion"]:
        check(False, f"{label}: the graph table has no tape column (graph node -> plan node ids): {header}")
        return None
    rows = {}
    for line in lines[start:]:
        if not line.startswith("  ") or line.startswith("  #"):
            break
        # #, id, op, inputs, shape ("[30, 8]"), backward, tape, fusion (the shape and fusion may hold spaces)
        m = re.match(r"\s+(\d+)\s+(\S+)\s+(\S+)\s+(\S+)\s+(\[[^\]]*\])\s+(\S+)\s+(\S+)\s+(.+)$", line)
        if not m:
            check(False, f"{label}: unreadable graph row {line!r}")
            continue
        tape = m.group(7)
        ids = [] if tape == "-" else (list(range(int(tape.split("..")[0]), int(tape.split("..")[1]) + 1))
                                      if ".." in tape else [int(tape)])
        rows[m.group(2)] = (m.group(3), ids, m.group(8).strip())
    m = re.search(r"; (\d+) are row-fusible", out)
    count = int(m.group(1)) if m else None
    check(m is not None, f"{label}: no row-fusible count:\n{out}")
    row_nodes, heads, serial = set(), set(), set()
    kind = None
    for line in lines:
        s = line.strip()
        if s.startswith("row segment"):
            kind = "row"
        elif s.startswith("serial segment"):
            kind = "serial"
        elif s.startswith("nodes:"):
            part, _, head = s[len("nodes:"):].partition("; backward head: node")
            (row_nodes if kind == "row" else serial).update(int(k) for k in part.split())
            if head.strip():
                heads.add(int(head))
    return rows, count, row_nodes, heads, serial


def agree(out, label):
    parsed = parse(out, label)
    if parsed is None:
        return None
    rows, count, row_nodes, heads, serial = parsed
    covered = set()
    for nid, (op, ids, fusion) in rows.items():
        where = f"{label}: node {nid} ({op}, tape {ids}, fusion {fusion!r})"
        if not ids:
            check(fusion == "-", where + ": records nothing, yet has a fusion")
            continue
        in_row = [k in row_nodes for k in ids]
        check(fusion.startswith("row") == any(in_row), where + f": the plan's row segments hold {sorted(row_nodes)}")
        check((fusion.startswith("row") and "," not in fusion) == all(in_row), where + ": all/part in row segments")
        check((fusion == "head") == all(k in heads for k in ids), where + f": the plan's heads are {sorted(heads)}")
        check((fusion == "serial") == all(k in serial for k in ids), where + f": serial nodes {sorted(serial)}")
        check((fusion == "-") == all(k not in row_nodes | heads | serial for k in ids), where + ": fused, yet '-'")
        if fusion.startswith("row"):
            covered.update(ids)
    check(row_nodes <= covered, f"{label}: row-segment nodes {sorted(row_nodes - covered)} in no row the table says is row")
    full = sum(1 for op, ids, f in rows.values() if f.startswith("row") and "," not in f)
    check(count == full, f"{label}: the summary says {count} are row-fusible, the fusion column {full}")
    return rows


def main():
    iris = os.path.join(ROOT, "datasets", "iris.csv")
    with tempfile.TemporaryDirectory(prefix="gradrun-inspect-") as tmp:
        for tail in (False, True):
            sp = os.path.join(tmp, f"dropout-{tail}.json")
            with open(sp, "w") as f:
                json.dump(dropout_spec(iris, tail), f)
            p = run("inspect", sp)
            rows = agree(p.stdout, f"dropout spec (tail {tail})")
            if rows is None:  # the rows without the tape column: is the dense layer's dropout there?
                check("+dropout" in p.stdout, f"dropout spec: the dense layer's dropout is in no row:\n{p.stdout}")
                continue
            want = ["h", "logits", "loss"] if tail else ["h", "d", "z", "logits", "loss"]
            check(list(rows) == want, f"dropout spec: graph rows {list(rows)}, want {want}")
            op, ids, _ = rows.get("h", ("", [], ""))
            check(op == "dense(relu)+dropout", f"the dense layer's dropout is not in its op: {op!r}")
            check(len(ids) == 4, f"dense relu + dropout records matmul, add, relu, dropout; tape ids {ids}")
            if tail:
                check(rows.get("logits", ("",))[0] == "dense(none)+dropout", f"dense(none) with dropout: {rows.get('logits')}")
            else:
                check(rows.get("d", ("",))[0] == "dropout" and len(rows["d"][1]) == 1, f"the dropout op's row: {rows.get('d')}")
        for name in sorted(os.listdir(os.path.join(ROOT, "specs"))):
            if name.endswith(".json") and name != "digits-finetune.json":  # needs the autoencoder's run folder
                p = run("inspect", os.path.join("specs", name))
                agree(p.stdout, name)
    return cli.finish("inspect: dropout nodes listed; the fusion column and the row-fusible count agree with the plan")


if __name__ == "__main__":
    sys.exit(main())
