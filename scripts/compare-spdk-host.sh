#!/usr/bin/env bash
# Sluice's host against SPDK's, side by side, against the same target: SPDK's
# nvmf_tgt on core 0 (a 1 GiB RAM namespace of 4 KiB blocks), the initiator under
# test on core 1, rounds interleaved (SPDK first, then the next round in reverse
# order). Initiators:
#   spdk          spdk_nvme_perf (polls: its core is 100 % busy, so CPU/IO = 1e6/IOPS)
#   <host-io>     `sluice bench --host-io <mode>`, one worker thread, one queue
#                 (adaptive, busy-poll, sleep, blocking; initiator CPU from the bench)
#   fio           fio with Sluice's engine (libsluice_fio.so), one job; fio's own cost
#                 is included (CPU from fio's usr+sys)
#   <name>@base   <name> (a host-io mode or fio) from a second build, for a before /
#                 after comparison in one sitting: SLUICE_BASE_BIN (and for fio@base
#                 SLUICE_BASE_FIO_ENGINE) name it
# Prints per workload each initiator's best round, the ratios to spdk_nvme_perf and
# host CPU per I/O.
#
#   scripts/compare-spdk-host.sh [--rounds N] [--seconds S] [--initiators "spdk adaptive fio"]
#                                [--workloads "randread:4096:1 ..."] [--out DIR]
#
# Needs ../shared/spdk-peer (SPDK_PEER=path overrides), a release build of sluice
# (built here unless SLUICE_BIN is set) and, for `fio`, the engine
# (scripts/build-fio-engine.sh; skipped with a note when missing). Loopback only.
set -euo pipefail

REPO=$(cd "$(dirname "$0")/.." && pwd)
SPDK_PEER=${SPDK_PEER:-$REPO/../shared/spdk-peer/spdk-peer}
ROUNDS=2
SECONDS_PER_RUN=8
INITIATORS="spdk adaptive blocking fio"
WORKLOADS="randread:4096:1 randread:4096:32 randread:4096:128 read:131072:8 randwrite:4096:32"
OUT=${OUT:-$REPO/target/compare-spdk-host}
export SPDK_PEER_HUGEPAGES=${SPDK_PEER_HUGEPAGES:-1536}

while [ $# -gt 0 ]; do
  case $1 in
    --rounds) ROUNDS=$2; shift 2 ;;
    --seconds) SECONDS_PER_RUN=$2; shift 2 ;;
    --initiators) INITIATORS=$2; shift 2 ;;
    --workloads) WORKLOADS=$2; shift 2 ;;
    --out) OUT=$2; shift 2 ;;
    -h|--help) sed -n '2,23p' "$0"; exit 0 ;;
    *) echo "compare-spdk-host: unknown argument $1 (see --help)" >&2; exit 2 ;;
  esac
done

[ -x "$SPDK_PEER" ] || { echo "compare-spdk-host: $SPDK_PEER not found (set SPDK_PEER)" >&2; exit 2; }
[ "$(nproc)" -ge 2 ] || { echo "compare-spdk-host: needs 2 CPUs (target on 0, initiator on 1)" >&2; exit 2; }
mkdir -p "$OUT"
if [ -z "${SLUICE_BIN:-}" ]; then
  (cd "$REPO" && cargo build --release -p sluice --bin sluice --quiet)
  SLUICE_BIN=$REPO/target/release/sluice
fi
FIO_ENGINE=${SLUICE_FIO_ENGINE:-$REPO/target/fio/libsluice_fio.so}
case " $INITIATORS " in
  *" fio "*)
    if [ ! -f "$FIO_ENGINE" ] || ! command -v fio >/dev/null; then
      echo "[compare-spdk-host] no fio or no engine at $FIO_ENGINE (scripts/build-fio-engine.sh): skipping fio" >&2
      INITIATORS=$(echo "$INITIATORS" | tr ' ' '\n' | grep -vx fio | tr '\n' ' ')
    fi ;;
esac

log() { echo "[compare-spdk-host] $*" >&2; }
# shellcheck source=scripts/lib/common.sh
. "$REPO/scripts/lib/common.sh"

PORT=$(free_port)
NQN=nqn.2016-06.io.spdk:cnode1
"$SPDK_PEER" target --port "$PORT" --size-mib 1024 --block-size 4096 --core 0 --ready-file "$OUT/ready" \
  >"$OUT/target.log" 2>&1 &
TARGET_PID=$!
trap 'kill -TERM $TARGET_PID 2>/dev/null || true; wait $TARGET_PID 2>/dev/null || true' EXIT
rm -f "$OUT/ready"
for _ in $(seq 1 300); do
  [ -e "$OUT/ready" ] && break
  kill -0 "$TARGET_PID" 2>/dev/null || { tail -n 20 "$OUT/target.log" >&2; exit 1; }
  sleep 0.2
done
[ -e "$OUT/ready" ] || { echo "compare-spdk-host: SPDK's target did not start" >&2; exit 1; }

RAW=$OUT/raw.tsv
printf 'round\tinitiator\tworkload\tiops\tavg_us\thost_cpu_us_per_io\n' >"$RAW"

# run_one ROUND INITIATOR WORKLOAD SIZE DEPTH: appends one row to $RAW.
run_one() {
  local round=$1 who=$2 workload=$3 size=$4 depth=$5 spec="$3:$4:$5" line iops avg cpu
  local mode=$who bin=$SLUICE_BIN engine=$FIO_ENGINE
  case $who in
    *@base)
      mode=${who%@base}
      bin=${SLUICE_BASE_BIN:?"$who needs SLUICE_BASE_BIN"}
      engine=${SLUICE_BASE_FIO_ENGINE:-$FIO_ENGINE} ;;
  esac
  case $mode in
    spdk)
      line=$("$SPDK_PEER" perf -c 0x2 -q "$depth" -o "$size" -w "$workload" -t "$SECONDS_PER_RUN" \
        -r "$("$SPDK_PEER" trid 127.0.0.1 "$PORT" "$NQN")" 2>"$OUT/err.log" | grep '^Total' || true)
      [ -n "$line" ] || { log "$spec spdk: no Total line"; tail -n 5 "$OUT/err.log" >&2; return 0; }
      read -r iops avg < <(echo "$line" | awk -F: '{ print $2 }' | awk '{ print $1, $3 }')
      cpu=$(awk -v iops="$iops" 'BEGIN { printf "%.2f", 1e6 / iops }') ;;
    fio)
      local rw=$workload
      taskset -c 1 env SLUICE_FIO_ENGINE="$engine" fio --name=host --ioengine=external:"$engine" \
        --traddr=127.0.0.1 --trsvcid="$PORT" --subnqn="$NQN" --nsid=1 --thread=1 --numjobs=1 \
        --rw="$rw" --bs="$size" --iodepth="$depth" --iodepth_batch_complete_min=1 --size=1g \
        --time_based=1 --runtime="$SECONDS_PER_RUN" --ramp_time=1 --norandommap=1 --randrepeat=0 \
        --output-format=json --output="$OUT/fio.json" >"$OUT/err.log" 2>&1 \
        || { log "$spec fio failed"; tail -n 5 "$OUT/err.log" >&2; return 0; }
      read -r iops avg cpu < <(python3 - "$OUT/fio.json" <<'EOF'
import json, sys
job = json.load(open(sys.argv[1]))["jobs"][0]
side = job["read"] if job["read"]["io_bytes"] else job["write"]
iops = side["iops"]
avg = side["clat_ns"]["mean"] / 1000 + side["slat_ns"]["mean"] / 1000
cpu = (job["usr_cpu"] + job["sys_cpu"]) / 100 * 1e6 / iops if iops else float("nan")
print(f"{iops:.0f} {avg:.2f} {cpu:.2f}")
EOF
      ) ;;
    *)
      local pattern=random read_percent=100
      case $workload in read|write) pattern=sequential ;; esac
      case $workload in *write) read_percent=0 ;; esac
      cat >"$OUT/job.toml" <<EOF
[[job]]
name = "$spec"
pattern = "$pattern"
read_percent = $read_percent
block_size = $size
threads = 1
queue_depth = $depth
duration = "${SECONDS_PER_RUN}s"
ramp = "1s"
EOF
      taskset -c 1 "$bin" bench --target "tcp://127.0.0.1:$PORT/$NQN" --suite-file "$OUT/job.toml" \
        --size 1GiB --no-baseline --host-io "$mode" --json "$OUT/bench.json" >"$OUT/err.log" 2>&1 \
        || { log "$spec $who failed"; tail -n 5 "$OUT/err.log" >&2; return 0; }
      read -r iops avg cpu < <(python3 - "$OUT/bench.json" <<'EOF'
import json, sys
run = json.load(open(sys.argv[1]))["runs"][0]
print(f"{run['iops']:.0f} {run['latency_us']['mean']:.2f} {run['cpu']['initiator_us_per_io']:.2f}")
EOF
      ) ;;
  esac
  printf '%s\t%s\t%s\t%s\t%s\t%s\n' "$round" "$who" "$spec" "$iops" "$avg" "$cpu" >>"$RAW"
  log "round $round $who $spec: $iops IOPS, avg $avg us, host $cpu us CPU/IO"
}

log "machine: $(nproc) CPUs, load $(cut -d' ' -f1-3 /proc/loadavg)"
for round in $(seq 1 "$ROUNDS"); do
  order=$INITIATORS
  [ $((round % 2)) -eq 0 ] && order=$(echo "$INITIATORS" | tr ' ' '\n' | tac | tr '\n' ' ')
  for spec in $WORKLOADS; do
    IFS=: read -r workload size depth <<<"$spec"
    for who in $order; do
      run_one "$round" "$who" "$workload" "$size" "$depth"
    done
  done
done

# Best round per initiator and workload (highest IOPS), then ratios to SPDK.
python3 "$REPO/scripts/lib/best-ratios.py" "$RAW" initiator spdk "$INITIATORS" host_cpu_us_per_io perf | tee "$OUT/summary.md"
log "raw rounds: $RAW"
