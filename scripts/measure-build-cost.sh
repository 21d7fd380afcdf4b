#!/usr/bin/env bash
# What a change costs per I/O: two builds of `sluice serve` (BEFORE and AFTER) on the
# same workload, interleaved round by round (order reversed every other round), target
# on core 0, `sluice bench` (the AFTER build's host, the same for both) on core 1.
# Per run: IOPS, target CPU per I/O (user + system time of the serving process from
# /proc over the bench run, divided by its I/Os) and the bench's p99. Prints a
# Markdown summary (also OUT/summary.md); raw JSON results stay in OUT.
#
#   scripts/measure-build-cost.sh --before BIN --after BIN [--rounds N] [--seconds S]
#                                 [--block-size SIZE] [--queue-depth N] [--threads N]
#                                 [--backend ram|null] [--out DIR]
#
# Used for the latency split (issue 48): BEFORE is the commit before it, AFTER the
# split. Both builds should share one profile (e.g. release without LTO) so that only
# the code differs.
set -euo pipefail

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
ROUNDS=5
SECONDS_PER_RUN=10
BLOCK_SIZE=4KiB
QUEUE_DEPTH=32
THREADS=2
BACKEND=ram
BEFORE='' AFTER=''
OUT=${OUT:-$REPO/target/measure-build-cost}

while [ $# -gt 0 ]; do
  case $1 in
    --before) BEFORE=$2; shift 2 ;;
    --after) AFTER=$2; shift 2 ;;
    --rounds) ROUNDS=$2; shift 2 ;;
    --seconds) SECONDS_PER_RUN=$2; shift 2 ;;
    --block-size) BLOCK_SIZE=$2; shift 2 ;;
    --queue-depth) QUEUE_DEPTH=$2; shift 2 ;;
    --threads) THREADS=$2; shift 2 ;;
    --backend) BACKEND=$2; shift 2 ;;
    --out) OUT=$2; shift 2 ;;
    -h|--help) sed -n '2,15p' "$0"; exit 0 ;;
    *) echo "measure-build-cost: unknown argument $1 (see --help)" >&2; exit 2 ;;
  esac
done
if [ ! -x "$BEFORE" ] || [ ! -x "$AFTER" ]; then
  echo "measure-build-cost: --before and --after must name sluice binaries (see --help)" >&2
  exit 2
fi
case $BACKEND in ram|null) ;; *) echo "measure-build-cost: --backend ram or null" >&2; exit 2 ;; esac
[ "$(nproc)" -ge 2 ] || { echo "measure-build-cost: needs 2 CPUs (target on 0, bench on 1)" >&2; exit 2; }
mkdir -p "$OUT"

# shellcheck source=scripts/lib/common.sh
. "$REPO/scripts/lib/common.sh"

NQN=nqn.2026-11.io.sluice:cost
TARGET_PID='' PORT=''

stop_target() {
  [ -n "$TARGET_PID" ] || return 0
  kill -TERM "$TARGET_PID" 2>/dev/null || true
  wait "$TARGET_PID" 2>/dev/null || true
  TARGET_PID=''
}
trap stop_target EXIT

# start_target BIN NAME: one RAM (or null) namespace on a fresh port, one I/O thread, core 0.
start_target() {
  local bin=$1 name=$2 waited=0
  PORT=$(free_port)
  printf '[[listener]]\naddress = "127.0.0.1:%s"\n\n[[subsystem]]\nnqn = "%s"\nallow_any_host = true\n\n[[subsystem.namespace]]\nnsid = 1\nbackend = "%s"\nsize = "1GiB"\nblock_size = 4096\n\n[runtime]\nthreads = 1\n' \
    "$PORT" "$NQN" "$BACKEND" >"$OUT/$name.toml"
  SLUICE_LOG=warn taskset -c 0 "$bin" serve --config "$OUT/$name.toml" --rpc-socket "$OUT/$name.sock" \
    >"$OUT/$name.log" 2>&1 &
  TARGET_PID=$!
  until grep -q '^sluice: ready' "$OUT/$name.log" 2>/dev/null; do
    sleep 0.2; waited=$((waited + 1))
    if [ $waited -ge 150 ] || ! kill -0 "$TARGET_PID" 2>/dev/null; then
      tail -n 20 "$OUT/$name.log" >&2
      echo "measure-build-cost: target $name ($bin) did not start" >&2; exit 1
    fi
  done
}

cpu_seconds() {
  awk -v hz="$(getconf CLK_TCK)" '{ printf "%.4f\n", ($14 + $15) / hz }' "/proc/$1/stat"
}

# run BIN NAME: one measured run; prints "iops target_us_per_io p99_us".
run() {
  local bin=$1 name=$2 before after
  start_target "$bin" "$name"
  printf '[[job]]\nname = "cost"\npattern = "random"\nblock_size = "%s"\nthreads = %s\nqueue_depth = %s\nduration = "%ss"\nramp = "1s"\n' \
    "$BLOCK_SIZE" "$THREADS" "$QUEUE_DEPTH" "$SECONDS_PER_RUN" >"$OUT/job.toml"
  before=$(cpu_seconds "$TARGET_PID")
  taskset -c 1 "$AFTER" bench --target "tcp://127.0.0.1:$PORT/$NQN" --suite-file "$OUT/job.toml" \
    --json "$OUT/$name.json" >"$OUT/$name.out" 2>&1 ||
    { tail -n 20 "$OUT/$name.out" >&2; echo "measure-build-cost: bench $name failed" >&2; exit 1; }
  after=$(cpu_seconds "$TARGET_PID")
  stop_target
  python3 - "$OUT/$name.json" "$before" "$after" <<'PYTHON'
import json, sys
r = json.load(open(sys.argv[1]))
run = r["runs"][0]
p99 = next(p["value"] for p in run["latency_us"]["percentiles"] if p["percentile"] == 99)
# The target's CPU over the whole bench invocation (ramp included) against every I/O
# the host completed in it: the ramp's I/Os are estimated at the measured rate.
ios = run["ios"] * (run["duration_seconds"] + 1.0) / run["duration_seconds"]
cpu = float(sys.argv[3]) - float(sys.argv[2])
print(f"{run['iops']:.0f} {cpu * 1e6 / ios:.3f} {p99:.0f}")
PYTHON
}

ROWS=$OUT/rows.txt
: >"$ROWS"
for round in $(seq 1 "$ROUNDS"); do
  order=(before after)
  [ $((round % 2)) -eq 0 ] && order=(after before)
  for which in "${order[@]}"; do
    bin=$BEFORE
    [ "$which" = after ] && bin=$AFTER
    read -r iops us p99 < <(run "$bin" "$which-$round")
    echo "$round $which $iops $us $p99" | tee -a "$ROWS" >&2
  done
done

python3 - "$ROWS" "$BEFORE" "$AFTER" "$SECONDS_PER_RUN" "$BLOCK_SIZE" "$THREADS" "$QUEUE_DEPTH" "$BACKEND" <<'PYTHON' | tee "$OUT/summary.md"
import statistics, sys
rows = [line.split() for line in open(sys.argv[1])]
def col(which, index):
    return [float(r[index]) for r in rows if r[1] == which]
print(f"# Cost per I/O: {sys.argv[3]} against {sys.argv[2]}")
print()
print(f"{sys.argv[5]} random reads, {sys.argv[6]} threads x QD{sys.argv[7]}, {sys.argv[8]} namespace, "
      f"{sys.argv[4]} s per run, {len(rows) // 2} interleaved rounds; target on core 0 (1 I/O thread), bench on core 1.")
print()
print("| round | build | IOPS | target CPU µs/I/O | p99 µs |")
print("| --: | --- | --: | --: | --: |")
for r in rows:
    print(f"| {r[0]} | {r[1]} | {float(r[2]):,.0f} | {float(r[3]):.3f} | {r[4]} |")
print()
for name, index in (("IOPS", 2), ("target CPU µs/I/O", 3), ("p99 µs", 4)):
    b, a = statistics.median(col("before", index)), statistics.median(col("after", index))
    print(f"- median {name}: before {b:,.3f}, after {a:,.3f} (after/before {a / b:.3f})")
PYTHON
