#!/usr/bin/env bash
# The acceptance records of QoS limits (issue 35), against one `sluice serve` on this
# machine's loopback (target on core 0, `sluice bench` on core 1), RAM namespaces of
# 4 KiB blocks:
#   1. accuracy: a namespace limited to 5,000 IOPS (4 KiB random reads) and one
#      limited to 50 MiB/s (64 KiB random reads), each driven at QD32 for --seconds
#      (default 10): measured against the limit (acceptance: within 5 %), with the
#      default burst (100 ms) and the bench's warm-up before the measured interval;
#   2. noisy neighbour: host A (4 KiB random reads, QD128) on one namespace, host B
#      (4 KiB random reads, QD1) on another of the same target: B's p99 with A idle,
#      with A unlimited, and with A limited to --neighbour-limit IOPS (set live with
#      `sluice ns qos`); acceptance: B's p99 with A limited within 20 % of A idle;
#   3. cost: 4 KiB random reads QD32 on a namespace without limits and on one limited
#      far above what the machine can do (2^40 IOPS), --rounds interleaved rounds
#      (order reversed every other round): IOPS and target CPU per I/O (from /proc:
#      user + system time of the target over each run).
# Prints a Markdown summary (also written to OUT/summary.md); raw JSON results stay in
# OUT.
#
#   scripts/measure-qos.sh [--seconds S] [--rounds N] [--neighbour-limit IOPS]
#                          [--only accuracy|isolation|cost] [--out DIR]
#
# Needs a release build of sluice (built here unless SLUICE_BIN is set) and 2 CPUs.
# The noisy-neighbour hosts can be moved and weighted through the environment:
# A_CPU and B_CPU (cpu lists for taskset, default 1), A_PREFIX (a command A's host
# runs under, e.g. "chrt --idle 0"), B_HOST_IO (B's --host-io, default the bench's).
set -euo pipefail

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
SECONDS_PER_RUN=10
ROUNDS=3
NEIGHBOUR_LIMIT=5000
ONLY=''
# Where the two hosts of the noisy-neighbour test run (the target is on core 0).
A_CPU=${A_CPU:-1}
B_CPU=${B_CPU:-1}
A_PREFIX=${A_PREFIX:-}
B_HOST_IO=${B_HOST_IO:-}
OUT=${OUT:-$REPO/target/measure-qos}
IOPS_LIMIT=5000
MBYTES_LIMIT=50

while [ $# -gt 0 ]; do
  case $1 in
    --seconds) SECONDS_PER_RUN=$2; shift 2 ;;
    --rounds) ROUNDS=$2; shift 2 ;;
    --neighbour-limit) NEIGHBOUR_LIMIT=$2; shift 2 ;;
    --only) ONLY=$2; shift 2 ;;
    --out) OUT=$2; shift 2 ;;
    -h|--help) sed -n '2,26p' "$0"; exit 0 ;;
    *) echo "measure-qos: unknown argument $1 (see --help)" >&2; exit 2 ;;
  esac
done
case $ONLY in ''|accuracy|isolation|cost) ;; *) echo "measure-qos: --only accuracy, isolation or cost" >&2; exit 2 ;; esac

[ "$(nproc)" -ge 2 ] || { echo "measure-qos: needs 2 CPUs (target on 0, bench on 1)" >&2; exit 2; }
mkdir -p "$OUT"
if [ -z "${SLUICE_BIN:-}" ]; then
  (cd "$REPO" && cargo build --release -p sluice --bin sluice --quiet)
  SLUICE_BIN=$REPO/target/release/sluice
fi

log() { echo "[measure-qos] $*" >&2; }

# shellcheck source=scripts/lib/common.sh
. "$REPO/scripts/lib/common.sh"

NQN_PREFIX=nqn.2026-11.io.sluice:qos
SOCKET=$OUT/rpc.sock
TARGET_PID='' PORT=''
# The bench's warm-up: long enough to spend the default 100 ms burst before the
# measured interval starts.
RAMP=1s

stop_target() {
  [ -n "$TARGET_PID" ] || return 0
  kill -TERM "$TARGET_PID" 2>/dev/null || true
  wait "$TARGET_PID" 2>/dev/null || true
  TARGET_PID=''
}
trap stop_target EXIT

# start_target NAME: serves OUT/NAME.toml (written by the caller, with PORT) on core 0.
start_target() {
  local name=$1 waited=0
  rm -f "$SOCKET"
  SLUICE_LOG=warn taskset -c 0 "$SLUICE_BIN" serve --config "$OUT/$name.toml" --rpc-socket "$SOCKET" \
    >"$OUT/target-$name.log" 2>&1 &
  TARGET_PID=$!
  until grep -q '^sluice: ready' "$OUT/target-$name.log" 2>/dev/null; do
    sleep 0.2; waited=$((waited + 1))
    if [ $waited -ge 150 ] || ! kill -0 "$TARGET_PID" 2>/dev/null; then
      tail -n 20 "$OUT/target-$name.log" >&2
      echo "measure-qos: target $name did not start" >&2; exit 1
    fi
  done
}

# subsystem SUFFIX [QOS-LINES]: one subsystem with one 1 GiB RAM namespace.
subsystem() {
  printf '\n[[subsystem]]\nnqn = "%s:%s"\nallow_any_host = true\n\n[[subsystem.namespace]]\nnsid = 1\nbackend = "ram"\nsize = "1GiB"\nblock_size = 4096\n' \
    "$NQN_PREFIX" "$1"
  if [ -n "${2:-}" ]; then
    printf '\n[subsystem.namespace.qos]\n%b\n' "$2"
  fi
}

# write_config NAME SUBSYSTEM-TEXT: a config with one listener on a fresh PORT.
write_config() {
  PORT=$(free_port)
  {
    printf '[[listener]]\naddress = "127.0.0.1:%s"\n' "$PORT"
    printf '%s\n' "$2"
    printf '\n[runtime]\nthreads = 1\n'
  } >"$OUT/$1.toml"
}

# bench NAME SUFFIX BLOCK QD: one run against subsystem SUFFIX on core 1; the JSON
# result is OUT/NAME.json.
bench() {
  local name=$1 suffix=$2 block=$3 depth=$4
  printf '[[job]]\nname = "%s"\npattern = "random"\nblock_size = "%s"\nqueue_depth = %s\nduration = "%ss"\nramp = "%s"\n' \
    "$name" "$block" "$depth" "$SECONDS_PER_RUN" "$RAMP" >"$OUT/$name.job.toml"
  ${BENCH_PREFIX:-} taskset -c "${BENCH_CPU:-1}" "$SLUICE_BIN" bench --target "tcp://127.0.0.1:$PORT/$NQN_PREFIX:$suffix" \
    --suite-file "$OUT/$name.job.toml" ${BENCH_HOST_IO:+--host-io "$BENCH_HOST_IO"} --target-rpc-socket "$SOCKET" --json "$OUT/$name.json" \
    >"$OUT/$name.out" 2>&1 || { tail -n 20 "$OUT/$name.out" >&2; echo "measure-qos: bench $name failed" >&2; exit 1; }
}

# cpu_seconds PID: user + system time of a process so far.
cpu_seconds() {
  awk -v hz="$(getconf CLK_TCK)" '{ printf "%.4f\n", ($14 + $15) / hz }' "/proc/$1/stat"
}

# field FILE EXPRESSION: a value out of a bench result (r: the result, run: its run).
field() {
  python3 - "$1" "$2" <<'PYTHON'
import json, sys
r = json.load(open(sys.argv[1]))
run = r["runs"][0]
p99 = next(p["value"] for p in run["latency_us"]["percentiles"] if p["percentile"] == 99)
print(eval(sys.argv[2], {"r": r, "run": run, "p99": p99}))
PYTHON
}

SUMMARY=$OUT/summary.md
{
  echo "# QoS measurements ($(date -u +%Y-%m-%dT%H:%M:%SZ))"
  echo
  echo "Machine: $(nproc) CPUs ($(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'))," \
    "load $(cut -d' ' -f1-3 /proc/loadavg) at start; $SECONDS_PER_RUN s measured per run after a $RAMP warm-up;" \
    "target on core 0, bench on core 1."
} >"$SUMMARY"

accuracy() {
  log "accuracy: $IOPS_LIMIT IOPS and $MBYTES_LIMIT MiB/s at QD32"
  write_config accuracy "$(subsystem iops "rw_ios_per_second = $IOPS_LIMIT")$(subsystem mbytes "rw_mbytes_per_second = $MBYTES_LIMIT")"
  start_target accuracy
  bench accuracy-iops iops 4KiB 32
  bench accuracy-mbytes mbytes 64KiB 32
  stop_target
  local iops mbytes throttled_iops throttled_mbytes
  iops=$(field "$OUT/accuracy-iops.json" 'round(run["iops"], 1)')
  mbytes=$(field "$OUT/accuracy-mbytes.json" 'round(run["bytes_per_second"] / 2**20, 2)')
  throttled_iops=$(field "$OUT/accuracy-iops.json" '(r.get("qos") or {}).get("throttled_commands", "?")')
  throttled_mbytes=$(field "$OUT/accuracy-mbytes.json" '(r.get("qos") or {}).get("throttled_commands", "?")')
  {
    echo
    echo "## Accuracy (QD32, burst_ms default 100)"
    echo
    echo "| namespace limit | workload | measured | error | commands throttled |"
    echo "|---|---|---|---|---|"
    python3 -c "import sys; m, l = float(sys.argv[1]), float(sys.argv[2]); print(f'| rw_ios_per_second = {l:.0f} | 4 KiB random read | {m:.1f} IOPS | {100 * (m - l) / l:+.2f} % | $throttled_iops |')" "$iops" "$IOPS_LIMIT"
    python3 -c "import sys; m, l = float(sys.argv[1]), float(sys.argv[2]); print(f'| rw_mbytes_per_second = {l:.0f} | 64 KiB random read | {m:.2f} MiB/s | {100 * (m - l) / l:+.2f} % | $throttled_mbytes |')" "$mbytes" "$MBYTES_LIMIT"
  } >>"$SUMMARY"
}

# neighbour PHASE: B's QD1 run while A is idle (idle), or runs QD128 throughout.
neighbour() {
  local phase=$1 a_pid=''
  if [ "$phase" != idle ]; then
    local saved=$SECONDS_PER_RUN
    # A runs longer than B on both sides, so B is measured with A at full pressure.
    SECONDS_PER_RUN=$((saved + 3))
    # A's host sleeps for its completions: a throttled host that polled would spin on
    # the CPU it shares with B (or the target) here, where on a network it would burn
    # only its own machine's (measured: B's p99 2.8x idle with A polling, limited).
    BENCH_PREFIX=$A_PREFIX BENCH_HOST_IO=sleep BENCH_CPU=$A_CPU bench "isolation-a-$phase" a 4KiB 128 &
    a_pid=$!
    SECONDS_PER_RUN=$saved
    sleep 1.5
  fi
  BENCH_HOST_IO=$B_HOST_IO BENCH_CPU=$B_CPU bench "isolation-b-$phase" b 4KiB 1
  [ -z "$a_pid" ] || wait "$a_pid"
}

isolation() {
  log "noisy neighbour: A at QD128 idle, unlimited, limited to $NEIGHBOUR_LIMIT IOPS; B at QD1 throughout"
  write_config isolation "$(subsystem a)$(subsystem b)"
  start_target isolation
  neighbour idle
  neighbour unlimited
  "$SLUICE_BIN" ns qos --socket "$SOCKET" "$NQN_PREFIX:a" 1 --rw-ios-per-second "$NEIGHBOUR_LIMIT" >"$OUT/isolation-qos.out"
  neighbour limited
  stop_target
  local idle unlimited limited
  idle=$(field "$OUT/isolation-b-idle.json" 'p99')
  unlimited=$(field "$OUT/isolation-b-unlimited.json" 'p99')
  limited=$(field "$OUT/isolation-b-limited.json" 'p99')
  {
    echo
    echo "## Noisy neighbour (A: 4 KiB random read QD128; B: 4 KiB random read QD1)"
    echo
    echo "| A | A's IOPS | B's IOPS | B's p99 | B's p99 / A idle |"
    echo "|---|---|---|---|---|"
    for phase in idle unlimited limited; do
      local a_iops='-' label=$phase
      [ "$phase" = idle ] || a_iops=$(field "$OUT/isolation-a-$phase.json" 'round(run["iops"])')
      [ "$phase" = limited ] && label="limited (rw_ios_per_second = $NEIGHBOUR_LIMIT)"
      python3 -c "import sys; print(f'| {sys.argv[1]} | {sys.argv[2]} | {float(sys.argv[3]):.0f} | {float(sys.argv[4]):.1f} µs | {float(sys.argv[4]) / float(sys.argv[5]):.2f} |')" \
        "$label" "$a_iops" "$(field "$OUT/isolation-b-$phase.json" 'run["iops"]')" \
        "$(field "$OUT/isolation-b-$phase.json" 'p99')" "$idle"
    done
    echo
    echo "B's p99: idle $idle µs, A unlimited $unlimited µs, A limited $limited µs."
  } >>"$SUMMARY"
}

cost() {
  log "cost: no limit vs 2^40 IOPS, 4 KiB QD32, $ROUNDS interleaved rounds"
  write_config cost "$(subsystem free)$(subsystem capped 'rw_ios_per_second = 1099511627776')"
  start_target cost
  local round order name before after
  local raw=$OUT/cost.tsv
  printf 'round\tnamespace\tiops\ttarget_cpu_us_per_io\n' >"$raw"
  for round in $(seq 1 "$ROUNDS"); do
    order="free capped"
    [ $((round % 2)) -eq 0 ] && order="capped free"
    for name in $order; do
      before=$(cpu_seconds "$TARGET_PID")
      bench "cost-$name-$round" "$name" 4KiB 32
      after=$(cpu_seconds "$TARGET_PID")
      python3 - "$OUT/cost-$name-$round.json" "$before" "$after" "$round" "$name" >>"$raw" <<'PYTHON'
import json, sys
run = json.load(open(sys.argv[1]))["runs"][0]
# The target's CPU over the whole bench (connect, warm-up, run) per measured I/O:
# the same overhead on both sides, so the difference is the limit's.
seconds = float(sys.argv[3]) - float(sys.argv[2])
print(f"{sys.argv[4]}\t{sys.argv[5]}\t{run['iops']:.0f}\t{seconds * 1e6 / max(run['ios'], 1):.3f}")
PYTHON
    done
  done
  stop_target
  {
    echo
    echo "## Cost of a limit far above capacity (4 KiB random read QD32, $ROUNDS interleaved rounds)"
    echo
    python3 - "$raw" <<'PYTHON'
import csv, statistics, sys
rows = list(csv.DictReader(open(sys.argv[1]), delimiter="\t"))
print("| namespace | IOPS per round | median IOPS | target CPU µs/I/O (median) |")
print("|---|---|---|---|")
medians = {}
for name, label in (("free", "no limit"), ("capped", "rw_ios_per_second = 2^40")):
    mine = [row for row in rows if row["namespace"] == name]
    iops = [float(row["iops"]) for row in mine]
    cpu = [float(row["target_cpu_us_per_io"]) for row in mine]
    medians[name] = (statistics.median(iops), statistics.median(cpu))
    print(f"| {label} | {', '.join(f'{value:.0f}' for value in iops)} | {medians[name][0]:.0f} | {medians[name][1]:.3f} |")
free, capped = medians["free"], medians["capped"]
print()
print(f"Limited vs no limit: IOPS {100 * (capped[0] - free[0]) / free[0]:+.1f} %, target CPU per I/O {100 * (capped[1] - free[1]) / free[1]:+.1f} %.")
PYTHON
  } >>"$SUMMARY"
}

for part in accuracy isolation cost; do
  if [ -z "$ONLY" ] || [ "$ONLY" = "$part" ]; then
    "$part"
  fi
done
cat "$SUMMARY"
log "raw results: $OUT"
