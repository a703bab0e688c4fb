#!/usr/bin/python3
"""The bad-input corpus: every case in tests/bad/cases.tsv must fail cleanly.

    /usr/bin/python3 tests/test_bad_inputs.py GRADRUN [CASE...]

For each case (all of them, or the named ones) this runs the command with `gradrun` replaced by
GRADRUN, from the repository root, and checks that
  - the process was not killed by a signal and left no sanitizer report (ASan, LSan, UBSan);
  - the exit code is the expected one;
  - stderr is exactly one line, starting with "gradrun: error: ", printable (valid UTF-8, no
    control bytes), and containing every expected substring (the file and the place);
  - no temporary file (*.tmp.*, .gradrun-write-test) is left anywhere in the case's folders, and
    every file in the output folder is whole: CSV files end in a newline with one cell count,
    JSON parses, SVG is closed, safetensors headers and data agree;
  - the case's extra checks hold (see below).
It prints `ok   NAME` or `FAIL NAME: why` per case, then `N passed, M failed`, and exits 1 on any
failure. It needs nothing but the Python standard library (run it with /usr/bin/python3).

cases.tsv: one case per line, tab-separated; `#` starts a comment line.
    NAME  EXIT  CHECKS  COMMAND  SUBSTRING...
EXIT is the expected exit code (or alternatives: `2|3`). COMMAND is a shell-like word list whose
first word is `gradrun`; in COMMAND and SUBSTRINGs these are replaced:
    $OUT   a fresh, empty folder for this case (where a run writes: `--out $OUT`)
    $CASE  the case's own scratch folder (holds $OUT)
    $WORK  the shared fixtures made before the cases (below)
CHECKS is `-` or a comma list of:
    out=FIXTURE   $OUT starts as a copy of the fixture folder $WORK/FIXTURE
    keep=A:B|*    these files of $OUT (relative paths, or * for all that existed but the
                  writer lock's note .gradrun.lock) must be byte-identical after the run: bad
                  input loses nothing
    losscsv       a diverged run: loss.csv is whole, its last loss is not finite, and its last
                  step is the one the message names ("at step N")
    ckpt          a diverged run: the message says "no checkpoint was written yet", or names a
                  folder ("is in DIR") whose state.safetensors exists and is whole

Fixtures ($WORK), made with the gradrun under test from the good specs in tests/bad/:
    run/            tiny.json trained for 1 epoch (init, weights, checkpoint ...)
    run_b13/        good_b13.json, 1 epoch: its b is [1, 3]
    run_bias/       good_bias.json, 1 epoch: it has "bias", not "b"
    div1/           diverge.json, 1 epoch: a checkpoint at epoch 1, divergence later
    run_trunc_ckpt/ run/ with checkpoint/state.safetensors cut short by 10 bytes
    run_ckpt_shape/ run/ with param/b declared [1, 3] in checkpoint/state.safetensors
    init_*.safetensors  run/init.safetensors truncated, emptied, corrupted (see make_fixtures)
    deep.json       a spec whose const values nest 1,000,000 arrays deep
    afile           a regular file (an --out path under it cannot be created, even by root)
"""
import concurrent.futures
import hashlib
import json
import math
import os
import re
import shlex
import shutil
import signal
import struct
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CASES = os.path.join(ROOT, "tests", "bad", "cases.tsv")
TIMEOUT = 120  # seconds per command; generous for sanitizer builds
SANITIZER_MARKS = ("AddressSanitizer", "LeakSanitizer", "UndefinedBehaviorSanitizer", "runtime error:",
                   "ThreadSanitizer", "MemorySanitizer")


def sanitizer_env():
    env = dict(os.environ)
    # allocator_may_return_null: a huge allocation throws std::bad_alloc as it does without ASan,
    # so the program's own handling of it is what gets tested.
    env["ASAN_OPTIONS"] = "detect_leaks=1:abort_on_error=0:allocator_may_return_null=1"
    env["UBSAN_OPTIONS"] = "print_stacktrace=1:halt_on_error=1"
    env.pop("GRADRUN_DEVICE", None)
    return env


ENV = sanitizer_env()


class CaseFailure(Exception):
    pass


def run(argv, cwd=ROOT):
    return subprocess.run(argv, cwd=cwd, env=ENV, stdin=subprocess.DEVNULL, capture_output=True, timeout=TIMEOUT)


# ---------------------------------------------------------------------------------------------
# Well-formedness of the files a run leaves behind.

def safetensors_problem(data):
    """None when `data` is a whole safetensors file, else what is wrong with it."""
    if len(data) < 8:
        return "shorter than the 8-byte header length"
    n = struct.unpack("<Q", data[:8])[0]
    if n > len(data) - 8:
        return "header length past the end of the file"
    try:
        header = json.loads(data[8:8 + n])
    except ValueError as e:
        return "header is not JSON (%s)" % e
    if not isinstance(header, dict):
        return "header is not an object"
    end = 0
    for name, info in header.items():
        if name == "__metadata__":
            continue
        try:
            end = max(end, int(info["data_offsets"][1]))
        except (KeyError, TypeError, ValueError, IndexError):
            return "tensor %r has no data_offsets" % name
    if end != len(data) - 8 - n:
        return "tensors cover %d bytes of a %d-byte buffer" % (end, len(data) - 8 - n)
    return None


def file_problem(path):
    """None when the file at `path` is whole for its kind, else what is wrong."""
    with open(path, "rb") as f:
        data = f.read()
    name = os.path.basename(path)
    if name.endswith(".safetensors"):
        return safetensors_problem(data)
    if name.endswith(".csv"):
        if not data.endswith(b"\n"):
            return "does not end with a newline"
        lines = data.decode("utf-8", "replace").splitlines()
        widths = {line.count(",") for line in lines}
        if len(widths) != 1:
            return "rows have different cell counts"
    if name.endswith(".json"):
        try:
            json.loads(data)
        except ValueError as e:
            return "not JSON (%s)" % e
    if name.endswith(".svg") and not data.rstrip().endswith(b"</svg>"):
        return "SVG not closed"
    return None


def walk_files(top):
    for d, _, files in os.walk(top):
        for f in files:
            yield os.path.join(d, f)


def digests_of(path):
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


def digests(top):
    return {os.path.relpath(p, top): digests_of(p) for p in walk_files(top)}


# ---------------------------------------------------------------------------------------------
# Fixtures.

def make_fixtures(gradrun, work):
    """Makes $WORK; returns a list of problems (empty when all is well)."""
    problems = []

    def train(spec, out, *extra):
        r = run([gradrun, "train", spec, "--quiet", "--out", os.path.join(work, out)] + list(extra))
        if r.returncode != 0:
            problems.append("fixture %s: gradrun train %s exited %d: %s" %
                            (out, spec, r.returncode, r.stderr.decode("utf-8", "replace").strip()))

    train("tests/bad/tiny.json", "run", "--epochs", "1")
    train("tests/bad/good_b13.json", "run_b13", "--epochs", "1")
    train("tests/bad/good_bias.json", "run_bias", "--epochs", "1")
    train("tests/bad/diverge.json", "div1", "--epochs", "1")
    if problems:
        return problems

    with open(os.path.join(work, "run", "init.safetensors"), "rb") as f:
        good = f.read()
    n = struct.unpack("<Q", good[:8])[0]
    header_at = 8 + good[8:].index(b"{")
    broken = {
        "init_truncated": good[:-5],                              # cut inside the last tensor
        "init_truncated_header": good[:8 + n // 2],               # cut inside the JSON header
        "init_empty": b"",
        "init_short": good[:4],                                   # not even a header length
        "init_absurd": struct.pack("<Q", 1 << 62) + good[8:],     # header length of 4 EiB
        "init_corrupt": good[:header_at] + b"#" + good[header_at + 1:],  # header JSON damaged
        "init_trailing": good + b"\0" * 8,                        # bytes no tensor covers
    }
    for name, data in broken.items():
        with open(os.path.join(work, name + ".safetensors"), "wb") as f:
            f.write(data)

    shutil.copytree(os.path.join(work, "run"), os.path.join(work, "run_trunc_ckpt"))
    state = os.path.join(work, "run_trunc_ckpt", "checkpoint", "state.safetensors")
    with open(state, "rb") as f:
        data = f.read()
    with open(state, "wb") as f:
        f.write(data[:-10])

    # The same checkpoint with param/b declared [1, 3] instead of [3] (the bytes still fit).
    shutil.copytree(os.path.join(work, "run"), os.path.join(work, "run_ckpt_shape"))
    state = os.path.join(work, "run_ckpt_shape", "checkpoint", "state.safetensors")
    with open(state, "rb") as f:
        data = f.read()
    n = struct.unpack("<Q", data[:8])[0]
    header = json.loads(data[8:8 + n])
    header["param/b"]["shape"] = [1, 3]
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)
    with open(state, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text + data[8 + n:])

    depth = 1000000
    with open(os.path.join(work, "deep.json"), "w") as f:
        f.write('{"gradrun": 1, "consts": {"k": {"shape": [1], "values": ' + "[" * depth + "1" + "]" * depth +
                "}}, \"graph\": [{\"id\": \"loss\", \"op\": \"sum\", \"inputs\": [\"k\"]}], \"loss\": \"loss\"}\n")
    with open(os.path.join(work, "afile"), "w") as f:
        f.write("a regular file, not a folder\n")
    return problems


# ---------------------------------------------------------------------------------------------
# One case.

def printable_problem(line):
    try:
        text = line.decode("utf-8")
    except UnicodeDecodeError as e:
        return "the error line is not valid UTF-8 (%s)" % e
    bad = [c for c in text if ord(c) < 0x20 or ord(c) == 0x7F]
    if bad:
        return "the error line holds control characters %r" % "".join(bad)
    return None


def check_case(gradrun, work, tmp, case):
    name, exits, checks, command, expect = case
    case_dir = os.path.join(tmp, name)
    out = os.path.join(case_dir, "out")
    os.makedirs(case_dir)
    subst = {"$OUT": out, "$CASE": case_dir, "$WORK": work}

    def expand(s):
        for k, v in subst.items():
            s = s.replace(k, v)
        return s

    opts = {}
    for c in checks:
        k, _, v = c.partition("=")
        opts[k] = v
    if "out" in opts:
        shutil.copytree(os.path.join(work, opts["out"]), out)
    else:
        os.makedirs(out)
    before = digests(out)

    argv = [expand(w) for w in shlex.split(command)]
    if not argv or argv[0] != "gradrun":
        raise CaseFailure("the command must start with `gradrun`")
    argv[0] = gradrun
    try:
        r = run(argv)
    except subprocess.TimeoutExpired:
        raise CaseFailure("timed out after %d s" % TIMEOUT)
    err = r.stderr
    err_text = err.decode("utf-8", "replace")
    shown = err_text.strip().replace("\n", " | ")
    if len(shown) > 600:
        shown = shown[:600] + " ..."

    why = []
    if r.returncode < 0:
        why.append("killed by %s" % signal.Signals(-r.returncode).name)
    if any(m in err_text for m in SANITIZER_MARKS):
        why.append("sanitizer report")
    if str(r.returncode) not in exits:
        why.append("exit %d, expected %s" % (r.returncode, "|".join(exits)))
    lines = err.splitlines()
    if len(lines) != 1:
        why.append("stderr has %d lines, expected 1" % len(lines))
    elif not lines[0].startswith(b"gradrun: error: "):
        why.append("stderr does not start with 'gradrun: error: '")
    else:
        p = printable_problem(lines[0])
        if p:
            why.append(p)
    for s in expect:
        s = expand(s)
        if s not in err_text:
            why.append("missing %r" % s)

    # Nothing torn, nothing temporary left behind.
    for p in walk_files(case_dir):
        base = os.path.basename(p)
        rel = os.path.relpath(p, case_dir)
        if ".tmp." in base or base == ".gradrun-write-test":
            why.append("left a temporary file %s" % rel)
        elif p.startswith(out + os.sep) and before.get(os.path.relpath(p, out)) != digests_of(p):
            problem = file_problem(p)  # (a fixture file the run did not touch is not its doing)
            if problem:
                why.append("torn file %s: %s" % (rel, problem))
    if "keep" in opts:
        after = digests(out)
        # * is every run file; .gradrun.lock notes the latest writer's PID (docs/cli.md), not a run file.
        keep = [k for k in before if k != ".gradrun.lock"] if opts["keep"] == "*" else opts["keep"].split(":")
        for k in keep:
            if k not in before:
                why.append("keep=%s: the fixture has no such file" % k)
            elif before[k] != after.get(k):
                why.append("%s was %s" % (k, "removed" if k not in after else "changed"))

    m = re.search(r"at step (\d+)", err_text)
    if "losscsv" in opts:
        path = os.path.join(out, "loss.csv")
        if not os.path.exists(path):
            why.append("no loss.csv")
        else:
            with open(path) as f:
                rows = f.read().splitlines()
            if not rows or rows[0] != "step,epoch,loss" or len(rows) < 2:
                why.append("loss.csv has no header or no rows")
            else:
                last = rows[-1].split(",")
                steps = [row.split(",")[0] for row in rows[1:]]
                if steps != [str(i) for i in range(1, len(rows))]:
                    why.append("loss.csv steps are not 1..%d" % (len(rows) - 1))
                if math.isfinite(float(last[2])):
                    why.append("the last loss in loss.csv (%s) is finite" % last[2])
                if not m:
                    why.append("the message names no step ('at step N')")
                elif m.group(1) != last[0]:
                    why.append("the message names step %s, loss.csv ends at step %s" % (m.group(1), last[0]))
    if "ckpt" in opts:
        if not m:
            why.append("the message names no step ('at step N')")
        if "no checkpoint was written yet" not in err_text:
            c = re.search(r"is in (\S+?)[;,.]?$", err_text.strip())
            if not c:
                why.append("the message says neither where the last good checkpoint is nor that none was written")
            else:
                state = os.path.join(c.group(1), "state.safetensors")
                if not os.path.isabs(state):
                    state = os.path.join(ROOT, state)
                if not os.path.exists(state):
                    why.append("the named checkpoint %s does not exist" % state)
                else:
                    with open(state, "rb") as f:
                        p = safetensors_problem(f.read())
                    if p:
                        why.append("the named checkpoint is torn: %s" % p)

    if why:
        raise CaseFailure("; ".join(why) + " -- exit %d, stderr: %s" % (r.returncode, shown or "(empty)"))


# ---------------------------------------------------------------------------------------------

def read_cases(path):
    cases, names = [], set()
    with open(path, encoding="utf-8") as f:
        for lineno, line in enumerate(f, 1):
            line = line.rstrip("\n")
            if not line.strip() or line.lstrip().startswith("#"):
                continue
            cols = line.split("\t")
            if len(cols) < 5:
                raise SystemExit("%s:%d: expected NAME EXIT CHECKS COMMAND SUBSTRING..., tab-separated" % (path, lineno))
            name, exits, checks, command = cols[:4]
            if name in names:
                raise SystemExit("%s:%d: duplicate case name %s" % (path, lineno, name))
            names.add(name)
            cases.append((name, exits.split("|"), [] if checks == "-" else checks.split(","), command,
                          [s for s in cols[4:] if s]))
    return cases


def main(argv):
    if len(argv) < 2:
        print(__doc__.strip().splitlines()[2], file=sys.stderr)
        return 2
    gradrun = os.path.abspath(argv[1])
    if not os.access(gradrun, os.X_OK):
        print("test_bad_inputs: %s is not an executable" % gradrun, file=sys.stderr)
        return 2
    cases = read_cases(CASES)
    if argv[2:]:
        wanted = set(argv[2:])
        unknown = wanted - {c[0] for c in cases}
        if unknown:
            print("test_bad_inputs: no such case: %s" % ", ".join(sorted(unknown)), file=sys.stderr)
            return 2
        cases = [c for c in cases if c[0] in wanted]

    tmp = tempfile.mkdtemp(prefix="gradrun-bad-inputs-")
    try:
        work = os.path.join(tmp, "work")
        os.makedirs(work)
        problems = make_fixtures(gradrun, work)
        if problems:
            for p in problems:
                print("FAIL setup: %s" % p)
            print("0 passed, %d failed" % len(cases))
            return 1
        cases_dir = os.path.join(tmp, "cases")
        os.makedirs(cases_dir)

        def one(case):
            try:
                check_case(gradrun, work, cases_dir, case)
                return None
            except CaseFailure as e:
                return str(e)
            except Exception as e:  # a bug in this script: report it against the case
                return "runner error: %r" % e

        failed = 0
        with concurrent.futures.ThreadPoolExecutor(max_workers=max(2, os.cpu_count() or 2)) as pool:
            for case, why in zip(cases, pool.map(one, cases)):
                if why is None:
                    print("ok   %s" % case[0])
                else:
                    failed += 1
                    print("FAIL %s: %s" % (case[0], why))
                sys.stdout.flush()
        print("%d passed, %d failed" % (len(cases) - failed, failed))
        return 1 if failed else 0
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main(sys.argv))
