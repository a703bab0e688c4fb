"""What the command-line tests share: run gradrun and collect failures, read files, read and write tensors.

    sys.path.insert(0, os.path.join(ROOT, "tests", "support"))
    from cli_support import Cli, read, tensors
    cli = Cli(sys.argv[1]); cli.run("train", SPEC, code=0); cli.check(ok, "what"); return cli.finish("ok line")
"""
import json
import struct
import subprocess


class Cli:
    def __init__(self, gradrun):
        self.gradrun = gradrun
        self.fails = []

    def check(self, ok, what):
        if not ok:
            self.fails.append(what)

    def run(self, *args, code=0, env=None):
        """Runs gradrun; an exit status other than `code` is a failure (None: any status)."""
        p = subprocess.run([self.gradrun, *args], capture_output=True, text=True, timeout=600, env=env)
        if code is not None and p.returncode != code:
            self.fails.append(f"{' '.join(args)}: exit {p.returncode}, wanted {code}\n{p.stderr}")
        return p

    def finish(self, ok_message):
        """Prints the failures (exit status 1) or the one-line summary (0)."""
        if self.fails:
            print("FAILED:\n" + "\n".join(self.fails))
            return 1
        print(ok_message)
        return 0


def read(path):
    with open(path, "rb") as f:
        return f.read()


def tensors(path):
    """The tensors of a safetensors file, name -> raw bytes (the metadata names the run, so it is left out)."""
    data = read(path)
    n = struct.unpack("<Q", data[:8])[0]
    header = json.loads(data[8:8 + n])
    header.pop("__metadata__", None)
    return {k: data[8 + n + v["data_offsets"][0]:8 + n + v["data_offsets"][1]] for k, v in header.items()}


def write_safetensors(path, arrays):
    """arrays: name -> (dtype string, numpy array), laid out in the given order (numpy needed)."""
    import numpy as np
    header, blobs, off = {}, [], 0
    np_of = {"F64": "<f8", "F32": "<f4", "I64": "<i8", "F16": "<f2"}
    for name, (dt, a) in arrays.items():
        b = np.ascontiguousarray(a, dtype=np_of[dt]).tobytes()
        header[name] = {"dtype": dt, "shape": list(a.shape), "data_offsets": [off, off + len(b)]}
        blobs.append(b)
        off += len(b)
    h = json.dumps(header).encode()
    h += b" " * ((8 - len(h) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + b"".join(blobs))
