#!/usr/bin/python3
"""Spec blocks through the CLI (docs/spec.md "Blocks"; issue 43 item 4).

    /usr/bin/python3 tests/test_blocks_cli.py GRADRUN

- Expansion: a block repeated 3 times (a dense layer with layer sugar, a param, a layer_norm) trains
  to the same bytes (loss.csv, weights.safetensors, tensor names included) as the same model written
  out by hand with the names the expansion gives (b1.0.W, b1.0.h.W, ...): the expansion is plain
  nodes and parameters in a documented order, nothing else. Without "repeat" the names are b1.W.
  A block inside a block names its parameters b1.0.m.W.
- `inspect` shows the expansion (every instance, its inputs, output and parameters, the alias
  b1 = b1.2.out); the block node's id stands for the last instance's output (loss, predict).
- Checkpoints: a run resumed after 2 of 4 epochs ends with the bytes of an uninterrupted run; the
  host engine (per-node and --fuse) trains the blocks spec to the CPU tape's bytes.
- `emit-cuda --verify` of a scalar model built from a repeated block (parameters m.0.w ...).
- Exports with dotted names: the torch export nests modules (self.b1[0].h, state_dict keys b1.0.W,
  b1.0.h.weight), the module reproduces `predict`, and import-torch reads every parameter back by
  name (bit for bit); ONNX (layer_norm, dense gelu, gelu op inside the block) in onnxruntime-node
  matches `predict` (1e-5 relative + 1e-6), and the f64 model within 1e-9.
- Bad specs: each refused with exit 2 and one located line: the JSON pointer inside the block and
  the instance ("(in b1.1)"), or the block node's own place.
- The 4-layer pre-norm transformer specs read in about 60 lines: tests/specs/transformer-blocks.json
  (a regression on float sequences, one head) and tests/specs/transformer-tokens.json (token and
  position embeddings, 2 causal heads per layer as a block inside the layer block, cross_entropy
  over [N,T,V]); each trains to the same bytes on cpu, host and host --fuse (f32 too) and learns.
Needs numpy; the torch part needs torch and the ONNX part node with onnxruntime-node
(tools/onnxrt): without them the rest runs, then the test exits 77 (Skipped, kinds torch / onnx).
"""
import copy
import json
import os
import shutil
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "tests", "support"))
from cli_support import Cli, read, tensors  # noqa: E402

cli = Cli(sys.argv[1])
check, run = cli.check, cli.run
IRIS = os.path.join(ROOT, "datasets", "iris.csv")
IRIS_X = ["sepal_length", "sepal_width", "petal_length", "petal_width"]
notes = []
skipped = []  # (kind, why): reported as a skip (exit 77) when nothing failed (tests/support/skip.h)


def base(tmp):
    return {"gradrun": 1, "name": "blocks", "seed": 11,
            "data": {"csv": IRIS, "validation": 0.2,
                     "inputs": {"x": {"columns": IRIS_X, "standardize": True}, "y": {"column": "species", "one_hot": 3}}},
            "train": {"epochs": 4, "batch_size": 20}, "optimizer": {"kind": "adam", "lr": 0.01}, "loss": "loss"}


BLOCK = {"inputs": ["h"],
         "params": {"W": {"shape": [6, 6], "init": {"kind": "normal", "std": 0.3}}, "s": {"shape": [6], "init": "ones"}},
         "graph": [{"id": "n", "op": "layer_norm", "inputs": ["h"]},
                   {"id": "m", "op": "matmul", "inputs": ["n", "W"]},
                   {"id": "g", "op": "gelu", "inputs": ["m"]},
                   {"id": "f", "layer": "dense", "inputs": ["g"], "units": 6, "activation": "gelu"},
                   {"id": "sc", "op": "mul", "inputs": ["f", "s"]},
                   {"id": "out", "op": "add", "inputs": ["h", "sc"]}],
         "output": "out"}


def blocks_spec(tmp, repeat=3):
    s = base(tmp)
    s["params"] = {"Win": {"shape": [4, 6], "init": "xavier_uniform"}}
    s["blocks"] = {"res": copy.deepcopy(BLOCK)}
    node = {"id": "b1", "block": "res", "inputs": ["x0"]}
    if repeat is not None:
        node["repeat"] = repeat
    s["graph"] = [{"id": "x0", "op": "matmul", "inputs": ["x", "Win"]}, node,
                  {"id": "logits", "layer": "dense", "inputs": ["b1"], "units": 3},
                  {"id": "loss", "op": "softmax_cross_entropy", "inputs": ["logits", "y"]}]
    s["metrics"] = {"accuracy": {"logits": "logits", "labels": "y"}}
    return s


def expanded_spec(tmp, repeat=3):
    """The same model written out by hand, with the names the expansion documents."""
    s = base(tmp)
    s["params"] = {"Win": {"shape": [4, 6], "init": "xavier_uniform"}}
    names = ["b1.%d." % k for k in range(repeat)] if repeat is not None else ["b1."]
    for pre in names:  # block params: after the top-level params, instance by instance
        for k, v in BLOCK["params"].items():
            s["params"][pre + k] = v
    graph, prev = [{"id": "x0", "op": "matmul", "inputs": ["x", "Win"]}], "x0"
    for pre in names:
        for n in BLOCK["graph"]:
            m = copy.deepcopy(n)
            m["id"] = pre + n["id"]
            m["inputs"] = [prev if i == "h" else pre + i for i in n["inputs"]]
            graph.append(m)
        prev = pre + "out"
    graph += [{"id": "logits", "layer": "dense", "inputs": [prev], "units": 3},
              {"id": "loss", "op": "softmax_cross_entropy", "inputs": ["logits", "y"]}]
    s["graph"] = graph
    s["metrics"] = {"accuracy": {"logits": "logits", "labels": "y"}}
    return s


def write(tmp, name, spec):
    path = os.path.join(tmp, name + ".json")
    with open(path, "w") as f:
        json.dump(spec, f, indent=1)
    return path


def same_run(a, b, what):
    check(read(os.path.join(a, "loss.csv")) == read(os.path.join(b, "loss.csv")), what + ": loss.csv differs")
    wa, wb = tensors(os.path.join(a, "weights.safetensors")), tensors(os.path.join(b, "weights.safetensors"))
    check(wa == wb, what + ": weights differ (names %s vs %s)" % (sorted(wa)[:6], sorted(wb)[:6]))


def expansion(tmp):
    for repeat in (3, None):
        tag = "repeat" if repeat else "single"
        a, b = os.path.join(tmp, "blk-" + tag), os.path.join(tmp, "flat-" + tag)
        run("train", write(tmp, "blk-" + tag, blocks_spec(tmp, repeat)), "--out", a, "--quiet")
        run("train", write(tmp, "flat-" + tag, expanded_spec(tmp, repeat)), "--out", b, "--quiet")
        same_run(a, b, "blocks vs written out (%s)" % tag)
        names = set(tensors(os.path.join(a, "weights.safetensors")))
        want = {"b1.0.W", "b1.2.s", "b1.1.f.W", "b1.2.f.b"} if repeat else {"b1.W", "b1.s", "b1.f.W", "b1.f.b"}
        check(want <= names, "%s: weights lack %s (have %s)" % (tag, sorted(want - names), sorted(names)))
    # inspect: the instances, their bindings and the alias
    p = run("inspect", os.path.join(tmp, "blk-repeat.json"))
    out = p.stdout
    for want in ("blocks: 3 instances", "b1.0             block res", "(x0) -> b1.0.out", "(b1.0.out) -> b1.1.out",
                 "b1 = b1.2.out", "b1.1.f"):
        check(want in out, "inspect does not show %r:\n%s" % (want, out[-2500:]))
    # two inputs: instance k > 0 takes the previous output as its first input, the second stays
    s = blocks_spec(tmp, 3)
    s["blocks"]["res"]["inputs"] = ["h", "skip"]
    s["blocks"]["res"]["graph"][5]["inputs"] = ["skip", "sc"]
    s["graph"][1]["inputs"] = ["x0", "x0"]
    p = run("inspect", write(tmp, "two", s))
    check("(b1.1.out, x0) -> b1.2.out" in p.stdout, "two inputs: inspect shows\n" + p.stdout[-800:])
    # a block inside a block
    s = blocks_spec(tmp, 2)
    s["blocks"]["outer"] = {"inputs": ["z"], "graph": [{"id": "r", "block": "res", "inputs": ["z"]},
                                                       {"id": "o", "op": "tanh", "inputs": ["r"]}], "output": "o"}
    s["graph"][1] = {"id": "b1", "block": "outer", "inputs": ["x0"], "repeat": 2}
    d = os.path.join(tmp, "nested")
    run("train", write(tmp, "nested", s), "--out", d, "--quiet")
    names = set(tensors(os.path.join(d, "weights.safetensors"))) if os.path.exists(os.path.join(d, "weights.safetensors")) else set()
    check({"b1.0.r.W", "b1.1.r.f.W", "b1.1.r.s"} <= names, "nested blocks: names %s" % sorted(names))


def checkpoints_and_engines(tmp):
    spec = os.path.join(tmp, "blk-repeat.json")
    full = os.path.join(tmp, "blk-repeat")
    part = os.path.join(tmp, "part")
    run("train", spec, "--out", part, "--epochs", "2", "--quiet")
    run("train", "--resume", part, "--epochs", "4", "--quiet")
    same_run(full, part, "resumed after 2 of 4 epochs")
    for extra in (["--device", "host"], ["--device", "host", "--fuse"]):
        d = os.path.join(tmp, "eng" + "".join(extra).replace("-", ""))
        run("train", spec, "--out", d, "--quiet", *extra)
        same_run(full, d, "cpu vs " + " ".join(extra))
    f32 = [os.path.join(tmp, "f32-" + k) for k in ("cpu", "host")]
    run("train", spec, "--out", f32[0], "--quiet", "--dtype", "f32")
    run("train", spec, "--out", f32[1], "--quiet", "--dtype", "f32", "--device", "host", "--fuse")
    same_run(f32[0], f32[1], "f32 cpu vs host --fuse")


def emit(tmp):
    """emit-cuda --verify over a scalar model whose parameters come from a repeated block (m.0.w ...)."""
    with open(os.path.join(ROOT, "specs", "linreg.json")) as f:
        s = json.load(f)
    s["data"]["csv"] = os.path.join(ROOT, "datasets", "linreg.csv")
    s["params"] = {}
    s["blocks"] = {"lin": {"inputs": ["x"], "output": "pred",
                           "params": {"w": {"shape": [1], "init": {"kind": "uniform", "low": -1.0, "high": 1.0}},
                                      "b": {"shape": [1], "init": "zeros"}},
                           "graph": [{"id": "wx", "op": "mul", "inputs": ["x", "w"]}, {"id": "pred", "op": "add", "inputs": ["wx", "b"]}]}}
    s["graph"] = [{"id": "m", "block": "lin", "inputs": ["x"], "repeat": 2}, {"id": "loss", "op": "mse", "inputs": ["m", "y"]}]
    p = run("emit-cuda", write(tmp, "lin", s), "--verify")
    check("p[3] = m.1.b" in p.stdout + p.stderr and "bit-identical" in p.stdout + p.stderr, "emit-cuda --verify:\n" + p.stderr[-600:])


def predict(run_dir, tmp):
    import numpy as np
    out = os.path.join(tmp, "pred.csv")
    run("predict", run_dir, "--data", IRIS, "--out", out, "--quiet")
    with open(out) as f:
        rows = [l.strip().split(",") for l in f if l.strip()]
    head = rows[0]
    cols = [i for i, h in enumerate(head) if h != "class"]
    return np.array([[float(r[i]) for i in cols] for r in rows[1:]]), head


def iris_x():
    import numpy as np
    with open(IRIS) as f:
        rows = [l.strip().split(",") for l in f if l.strip()]
    return np.array([[float(v) for v in r[:4]] for r in rows[1:]])


def exports(tmp):
    import numpy as np
    run_dir = os.path.join(tmp, "blk-repeat")
    pred, head = predict(run_dir, tmp)
    check(pred.shape == (150, 3), "predict: %s columns %s" % (pred.shape, head))
    # torch
    try:
        import torch
    except ImportError:
        skipped.append(("torch", "the torch export check needs torch"))
        torch = None
    if torch is not None:
        tdir = os.path.join(tmp, "torch")
        run("export", run_dir, "--format", "torch", "--out", tdir)
        sys.path.insert(0, tdir)
        import importlib
        import importlib.util
        mod = importlib.import_module("model")
        m = mod.Model.from_dir(tdir)
        keys = set(m.state_dict())
        for want in ("b1.0.W", "b1.2.s", "b1.1.f.weight", "b1.1.f.bias", "Win", "logits.weight"):
            check(want in keys, "torch state_dict lacks %s: %s" % (want, sorted(keys)))
        check("self.b1 = nn.ModuleList" in open(os.path.join(tdir, "model.py")).read(), "the blocks are not an nn.ModuleList")
        with torch.no_grad():
            got = m(torch.tensor(iris_x())).numpy()
        err = np.max(np.abs(got - pred))
        check(err < 1e-12, "torch module vs predict: max |diff| %.3g" % err)
        notes.append("torch vs predict %.1e" % err)
        # import-torch reads every parameter back by name
        init = os.path.join(tmp, "imported.safetensors")
        p = run("import-torch", os.path.join(tdir, "state_dict.safetensors"), "--spec", os.path.join(tmp, "blk-repeat.json"),
                "--out", init)
        check("from the spec" not in p.stdout or "b1." not in p.stdout.split("from the spec")[-1].splitlines()[0],
              "import-torch left block parameters at the spec's init:\n" + p.stdout)
        w, i = tensors(os.path.join(run_dir, "weights.safetensors")), tensors(init)
        check(w == i, "import-torch of the export is not the trained weights: %s" %
              [k for k in w if w.get(k) != i.get(k)][:5])
        # a batch_norm layer inside a block: nn.BatchNorm-style keys under the instance (nb.0.norm.running_mean)
        bs = blocks_spec(tmp, 3)
        bs["blocks"]["bn"] = {"inputs": ["h"], "graph": [{"id": "norm", "layer": "batch_norm", "inputs": ["h"]},
                                                        {"id": "a", "op": "relu", "inputs": ["norm"]}], "output": "a"}
        bs["graph"].insert(2, {"id": "nb", "block": "bn", "inputs": ["b1"], "repeat": 2})
        bs["graph"][3]["inputs"] = ["nb"]
        bn_spec, bn_run, bn_t = write(tmp, "bn", bs), os.path.join(tmp, "bn-run"), os.path.join(tmp, "bn-torch")
        run("train", bn_spec, "--out", bn_run, "--quiet")
        run("export", bn_run, "--format", "torch", "--out", bn_t)
        bn_pred, _ = predict(bn_run, tmp)
        spec_mod = importlib.util.spec_from_file_location("bn_model", os.path.join(bn_t, "model.py"))
        bn_mod = importlib.util.module_from_spec(spec_mod)
        spec_mod.loader.exec_module(bn_mod)
        mb = bn_mod.Model.from_dir(bn_t)
        check({"nb.0.norm.weight", "nb.1.norm.bias", "nb.1.norm.running_mean", "nb.0.norm.running_var"} <= set(mb.state_dict()),
              "batch_norm in a block: state_dict %s" % sorted(mb.state_dict()))
        with torch.no_grad():
            err = np.max(np.abs(mb(torch.tensor(iris_x())).numpy() - bn_pred))
        check(err < 1e-12, "batch_norm block: torch vs predict %.3g" % err)
        init = os.path.join(tmp, "bn-imported.safetensors")
        run("import-torch", os.path.join(bn_t, "state_dict.safetensors"), "--spec", bn_spec, "--out", init)
        check(tensors(os.path.join(bn_run, "weights.safetensors")) == tensors(init), "batch_norm block: import-torch is not the trained weights")
    # onnx
    ort = os.path.join(ROOT, "tools", "onnxrt", "node_modules", "onnxruntime-node")
    if not shutil.which("node") or not os.path.isdir(ort):
        skipped.append(("onnx", "the ONNX check needs node and onnxruntime-node in tools/onnxrt/node_modules"))
        return
    feeds = os.path.join(tmp, "feeds.json")
    x = iris_x()
    with open(feeds, "w") as f:
        json.dump({"x": {"dims": list(x.shape), "data": x.reshape(-1).tolist()}}, f)
    for dtype, rel, ab in (("f32", 1e-5, 1e-6), ("f64", 1e-9, 1e-12)):
        model = os.path.join(tmp, "blocks-%s.onnx" % dtype)
        run("export", run_dir, "--format", "onnx", "--dtype", dtype, "--out", model)
        try:
            import onnx
            mo = onnx.load(model)
            onnx.checker.check_model(mo, full_check=True)
            ops = {n.op_type for n in mo.graph.node}
            check({"ReduceMean", "Sqrt", "Div", "Tanh"} <= ops, "onnx ops %s" % sorted(ops))
        except ImportError:
            pass
        r = subprocess.run(["node", os.path.join(ROOT, "tools", "onnxrt", "run.js"), model, feeds], capture_output=True, text=True)
        check(r.returncode == 0, "run.js (%s): %s" % (dtype, r.stderr[-800:]))
        if r.returncode == 0:
            out = json.loads(r.stdout)
            got = np.array(list(out.values())[0]["data"]).reshape(pred.shape)
            err = np.max(np.abs(got - pred))
            check(not (np.abs(got - pred) > rel * np.abs(pred) + ab).any(), "onnxruntime (%s) vs predict: max |diff| %.3g" % (dtype, err))
            notes.append("onnx %s vs predict %.1e" % (dtype, err))


def bad_specs(tmp):
    def case(edit, place, words):
        s = blocks_spec(tmp, 2)
        edit(s)
        path = write(tmp, "bad", s)
        p = run("train", path, "--out", os.path.join(tmp, "bad-run"), "--quiet", code=2)
        line = p.stderr.strip()
        check(len(line.splitlines()) == 1, "%s: not one line: %s" % (place, line))
        check((": " + place + ": ") in line, "want place %r in: %s" % (place, line))
        for w in words:
            check(w in line, "want %r in: %s" % (w, line))

    def g(k):  # the block's graph node k
        return lambda s: s["blocks"]["res"]["graph"][k]

    case(lambda s: s["graph"][1].update(block="rez"), "/graph/1/block", ['unknown block "rez"', "did you mean", "res"])
    case(lambda s: s["graph"][1].update(inputs=["x0", "x"]), "/graph/1/inputs", ['takes 1 input (h), got 2'])
    case(lambda s: s["graph"][1].update(inputs=["nope"]), "/graph/1/inputs/0", ['unknown name "nope"'])
    case(lambda s: s["graph"][1].update(repeat=0), "/graph/1/repeat", ["out of range"])
    case(lambda s: s["graph"][1].update(units=3), "/graph/1/units", ['unknown key "units"'])
    case(lambda s: s["blocks"]["res"].update(extra=1), "/blocks/res/extra", ['unknown key "extra"'])
    case(lambda s: s["blocks"]["res"].pop("output"), "/blocks/res", ['missing required key "output"'])
    case(lambda s: s["blocks"]["res"].update(output="W"), "/blocks/res/output (in b1.0)", ['output "W" is not a node'])
    case(lambda s: s["blocks"]["res"].update(inputs=[]), "/blocks/res/inputs", ["at least one input"])
    case(lambda s: s["blocks"]["res"].update(graph=[]), "/blocks/res/graph", ["at least one node"])
    case(lambda s: s["blocks"].update(res=[1]), "/blocks/res", ["expected a block object"])
    case(lambda s: s.update(blocks=[]), "/blocks", ["expected an object"])
    case(lambda s: g(1)(s).update(inputs=["n", "Wx"]), "/blocks/res/graph/1/inputs/1 (in b1.0)", ['unknown name "Wx"', 'did you mean "W"'])
    case(lambda s: g(0)(s).update(inputs=["x"]), "/blocks/res/graph/0/inputs/0 (in b1.0)",
         ['unknown name "x"', "a block sees its inputs, params and nodes"])
    case(lambda s: g(1)(s).update(inputs=["n", "f"]), "/blocks/res/graph/1/inputs/1 (in b1.0)",
         ['"f" is used before its definition at /blocks/res/graph/3'])
    case(lambda s: g(2)(s).update(id="m"), "/blocks/res/graph/2/id (in b1.0)", ['name "m" is already defined in the block'])
    case(lambda s: g(2)(s).update(op="gelux"), "/blocks/res/graph/2/op (in b1.0)", ['unknown op "gelux"'])
    case(lambda s: g(3)(s).update(activation="swish"), "/blocks/res/graph/3/activation (in b1.0)", ['unknown activation "swish"'])
    case(lambda s: s["blocks"]["res"]["params"].update(h={"shape": [6]}), "/blocks/res/params/h (in b1.0)",
         ["the name of one of the block's inputs"])
    case(lambda s: s["blocks"]["res"]["params"]["W"].update(init="zero"), "/blocks/res/params/W/init (in b1.0)", ['unknown init "zero"'])
    case(lambda s: g(4)(s).update(class_weight=[1, 2]), "/blocks/res/graph/4/class_weight (in b1.0)", ["not supported inside a block"])
    # a shape error in the second instance only: its input is the first instance's [20, 7] output
    case(lambda s: (s["blocks"]["res"]["graph"].__setitem__(5, {"id": "out", "op": "concat", "inputs": ["sc", "sc"], "axis": -1})),
         "/blocks/res/graph/1 (in b1.1)", ["matmul"])
    case(lambda s: s["graph"].insert(0, {"id": "b1.0.m", "op": "relu", "inputs": ["x"]}), "/blocks/res/graph/1/id (in b1.0)",
         ['name "b1.0.m" ("m" of b1.0) is already defined'])
    case(lambda s: s["graph"].insert(3, {"id": "b1.1.f.W", "op": "relu", "inputs": ["x"]}), "/graph/3/id",
         ['name "b1.1.f.W" is already defined'])
    case(lambda s: s["graph"].append({"id": "b1", "op": "relu", "inputs": ["x"]}), "/graph/4/id", ['name "b1" is already defined'])

    def recursive(s):
        s["blocks"]["a"] = {"inputs": ["z"], "graph": [{"id": "r", "block": "b", "inputs": ["z"]}], "output": "r"}
        s["blocks"]["b"] = {"inputs": ["z"], "graph": [{"id": "r", "block": "a", "inputs": ["z"]}], "output": "r"}
        s["graph"][1]["block"] = "a"
    case(recursive, "/blocks/b/graph/0/block (in b1.0.r)", ['block "a" instantiates itself (a → b → a)'])


def transformer(tmp):
    spec = os.path.join(ROOT, "tests", "specs", "transformer-blocks.json")
    with open(spec) as f:
        text = f.read()
    lines = [l for l in text.splitlines() if not l.lstrip().startswith('"X"') and not l.lstrip().startswith('"Y"')]
    check(len(lines) <= 65, "the transformer spec is %d lines without its data" % len(lines))
    a, b = os.path.join(tmp, "tf-cpu"), os.path.join(tmp, "tf-host")
    run("train", spec, "--out", a, "--quiet")
    run("train", spec, "--out", b, "--quiet", "--device", "host", "--fuse")
    same_run(a, b, "transformer cpu vs host --fuse")
    with open(os.path.join(a, "loss.csv")) as f:
        rows = [l.split(",") for l in f.read().splitlines()[1:]]
    first, last = float(rows[0][2]), float(rows[-1][2])
    check(last < 0.5 * first, "transformer loss %g -> %g did not halve" % (first, last))
    notes.append("transformer loss %.4g -> %.4g" % (first, last))
    p = run("inspect", spec)
    check("blocks: 4 instances" in p.stdout and "body = body.3.out" in p.stdout, "transformer inspect:\n" + p.stdout[-1500:])


def transformer_tokens(tmp):
    """tests/specs/transformer-tokens.json: embedding, causal softmax in 2 heads per layer (a block in
    a block), dense on [N,T,D], cross_entropy on [N,T,V]; every engine and dtype the same bytes."""
    spec = os.path.join(ROOT, "tests", "specs", "transformer-tokens.json")
    with open(spec) as f:
        n = len(f.read().splitlines())
    check(n <= 65, "the token transformer spec is %d lines" % n)
    runs = {}
    for tag, extra in (("cpu", []), ("host", ["--device", "host"]), ("fused", ["--device", "host", "--fuse"]),
                       ("f32", ["--dtype", "f32"]), ("f32-fused", ["--dtype", "f32", "--device", "host", "--fuse"])):
        runs[tag] = os.path.join(tmp, "tok-" + tag)
        run("train", spec, "--out", runs[tag], "--quiet", *extra)
    for a, b in (("cpu", "host"), ("cpu", "fused"), ("f32", "f32-fused")):
        same_run(runs[a], runs[b], "token transformer %s vs %s" % (a, b))
    with open(os.path.join(runs["cpu"], "loss.csv")) as f:
        rows = [l.split(",") for l in f.read().splitlines()[1:]]
    first, last = float(rows[0][2]), float(rows[-1][2])
    check(last < 0.1, "token transformer: cross-entropy %g -> %g (ln 8 = 2.08)" % (first, last))
    notes.append("token transformer cross-entropy %.4g -> %.4g" % (first, last))
    p = run("inspect", spec)
    for want in ("blocks: 12 instances", "body = body.3.out", "body.3.h1        block head", "(body.2.out) -> body.3.out"):
        check(want in p.stdout, "token transformer inspect lacks %r" % want)


def main():
    with tempfile.TemporaryDirectory() as tmp:
        expansion(tmp)
        checkpoints_and_engines(tmp)
        emit(tmp)
        exports(tmp)
        bad_specs(tmp)
        transformer(tmp)
        transformer_tokens(tmp)
    if skipped and not cli.fails:
        for kind, why in skipped:
            print("SKIPPED [%s]: blocks_cli -- %s" % (kind, why))
            if os.environ.get("GR_SKIP_LOG"):
                with open(os.environ["GR_SKIP_LOG"], "a") as log:
                    log.write("%s\tblocks_cli\t%s\n" % (kind, why))
        return 77
    return cli.finish("blocks: expansion = written out, inspect, resume, engines, exports, bad specs, transformer ok; " + "; ".join(notes))


if __name__ == "__main__":
    sys.exit(main())
