#!/usr/bin/python3
"""--threads N|auto through the CLI (lib/train/thread_tuner.h).

    /usr/bin/python3 tests/test_threads_cli.py GRADRUN

`gradrun train` defaults to --threads auto: all cores, with each CPU-tape step run on 1 thread or
on all of them, whichever its timings say is faster. Checked:
- a run with the default, with --threads auto, --threads 1 and --threads 2 writes the same loss.csv,
  metrics.csv (less seconds) and weights, byte for byte, on specs/digits.json and specs/iris.json;
- run.json says how: `threads` (the most a step used), `threads_auto`, and `steps_on_one_thread`;
  runs of 520+ steps are long enough for the tuner's first probe whatever the step times (its
  first leg is at most 2 x 255 steps), so an auto run must have run at least kWarm + kSamples = 7
  steps on 1 thread (it really switched); a fixed count has threads_auto false and
  steps_on_one_thread null, and a device run (--device host) keeps its count (threads_auto false);
- an auto run resumed from an interrupted one's checkpoint ends on the same bytes;
- --threads with a bad value (0, 1025, -1, abc, 2x, empty) is exit 2 with one line naming the flag.
Needs two cores for the switching: on one it exits 77 (ctest: Skipped), recorded in
$GR_SKIP_LOG as kind "cores", which scripts/test counts as unexpected unless GR_ALLOWED_SKIPS has it.
"""
import json
import os
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "tests", "support"))
from cli_support import Cli, read, tensors  # noqa: E402

cli = Cli(sys.argv[1])
check, run = cli.check, cli.run
# ThreadTuner: a leg is at most kMaxSamples warm-up steps and kMaxSamples timed ones, and at least
# kWarm + kSamples; so a run of 2 * 255 + 7 steps has run the 1-thread leg of the first probe,
# whatever the step times.
MAX_FIRST_LEG, MIN_LEG = 2 * 255, 2 + 5


def metrics_less_seconds(out):
    rows = [r.split(",") for r in read(os.path.join(out, "metrics.csv")).decode().splitlines()]
    at = rows[0].index("seconds")
    return [r[:at] + r[at + 1:] for r in rows]


def outputs(out):
    return read(os.path.join(out, "loss.csv")), metrics_less_seconds(out), tensors(os.path.join(out, "weights.safetensors"))


def run_json(out):
    with open(os.path.join(out, "run.json")) as f:
        return json.load(f)


def main():
    if (os.cpu_count() or 1) < 2:
        why = "one core: nothing for --threads auto to choose"
        print("SKIP: " + why)
        if os.environ.get("GR_SKIP_LOG"):  # scripts/test: kind "cores" (tests/support/skip.h)
            with open(os.environ["GR_SKIP_LOG"], "a") as log:
                log.write(f"cores\tthreads_cli\t{why}\n")
        return 77
    with tempfile.TemporaryDirectory() as tmp:
        for spec, epochs in (("digits", 24), ("iris", 130)):  # 528 and 520 steps
            path = f"specs/{spec}.json"
            runs = {}
            for name, flags in (("default", []), ("auto", ["--threads", "auto"]), ("1", ["--threads", "1"]),
                                ("2", ["--threads", "2"])):
                out = os.path.join(tmp, f"{spec}-{name}")
                run("train", path, "--out", out, "--quiet", "--epochs", str(epochs), *flags)
                runs[name] = out
            base = outputs(runs["1"])
            for name in ("default", "auto", "2"):
                check(outputs(runs[name]) == base, f"{spec}: --threads {name} wrote other bytes than --threads 1")
            steps = run_json(runs["1"])["episodes"]
            for name in ("default", "auto"):
                r = run_json(runs[name])
                check(r["threads_auto"] is True, f"{spec} {name}: threads_auto {r['threads_auto']}")
                check(r["threads"] == os.cpu_count(), f"{spec} {name}: threads {r['threads']}, {os.cpu_count()} cores")
                ones = r["steps_on_one_thread"]
                check(isinstance(ones, int) and MIN_LEG <= ones <= steps,
                      f"{spec} {name}: {ones} of {steps} steps on 1 thread, wanted at least {MIN_LEG}")
            for name, threads in (("1", 1), ("2", 2)):
                r = run_json(runs[name])
                check(r["threads_auto"] is False and r["steps_on_one_thread"] is None and r["threads"] == threads,
                      f"{spec} --threads {name}: run.json threads {r['threads']} auto {r['threads_auto']} "
                      f"steps_on_one_thread {r['steps_on_one_thread']}")
            check(steps >= MAX_FIRST_LEG + MIN_LEG, f"{spec}: only {steps} steps, too few for a whole probe")

        # A device run keeps its count: the tuner is the CPU tape's.
        out = os.path.join(tmp, "host")
        run("train", "specs/digits.json", "--out", out, "--quiet", "--epochs", "1", "--device", "host")
        r = run_json(out)
        check(r["threads_auto"] is False and r["steps_on_one_thread"] is None, f"--device host: run.json {r}")

        # Resume: 12 epochs, then on to 24, both auto, = 24 straight (the bytes of --threads 1 above).
        out = os.path.join(tmp, "resumed")
        run("train", "specs/digits.json", "--out", out, "--quiet", "--epochs", "12")
        run("train", "specs/digits.json", "--resume", out, "--quiet", "--epochs", "24")
        check(outputs(out)[0] == read(os.path.join(tmp, "digits-1", "loss.csv")), "auto resumed 12 -> 24: other loss.csv bytes")
        check(outputs(out)[2] == tensors(os.path.join(tmp, "digits-1", "weights.safetensors")),
              "auto resumed 12 -> 24: other weights")

        for bad in ("0", "1025", "-1", "abc", "2x", ""):
            p = run("train", "specs/xor.json", "--out", os.path.join(tmp, "bad"), "--quiet", "--threads", bad, code=2)
            lines = p.stderr.strip().splitlines()
            check(len(lines) == 1 and "--threads" in lines[0] and "auto" in lines[0],
                  f"--threads '{bad}': stderr {p.stderr!r}")
            check(not os.path.exists(os.path.join(tmp, "bad")), f"--threads '{bad}': the run folder was created")
        for cmd in (["check", "specs/xor.json", "--fd"], ["grad", "specs/xor.json", "--out", os.path.join(tmp, "g.safetensors")]):
            run(*cmd, "--threads", "auto")  # the other commands take auto too: all cores
    return cli.finish("threads: default/auto/1/2 same bytes on digits and iris; auto probed 1 thread; "
                      "device keeps its count; resume; bad values exit 2")


if __name__ == "__main__":
    sys.exit(main())
