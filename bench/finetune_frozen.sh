#!/usr/bin/env bash
# Frozen trunk vs trainable trunk (issue 18): the same fine-tune model, once with the encoder frozen
# (specs/digits-finetune.json) and once with it trainable (--set /graph/0/trainable=true), timed by
# run.json's seconds_per_episode, best of REPEATS runs each, on the CPU tape with --threads 1.
#   bench/finetune_frozen.sh [GRADRUN] [REPEATS] [EPOCHS]
set -euo pipefail
cd "$(dirname "$0")/.."
bin=${1:-build/apps/gradrun/gradrun}
repeats=${2:-5}
epochs=${3:-60}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
"$bin" train specs/digits-autoencoder.json --out "$tmp/ae" --quiet
w="$tmp/ae/weights.safetensors"
best() {  # best seconds_per_episode of $repeats runs of "$@"
  local b=""
  for i in $(seq "$repeats"); do
    "$bin" train specs/digits-finetune.json --out "$tmp/run" --quiet --force --threads 1 --epochs "$epochs" \
      --set "/graph/0/init/W/file=$w" --set "/graph/0/init/b/file=$w" "$@"
    s=$(/usr/bin/python3 -c "import json,sys; print(json.load(open(sys.argv[1]))['seconds_per_episode'])" "$tmp/run/run.json")
    b=$(/usr/bin/python3 -c "import sys; a, c = sys.argv[1], float(sys.argv[2]); print(c if a == '' else min(float(a), c))" "$b" "$s")
  done
  echo "$b"
}
frozen=$(best)
trainable=$(best --set /graph/0/trainable=true)
/usr/bin/python3 - "$frozen" "$trainable" <<'PY'
import sys
f, t = float(sys.argv[1]), float(sys.argv[2])
print(f"digits-finetune, CPU tape, 1 thread, best of runs: frozen trunk {f * 1e6:.1f} us/step, "
      f"trainable trunk {t * 1e6:.1f} us/step: frozen is {t / f:.2f}x faster")
PY
