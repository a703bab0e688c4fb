#!/usr/bin/env bash
# dist_scaling.sh — issue 17's scaling benchmark (docs/distributed.md): the 784-256-128-10 MLP at
# batch 512 with train.shards = 2 and --threads 1 per rank, one process against mpirun -np 2 (the
# same bytes: the script checks), then the α–β message costs (bench_comm). The time per step is
# the difference of two runs' wall_seconds (run.json) over the difference of their steps, so the
# fixed costs (start, data load, init and final files) cancel; best of 3. Run it on a quiet machine:
#   bench/dist_scaling.sh [build-dir] [epochs]
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build} epochs=${2:-20}
g=$build/apps/gradrun/gradrun
flags=(--oversubscribe); [ "$(id -u)" -ne 0 ] || flags+=(--allow-run-as-root)
mkdir -p bench/peers/data
[ -f bench/peers/data/mlp784.npz ] || /usr/bin/python3 -c '
import numpy as np
r = np.random.default_rng(784)
np.savez("bench/peers/data/mlp784.npz", x=r.standard_normal((2048, 784)), y=np.eye(10)[r.integers(0, 10, 2048)])'
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
args=(train bench/peers/mlp784.json --set train.batch_size=512 --set train.shards=2 --threads 1 -q)
us() {  # the per-step time between a short and a long run
  /usr/bin/python3 -c 'import json,sys
a, b = (json.load(open(p + "/run.json")) for p in sys.argv[1:3])
print("%.0f" % (1e6 * (b["wall_seconds"] - a["wall_seconds"]) / (b["episodes"] - a["episodes"])))' "$1" "$2"
}
best() {  # np -> best us/step of 3 pairs of runs
  local b=
  for i in 1 2 3; do
    rm -rf "$tmp/short$1" "$tmp/np$1"
    mpirun "${flags[@]}" -np "$1" "$g" "${args[@]}" --epochs 2 --out "$tmp/short$1"
    mpirun "${flags[@]}" -np "$1" "$g" "${args[@]}" --epochs "$epochs" --out "$tmp/np$1"
    t=$(us "$tmp/short$1" "$tmp/np$1"); { [ -z "$b" ] || [ "$t" -lt "$b" ]; } && b=$t
  done
  echo "$b"
}
one=$(best 1) two=$(best 2)
cmp -s "$tmp/np1/loss.csv" "$tmp/np2/loss.csv" || { echo "dist_scaling: R=1 and R=2 loss logs differ" >&2; exit 1; }
echo "MLP 784-256-128-10, batch 512, shards 2, --threads 1 per rank ($(nproc) cores, load $(cut -d' ' -f1 /proc/loadavg)):"
echo "  R=1: $one us/step   R=2: $two us/step   speedup $(/usr/bin/python3 -c "print('%.2f' % ($one / $two))")x (target >= 1.6x); same loss.csv"
mpirun "${flags[@]}" -np 2 "$build/bench/bench_comm"
