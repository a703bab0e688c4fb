#!/usr/bin/env bash
# How fast gradrun reads a CSV, against pandas (issue 41 item 8; docs/performance.md, "Reading CSV").
#   bench/csv_speed.sh [ROWS] [ROUNDS]     defaults 1000000 rows, 3 rounds
# Writes ROWS × 21 numeric columns (x0..x19, y; %.8f of standard normals, one x cell in 1000 "nan":
# 245 MB for a million rows) into $GR_BENCH_DIR (default /tmp/gradrun-csv-speed, never the
# repository), with a spec that binds x0..x19 (missing cells filled with the training rows' means,
# standardized) and y, holds out 20 % and fits a linear model: the dialect detection, quote and
# na_values handling and the fill all run, as they do for any table. Then, interleaved
# ROUNDS times: `gradrun inspect` on it (the whole command: read, split, standardize, resolve),
# and `pandas.read_csv` on the same file (Debian's python3-pandas, C engine; the read alone, the
# import not counted), each under /usr/bin/time -v. Prints the best wall time of each, the ratio
# (pandas / gradrun; target >= 2) and gradrun's peak RSS against the file's float64 data
# (ROWS × 21 × 8 bytes; target <= 1.5), and exits 1 when a target is missed.
# Needs python3-numpy (the generator), python3-pandas and GNU time:
#   apt-get install python3-pandas time
set -euo pipefail
cd "$(dirname "$0")/.."
rows=${1:-1000000}
rounds=${2:-3}
dir=${GR_BENCH_DIR:-/tmp/gradrun-csv-speed}
bin=${GR_BUILD_DIR:-build}/apps/gradrun/gradrun
[ -x "$bin" ] || { echo "csv_speed: build gradrun first ($bin)" >&2; exit 2; }
[ -x /usr/bin/time ] || { echo "csv_speed: needs GNU time (apt-get install time)" >&2; exit 2; }
/usr/bin/python3 -c "import pandas" 2>/dev/null || { echo "csv_speed: needs python3-pandas (apt-get install python3-pandas)" >&2; exit 2; }
mkdir -p "$dir"
csv=$dir/table-$rows-na.csv
if [ ! -s "$csv" ]; then
  /usr/bin/python3 - "$csv" "$rows" <<'PY'
import sys
import numpy as np
path, rows = sys.argv[1], int(sys.argv[2])
rng = np.random.default_rng(7)
with open(path + ".part", "w") as f:
    f.write(",".join([f"x{i}" for i in range(20)] + ["y"]) + "\n")
    for start in range(0, rows, 100000):
        a = rng.standard_normal((min(100000, rows - start), 21))
        a[:, :20][rng.random((a.shape[0], 20)) < 0.001] = np.nan
        np.savetxt(f, a, fmt="%.8f", delimiter=",")
import os
os.replace(path + ".part", path)
PY
fi
cols=$(printf '"x%d",' $(seq 0 19)); cols=${cols%,}
cat > "$dir/spec.json" <<EOF
{"gradrun": 1, "name": "csv-speed",
 "data": {"csv": "$(basename "$csv")", "validation": 0.2,
          "inputs": {"x": {"columns": [$cols], "missing": "mean", "standardize": true}, "y": {"column": "y"}}},
 "graph": [{"id": "p", "layer": "dense", "inputs": ["x"], "units": 1}, {"id": "loss", "op": "mse", "inputs": ["p", "y"]}],
 "loss": "loss", "train": {"epochs": 1, "batch_size": 100}}
EOF
bytes=$(stat -c %s "$csv")
echo "csv_speed: $csv: $rows rows x 21 columns, $((bytes / 1000000)) MB; $rounds interleaved rounds"

best_gr="" best_pd="" rss_gr=0 rss_pd=0
min() { /usr/bin/python3 -c "import sys; v=[float(x) for x in sys.argv[1:] if x]; print(min(v))" "$@"; }
for i in $(seq "$rounds"); do
  /usr/bin/time -v -o "$dir/time.gr" "$bin" inspect "$dir/spec.json" > "$dir/inspect.out"
  t=$(sed -n 's/.*Elapsed (wall clock) time (h:mm:ss or m:ss): //p' "$dir/time.gr" | awk -F: '{print ($1 * 60) + $2}')
  r=$(sed -n 's/.*Maximum resident set size (kbytes): //p' "$dir/time.gr")
  best_gr=$(min "$t" "$best_gr")
  [ "$r" -gt "$rss_gr" ] && rss_gr=$r
  t=$(/usr/bin/time -v -o "$dir/time.pd" /usr/bin/python3 -c "
import time, pandas
t = time.perf_counter()
d = pandas.read_csv('$csv', engine='c')
assert d.shape == ($rows, 21)
print(time.perf_counter() - t)")
  r=$(sed -n 's/.*Maximum resident set size (kbytes): //p' "$dir/time.pd")
  best_pd=$(min "$t" "$best_pd")
  [ "$r" -gt "$rss_pd" ] && rss_pd=$r
  echo "  round $i: gradrun inspect $(sed -n 's/.*Elapsed (wall clock) time (h:mm:ss or m:ss): //p' "$dir/time.gr"), pandas.read_csv ${t}s"
done
grep -q "^data: $((rows - rows / 5)) training rows" "$dir/inspect.out" || { echo "csv_speed: inspect did not read the table:" >&2; cat "$dir/inspect.out" >&2; exit 1; }
/usr/bin/python3 - "$best_gr" "$best_pd" "$rss_gr" "$rss_pd" "$rows" <<'PY'
import sys
gr, pd, rss_gr, rss_pd, rows = float(sys.argv[1]), float(sys.argv[2]), int(sys.argv[3]) * 1024, int(sys.argv[4]) * 1024, int(sys.argv[5])
data = rows * 21 * 8
ratio, mem = pd / gr, rss_gr / data
print(f"gradrun inspect     {gr:7.2f} s (best)   peak RSS {rss_gr / 1e6:7.1f} MB")
print(f"pandas.read_csv     {pd:7.2f} s (best)   peak RSS {rss_pd / 1e6:7.1f} MB (the whole python process)")
print(f"float64 data        {data / 1e6:7.1f} MB")
ok_speed, ok_mem = ratio >= 2.0, mem <= 1.5
print(f"speed: pandas / gradrun = {ratio:.2f}x (target >= 2x: {'ok' if ok_speed else 'MISS'})")
print(f"memory: gradrun peak RSS / float64 data = {mem:.2f}x (target <= 1.5x: {'ok' if ok_mem else 'MISS'})")
sys.exit(0 if ok_speed and ok_mem else 1)
PY
