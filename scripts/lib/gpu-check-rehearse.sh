# scripts/lib/gpu-check-rehearse.sh — gpu-check --rehearse, sourced by scripts/gpu-check (uses its variables:
# top, kit, plant, keep, report_dir). Kept apart so gpu-check itself stays one readable page of steps.
# --rehearse: the whole check in a clean Debian 12 chroot, as the GPU machine will see it.
# The root: debootstrap --variant=minbase bookworm (cached by scripts/fresh-machine-check as
# build-fresh/bookworm-minbase.tar.gz, made here if missing) plus build-essential, cmake, ninja-build
# and python3 without recommends (cached as build-fresh/bookworm-gpu-rehearse.tar.gz; GR_FRESH_DIR
# moves both) and NONE of the -dev packages (checked). The CUDA toolkit (/usr/local/cuda*) is bind-
# mounted read-only; there is no driver. The tree travels as the device machine's `run` tool
# carries it: tracked and untracked-but-not-ignored files, plus the kit folder (ignored). Two runs:
#   1. scripts/gpu-check --kit gpu-kit --report /root/gpu-report     (the GPU machine's command)
#      must configure, build, run every step that needs no GPU and stop: exit 2, "no usable CUDA device";
#   2. the same with --examples iris --plant KERNEL (default grk_add_fwd), on the build of run 1,
#      must exit 1 with the failure naming `check --replay --device host iris` and its first
#      differing node — a wrong kernel is a failure, not an absence.
# The limits are scaled to this machine's cores (GR_GPU_CHECK_SCALE = 16 / nproc, rounded up). Wall
# time and CPU seconds of each run are printed and appended to build-fresh/rehearse-results.txt; the
# reports are copied to REPORT_DIR and REPORT_DIR/planted. Mounts are undone and the
# root removed on every exit path (--keep keeps the root).
# ======================================================================================================
rehearse() {
  [ "$(id -u)" -eq 0 ] || { echo "gpu-check --rehearse: needs root (debootstrap, chroot, mount)" >&2; exit 64; }
  local work=${GR_FRESH_DIR:-$top/build-fresh} mirror=${GR_FRESH_MIRROR:-http://deb.debian.org/debian}
  local base rbase tmp
  mkdir -p "$work"
  base="$work/bookworm-minbase.tar.gz" rbase="$work/bookworm-gpu-rehearse.tar.gz"
  rlog() { echo "gpu-check --rehearse: $*" >&2; }
  set -e  # every preparation step must work; the run itself is checked by its exit line
  trap 'rlog "a preparation step failed (line $LINENO): $BASH_COMMAND"' ERR
  mounted=() root=""
  unmount_all() {
    local i
    for ((i = ${#mounted[@]} - 1; i >= 0; i--)); do
      umount -R "${mounted[$i]}" 2>/dev/null || umount -lR "${mounted[$i]}" 2>/dev/null || true
    done
    mounted=()
  }
  cleanup() {  # on every exit path: the mounts, then the root (never through a mount)
    unmount_all
    [ -n "$root" ] && [ -d "$root" ] || return 0
    if grep -q " $root/" /proc/mounts; then  # never delete through a mount
      rlog "not removing $root: something is still mounted under it"
    elif [ "$keep" = 1 ]; then
      rlog "kept $root"
    else
      rm -rf --one-file-system "$root"
    fi
  }
  trap cleanup EXIT
  trap 'exit 130' INT
  trap 'exit 143' TERM
  mount_into() {  # mount_into ARGS... TARGET: mount, remembered for cleanup
    mount "$@" && mounted+=("${!#}")
  }

  # --- the base with the build tools, made once ---
  if [ ! -f "$rbase" ]; then
    if [ ! -f "$base" ]; then
      command -v debootstrap >/dev/null || { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq debootstrap >/dev/null; }
      tmp="$work/debootstrap.$$"
      root=$tmp
      rlog "debootstrap --variant=minbase bookworm (once; cached as $base)"
      debootstrap --variant=minbase bookworm "$tmp" "$mirror" >"$work/debootstrap.log" 2>&1 ||
        { rlog "debootstrap failed: see $work/debootstrap.log"; exit 3; }
      printf 'deb %s bookworm main\ndeb %s bookworm-updates main\ndeb http://security.debian.org/debian-security bookworm-security main\n' \
        "$mirror" "$mirror" >"$tmp/etc/apt/sources.list"
      chroot "$tmp" apt-get clean
      rm -rf "$tmp"/var/lib/apt/lists/*
      tar -C "$tmp" -czf "$base.part" . && mv "$base.part" "$base"
      rm -rf --one-file-system "$tmp"
    fi
    tmp="$work/rehearse-base.$$"
    root=$tmp
    mkdir -p "$tmp"
    tar -C "$tmp" -xzf "$base"
    cp /etc/resolv.conf "$tmp/etc/resolv.conf"
    mount_into -t proc proc "$tmp/proc"
    mount_into --bind /dev "$tmp/dev"
    rlog "installing build-essential cmake ninja-build python3 into the base (once; cached as $rbase)"
    chroot "$tmp" /usr/bin/env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin DEBIAN_FRONTEND=noninteractive bash -c \
      'apt-get update -qq && apt-get install -y -qq --no-install-recommends build-essential cmake ninja-build python3 && apt-get clean' \
      >"$work/rehearse-base.log" 2>&1 || { rlog "apt-get install failed: see $work/rehearse-base.log"; exit 3; }
    rm -rf "$tmp"/var/lib/apt/lists/* "$tmp/etc/resolv.conf"
    unmount_all
    tar -C "$tmp" -czf "$rbase.part" . && mv "$rbase.part" "$rbase"
    rm -rf --one-file-system "$tmp"
    root=""
  fi

  # --- the kit: made here when there is none (it needs this machine's packages, not the chroot's) ---
  [ -n "$kit" ] || kit=gpu-kit
  if [ ! -f "$kit/MANIFEST" ]; then
    rlog "no kit in $kit: scripts/gpu-kit $kit"
    scripts/gpu-kit "$kit" >/dev/null || exit 3
  fi

  # --- a fresh root ---
  root="$work/rehearse.$$"
  mkdir -p "$root"
  tar -C "$root" -xzf "$rbase"
  local devs
  devs=$(chroot "$root" dpkg-query -W -f='${Package} ${Status}\n' libcli11-dev nlohmann-json3-dev catch2 libcatch2-dev \
    libspdlog-dev libfmt-dev zlib1g-dev 2>/dev/null | awk '/install ok installed/ { print $1 }' || true)
  [ -z "$devs" ] || { rlog "the rehearsal root has -dev packages installed: $devs"; exit 3; }
  for f in usr/include/zlib.h usr/include/CLI usr/include/nlohmann usr/include/catch2 usr/include/spdlog usr/include/fmt; do
    [ ! -e "$root/$f" ] || { rlog "the rehearsal root has /$f"; exit 3; }
  done
  mount_into -t proc proc "$root/proc"
  mount_into --bind /dev "$root/dev"
  # The CUDA toolkit, read-only, at its own paths; its symlinks (/usr/local/cuda -> cuda-13.0) as links.
  local c cuda_seen=""
  for c in /usr/local/cuda*; do
    [ -e "$c" ] || continue
    if [ -L "$c" ]; then
      ln -s "$(readlink "$c")" "$root$c"
    elif [ -d "$c" ]; then
      mkdir -p "$root$c"
      mount_into --bind "$c" "$root$c" && mount -o remount,bind,ro "$root$c"
      cuda_seen="$cuda_seen $c"
    fi
  done
  [ -n "$cuda_seen" ] || rlog "no /usr/local/cuda* here: the NVRTC steps will fail"
  # The tree as `run` carries it, plus the kit (an ignored folder named in carry).
  mkdir -p "$root/root/gradrun"
  git ls-files -z -co --exclude-standard | while IFS= read -r -d '' f; do if [ -e "$f" ]; then printf '%s\0' "$f"; fi; done |
    tar -c --null -T - | tar -C "$root/root/gradrun" -x
  rm -rf "$root/root/gradrun/gpu-kit"
  cp -r "$kit" "$root/root/gradrun/gpu-kit"
  local desc
  desc="$(git rev-parse --short HEAD 2>/dev/null)$(git diff --quiet HEAD 2>/dev/null || echo '+uncommitted edits')"

  # --- the runs: the check as the GPU machine runs it, then the same build with a planted mismatch ---
  local cores scale cpuname
  cores=$(nproc)
  scale=$(((16 + cores - 1) / cores))
  cpuname=$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ *//')
  in_root() {  # in_root NAME ARGS...: scripts/gpu-check ARGS in the root; sets rc, wall, cpu, out
    out="$work/rehearse.$$.$1.log"
    shift
    rlog "chroot $root: scripts/gpu-check $* (limits x$scale for $cores cores; output: $out)"
    local t0 t1
    t0=$(date +%s.%N)
    chroot "$root" /usr/bin/env -i HOME=/root LANG=C.UTF-8 TERM=dumb PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
      GR_GPU_CHECK_SCALE="$scale" GR_CHECKOUT="$desc" \
      /bin/bash -c "cd /root/gradrun && { scripts/gpu-check $*; echo \"gpu-check exit \$?\"; times; }" 2>&1 | tee "$out" || true
    t1=$(date +%s.%N)
    rc=$(sed -n 's/^gpu-check exit \([0-9]*\)$/\1/p' "$out" | tail -1)
    wall=$(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.0f", b - a }')
    # The last line of `times`: the children's user and system time ("5m3.1s 0m40.2s").
    cpu=$(tail -1 "$out" | awk '{ s = 0; for (f = 1; f <= 2; f++) { split($f, p, /[ms]/); s += p[1] * 60 + p[2] } printf "%.0f", s }')
  }
  local rc wall cpu out verdict closing line ok=1
  mkdir -p "$report_dir"
  rm -rf "$report_dir/steps" "$report_dir/fuzz" "$report_dir/planted"
  # 1. The GPU machine's command: configure, build and every step that needs no GPU, then the stop.
  in_root check --kit gpu-kit --report /root/gpu-report
  cp -r "$root/root/gpu-report/." "$report_dir/" 2>/dev/null || true
  closing=$(tail -1 "$report_dir/summary.txt" 2>/dev/null || true)
  if [ "$rc" = 2 ] && [[ $closing == *"no usable CUDA device"* ]]; then
    verdict="PASSED (exit 2: configured, built, ran every step that needs no GPU, stopped with its line)"
  else
    verdict="FAILED (expected exit 2 and the no-GPU line; got exit ${rc:-?})" ok=0
  fi
  line="gpu-check --rehearse $(date -u '+%Y-%m-%d %H:%M UTC'), checkout $desc, $cores cores ($cpuname), limits x$scale: $verdict; ${wall} s wall, ${cpu} CPU-s; load average after $(cut -d' ' -f1-3 /proc/loadavg)"
  echo "$line" | tee -a "$work/rehearse-results.txt"
  echo "  the closing line: $closing"
  # 2. The same build, iris only, with the planted mismatch: a failure naming its step, not "no GPU".
  in_root planted --kit gpu-kit --report /root/gpu-report-planted --examples iris --plant "${plant:-grk_add_fwd}"
  mkdir -p "$report_dir/planted"
  cp -r "$root/root/gpu-report-planted/." "$report_dir/planted/" 2>/dev/null || true
  closing=$(tail -1 "$report_dir/planted/summary.txt" 2>/dev/null || true)
  if [ "$rc" = 1 ] && grep -q '^FAIL check --replay --device host iris: REPLAY DIFFERS' "$report_dir/planted/summary.txt" 2>/dev/null &&
    [[ $closing == "gpu-check: FAILED:"* ]]; then
    verdict="PASSED (exit 1, the failure names its step and node: $(grep -m1 '^FAIL ' "$report_dir/planted/summary.txt" | cut -c1-160))"
  else
    verdict="FAILED (expected exit 1 naming check --replay --device host iris; got exit ${rc:-?})" ok=0
  fi
  line="gpu-check --rehearse, planted mismatch ${plant:-grk_add_fwd} (iris, the build above): $verdict; ${wall} s wall, ${cpu} CPU-s"
  echo "$line" | tee -a "$work/rehearse-results.txt"
  echo "  report: $report_dir/gpu-report.md, $report_dir/planted/gpu-report.md"
  [ $ok = 1 ] && exit 0
  exit 1
}
