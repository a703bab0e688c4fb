#!/usr/bin/env bash
# --threads auto against a fixed 1 and all cores (lib/train/thread_tuner.h): the bench-peers specs
# trained by the CLI, timed by run.json's seconds_per_episode (the whole run: steps, evaluation,
# checkpoints), in ROUNDS interleaved rounds of 1 / all / auto so each round sees the same machine
# state. Prints each round and, per spec and dtype, the median of the rounds and auto's ratio to the
# faster fixed count (1.00: auto ran as fast as the better choice; > 1 faster, < 1 slower).
#   bench/threads_auto.sh [GRADRUN] [ROUNDS] [SECONDS]   (SECONDS: about how long one run lasts)
# Needs bench/peers/data (scripts/bench-peers makes it).
set -euo pipefail
cd "$(dirname "$0")/.."
bin=${1:-build/apps/gradrun/gradrun}
rounds=${2:-3}
seconds=${3:-4}
all=$(nproc)
[[ -f bench/peers/data/mlp784.npz ]] || { echo "threads_auto: no bench/peers/data; run scripts/bench-peers first" >&2; exit 2; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
spe() { /usr/bin/python3 -c "import json,sys; print(json.load(open(sys.argv[1]))['seconds_per_episode'])" "$1/run.json"; }
results="$tmp/results.tsv"
for spec in mlp784 autoencoder attention; do
  for dtype in f64 f32; do
    # Epochs for about $seconds per run, from one short 1-thread run.
    "$bin" train "bench/peers/$spec.json" --out "$tmp/probe" --quiet --force --threads 1 --epochs 2 --dtype "$dtype"
    epochs=$(/usr/bin/python3 -c "import json,sys; r=json.load(open(sys.argv[1])); print(max(2, int(float(sys.argv[2]) / (r['wall_seconds'] / 2))))" \
      "$tmp/probe/run.json" "$seconds")
    for r in $(seq "$rounds"); do
      for t in 1 "$all" auto; do
        "$bin" train "bench/peers/$spec.json" --out "$tmp/run" --quiet --force --threads "$t" --epochs "$epochs" --dtype "$dtype"
        ones=$(/usr/bin/python3 -c "import json,sys; print(json.load(open(sys.argv[1]))['steps_on_one_thread'])" "$tmp/run/run.json")
        printf '%s\t%s\t%s\t%s\t%s\t%s\n' "$spec" "$dtype" "$r" "$t" "$(spe "$tmp/run")" "$ones" | tee -a "$results"
      done
    done
  done
done
/usr/bin/python3 - "$results" "$all" <<'PY'
import collections, statistics, sys
runs = collections.defaultdict(list)
ones = collections.defaultdict(list)
for line in open(sys.argv[1]):
    spec, dtype, _, t, s, o = line.rstrip("\n").split("\t")
    runs[(spec, dtype, t)].append(float(s))
    if t == "auto":
        ones[(spec, dtype)].append(o)
allc = sys.argv[2]
print(f"\nmedian us/step over rounds: 1 thread | {allc} threads | auto (steps on 1 thread) | auto vs the faster fixed")
for spec, dtype in sorted({(k[0], k[1]) for k in runs}):
    one, many, auto = (statistics.median(runs[(spec, dtype, t)]) * 1e6 for t in ("1", allc, "auto"))
    print(f"{spec:12s} {dtype}  {one:8.1f} | {many:8.1f} | {auto:8.1f} ({', '.join(ones[(spec, dtype)])}) | {min(one, many) / auto:.2f}")
PY
