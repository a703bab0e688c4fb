#!/usr/bin/python3
"""The CNN user side of issue 42 through the CLI: a data input's row shape, the layer sugar, inspect's
layers table, the exports and import-torch of conv2d / pools against `predict`, and specs/digits-cnn.json.

    /usr/bin/python3 tests/test_cnn_cli.py GRADRUN

- "shape": [1, 8, 8] on the digits CSV feeds [N, 1, 8, 8]; a row shape whose product is not the
  column count is one located line (exit 2) at /data/inputs/x/shape.
- Lowering: a flatten layer trains to the same loss.csv bytes as the reshape op it stands for, and a
  conv2d layer to the same bytes as the conv2d + add + relu op nodes with the same params (its
  W [F, C, k, k] and b [F, 1, 1] given as "values" inits in both).
- "trainable": false on a conv2d layer keeps its W and b at their initial bytes.
- inspect lists every layer with its output shape and parameter count (conv 3x3, 1 -> 16: 160).
- Unknown layer keys and a conv2d layer on a 2-D input are located errors naming the layer.
- export --format torch of a CNN with "same" padding (even kernel: asymmetric pads), max and avg
  pools reproduces `gradrun predict` to 1e-12 in float64 (torch); import-torch of that state_dict
  gives the trained bytes, and a float32 PyTorch-native one (c1.weight, c1.bias [F], logits.weight
  [out, in]) widens exactly into c1.W, c1.b [F, 1, 1], logits.W.
- export --format onnx in onnxruntime-node (when tools/onnxrt/node_modules is there): the CNN in
  float32 to 1e-5 relative, a max-pool model in float64 to 1e-12; the f64 CNN export warns that
  onnxruntime has no double Conv.
- A batch_norm layer after a conv: inspect counts its 8 parameters, export torch matches predict
  (running statistics), its scale/shift saved as nn.BatchNorm2d's bn.weight / bn.bias [C].
- specs/digits-cnn.json beats the MLP's validation accuracy (0.983) on the same rows.
"""
import csv
import importlib.util
import json
import os
import shutil
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
GR = sys.argv[1]
sys.path.insert(0, os.path.join(ROOT, "tests", "support"))
from cli_support import Cli, read, tensors  # noqa: E402

cli = Cli(GR)
check, run, fails = cli.check, cli.run, cli.fails
DIGITS = os.path.join(ROOT, "datasets", "digits.csv")


def digits(graph, tmp, name, epochs=1, shape=(1, 8, 8), params=None, l2=None):
    s = json.load(open(os.path.join(ROOT, "specs", "digits.json")))
    s["data"]["csv"] = DIGITS
    if shape is not None:
        s["data"]["inputs"]["x"]["shape"] = list(shape)
    s["graph"] = graph + [{"id": "loss", "op": "softmax_cross_entropy", "inputs": ["logits", "y"]}]
    s["optimizer"] = {"kind": "adam", "lr": 0.003}
    if params:
        s["params"] = params
    s["train"]["epochs"] = epochs
    path = os.path.join(tmp, name + ".json")
    json.dump(s, open(path, "w"))
    return path


def main():
    with tempfile.TemporaryDirectory(prefix="gradrun-cnn-") as tmp:
        # 1. the row shape
        bad = digits([{"id": "logits", "layer": "dense", "inputs": ["x"], "units": 10}], tmp, "bad", shape=(1, 8, 9))
        p = run("train", bad, "--out", os.path.join(tmp, "bad-run"), code=2)
        check("/data/inputs/x/shape" in p.stderr and "72" in p.stderr and "64 columns" in p.stderr, "row shape error located: " + p.stderr)

        # 2. flatten == reshape op, bit for bit
        dense = [{"id": "logits", "layer": "dense", "inputs": ["flat"], "units": 10}]
        a = digits([{"id": "flat", "layer": "flatten", "inputs": ["x"]}] + dense, tmp, "flatten")
        b = digits([{"id": "flat", "op": "reshape", "inputs": ["x"], "shape": [-1, 64]}] + dense, tmp, "reshape")
        run("train", a, "--out", os.path.join(tmp, "ra"), "--quiet")
        run("train", b, "--out", os.path.join(tmp, "rb"), "--quiet")
        check(read(os.path.join(tmp, "ra", "loss.csv")) == read(os.path.join(tmp, "rb", "loss.csv")), "flatten = reshape [-1, 64]")

        # 3. conv2d layer == its op nodes (same initial values)
        import numpy as np
        rng = np.random.default_rng(0)
        w = (rng.standard_normal((4, 1, 3, 3)) * 0.3).tolist()
        bias = (rng.standard_normal((4, 1, 1)) * 0.1).tolist()
        head = [{"id": "flat", "layer": "flatten", "inputs": ["c"]},
                {"id": "logits", "layer": "dense", "inputs": ["flat"], "units": 10}]
        layer = digits([{"id": "c", "layer": "conv2d", "inputs": ["x"], "filters": 4, "kernel": 3, "padding": "same",
                         "activation": "relu", "init": {"W": {"values": w}, "b": {"values": bias}}}] + head, tmp, "layer")
        ops = digits([{"id": "c.conv", "op": "conv2d", "inputs": ["x", "W"], "padding": "same"},
                      {"id": "c.bias", "op": "add", "inputs": ["c.conv", "b"]},
                      {"id": "c", "op": "relu", "inputs": ["c.bias"]}] + head, tmp, "ops",
                     params={"W": {"shape": [4, 1, 3, 3], "init": {"values": w}}, "b": {"shape": [4, 1, 1], "init": {"values": bias}}})
        run("train", layer, "--out", os.path.join(tmp, "rl"), "--quiet")
        run("train", ops, "--out", os.path.join(tmp, "ro"), "--quiet")
        check(read(os.path.join(tmp, "rl", "loss.csv")) == read(os.path.join(tmp, "ro", "loss.csv")), "conv2d layer = conv2d + add + relu ops")

        # 3b. "trainable": false on a conv2d layer freezes its W and b: their bytes stay the init's
        frozen = digits([{"id": "c", "layer": "conv2d", "inputs": ["x"], "filters": 4, "kernel": 3, "padding": "same",
                          "activation": "relu", "trainable": False}] + head, tmp, "frozen")
        rf = os.path.join(tmp, "rf")
        run("train", frozen, "--out", rf, "--quiet")
        a0, a1 = tensors(os.path.join(rf, "init.safetensors")), tensors(os.path.join(rf, "weights.safetensors"))
        check(a0["c.W"] == a1["c.W"] and a0["c.b"] == a1["c.b"] and a0["logits.W"] != a1["logits.W"], "frozen conv2d layer")

        # 4. inspect's layers table
        out = run("inspect", os.path.join(ROOT, "specs", "digits-cnn.json")).stdout
        rows = {}
        if "layers:" in out:
            for line in out[out.index("layers:"):].splitlines()[2:]:
                parts = line.split()
                if len(parts) < 4 or parts[0] == "total":
                    break
                rows[parts[0]] = (parts[1], " ".join(parts[2:-1]), int(parts[-1]))
        check(rows.get("c1") == ("conv2d(relu)", "[64, 16, 8, 8]", 160), "inspect c1: %s" % (rows.get("c1"),))
        check(rows.get("p1") == ("max_pool2d", "[64, 16, 4, 4]", 0), "inspect p1: %s" % (rows.get("p1"),))
        check(rows.get("c2") == ("conv2d(relu)", "[64, 32, 4, 4]", 16 * 32 * 9 + 32), "inspect c2: %s" % (rows.get("c2"),))
        check(rows.get("flat") == ("flatten", "[64, 512]", 0), "inspect flat: %s" % (rows.get("flat"),))

        # 5. located errors naming the layer
        e1 = digits([{"id": "c", "layer": "conv2d", "inputs": ["x"], "filters": 4, "kernel": 3, "strid": 2}] + head, tmp, "e1")
        p = run("train", e1, "--out", os.path.join(tmp, "e1"), code=2)
        check("/graph/0/strid" in p.stderr and "unknown key" in p.stderr, "unknown layer key: " + p.stderr)
        e2 = digits([{"id": "f", "layer": "flatten", "inputs": ["x"]},
                     {"id": "c", "layer": "conv2d", "inputs": ["f"], "filters": 4, "kernel": 3}] + head, tmp, "e2")
        p = run("train", e2, "--out", os.path.join(tmp, "e2"), code=2)
        check("/graph/1" in p.stderr and "conv2d layer (\"c\") needs an [N, C, H, W] input" in p.stderr, "conv2d on 2-D: " + p.stderr)

        e3 = digits([{"id": "c", "layer": "conv2d", "inputs": ["x"], "filters": 4, "kernel": 9}] + head, tmp, "e3")
        p = run("train", e3, "--out", os.path.join(tmp, "e3"), code=2)
        check("/graph/0: conv2d layer \"c\": conv2d: output would be empty" in p.stderr, "kernel larger than the image: " + p.stderr)

        # 6. export torch vs predict: "same" with an even kernel (asymmetric pads), both pools
        try:
            import torch
        except ImportError as e:
            print("SKIPPED [torch]: cnn_cli -- " + str(e))
            return 77
        net = [{"id": "c1", "layer": "conv2d", "inputs": ["x"], "filters": 6, "kernel": 4, "padding": "same", "activation": "tanh"},
               {"id": "p1", "layer": "max_pool2d", "inputs": ["c1"], "kernel": 2},
               {"id": "c2", "layer": "conv2d", "inputs": ["p1"], "filters": 8, "kernel": 3, "padding": 1, "stride": 1, "activation": "relu"},
               {"id": "p2", "layer": "avg_pool2d", "inputs": ["c2"], "kernel": 2},
               {"id": "flat", "layer": "flatten", "inputs": ["p2"]},
               {"id": "logits", "layer": "dense", "inputs": ["flat"], "units": 10}]
        spec = digits(net, tmp, "net", epochs=2)
        rd = os.path.join(tmp, "rn")
        run("train", spec, "--out", rd, "--quiet")
        pred = os.path.join(tmp, "pred.csv")
        run("predict", rd, "--data", DIGITS, "--out", pred)
        ex = os.path.join(tmp, "ex")
        run("export", rd, "--format", "torch", "--out", ex)
        check(os.path.exists(os.path.join(ex, "model.py")), "export torch wrote model.py")
        if os.path.exists(os.path.join(ex, "model.py")):
            spec_mod = importlib.util.spec_from_file_location("cnn_model", os.path.join(ex, "model.py"))
            mod = importlib.util.module_from_spec(spec_mod)
            spec_mod.loader.exec_module(mod)
            model = mod.Model.from_dir(ex)
            rows_in = list(csv.DictReader(open(DIGITS)))
            x = torch.tensor([[float(r["px%d" % i]) for i in range(64)] for r in rows_in], dtype=torch.float64)
            with torch.no_grad():
                got = model(x).numpy()
            want = np.array([[float(v) for v in r[:-1]] for r in list(csv.reader(open(pred)))[1:]])
            err = float(np.max(np.abs(got - want)))
            check(err <= 1e-12, "export torch vs predict: max |diff| %.3g" % err)

        # 6a. import-torch: the export's state_dict (nn.Conv2d's names c1.weight, c1.bias [F]) imports as
        # the trained weights' bytes; a PyTorch-native float32 state_dict widens exactly ([F] -> [F, 1, 1])
        from cli_support import write_safetensors
        imp = os.path.join(tmp, "imported.safetensors")
        run("import-torch", os.path.join(ex, "state_dict.safetensors"), "--spec", spec, "--out", imp, "--quiet")
        a, b = tensors(imp), tensors(os.path.join(rd, "weights.safetensors"))
        check(all(a.get(k) == v for k, v in b.items() if ".running_" not in k), "import-torch round trip: the trained bytes")
        torch.manual_seed(0)
        native = {"c1.weight": torch.randn(6, 1, 4, 4), "c1.bias": torch.randn(6), "c2.weight": torch.randn(8, 6, 3, 3),
                  "c2.bias": torch.randn(8), "logits.weight": torch.randn(10, 32), "logits.bias": torch.randn(10)}
        nat = os.path.join(tmp, "native.safetensors")
        write_safetensors(nat, {k: ("F32", v.numpy()) for k, v in native.items()})
        imp2 = os.path.join(tmp, "imported2.safetensors")
        run("import-torch", nat, "--spec", spec, "--out", imp2, "--quiet")
        got = tensors(imp2)
        for k, gk, f in (("c1.weight", "c1.W", None), ("c1.bias", "c1.b", None), ("c2.bias", "c2.b", None),
                         ("logits.weight", "logits.W", "T")):
            v = native[k].numpy().astype(np.float64)
            v = v.T if f else v
            check(got.get(gk) == np.ascontiguousarray(v).tobytes(), "import-torch native %s -> %s" % (k, gk))

        # 6b. export onnx vs predict in onnxruntime-node (tools/onnxrt): float32 to 1e-5 relative + 1e-6,
        # float64 to 1e-12 relative + 1e-15 (as test_export_onnx.py), when node and onnxruntime are there
        run_js = os.path.join(ROOT, "tools", "onnxrt", "run.js")
        if shutil.which("node") and os.path.isdir(os.path.join(ROOT, "tools", "onnxrt", "node_modules", "onnxruntime-node")):
            rows_in = list(csv.DictReader(open(DIGITS)))
            feed = os.path.join(tmp, "feed.json")
            json.dump({"x": [[float(r["px%d" % i]) for i in range(64)] for r in rows_in]}, open(feed, "w"))
            want = np.array([[float(v) for v in r[:-1]] for r in list(csv.reader(open(pred)))[1:]])
            # A max-pool-only model in float64 too (onnxruntime's CPU provider has no double Conv or
            # AveragePool: the f64 CNN export warns, naming the node, and is written all the same).
            p = run("export", rd, "--format", "onnx", "--dtype", "f64", "--out", os.path.join(tmp, "net64.onnx"))
            check("uses Conv in float64" in p.stderr, "f64 export warns that onnxruntime lacks double Conv: " + p.stderr)
            pools = digits([{"id": "p1", "layer": "max_pool2d", "inputs": ["x"], "kernel": 3, "stride": 2, "padding": 1},
                            {"id": "flat", "layer": "flatten", "inputs": ["p1"]},
                            {"id": "logits", "layer": "dense", "inputs": ["flat"], "units": 10}], tmp, "pools")
            rp = os.path.join(tmp, "rp")
            run("train", pools, "--out", rp, "--quiet")
            pred_p = os.path.join(tmp, "pred-pools.csv")
            run("predict", rp, "--data", DIGITS, "--out", pred_p)
            for dtype, rel, ab, rd_, pred_ in (("f32", 1e-5, 1e-6, rd, pred), ("f64", 1e-12, 1e-15, rp, pred_p)):
                want = np.array([[float(v) for v in r[:-1]] for r in list(csv.reader(open(pred_)))[1:]])
                model_path = os.path.join(tmp, "net-%s.onnx" % dtype)
                run("export", rd_, "--format", "onnx", "--dtype", dtype, "--out", model_path)
                r = subprocess.run(["node", run_js, model_path, feed], capture_output=True, text=True)
                if r.returncode != 0:
                    check(False, "onnxruntime %s: %s" % (dtype, r.stderr.strip()))
                    continue
                outs = json.loads(r.stdout)
                got = np.array(next(iter(outs.values()))["data"]).reshape(want.shape)
                bad = np.abs(got - want) > rel * np.abs(want) + ab
                check(not bad.any(), "export onnx %s vs predict: max |diff| %.3g" % (dtype, float(np.max(np.abs(got - want)))))
        else:
            print("note: no node/onnxruntime-node (tools/onnxrt/node_modules): the ONNX check did not run")

        # 6c. a batch_norm layer after a conv (running statistics in eval mode, scale/shift [C, 1, 1] as
        # nn.BatchNorm2d's weight/bias [C]): export torch reproduces predict; import-torch maps the names
        bnet = [{"id": "c1", "layer": "conv2d", "inputs": ["x"], "filters": 4, "kernel": 3, "bias": False},
                {"id": "bn", "layer": "batch_norm", "inputs": ["c1"]},
                {"id": "p1", "layer": "max_pool2d", "inputs": ["bn"], "kernel": 2},
                {"id": "flat", "layer": "flatten", "inputs": ["p1"]},
                {"id": "logits", "layer": "dense", "inputs": ["flat"], "units": 10}]
        bspec = digits(bnet, tmp, "bnet", epochs=2)
        rbn = os.path.join(tmp, "rbn")
        run("train", bspec, "--out", rbn, "--quiet")
        out = run("inspect", bspec).stdout
        check("bn               batch_norm" in out and " 8\n" in out[out.index("layers:"):], "inspect: batch_norm layer, 8 parameters")
        pred_b = os.path.join(tmp, "pred-bn.csv")
        run("predict", rbn, "--data", DIGITS, "--out", pred_b)
        exb = os.path.join(tmp, "exb")
        run("export", rbn, "--format", "torch", "--out", exb)
        sm = importlib.util.spec_from_file_location("bn_model", os.path.join(exb, "model.py"))
        bm = importlib.util.module_from_spec(sm)
        sm.loader.exec_module(bm)
        bmodel = bm.Model.from_dir(exb)
        rows_all = list(csv.DictReader(open(DIGITS)))
        xb = torch.tensor([[float(r["px%d" % i]) for i in range(64)] for r in rows_all], dtype=torch.float64)
        with torch.no_grad():
            got = bmodel(xb).numpy()
        want = np.array([[float(v) for v in r[:-1]] for r in list(csv.reader(open(pred_b)))[1:]])
        check(float(np.max(np.abs(got - want))) <= 1e-12, "batch_norm layer: export torch vs predict %.3g" % float(np.max(np.abs(got - want))))
        sd = tensors(os.path.join(exb, "state_dict.safetensors"))
        check("bn.weight" in sd and "bn.bias" in sd and len(sd["bn.weight"]) == 4 * 8, "export: bn.weight / bn.bias as [C]: %s" % sorted(sd))
        # the layer's running statistics sit beside its weight and bias, as nn.BatchNorm2d's buffers: a real
        # BatchNorm2d loads the four tensors, and import-torch takes them back without a --map
        bn_keys = sorted(k for k in sd if k.startswith("bn."))
        check(bn_keys == ["bn.bias", "bn.running_mean", "bn.running_var", "bn.weight"], "export: nn.BatchNorm2d's keys: %s" % bn_keys)
        real_bn = torch.nn.BatchNorm2d(4, dtype=torch.float64)
        missing, unexpected = real_bn.load_state_dict({k[3:]: torch.from_numpy(np.frombuffer(sd[k], dtype=np.float64).copy()) for k in bn_keys}, strict=False)
        check(set(missing) <= {"num_batches_tracked"} and not unexpected, "nn.BatchNorm2d loads the export: %s %s" % (missing, unexpected))
        impb = os.path.join(tmp, "imported-bn.safetensors")
        run("import-torch", os.path.join(exb, "state_dict.safetensors"), "--spec", bspec, "--out", impb, "--quiet")
        wb = tensors(os.path.join(rbn, "weights.safetensors"))
        check("bn.running_mean" in wb and tensors(impb) == wb, "import-torch round trip with a batch_norm layer: the trained bytes, running statistics included")

        # 7. the example beats the MLP
        rc = os.path.join(tmp, "rc")
        run("train", os.path.join(ROOT, "specs", "digits-cnn.json"), "--out", rc, "--quiet")
        last = list(csv.DictReader(open(os.path.join(rc, "metrics.csv"))))[-1]
        acc = float(last["val_accuracy"])
        check(acc > 0.983, "digits-cnn val_accuracy %.4f > 0.983 (digits.json's MLP)" % acc)
        ev = run("evaluate", rc).stdout  # the validation rows again through the row shape: the same bits
        check("accuracy   %r" % acc in ev or ("accuracy   " + last["val_accuracy"]) in ev, "evaluate = metrics.csv: " + ev[:200])

        # 8. a tensor input's row shape: checked when the data is loaded, located at the binding
        npz = os.path.join(tmp, "img.npz")
        np.savez(npz, x=np.zeros((16, 1, 4, 4)), y=np.eye(2)[np.arange(16) % 2])
        t = {"gradrun": 1, "data": {"npz": npz, "inputs": {"x": {"tensor": "x", "shape": [1, 4, 5]}, "y": {"tensor": "y"}}},
             "graph": [{"id": "o", "layer": "dense", "inputs": ["x"], "units": 2},
                       {"id": "loss", "op": "softmax_cross_entropy", "inputs": ["o", "y"]}],
             "loss": "loss", "train": {"batch_size": 8}}
        tpath = os.path.join(tmp, "tensor.json")
        json.dump(t, open(tpath, "w"))
        p = run("inspect", tpath, code=2)
        check("/data/inputs/x/shape" in p.stderr and "16 values" in p.stderr and "holds 20" in p.stderr, "tensor row shape: " + p.stderr)
        t["data"]["inputs"]["x"]["shape"] = [16]
        json.dump(t, open(tpath, "w"))
        check("input x              [8, 16]" in run("inspect", tpath).stdout, "a [N, 1, 4, 4] tensor read as [N, 16] rows")
        print("digits-cnn val_accuracy %.4f" % acc)
    return cli.finish("ok   cnn_cli")


if __name__ == "__main__":
    sys.exit(main())
