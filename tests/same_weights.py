#!/usr/bin/env python3
"""same_weights.py A.safetensors B.safetensors — exit 0 when both files hold the same tensors (names,
dtypes, shapes) with the same data bytes; the __metadata__ (device, dtype of the run) may differ."""
import json
import struct
import sys


def tensors(path):
    raw = open(path, "rb").read()
    (n,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8 : 8 + n])
    header.pop("__metadata__", None)
    data = raw[8 + n :]
    return {k: (v["dtype"], v["shape"], data[v["data_offsets"][0] : v["data_offsets"][1]]) for k, v in header.items()}


a, b = tensors(sys.argv[1]), tensors(sys.argv[2])
if not a or a != b:
    diff = sorted(k for k in set(a) | set(b) if a.get(k) != b.get(k))
    print(f"weights differ: {', '.join(diff) or 'no tensors'}")
    sys.exit(1)
print(f"same bytes: {len(a)} tensors")
