#!/usr/bin/python3
"""torch_oracle.py — an independent PyTorch (float64) oracle for the gradrun tape.

Usage: /usr/bin/python3 tests/oracle/torch_oracle.py DIR [--variants] [--float32]

Reads DIR/program.txt, written by tests/test_oracle.cpp straight from the tape's nodes, and
interprets it as a PyTorch float64 autograd graph: every gradrun op maps to its torch
equivalent, so every op of the op table is covered without duplicating the graph here. An
elementwise node carries its op-table row's `torch` expression (kernels/gr_op_table.h) over the
tensors a, b and the float s, evaluated here as it is; the other ops are mapped by hand below.
Writes DIR/result.txt (the loss, every parameter's gradient and every node's value, each as the
hex of the 64-bit pattern). With --variants it also writes two deliberately wrong answers that the
C++ side must reject (so the oracle cannot pass vacuously):
  result_fwd.txt  the value of the program's "mutate" node scaled by (1 + 1e-10)
  result_bwd.txt  the gradient flowing back through that node scaled by (1 + 1e-9) (values intact)

program.txt (one record per line, hex = 16 hex digits of an IEEE binary64 bit pattern):
  gradrun-oracle 1
  loss ID
  mutate ID
  node ID OP A B AXIS KEEPDIMS SCALARHEX RANK DIMS... STARTS...
  vals ID COUNT HEX...          (after a param/const node: its values, row-major)
  expr ID TEXT...               (after an elementwise, row or fold node: its row's torch expression)
  fold ID                       (after a fold reduction's expr: the expression is over a, dim d, keepdim k)
  window ID KH KW SH SW PT PL PB PR DH DW GROUPS
                                (after a window op's expr (conv2d, pools): its resolved geometry; the
                                expression is over a padded by F.pad (0, max_pool2d -inf), b, kernel k,
                                stride st, dilation dl and groups gp)
  batch ID C MOMENTUMHEX TRAINING  (after a batch_norm node: its running variance's node C (B: the running
                                mean), momentum, and 1 when recorded training; result.txt then holds
                                `state ID COUNT HEX...`: the running mean then variance after
                                torch.nn.functional.batch_norm's own update)
  end
AXIS is -2147483648 for "all axes"; A/B are -1 when absent. Node ids are 0..N-1 in order.

--float32 runs the graph in torch float32 instead (the oracle of an f32 tape); values and results
still travel as binary64 patterns (floats widen exactly).

Exit status: 0 ok, 77 torch is not importable (the C++ test skips), 2 bad program / internal error.
"""
import struct
import sys

ALL_AXES = -2147483648
DTYPE = None  # torch.float64, or torch.float32 with --float32 (set in main)


def die(msg, code=2):
    sys.stderr.write("torch_oracle: " + msg + "\n")
    sys.exit(code)


try:
    import torch
except Exception as e:  # ImportError, or a broken install
    sys.stdout.write("cannot import torch in %s: %s\n" % (sys.executable, e))
    sys.exit(77)


def d2h(x):
    return "%016x" % struct.unpack("<Q", struct.pack("<d", float(x)))[0]


def h2d(h):
    return struct.unpack("<d", struct.pack("<Q", int(h, 16)))[0]


def parse(path):
    nodes, vals = [], {}
    loss = mutate = None
    with open(path) as f:
        lines = f.read().split("\n")
    if not lines or lines[0].strip() != "gradrun-oracle 1":
        die("bad header in " + path)
    ended = False
    for ln in lines[1:]:
        t = ln.split()
        if not t:
            continue
        k = t[0]
        if k == "loss":
            loss = int(t[1])
        elif k == "mutate":
            mutate = int(t[1])
        elif k == "node":
            nid, op, a, b, axis, keep = int(t[1]), t[2], int(t[3]), int(t[4]), int(t[5]), int(t[6])
            scalar = h2d(t[7])
            rank = int(t[8])
            dims = [int(v) for v in t[9:9 + rank]]
            starts = [int(v) for v in t[9 + rank:9 + 2 * rank]]
            if nid != len(nodes) or len(starts) != rank:
                die("malformed node record: " + ln)
            nodes.append(dict(id=nid, op=op, a=a, b=b, axis=axis, keepdims=bool(keep), scalar=scalar,
                              shape=dims, starts=starts))
        elif k == "expr":
            nid = int(t[1])
            if nid != len(nodes) - 1:
                die("expr record for node %d does not follow it" % nid)
            nodes[nid]["expr"] = ln.split(None, 2)[2] if len(t) > 2 else ""
        elif k == "fold":  # the node before is a fold reduction (its expr is over a, d and k)
            if not nodes or nodes[-1]["id"] != int(t[1]):
                die("fold record for node %s does not follow it" % t[1])
            nodes[-1]["fold"] = True
        elif k == "window":  # the node before is a window op: its geometry
            if not nodes or nodes[-1]["id"] != int(t[1]):
                die("window record for node %s does not follow it" % t[1])
            nodes[-1]["window"] = [int(v) for v in t[2:14]]
        elif k == "causal":  # the node before is a causal softmax (last two axes: query, key)
            if not nodes or nodes[-1]["id"] != int(t[1]):
                die("causal record for node %s does not follow it" % t[1])
            nodes[-1]["causal"] = True
        elif k == "batch":
            nodes[int(t[1])]["batch"] = (int(t[2]), h2d(t[3]), int(t[4]))
        elif k == "key":
            nodes[int(t[1])]["key"] = (int(t[2]), int(t[3]), int(t[4]))
        elif k == "vals":
            nid, cnt = int(t[1]), int(t[2])
            hx = t[3:]
            if len(hx) != cnt:
                die("vals %d: expected %d values, got %d" % (nid, cnt, len(hx)))
            vals[nid] = [h2d(h) for h in hx]
        elif k == "end":
            ended = True
        else:
            die("unknown record: " + k)
    if not ended:
        die("program is truncated (no 'end')")
    if loss is None:
        die("no loss record")
    return nodes, vals, loss, mutate


M64 = (1 << 64) - 1


def mix64(z):
    """SplitMix64's finalizer (docs/numerics.md, dropout), on Python integers."""
    z = (z + 0x9E3779B97F4A7C15) & M64
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & M64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & M64
    return z ^ (z >> 31)


def counter_unit(seed, step, node, e):
    """Dropout's uniform for element e of a node: written from the documented formula, not the C++."""
    h = mix64(seed ^ mix64(step ^ mix64(node ^ mix64(e))))
    return (h >> 11) / float(1 << 53)


class ScaleGrad(torch.autograd.Function):
    """Identity forward; the incoming gradient scaled by `factor` on the way back."""

    @staticmethod
    def forward(ctx, x, factor):
        ctx.factor = factor
        return x.clone()

    @staticmethod
    def backward(ctx, g):
        return g * ctx.factor, None


STATES = {}  # batch_norm node id -> its running statistics after the forward (run() fills it)


def run(nodes, vals, loss_id, mutate=None, mode=None):
    """Evaluates the program; returns (loss tensor, {param id: leaf tensor}, [node values])."""
    STATES.clear()
    t = []
    params = {}
    for n in nodes:
        op, shape = n["op"], n["shape"]
        a = t[n["a"]] if n["a"] >= 0 else None
        b = t[n["b"]] if n["b"] >= 0 else None
        ax = n["axis"]
        if op in ("param", "const"):
            if n["id"] not in vals:
                die("node %d (%s) has no values" % (n["id"], op))
            y = torch.tensor(vals[n["id"]], dtype=DTYPE).reshape(shape)
            if op == "param":
                y.requires_grad_(True)
                params[n["id"]] = y
        elif "expr" in n and "fold" in n:  # a fold reduction: its row's expression over a, dim d, keepdim k
            if not n["expr"]:
                die("node %d (%s): the op table row has no torch expression" % (n["id"], op))
            env = {"__builtins__": {}, "torch": torch}
            if ax == ALL_AXES:  # one lane of every element, as the tape's rule sees it
                y = eval(n["expr"], env, {"a": a.reshape(-1), "d": 0, "k": False}).reshape(1)
            else:
                y = eval(n["expr"], env, {"a": a, "d": ax, "k": n["keepdims"]})
                if y.dim() == 0:
                    y = y.reshape(1)
        elif "expr" in n and "window" in n:  # a window op: its row's expression over the padded input
            if not n["expr"]:
                die("node %d (%s): the op table row has no torch expression" % (n["id"], op))
            kh, kw, sh, sw, pt, pl, pb, pr, dh, dw, gp = n["window"]
            fill = float("-inf") if op == "max_pool2d" else 0.0
            ap = torch.nn.functional.pad(a, (pl, pr, pt, pb), value=fill) if (pt or pl or pb or pr) else a
            y = eval(n["expr"], {"__builtins__": {}, "torch": torch},
                     {"a": ap, "b": b, "k": (kh, kw), "st": (sh, sw), "dl": (dh, dw), "gp": gp})
        elif "expr" in n:  # an elementwise or row op: its row's torch expression over a, b and s
            if not n["expr"]:
                die("node %d (%s): the op table row has no torch expression" % (n["id"], op))
            y = eval(n["expr"], {"__builtins__": {}, "torch": torch}, {"a": a, "b": b, "s": n["scalar"]})
        elif op in ("sum", "mean"):
            f = torch.sum if op == "sum" else torch.mean
            if ax == ALL_AXES:
                y = f(a).reshape(1)
            else:
                y = f(a, dim=ax, keepdim=n["keepdims"])
                if y.dim() == 0:  # a rank-1 input reduced away: gradrun keeps shape [1]
                    y = y.reshape(1)
        elif op == "matmul":
            if a.dim() < 2 or b.dim() != 2:  # [..., M, K]·[K, N] as nn.Linear
                die("matmul node %d: operands are not [..., M, K] and [K, N]" % n["id"])
            y = torch.matmul(a, b)
        elif op == "bmm":
            if a.dim() != 3 or b.dim() != 3:
                die("bmm node %d: operands are not 3-D" % n["id"])
            y = torch.matmul(a, b)  # broadcasts a batch of 1
        elif op == "transpose":
            y = a.transpose(-2, -1)
        elif op == "reshape":
            y = a.reshape(shape)
        elif op == "slice":
            y = a[tuple(slice(s, s + d) for s, d in zip(n["starts"], shape))]
        elif op == "concat":
            y = torch.cat([a, b], dim=ax)
        elif op == "softmax":
            if n.get("causal"):  # the keys after each query at -inf: torch's own masked softmax
                mask = torch.ones(a.shape[-2], a.shape[-1], dtype=torch.bool).triu(1)
                y = torch.softmax(a.masked_fill(mask, float("-inf")), dim=-1)
            else:
                y = torch.softmax(a, dim=ax)
        elif op == "log_softmax":
            y = torch.log_softmax(a, dim=ax)
        elif op == "softmax_cross_entropy":
            if a.dim() != 2:
                die("softmax_cross_entropy node %d: logits are not 2-D" % n["id"])
            y = (-(b * torch.log_softmax(a, dim=-1)).sum() / a.shape[0]).reshape(1)
        elif op == "dropout":
            seed, step, training = n["key"]
            if training:
                rate = n["scalar"]
                keep = [counter_unit(seed, step, n["id"], e) >= rate for e in range(a.numel())]
                factor = torch.tensor([1.0 / (1.0 - rate) if k else 0.0 for k in keep], dtype=DTYPE)
                y = a * factor.reshape(a.shape)
            else:
                y = a.clone()
        elif op == "batch_norm":
            c, momentum, training = n["batch"]
            rm, rv = b.detach().clone(), t[c].detach().clone()  # torch updates these in place in training
            y = torch.nn.functional.batch_norm(a, rm, rv, training=bool(training), momentum=momentum, eps=n["scalar"])
            STATES[n["id"]] = torch.cat([rm, rv])
        elif op == "embedding":  # ids (a const) select rows of the table: F.embedding, its own backward
            y = torch.nn.functional.embedding(a.detach().long(), b)
        elif op == "cross_entropy":
            if a.dim() not in (2, 3):
                die("cross_entropy node %d: logits are not [N,C] or [N,T,C]" % n["id"])
            # [N,T,C] with ids [N,T]: the mean over all N·T positions (torch's own mean over the flattened rows)
            y = torch.nn.functional.cross_entropy(a.reshape(-1, a.shape[-1]), b.detach().reshape(-1).long()).reshape(1)
        else:
            die("node %d: no torch mapping for op '%s'" % (n["id"], op))
        if list(y.shape) != list(shape):
            die("node %d (%s): torch shape %s, tape shape %s" % (n["id"], op, list(y.shape), shape))
        if mutate is not None and n["id"] == mutate:
            if mode == "fwd":
                y = y * (1.0 + 1e-10)
            elif mode == "bwd":
                y = ScaleGrad.apply(y, 1.0 + 1e-9)
        t.append(y)
    loss = t[loss_id]
    if loss.numel() != 1:
        die("the loss node %d has %d elements" % (loss_id, loss.numel()))
    loss.sum().backward()
    return loss, params, t


def write_result(path, loss, params, t):
    out = ["loss " + d2h(loss.detach().reshape(-1)[0].item())]
    for pid in sorted(params):
        g = params[pid].grad
        if g is None:
            g = torch.zeros_like(params[pid])
        flat = g.detach().reshape(-1).tolist()
        out.append("grad %d %d %s" % (pid, len(flat), " ".join(d2h(v) for v in flat)))
    for i, y in enumerate(t):
        flat = y.detach().reshape(-1).tolist()
        out.append("value %d %d %s" % (i, len(flat), " ".join(d2h(v) for v in flat)))
    for i in sorted(STATES):
        flat = STATES[i].reshape(-1).tolist()
        out.append("state %d %d %s" % (i, len(flat), " ".join(d2h(v) for v in flat)))
    out.append("end")
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        f.write("\n".join(out) + "\n")
    import os
    os.replace(tmp, path)


def main():
    args = sys.argv[1:]
    if not args:
        die("usage: torch_oracle.py DIR [--variants]")
    d = args[0]
    variants = "--variants" in args[1:]
    global DTYPE
    DTYPE = torch.float32 if "--float32" in args[1:] else torch.float64
    torch.set_num_threads(1)
    nodes, vals, loss_id, mutate = parse(d + "/program.txt")
    write_result(d + "/result.txt", *run(nodes, vals, loss_id))
    if variants:
        if mutate is None:
            die("--variants needs a 'mutate' record")
        write_result(d + "/result_fwd.txt", *run(nodes, vals, loss_id, mutate, "fwd"))
        write_result(d + "/result_bwd.txt", *run(nodes, vals, loss_id, mutate, "bwd"))
    print("torch_oracle: torch %s, %d nodes, %d params%s" %
          (torch.__version__, len(nodes), sum(1 for n in nodes if n["op"] == "param"),
           ", with mutated variants" if variants else ""))


if __name__ == "__main__":
    main()
