#!/usr/bin/env bash
# Sluice's target against SPDK's, side by side, with the same initiator: SPDK's
# spdk_nvme_perf on core 1, the target under test on core 0, a 1 GiB RAM namespace of
# 4 KiB blocks, the workloads of the target-speed issue, rounds interleaved
# (SPDK, Sluice modes..., then the next round in reverse order). Prints per workload
# the best round of each target, the ratios to SPDK and each target's CPU per I/O
# (from /proc: user + system time of the target process over the run).
#
#   scripts/compare-spdk.sh [--rounds N] [--seconds S] [--modes "adaptive sleep busy-poll"]
#                           [--workloads "randread:4096:1 ..."] [--precondition-seconds S]
#                           [--baseline BIN] [--out DIR]
#
# --baseline BIN also runs each mode on another build of sluice (a build before a
# change), as target `base-MODE`, interleaved with the rest: the one-connection
# profiles of a change against the build before it, with SPDK's figures beside them.
#
# Each target is preconditioned first (128 KiB sequential writes for S seconds, default
# 3; 0 skips it), so no workload measures first writes into unallocated memory.
#
# Needs ../shared/spdk-peer (SPDK_PEER=path overrides) and a release build of sluice
# (built here unless SLUICE_BIN is set). Runs on this machine's loopback only.
set -euo pipefail

REPO=$(cd "$(dirname "$0")/.." && pwd)
SPDK_PEER=${SPDK_PEER:-$REPO/../shared/spdk-peer/spdk-peer}
ROUNDS=2
SECONDS_PER_RUN=10
# 1 GiB at 128 KiB QD8 takes well under a second here; 3 s covers a slow sitting.
PRECONDITION_SECONDS=3
MODES="adaptive sleep busy-poll"
BASELINE_BIN=''
WORKLOADS="randread:4096:1 randread:4096:32 randread:4096:128 randwrite:4096:32 read:131072:8 write:131072:8"
OUT=${OUT:-$REPO/target/compare-spdk}
NQN=nqn.2026-11.io.sluice:compare
# SPDK's malloc namespace of 1 GiB, the target's own pools and perf's buffers come
# out of hugepages: 3 GiB of 2 MiB pages (spdk-peer reserves them; they stay reserved).
export SPDK_PEER_HUGEPAGES=${SPDK_PEER_HUGEPAGES:-1536}

while [ $# -gt 0 ]; do
  case $1 in
    --rounds) ROUNDS=$2; shift 2 ;;
    --seconds) SECONDS_PER_RUN=$2; shift 2 ;;
    --modes) MODES=$2; shift 2 ;;
    --precondition-seconds) PRECONDITION_SECONDS=$2; shift 2 ;;
    --workloads) WORKLOADS=$2; shift 2 ;;
    --baseline) BASELINE_BIN=$2; shift 2 ;;
    --out) OUT=$2; shift 2 ;;
    -h|--help) sed -n '2,23p' "$0"; exit 0 ;;
    *) echo "compare-spdk: unknown argument $1 (see --help)" >&2; exit 2 ;;
  esac
done

[ -x "$SPDK_PEER" ] || { echo "compare-spdk: $SPDK_PEER not found (set SPDK_PEER)" >&2; exit 2; }
[ "$(nproc)" -ge 2 ] || { echo "compare-spdk: needs 2 CPUs (target on 0, initiator on 1)" >&2; exit 2; }
mkdir -p "$OUT"
if [ -z "${SLUICE_BIN:-}" ]; then
  (cd "$REPO" && cargo build --release -p sluice --bin sluice --quiet)
  SLUICE_BIN=$REPO/target/release/sluice
fi

log() { echo "[compare-spdk] $*" >&2; }

# shellcheck source=scripts/lib/common.sh
. "$REPO/scripts/lib/common.sh"

# shellcheck source=scripts/lib/spdk-perf.sh
. "$REPO/scripts/lib/spdk-perf.sh"
PERF_EXTRA_ARGS=()

TARGET_PID='' PORT='' TARGET_NQN=''

# start_target NAME: spdk, or a Sluice poll mode.
start_target() {
  local name=$1 ready=$OUT/ready.$$
  PORT=$(free_port)
  rm -f "$ready"
  if [ "$name" = spdk ]; then
    TARGET_NQN=nqn.2016-06.io.spdk:cnode1
    "$SPDK_PEER" target --port "$PORT" --size-mib 1024 --block-size 4096 --core 0 --ready-file "$ready" \
      >"$OUT/target-$name.log" 2>&1 &
    TARGET_PID=$!
  else
    TARGET_NQN=$NQN
    # base-MODE: the baseline build in MODE.
    local mode=${name#base-} binary=$SLUICE_BIN
    [ "$mode" != "$name" ] && binary=$BASELINE_BIN
    cat >"$OUT/sluice-$name.toml" <<EOF
[[listener]]
address = "127.0.0.1:$PORT"

[[subsystem]]
nqn = "$NQN"
allow_any_host = true

[[subsystem.namespace]]
nsid = 1
backend = "ram"
size = "1GiB"
block_size = 4096

[runtime]
threads = 1
poll_mode = "$mode"
EOF
    SLUICE_LOG=warn taskset -c 0 "$binary" serve --config "$OUT/sluice-$name.toml" >"$OUT/target-$name.log" 2>&1 &
    TARGET_PID=$!
  fi
  local waited=0
  until { [ "$name" = spdk ] && [ -e "$ready" ]; } || grep -q '^sluice: ready' "$OUT/target-$name.log" 2>/dev/null; do
    sleep 0.2; waited=$((waited + 1))
    if [ $waited -ge 300 ] || ! kill -0 "$TARGET_PID" 2>/dev/null; then
      tail -n 20 "$OUT/target-$name.log" >&2
      echo "compare-spdk: target $name did not start" >&2; exit 1
    fi
  done
  # The SPDK target's reactor is a child of the wrapper: measure the process that
  # burns the CPU (the newest descendant named reactor_0 or nvmf_tgt).
  if [ "$name" = spdk ]; then
    local child
    child=$(pgrep -n -f 'nvmf_tgt' || true)
    [ -n "$child" ] && TARGET_CPU_PID=$child || TARGET_CPU_PID=$TARGET_PID
  else
    TARGET_CPU_PID=$TARGET_PID
  fi
}

RAW=$OUT/raw.tsv
write_raw_header


log "machine: $(nproc) CPUs, load $(cut -d' ' -f1-3 /proc/loadavg)"
targets="spdk $MODES"
sides=$MODES
if [ -n "$BASELINE_BIN" ]; then
  [ -x "$BASELINE_BIN" ] || { echo "compare-spdk: --baseline $BASELINE_BIN is not an executable" >&2; exit 2; }
  for mode in $MODES; do sides="$sides base-$mode"; done
  targets="spdk $sides"
fi
for round in $(seq 1 "$ROUNDS"); do
  order=$targets
  [ $((round % 2)) -eq 0 ] && order=$(echo "$targets" | tr ' ' '\n' | tac | tr '\n' ' ')
  for name in $order; do
    start_target "$name"
    precondition "$name"
    run_workloads "$round" "$name"
    stop_target
  done
done

# Best round per target and workload (highest IOPS), then ratios to SPDK.
python3 "$REPO/scripts/lib/best-ratios.py" "$RAW" target spdk "$sides" target_cpu_us_per_io SPDK | tee "$OUT/summary.md"
log "raw rounds: $RAW"
