#!/usr/bin/python3
"""`grad` and `check --replay` run on the spec's engine, like `train` (issue 40 item 3).

    /usr/bin/python3 tests/test_engine_cli.py GRADRUN

The spec's "device" object (kind, dtype, fuse) is parsed once into one engine choice that every
command uses (lib/train/engine.h). On specs/iris.json with its device object rewritten:
- grad with "dtype": "f32" writes F32 tensors whose values are floats and whose loss differs from
  the f64 spec's; the same bytes as `grad --dtype f32` on the f64 spec, and as the f32 spec on
  "kind": "host" (the f32 tape and the f32 device program agree bit for bit);
- grad with "kind": "host", "fuse": true runs fused (metadata "fused": "true") and gives the CPU
  tape's f64 bytes; "fuse": false runs per node ("fused": "false");
- check --replay with "fuse": true replays fused kernels and says so ("fused:" in its device line);
  with "fuse": "auto" on the host backend (no launch latency to save) and with false it does not;
  with "dtype": "f32" it compares the f32 device program with the f32 tape, bit for bit.
"""
import json
import os
import struct
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "tests", "support"))
from cli_support import Cli, read, tensors  # noqa: E402

cli = Cli(sys.argv[1])
check, run = cli.check, cli.run


def header(path):
    data = read(path)
    n = struct.unpack("<Q", data[:8])[0]
    return json.loads(data[8:8 + n])


def floats_are_f32(path):
    h = header(path)
    meta = h.pop("__metadata__", {})
    return meta, {k: v["dtype"] for k, v in h.items()}


def main():
    tmp = tempfile.mkdtemp(prefix="gr_engine_")
    base = json.load(open(os.path.join(ROOT, "specs", "iris.json")))
    base["data"]["csv"] = os.path.join(ROOT, "datasets", "iris.csv")
    specs = {}
    for name, dev in [("f64", {"kind": "cpu", "dtype": "f64", "fuse": False}),
                      ("f32", {"kind": "cpu", "dtype": "f32", "fuse": False}),
                      ("host-f32", {"kind": "host", "dtype": "f32", "fuse": False}),
                      ("host", {"kind": "host", "dtype": "f64", "fuse": False}),
                      ("host-fuse", {"kind": "host", "dtype": "f64", "fuse": True}),
                      ("host-auto", {"kind": "host", "dtype": "f64", "fuse": "auto"})]:
        s = dict(base)
        s["device"] = dev
        specs[name] = os.path.join(tmp, name + ".json")
        with open(specs[name], "w") as f:
            json.dump(s, f)

    def grad(name, *extra):
        out = os.path.join(tmp, "grad-" + name + "-".join(extra) + ".safetensors")
        run("grad", specs[name], "--out", out, *extra)
        return out

    g64, g32, g32_flag = grad("f64"), grad("f32"), grad("f64", "--dtype", "f32")
    meta64, types64 = floats_are_f32(g64)
    meta32, types32 = floats_are_f32(g32)
    check(set(types64.values()) == {"F64"} and meta64.get("dtype") == "f64", f"f64 spec: grad wrote {types64} {meta64}")
    check(set(types32.values()) == {"F32"} and meta32.get("dtype") == "f32",
          f'"dtype": "f32" spec: grad wrote {types32} {meta32}, wanted F32 tensors and dtype f32')
    loss64 = struct.unpack("<d", tensors(g64)["loss"])[0]
    loss32 = struct.unpack("<f", tensors(g32)["loss"])[0]
    check(loss64 != loss32 and abs(loss64 - loss32) < 1e-5 * abs(loss64),
          f"f32 grad loss {loss32!r} vs f64 {loss64!r}: wanted close, not equal (the f32 tape computed it)")
    check(tensors(g32) == tensors(g32_flag), "the f32 spec's grad differs from grad --dtype f32 on the f64 spec")
    gh32 = grad("host-f32")
    check(header(gh32)["__metadata__"].get("device") == "host", "a host spec's grad did not run on the host backend")
    check(tensors(gh32) == tensors(g32), "grad on the host f32 program differs from the f32 CPU tape")
    gh, ghf = grad("host"), grad("host-fuse")
    check(header(gh)["__metadata__"].get("fused") == "false", "fuse false: grad says it fused")
    check(header(ghf)["__metadata__"].get("fused") == "true", '"fuse": true: grad did not run fused')
    check(tensors(gh) == tensors(g64) and tensors(ghf) == tensors(g64), "f64 grad on the host (per node, fused) differs from the CPU tape")

    for name, fused in [("host-fuse", True), ("host-auto", False), ("host", False), ("host-f32", False)]:
        p = run("check", specs[name], "--replay", "--episodes", "3")
        line = next((l for l in p.stdout.splitlines() if l.startswith("device:")), "")
        check(("fused:" in line) == fused, f"check --replay on the {name} spec: device line {line!r}, wanted fused={fused}")
        check("bit-equal" in p.stdout, f"check --replay on the {name} spec: {p.stdout}")
    return cli.finish("engine: grad and check --replay follow the spec's device, dtype and fuse")


if __name__ == "__main__":
    sys.exit(main())
