#!/usr/bin/env bash
# NVMe/TCP with and without TLS on Sluice's target and SPDK's, with one initiator:
# SPDK's spdk_nvme_perf on core 1 (`-S ssl --psk-path KEY` for TLS), each target on
# core 0 serving a 1 GiB RAM namespace of 4 KiB blocks, one key from `sluice
# gen-tls-key` for both. Four targets run in turn per round (sluice plain, sluice TLS,
# SPDK plain, SPDK TLS; the order reversed every other round), each workload once per
# target. Prints per workload the best round of each, TLS / plain ratios per target,
# and each target's CPU per I/O (its user + system time over the run; SPDK's reactor
# polls, so that is one core over its IOPS).
#
#   scripts/compare-spdk-tls.sh [--rounds N] [--seconds S] [--workloads "randread:4096:32 ..."] [--out DIR]
#
# Needs ../shared/spdk-peer (SPDK_PEER=path) and a release build of sluice (built here
# unless SLUICE_BIN is set). Loopback only. This machine's kernel has no `tls` module,
# so both targets run the TLS record layer in user space (OpenSSL).
set -euo pipefail

REPO=$(cd "$(dirname "$0")/.." && pwd)
SPDK_PEER=${SPDK_PEER:-$REPO/../shared/spdk-peer/spdk-peer}
ROUNDS=2
SECONDS_PER_RUN=6
# 128 KiB sequential writes before the workloads (scripts/lib/spdk-perf.sh).
PRECONDITION_SECONDS=${PRECONDITION_SECONDS:-3}
WORKLOADS="randread:4096:1 randread:4096:32 randwrite:4096:32 read:131072:8 write:131072:8"
OUT=${OUT:-$REPO/target/compare-spdk-tls}
NQN=nqn.2026-11.io.sluice:compare-tls
SPDK_NQN=nqn.2016-06.io.spdk:cnode1
HOSTNQN=nqn.2014-08.org.nvmexpress:uuid:c0ffee00-0000-4000-8000-0000000071a5
export SPDK_PEER_HUGEPAGES=${SPDK_PEER_HUGEPAGES:-1536}

while [ $# -gt 0 ]; do
  case $1 in
    --rounds) ROUNDS=$2; shift 2 ;;
    --seconds) SECONDS_PER_RUN=$2; shift 2 ;;
    --workloads) WORKLOADS=$2; shift 2 ;;
    --out) OUT=$2; shift 2 ;;
    -h|--help) sed -n '2,15p' "$0"; exit 0 ;;
    *) echo "compare-spdk-tls: unknown argument $1 (see --help)" >&2; exit 2 ;;
  esac
done

[ -x "$SPDK_PEER" ] || { echo "compare-spdk-tls: $SPDK_PEER not found (set SPDK_PEER)" >&2; exit 2; }
[ "$(nproc)" -ge 2 ] || { echo "compare-spdk-tls: needs 2 CPUs (target on 0, initiator on 1)" >&2; exit 2; }
mkdir -p "$OUT"
if [ -z "${SLUICE_BIN:-}" ]; then
  (cd "$REPO" && cargo build --release -p sluice --bin sluice --quiet)
  SLUICE_BIN=$REPO/target/release/sluice
fi
# shellcheck source=scripts/lib/common.sh
. "$REPO/scripts/lib/common.sh"
# shellcheck source=scripts/lib/spdk-perf.sh
. "$REPO/scripts/lib/spdk-perf.sh"
log() { echo "[compare-spdk-tls] $*" >&2; }
PERF_HOSTNQN=$HOSTNQN

KEY=$("$SLUICE_BIN" gen-tls-key | tail -n 1)
KEY_FILE=$OUT/psk.key
(umask 077 && printf '%s' "$KEY" >"$KEY_FILE")

TARGET_PID='' TARGET_CPU_PID='' PORT='' TARGET_NQN='' TLS=''
start_target() {  # sluice-plain | sluice-tls | spdk-plain | spdk-tls
  local name=$1 ready=$OUT/ready.$$ tls_args=()
  PORT=$(free_port)
  rm -f "$ready"
  case $name in *-tls) TLS=1 ;; *) TLS='' ;; esac
  if [[ $name == spdk-* ]]; then
    TARGET_NQN=$SPDK_NQN
    [ -z "$TLS" ] || tls_args=(--tls-psk "$KEY_FILE" --hostnqn "$HOSTNQN")
    "$SPDK_PEER" target --port "$PORT" --size-mib 1024 --block-size 4096 --core 0 --ready-file "$ready" \
      "${tls_args[@]}" >"$OUT/target-$name.log" 2>&1 &
    TARGET_PID=$!
  else
    TARGET_NQN=$NQN
    {
      printf '[[listener]]\naddress = "127.0.0.1:%s"\n' "$PORT"
      [ -z "$TLS" ] || printf 'tls = "required"\n'
      printf '\n[[subsystem]]\nnqn = "%s"\n\n' "$NQN"
      printf '[[subsystem.host]]\nnqn = "%s"\n' "$HOSTNQN"
      [ -z "$TLS" ] || printf 'tls_key = "%s"\n' "$KEY"
      printf '\n[[subsystem.namespace]]\nnsid = 1\nbackend = "ram"\nsize = "1GiB"\nblock_size = 4096\n\n'
      printf '[runtime]\nthreads = 1\n'
    } >"$OUT/sluice-$name.toml"
    SLUICE_LOG=warn taskset -c 0 "$SLUICE_BIN" serve --config "$OUT/sluice-$name.toml" >"$OUT/target-$name.log" 2>&1 &
    TARGET_PID=$!
  fi
  local waited=0
  until { [[ $name == spdk-* ]] && [ -e "$ready" ]; } || grep -q '^sluice: ready' "$OUT/target-$name.log" 2>/dev/null; do
    sleep 0.2; waited=$((waited + 1))
    if [ $waited -ge 300 ] || ! kill -0 "$TARGET_PID" 2>/dev/null; then
      tail -n 20 "$OUT/target-$name.log" >&2
      echo "compare-spdk-tls: target $name did not start" >&2; exit 1
    fi
  done
  TARGET_CPU_PID=$TARGET_PID
  if [[ $name == spdk-* ]]; then
    local child
    child=$(pgrep -n -f 'nvmf_tgt' || true)
    [ -z "$child" ] || TARGET_CPU_PID=$child
  fi
}

RAW=$OUT/raw.tsv
write_raw_header

log "machine: $(nproc) CPUs, load $(cut -d' ' -f1-3 /proc/loadavg)"
targets="sluice-plain sluice-tls spdk-plain spdk-tls"
for round in $(seq 1 "$ROUNDS"); do
  order=$targets
  [ $((round % 2)) -eq 0 ] && order=$(echo "$targets" | tr ' ' '\n' | tac | tr '\n' ' ')
  for name in $order; do
    start_target "$name"
    PERF_EXTRA_ARGS=()
    [ -z "$TLS" ] || PERF_EXTRA_ARGS=(-S ssl --psk-path "$KEY_FILE")
    precondition "$name"
    run_workloads "$round" "$name"
    stop_target
  done
done
log "machine after: load $(cut -d' ' -f1-3 /proc/loadavg)"

# Best round per target and workload, then TLS / plain per target and Sluice / SPDK.
python3 - "$RAW" <<'EOF' | tee "$OUT/summary.md"
import csv, sys
rows = list(csv.DictReader(open(sys.argv[1]), delimiter='\t'))
best = {}
for row in rows:
    key = (row['workload'], row['target'])
    if key not in best or float(row['iops']) > float(best[key]['iops']):
        best[key] = row
workloads = list(dict.fromkeys(row['workload'] for row in rows))
print('| workload | target | plain IOPS | TLS IOPS | TLS / plain | plain avg us | TLS avg us | plain CPU us/IO | TLS CPU us/IO |')
print('| --- | --- | --: | --: | --: | --: | --: | --: | --: |')
for workload in workloads:
    for target in ('sluice', 'spdk'):
        plain, tls = best.get((workload, target + '-plain')), best.get((workload, target + '-tls'))
        if not plain or not tls:
            continue
        ratio = float(tls['iops']) / float(plain['iops']) if float(plain['iops']) else float('nan')
        print(f"| {workload} | {target} | {float(plain['iops']):,.0f} | {float(tls['iops']):,.0f} | {ratio:.2f}x | "
              f"{float(plain['avg_us']):.1f} | {float(tls['avg_us']):.1f} | {plain['target_cpu_us_per_io']} | {tls['target_cpu_us_per_io']} |")
print()
print('| workload | Sluice / SPDK IOPS, plain | Sluice / SPDK IOPS, TLS |')
print('| --- | --: | --: |')
for workload in workloads:
    cells = []
    for mode in ('plain', 'tls'):
        ours, theirs = best.get((workload, 'sluice-' + mode)), best.get((workload, 'spdk-' + mode))
        cells.append(f"{float(ours['iops']) / float(theirs['iops']):.2f}x" if ours and theirs and float(theirs['iops']) else 'n/a')
    print(f'| {workload} | {cells[0]} | {cells[1]} |')
EOF
log "raw rounds: $RAW"
