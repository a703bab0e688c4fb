#!/usr/bin/python3
"""specs/digits-finetune.json (issue 18 item 5): the digits autoencoder's encoder, frozen and loaded
from the autoencoder's run folder, under a new classifier head.

    /usr/bin/python3 tests/test_finetune_example.py GRADRUN

- specs/digits-autoencoder.json trains into a scratch folder; the fine-tune reads its weights
  (the spec's file paths redirected with --set) and lands on the golden log
  tests/golden/finetune/digits-finetune.loss.csv bit for bit on the CPU tape, --device host and
  --device host --fuse;
- the frozen trunk's bytes in weights.safetensors are the autoencoder's code.W / code.b bytes;
- run.json names the autoencoder's weights file with its SHA-256;
- the same model with the trunk trainable trains differently and moves the trunk;
- without the autoencoder's run folder the spec fails with one located line (exit 2).
Standard library only.
"""
import hashlib
import json
import os
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
GR = sys.argv[1]
sys.path.insert(0, os.path.join(ROOT, "tests", "support"))
from cli_support import Cli, read, tensors  # noqa: E402

SPEC = os.path.join(ROOT, "specs", "digits-finetune.json")
GOLDEN = os.path.join(ROOT, "tests", "golden", "finetune", "digits-finetune.loss.csv")
cli = Cli(GR)
check, run, fails = cli.check, cli.run, cli.fails


def main():
    with tempfile.TemporaryDirectory(prefix="gradrun-finetune-") as tmp:
        ae = os.path.join(tmp, "ae")
        run("train", os.path.join(ROOT, "specs", "digits-autoencoder.json"), "--out", ae, "--quiet")
        ae_weights = os.path.join(ae, "weights.safetensors")
        redirect = ["--set", f"/graph/0/init/W/file={ae_weights}", "--set", f"/graph/0/init/b/file={ae_weights}"]
        for name, extra in (("cpu", []), ("host", ["--device", "host"]), ("fused", ["--device", "host", "--fuse"])):
            out = os.path.join(tmp, name)
            run("train", SPEC, "--out", out, "--quiet", "--expect", GOLDEN, *redirect, *extra)
            w = os.path.join(out, "weights.safetensors")
            if not os.path.exists(w):
                continue
            got, want = tensors(w), tensors(ae_weights)
            check(got["code.W"] == want["code.W"] and got["code.b"] == want["code.b"], f"{name}: the frozen trunk changed")
            if name == "cpu":
                files = json.load(open(os.path.join(out, "run.json"))).get("init_files", [])
                sha = hashlib.sha256(read(ae_weights)).hexdigest()
                check(any(f.get("sha256") == sha for f in files), f"run.json init_files does not name the encoder: {files}")
        # the trunk trainable: a different run, a moved trunk
        out = os.path.join(tmp, "trainable")
        run("train", SPEC, "--out", out, "--quiet", "--set", "/graph/0/trainable=true", *redirect)
        if os.path.exists(os.path.join(out, "loss.csv")):
            check(read(os.path.join(out, "loss.csv")) != read(GOLDEN),
                  "a trainable trunk trained to the frozen run's log")
            check(tensors(os.path.join(out, "weights.safetensors"))["code.W"] != tensors(ae_weights)["code.W"],
                  "a trainable trunk did not move")
        # no autoencoder run: one located line
        p = run("train", SPEC, "--out", os.path.join(tmp, "missing"), "--quiet",
                "--set", f"/graph/0/init/W/file={os.path.join(tmp, 'nowhere', 'weights.safetensors')}", code=2)
        lines = p.stderr.strip().splitlines()
        check(len(lines) == 1 and "/graph/0/init/W" in lines[0] and "nowhere" in lines[0], f"missing encoder: {p.stderr!r}")
    return cli.finish("digits-finetune: golden log on cpu/host/fused, trunk bytes unchanged, trainable trunk differs, missing file refused")


if __name__ == "__main__":
    sys.exit(main())
