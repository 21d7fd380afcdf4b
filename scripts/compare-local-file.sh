#!/usr/bin/env bash
# A file namespace against the same file read locally (the target-speed issue's file
# goal): a FILE_MIB file of random data on this machine's disk, 4 KiB random read with
# O_DIRECT at each depth in DEPTHS, interleaved for ROUNDS rounds, the same fio on
# core 1 both ways:
#
#   local    fio's io_uring engine on the file (direct=1)
#   sluice   fio's Sluice engine (fio/sluice_engine.c, host_io=adaptive) over NVMe/TCP on
#            loopback to `sluice serve` (one runtime thread on core 0) with the file as
#            a namespace (direct_io = true)
#
# Prints each way's best round per depth, the ratio sluice / local and the target's CPU
# per I/O.
#
#   scripts/compare-local-file.sh [--dir DIR] [--file-mib N] [--depths "1 32"] [--seconds T]
#                                 [--rounds R] [--out DIR]
#
# Defaults: the file under target/ (this repository's disk), 1024 MiB, depths 1 and 32,
# 10 s, 2 rounds. Needs fio and the Sluice engine (scripts/build-fio-engine.sh builds it)
# and a release build of sluice (built here unless SLUICE_BIN is set). Loopback only.
set -euo pipefail

REPO=$(cd "$(dirname "$0")/.." && pwd)
DIR=$REPO/target
FILE_MIB=1024
DEPTHS="1 32"
SECONDS_PER_RUN=10
ROUNDS=2
OUT=${OUT:-$REPO/target/compare-local-file}

while [ $# -gt 0 ]; do
  case $1 in
    --dir) DIR=$2; shift 2 ;;
    --file-mib) FILE_MIB=$2; shift 2 ;;
    --depths) DEPTHS=$2; shift 2 ;;
    --seconds) SECONDS_PER_RUN=$2; shift 2 ;;
    --rounds) ROUNDS=$2; shift 2 ;;
    --out) OUT=$2; shift 2 ;;
    -h|--help) sed -n '2,20p' "$0"; exit 0 ;;
    *) echo "compare-local-file: unknown argument $1 (see --help)" >&2; exit 2 ;;
  esac
done

log() { echo "[compare-local-file] $*" >&2; }
die() { log "$*"; exit 1; }
# shellcheck source=scripts/lib/common.sh
. "$REPO/scripts/lib/common.sh"

command -v fio >/dev/null || die "fio is missing: scripts/setup.sh installs it"
ENGINE=$("$REPO/scripts/build-fio-engine.sh" --print-path) || die "the Sluice fio engine did not build (scripts/build-fio-engine.sh)"
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
cpu_ticks() { awk '{ print $14 + $15 }' "/proc/$1/stat"; }

RAW=$OUT/raw.tsv
printf 'round\tway\tdepth\tiops\tavg_us\ttarget_cpu_us_per_io\n' >"$RAW"
# fio_row ROUND WAY DEPTH JSON [TARGET_TICKS]: one raw row from fio's JSON.
fio_row() {
  python3 - "$@" "$(getconf CLK_TCK)" "$SECONDS_PER_RUN" <<'PY'
import json, sys
round_, way, depth, path, ticks, ticks_per_s, seconds = sys.argv[1:8]
job = json.load(open(path))["jobs"][0]["read"]
cpu = "-"
if ticks != "-":
    # ticks cover the ramp second too
    cpu = f"{int(ticks) / int(ticks_per_s) * 1e6 / (job['iops'] * (int(seconds) + 1)):.2f}"
print(f"{round_}\t{way}\t{depth}\t{job['iops']:.0f}\t{job['lat_ns']['mean'] / 1000:.2f}\t{cpu}")
PY
}
fio_args=(--output-format=json --name=randread --rw=randread --bs=4k --time_based --ramp_time=1
  --runtime="$SECONDS_PER_RUN" --norandommap)
run_local() {  # run_local ROUND DEPTH
  taskset -c 1 fio "${fio_args[@]}" --output="$OUT/local-$1-$2.json" --ioengine=io_uring --direct=1 \
    --filename="$FILE" --iodepth="$2" >/dev/null
  fio_row "$1" local "$2" "$OUT/local-$1-$2.json" - >>"$RAW"
  log "round $1 local QD$2: $(tail -1 "$RAW")"
}
run_sluice() {  # run_sluice ROUND DEPTH
  local before after
  before=$(cpu_ticks "$SERVE_PID")
  taskset -c 1 fio "${fio_args[@]}" --output="$OUT/sluice-$1-$2.json" --ioengine="external:$ENGINE" \
    --traddr=127.0.0.1 --trsvcid="$PORT" --subnqn="$NQN" --nsid=1 --host_io=adaptive --iodepth="$2" \
    --thread=1 >"$OUT/sluice-$1-$2.log" 2>&1 || { tail -20 "$OUT/sluice-$1-$2.log" >&2; die "fio through Sluice failed"; }
  after=$(cpu_ticks "$SERVE_PID")
  fio_row "$1" sluice "$2" "$OUT/sluice-$1-$2.json" "$(( after - before ))" >>"$RAW"
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
