#!/usr/bin/env bash
# Interop: fio (Debian's fio 3.33) with the Sluice fio engine (fio/sluice_engine.c
# over libsluice_host, Sluice's userspace NVMe/TCP host) against a target:
#
#   1. builds the engine (scripts/build-fio-engine.sh: Debian's fio sources for the
#      headers, libsluice_host.a, target/fio/libsluice_fio.so)
#   2. starts the target: `sluice serve` on 127.0.0.1 (default), the Linux kernel
#      target through ../shared/linux-nvme-peer (INTEROP_TARGET=linux-nvmet), or
#      SPDK's target through ../shared/spdk-peer (INTEROP_TARGET=spdk)
#   3. fio write + verify, 64 MiB of patterned data per section, --verify=crc32c:
#      4 KiB random writes at iodepth 32, then 1 MiB sequential writes at iodepth
#      32 with header and data digests (each split into 128 KiB commands, more
#      commands than the queue holds)
#   4. fio 4 KiB random reads at iodepth 32 for RANDREAD_SECONDS; prints IOPS and
#      latency (mean, p50, p99, p99.9)
#   5. stops the target with SIGTERM (sluice must exit with status 0)
#
# Usage: tests/interop/fio-engine.sh
# Environment:
#   OUT=DIR              artifact root (default <repo>/target/interop); this test
#                        writes to DIR/fio-engine/
#   SLUICE_BIN=PATH      sluice binary (default: build target/release/sluice)
#   INTEROP_TARGET=T     all (default) | sluice | linux-nvmet | spdk (all: each, one
#                        after the other, artifacts in fio-engine/<target>/)
#   FIO_ENGINE_PORT=P    target port (default 4520; 4420/8009 belong to linux-host)
#   FIO_ENGINE_DISC_PORT=P  sluice's discovery port (default 8109)
#   RANDREAD_SECONDS=S   length of the random read run (default 10)
#   SLUICE_LOG=...       sluice's log filter (default info)
# Functions here are also called indirectly (traps, wait_for):
# shellcheck disable=SC2317
set -euo pipefail

TEST_NAME=fio-engine
REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
INTEROP_REPO=$REPO
# shellcheck source=tests/interop/lib/common.sh
. "$REPO/tests/interop/lib/common.sh"

OUT_ROOT=${OUT:-$REPO/target/interop}
mkdir -p "$OUT_ROOT"
OUT_DIR=$(cd "$OUT_ROOT" && pwd)/$TEST_NAME
TARGET_KIND=${INTEROP_TARGET:-all}

if [ "$TARGET_KIND" = all ]; then
  rm -rf "$OUT_DIR"
  status=0 results=()
  for kind in sluice linux-nvmet spdk; do
    if INTEROP_TARGET=$kind FIO_ENGINE_OUT_SUBDIR=$kind bash "${BASH_SOURCE[0]}"; then
      results+=("PASS against $kind")
    else
      results+=("FAIL against $kind"); status=1
    fi
  done
  for r in "${results[@]}"; do log "$r"; done
  exit "$status"
fi
OUT_DIR=$OUT_DIR${FIO_ENGINE_OUT_SUBDIR:+/$FIO_ENGINE_OUT_SUBDIR}
IO_PORT=${FIO_ENGINE_PORT:-4520}
DISC_PORT=${FIO_ENGINE_DISC_PORT:-8109}
RANDREAD_SECONDS=${RANDREAD_SECONDS:-10}
NQN=nqn.2026-11.io.sluice:fio-engine
# SPDK's target names its subsystem itself.
[ "$TARGET_KIND" = spdk ] && NQN=nqn.2016-06.io.spdk:cnode1
NS_SIZE_MIB=256
BLOCK_SIZE=512
VERIFY_MIB=64

TARGET_PID='' TARGET_NAME=''
cleanup() {
  local rc=$?
  trap - EXIT INT TERM
  [ -n "$TARGET_PID" ] && { stop_pid "$TARGET_PID" "$TARGET_NAME" 20 TERM || true; }
  exit "$rc"
}
trap cleanup EXIT
trap 'log "interrupted"; exit 130' INT TERM

# ---------------------------------------------------------------------------
# prerequisites
# ---------------------------------------------------------------------------
for tool in fio ss python3; do
  command -v "$tool" >/dev/null || die "'$tool' is not installed: run scripts/setup.sh"
done
case $TARGET_KIND in
  sluice) ;;
  linux-nvmet) [ -x "$LNP" ] || die "linux-nvme-peer not found at $LNP (expected in ../shared/ next to the repository)" ;;
  spdk) ;;
  *) die "INTEROP_TARGET must be sluice, linux-nvmet, spdk or all" ;;
esac

rm -rf "$OUT_DIR"
mkdir -p "$OUT_DIR"
ports=("$IO_PORT")
[ "$TARGET_KIND" = sluice ] && ports+=("$DISC_PORT")
for p in "${ports[@]}"; do
  if port_listening "$p"; then
    die "TCP port $p is already in use (stop whatever listens there, or set FIO_ENGINE_PORT / FIO_ENGINE_DISC_PORT):
$(port_owner "$p")"
  fi
done
log "target: $TARGET_KIND; subsystem $NQN on 127.0.0.1:$IO_PORT; artifacts: $OUT_DIR"

# ---------------------------------------------------------------------------
# build the engine (and sluice)
# ---------------------------------------------------------------------------
log "building the fio engine (scripts/build-fio-engine.sh; log: build-engine.log)"
t_build=$SECONDS
if ! ENGINE=$(cd "$REPO" && bash scripts/build-fio-engine.sh --print-path 2>"$OUT_DIR/build-engine.log"); then
  tail_file "$OUT_DIR/build-engine.log" 40
  die "building the fio engine failed"
fi
ENGINE=$(printf '%s\n' "$ENGINE" | tail -n 1)
[ -f "$ENGINE" ] || die "the build script did not produce the engine ($ENGINE)"
log "engine: $ENGINE (built in $((SECONDS - t_build))s)"
sed 's/^/  /' "$OUT_DIR/build-engine.log" | grep -E 'headers:|fio sources:|fetched|configured' || true

if [ "$TARGET_KIND" = sluice ]; then
  use_sluice_binary
fi

# ---------------------------------------------------------------------------
# start the target
# ---------------------------------------------------------------------------
if [ "$TARGET_KIND" = sluice ]; then
  # one target thread: fio and the target share this machine's cores
  write_sluice_config "$OUT_DIR/sluice.toml" "$IO_PORT" "$DISC_PORT" "$NQN" "$NS_SIZE_MIB" "$BLOCK_SIZE" 1
  start_sluice "$SLUICE" "$OUT_DIR/sluice.toml" "$IO_PORT" "$DISC_PORT"
elif [ "$TARGET_KIND" = spdk ]; then
  start_spdk_target "$IO_PORT" "$NQN" "$NS_SIZE_MIB" "$BLOCK_SIZE"
  log "note: SPDK's reactor polls core 0; fio shares core 1 with nothing else"
else
  start_linux_target "$IO_PORT" '' "$NQN" "$NS_SIZE_MIB"
  log "note: the Linux target runs in an emulated guest: its numbers measure the emulator"
fi
log "$TARGET_NAME is up (pid $TARGET_PID)"

# ---------------------------------------------------------------------------
# fio runs
# ---------------------------------------------------------------------------
failures=()
fio_common=(
  "--ioengine=external:$ENGINE" "--traddr=127.0.0.1" "--trsvcid=$IO_PORT" "--subnqn=$NQN" "--nsid=1"
)

# run_fio NAME TIMEOUT FIO-ARGS...: runs fio with JSON output into NAME.json (and
# its messages into NAME.log), bounded by TIMEOUT seconds
run_fio() {
  local name=$1 limit=$2 rc=0
  shift 2
  log "fio $name: fio $*"
  (cd "$OUT_DIR" && timeout --kill-after=10 "$limit" fio --output-format=json --output="$name.json" "$@") \
    >"$OUT_DIR/$name.log" 2>&1 || rc=$?
  if [ "$rc" -ne 0 ]; then
    [ "$rc" -eq 124 ] && log "fio $name timed out after ${limit}s"
    tail_file "$OUT_DIR/$name.log"
    failures+=("fio $name exited with status $rc (see $name.log)")
    return 1
  fi
}

# summarize NAME: one line per job from NAME.json; fails on any job error
summarize() {
  python3 - "$OUT_DIR/$1.json" <<'PY'
import json, sys
try:
    data = json.load(open(sys.argv[1]))
except Exception as e:  # fio may print a warning before the JSON
    text = open(sys.argv[1]).read()
    data = json.loads(text[text.index('{'):])
bad = 0
for job in data["jobs"]:
    parts = []
    for ddir in ("read", "write"):
        d = job[ddir]
        if d["total_ios"] == 0:
            continue
        clat = d["clat_ns"]
        pct = clat.get("percentile", {})
        def p(key):
            v = pct.get(key)
            return "%.0f" % (v / 1000) if v is not None else "-"
        parts.append("%s %.0f IOPS %.1f MiB/s lat mean %.1f us p50 %s p99 %s p99.9 %s us (%d ios)" % (
            ddir, d["iops"], d["bw_bytes"] / 2**20, d["lat_ns"]["mean"] / 1000,
            p("50.000000"), p("99.000000"), p("99.900000"), d["total_ios"]))
    print("  %-32s err=%d  %s" % (job["jobname"], job["error"], "; ".join(parts)))
    if job["error"]:
        bad = 1
sys.exit(bad)
PY
}

# 1. write + verify
verify_bytes=$((VERIFY_MIB * 1024 * 1024))
t=$SECONDS
if run_fio verify 600 "${fio_common[@]}" --verify=crc32c --do_verify=1 --verify_fatal=1 \
    --verify_state_save=0 --iodepth=32 --size="${VERIFY_MIB}m" \
    --name=verify-4k-randwrite --rw=randwrite --bs=4k --offset=0 \
    --name=verify-1m-write-digests --stonewall --rw=write --bs=1m --offset="${VERIFY_MIB}m" \
    --hdr_digest=1 --data_digest=1; then
  log "fio verify finished in $((SECONDS - t))s:"
  if ! summarize verify; then
    failures+=("fio verify reported errors (see verify.json, verify.log)")
  fi
  # every byte was read back: 2 sections x 64 MiB
  read_bytes=$(python3 -c "import json,sys; d=json.load(open(sys.argv[1])); print(sum(j['read']['io_bytes'] for j in d['jobs']))" "$OUT_DIR/verify.json" 2>/dev/null || echo 0)
  if [ "$read_bytes" -lt $((2 * verify_bytes)) ]; then
    failures+=("fio verify read back $read_bytes bytes, expected $((2 * verify_bytes))")
  else
    log "verified $((read_bytes / 1024 / 1024)) MiB of crc32c-patterned data"
  fi
fi

# 2. 4 KiB random read, iodepth 32
t=$SECONDS
if run_fio randread $((RANDREAD_SECONDS + 120)) "${fio_common[@]}" --name=randread-4k-qd32 \
    --rw=randread --bs=4k --iodepth=32 --size="${VERIFY_MIB}m" --time_based=1 \
    --runtime="$RANDREAD_SECONDS" --randrepeat=0; then
  log "fio 4 KiB random read, iodepth 32, ${RANDREAD_SECONDS}s (2 cores shared by fio and $TARGET_NAME):"
  summarize randread | tee "$OUT_DIR/randread-summary.txt" ||
    failures+=("fio randread reported errors (see randread.json)")
fi

# ---------------------------------------------------------------------------
# stop the target
# ---------------------------------------------------------------------------
stop_target
if grep -h 'panicked at' "$OUT_DIR"/*.log 2>/dev/null | grep -v sluice.log | head -n 5 | grep -q .; then
  failures+=("the host library panicked inside fio (see verify.log / randread.log)")
fi

# ---------------------------------------------------------------------------
# verdict
# ---------------------------------------------------------------------------
{
  echo "fio-engine interop against $TARGET_NAME ($(git -C "$REPO" rev-parse --short HEAD 2>/dev/null || echo '?'))"
  echo "engine: $ENGINE"
  [ -f "$OUT_DIR/randread-summary.txt" ] && { echo "4 KiB random read, iodepth 32:"; cat "$OUT_DIR/randread-summary.txt"; }
  echo "problems: ${#failures[@]}"
  printf '  %s\n' "${failures[@]}"
} >"$OUT_DIR/result.txt"

if [ ${#failures[@]} -eq 0 ]; then
  log "PASS: write+verify and random read through the fio engine, $TARGET_NAME stopped cleanly (artifacts: $OUT_DIR)"
  exit 0
fi
log "FAIL: ${#failures[@]} problem(s):"
printf '  - %s\n' "${failures[@]}"
echo "  artifacts: $OUT_DIR (verify.log/.json, randread.log/.json, sluice.log, build-engine.log)"
exit 1
