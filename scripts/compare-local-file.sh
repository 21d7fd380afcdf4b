#!/usr/bin/env bash
# A file namespace against the same file read locally (the target-speed issue's file
# goal): a FILE_MIB file of random data on this machine's disk, 4 KiB random read with
# O_DIRECT at each depth in DEPTHS, interleaved for ROUNDS rounds:
#
#   local    fio's io_uring engine on the file (direct=1), pinned to core 1
#   sluice   `sluice serve` (one runtime thread on core 0) with the file as a namespace
#            (direct_io = true), driven by SPDK's spdk_nvme_perf on core 1
#
# Prints each way's best round per depth, the ratio sluice / local and the target's CPU
# per I/O.
#
#   scripts/compare-local-file.sh [--dir DIR] [--file-mib N] [--depths "1 32"] [--seconds T]
#                                 [--rounds R] [--out DIR]
#
# Defaults: the file under target/ (this repository's disk), 1024 MiB, depths 1 and 32,
# 10 s, 2 rounds. Needs fio, ../shared/spdk-peer (SPDK_PEER=path overrides) and a
# release build of sluice (built here unless SLUICE_BIN is set). Loopback only.
set -euo pipefail

REPO=$(cd "$(dirname "$0")/.." && pwd)
SPDK_PEER=${SPDK_PEER:-$REPO/../shared/spdk-peer/spdk-peer}
DIR=$REPO/target
FILE_MIB=1024
DEPTHS="1 32"
SECONDS_PER_RUN=10
ROUNDS=2
OUT=${OUT:-$REPO/target/compare-local-file}
export SPDK_PEER_HUGEPAGES=${SPDK_PEER_HUGEPAGES:-1536}

while [ $# -gt 0 ]; do
  case $1 in
    --dir) DIR=$2; shift 2 ;;
    --file-mib) FILE_MIB=$2; shift 2 ;;
    --depths) DEPTHS=$2; shift 2 ;;
    --seconds) SECONDS_PER_RUN=$2; shift 2 ;;
    --rounds) ROUNDS=$2; shift 2 ;;
    --out) OUT=$2; shift 2 ;;
    -h|--help) sed -n '2,18p' "$0"; exit 0 ;;
    *) echo "compare-local-file: unknown argument $1 (see --help)" >&2; exit 2 ;;
  esac
done

log() { echo "[compare-local-file] $*" >&2; }
die() { log "$*"; exit 1; }
# shellcheck source=scripts/lib/common.sh
. "$REPO/scripts/lib/common.sh"

[ -x "$SPDK_PEER" ] || die "$SPDK_PEER not found (set SPDK_PEER)"
command -v fio >/dev/null || die "fio is missing: scripts/setup.sh installs it"
[ "$(nproc)" -ge 2 ] || die "needs 2 CPUs (target on 0, initiator on 1)"
mkdir -p "$OUT" "$DIR"
if [ -z "${SLUICE_BIN:-}" ]; then
  (cd "$REPO" && cargo build --release -p sluice --bin sluice --quiet)
  SLUICE_BIN=$REPO/target/release/sluice
fi
FILE=$DIR/compare-local-file.img
SERVE_PID=''
cleanup() {
  [ -n "$SERVE_PID" ] && { kill "$SERVE_PID" 2>/dev/null; wait "$SERVE_PID" 2>/dev/null || true; }
  rm -f "$FILE"
}
trap cleanup EXIT

# Random data, so every read reaches the disk's blocks (no sparse holes).
log "writing $FILE_MIB MiB of random data to $FILE"
dd if=/dev/urandom of="$FILE" bs=1M count="$FILE_MIB" oflag=direct status=none
PORT=$(free_port)
NQN=nqn.2026-11.io.sluice:local-file
cat >"$OUT/serve.toml" <<EOF
[[listener]]
address = "127.0.0.1:$PORT"

[[subsystem]]
nqn = "$NQN"
allow_any_host = true

[[subsystem.namespace]]
nsid = 1
backend = "file"
path = "$FILE"
block_size = 4096
direct_io = true

[runtime]
threads = 1
EOF
taskset -c 0 "$SLUICE_BIN" serve --config "$OUT/serve.toml" --no-rpc-socket --log-level warn >"$OUT/serve.log" 2>&1 &
SERVE_PID=$!
for _ in $(seq 1 300); do
  grep -q '^sluice: ready' "$OUT/serve.log" && break
  kill -0 "$SERVE_PID" 2>/dev/null || { cat "$OUT/serve.log" >&2; die "sluice serve exited"; }
  sleep 0.1
done
grep -q '^sluice: ready' "$OUT/serve.log" || die "sluice serve not ready within 30 s"
TRID=$("$SPDK_PEER" trid 127.0.0.1 "$PORT" "$NQN")
cpu_ticks() { awk '{ print $14 + $15 }' "/proc/$1/stat"; }

RAW=$OUT/raw.tsv
printf 'round\tway\tdepth\tiops\tavg_us\ttarget_cpu_us_per_io\n' >"$RAW"
run_local() {  # run_local ROUND DEPTH
  taskset -c 1 fio --output-format=json --output="$OUT/fio-$1-$2.json" --name=local --ioengine=io_uring \
    --direct=1 --filename="$FILE" --rw=randread --bs=4k --iodepth="$2" --time_based \
    --runtime="$SECONDS_PER_RUN" --ramp_time=1 --norandommap >/dev/null
  python3 - "$OUT/fio-$1-$2.json" "$1" "$2" >>"$RAW" <<'PY'
import json, sys
job = json.load(open(sys.argv[1]))["jobs"][0]["read"]
print(f"{sys.argv[2]}\tlocal\t{sys.argv[3]}\t{job['iops']:.0f}\t{job['lat_ns']['mean'] / 1000:.2f}\t-")
PY
  log "round $1 local QD$2: $(tail -1 "$RAW")"
}
run_sluice() {  # run_sluice ROUND DEPTH
  local before after ticks_per_s total
  ticks_per_s=$(getconf CLK_TCK)
  before=$(cpu_ticks "$SERVE_PID")
  "$SPDK_PEER" perf -c 0x2 -q "$2" -o 4096 -w randread -t "$SECONDS_PER_RUN" -r "$TRID" >"$OUT/perf-$1-$2.log" 2>&1 \
    || { tail -20 "$OUT/perf-$1-$2.log" >&2; die "spdk_nvme_perf failed"; }
  after=$(cpu_ticks "$SERVE_PID")
  total=$(grep -E '^Total' "$OUT/perf-$1-$2.log" | tail -1)
  python3 - "$1" "$2" "$total" "$(( after - before ))" "$ticks_per_s" "$SECONDS_PER_RUN" >>"$RAW" <<'PY'
import sys
round_, depth, total, ticks, ticks_per_s, seconds = sys.argv[1:7]
fields = total.split()
iops, avg = float(fields[2]), float(fields[4])
cpu_us_per_io = int(ticks) / int(ticks_per_s) * 1e6 / (iops * int(seconds))
print(f"{round_}\tsluice\t{depth}\t{iops:.0f}\t{avg:.2f}\t{cpu_us_per_io:.2f}")
PY
  log "round $1 sluice QD$2: $(tail -1 "$RAW")"
}
for round in $(seq 1 "$ROUNDS"); do
  for depth in $DEPTHS; do
    if [ $(( round % 2 )) -eq 1 ]; then run_local "$round" "$depth"; run_sluice "$round" "$depth"
    else run_sluice "$round" "$depth"; run_local "$round" "$depth"; fi
  done
done

python3 - "$RAW" <<'EOF' | tee "$OUT/summary.md"
import csv, sys
rows = list(csv.DictReader(open(sys.argv[1]), delimiter="\t"))
best = {}
for row in rows:
    key = (row["way"], row["depth"])
    if key not in best or float(row["iops"]) > float(best[key]["iops"]):
        best[key] = row
print("| 4 KiB random read | local fio IOPS | local avg us | Sluice IOPS (ratio) | Sluice avg us (ratio) | target CPU us/IO |")
print("| --- | --: | --: | --: | --: | --: |")
for depth in dict.fromkeys(row["depth"] for row in rows):
    local, sluice = best.get(("local", depth)), best.get(("sluice", depth))
    if not local or not sluice:
        continue
    print(f"| QD{depth} | {float(local['iops']):.0f} | {local['avg_us']} | "
          f"{float(sluice['iops']):.0f} ({float(sluice['iops']) / float(local['iops']):.2f}x) | "
          f"{sluice['avg_us']} ({float(sluice['avg_us']) / float(local['avg_us']):.2f}x) | {sluice['target_cpu_us_per_io']} |")
EOF
log "raw rounds: $RAW"
