#!/usr/bin/env bash
# Interop: the real Linux kernel NVMe/TCP host with its native multipath (Linux 6.1 in
# a linux-nvme-peer QEMU guest) against two `sluice serve` gateways of one gateway
# group, started from docs/examples/gateway-a.toml and gateway-b.toml without any
# edit (127.0.0.1:4420 and :4421, subsystem nqn.2026-11.io.sluice:ha, image
# rbd/ha-demo on the cluster at CEPH_CONF, default lease).
#
# The guest (tests/interop/guest/gateway-guest.sh) connects to both and checks one
# subsystem with two live paths, a optimized and b non-optimized; it runs fio
# write+verify rounds on the multipath device while this script SIGKILLs gateway a;
# every round must end without error and b's path must turn optimized. This script
# measures the takeover (SIGKILL to b reporting the group optimized, read with
# `sluice ana-log` like a host) and the guest the longest I/O completion across it.
# Then a is restarted from the same file: it must rejoin (`sluice gateway status`)
# and get its group back (failback); the guest checks the paths again and runs one
# more verify round. Sluice's own host reads both paths' ANA logs throughout.
# Sluice's own multipath host runs at the same time: fio with the Sluice engine and
# both gateways in traddr (one namespace through two paths, ANA-aware) writes and
# verifies its own region of the image across the same SIGKILL and must finish
# with zero errors through gateway b.
# Gateway b's traffic is captured and dissected as NVMe/TCP (a's is not: a SIGKILL
# cuts PDUs in half, which tshark rightly marks).
#
# Usage: tests/interop/gateway.sh
# Environment:
#   OUT=DIR              artifact root (default <repo>/target/interop); this test
#                        writes to DIR/gateway/
#   SLUICE_BIN=PATH      sluice binary (default: build target/release/sluice)
#   GUEST_TIMEOUT=S      bound for the whole guest run (default 600)
#   CEPH_CONF=PATH       the cluster (pool "rbd"); without it the test is skipped,
#                        unless SLUICE_REQUIRE_CEPH is set (then it fails)
# Functions here are also called indirectly (traps, wait_for), which ShellCheck
# cannot see:
# shellcheck disable=SC2317
set -euo pipefail

TEST_NAME=gateway
REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
INTEROP_REPO=$REPO
# shellcheck source=tests/interop/lib/common.sh
. "$REPO/tests/interop/lib/common.sh"

OUT_ROOT=${OUT:-$REPO/target/interop}
mkdir -p "$OUT_ROOT"
OUT_DIR=$(cd "$OUT_ROOT" && pwd)/$TEST_NAME
SHARE=$OUT_DIR/guest
GUEST_TIMEOUT=${GUEST_TIMEOUT:-600}
GUEST_SCRIPT=$REPO/tests/interop/guest/gateway-guest.sh
CONFIG_A=$REPO/docs/examples/gateway-a.toml
CONFIG_B=$REPO/docs/examples/gateway-b.toml
NQN=nqn.2026-11.io.sluice:ha
PORT_A=4420 PORT_B=4421
IMAGE=rbd/ha-demo

if [ -z "${CEPH_CONF:-}" ]; then
  [ -n "${SLUICE_REQUIRE_CEPH:-}" ] && die "SLUICE_REQUIRE_CEPH is set but CEPH_CONF is not: start a cluster (scripts/test.sh does)"
  warn "CEPH_CONF is not set: the gateway interop test is skipped"
  exit 0
fi
for tool in tshark ss capinfos rbd python3 fio; do
  command -v "$tool" >/dev/null || die "'$tool' is not installed: run scripts/setup.sh"
done
[ -x "$LNP" ] || die "linux-nvme-peer not found at $LNP (expected in ../shared/ next to the repository)"
for port in $PORT_A $PORT_B; do
  port_listening "$port" && die "port $port is taken (the examples use 4420 and 4421):"$'\n'"$(port_owner "$port")"
done

rm -rf "$OUT_DIR"
mkdir -p "$SHARE" "$OUT_DIR/peer"
use_sluice_binary

log "building the fio engine (scripts/build-fio-engine.sh; log: build-engine.log)"
ENGINE=$(cd "$REPO" && bash scripts/build-fio-engine.sh --print-path 2>"$OUT_DIR/build-engine.log") ||
  { tail_file "$OUT_DIR/build-engine.log"; die "building the fio engine failed"; }

declare -A PID=()
GUEST_PID='' TAIL_PID='' HOST_FIO_PID=''
cleanup() {
  local rc=$? name
  trap - EXIT INT TERM
  [ -n "$GUEST_PID" ] && { stop_pid "$GUEST_PID" linux-nvme-peer 10 TERM >/dev/null 2>&1 || true; }
  [ -n "$HOST_FIO_PID" ] && { stop_pid "$HOST_FIO_PID" fio 10 TERM >/dev/null 2>&1 || true; }
  [ -n "$TSHARK_PID" ] && stop_pid "$TSHARK_PID" tshark 10 TERM >/dev/null 2>&1
  for name in "${!PID[@]}"; do
    [ -n "${PID[$name]}" ] && { stop_pid "${PID[$name]}" "gateway $name" 20 TERM >/dev/null 2>&1 || true; }
  done
  rbd -c "$CEPH_CONF" rm --no-progress "$IMAGE" >/dev/null 2>&1 || true
  rados -c "$CEPH_CONF" -p rbd rm sluice.gateway.ha >/dev/null 2>&1 || true
  exit "$rc"
}
trap cleanup EXIT
trap 'log "interrupted"; exit 130' INT TERM

HOST_OK=0 HOST_FAILED=()
host_ok() { HOST_OK=$((HOST_OK + 1)); echo "CHECK host-$1: ok${2:+ ($2)}"; }
host_fail() { HOST_FAILED+=("host-$1"); echo "CHECK host-$1: FAIL${2:+ ($2)}"; }

# start_gateway NAME CONFIG PORT: sluice serve, ready once its port listens
start_gateway() {
  local name=$1 config=$2 port=$3
  "$SLUICE" config check "$config" >"$OUT_DIR/config-check-$name.txt" 2>&1 ||
    { tail_file "$OUT_DIR/config-check-$name.txt"; die "sluice config check rejected $config"; }
  NO_COLOR=1 SLUICE_LOG=${SLUICE_LOG:-info} "$SLUICE" serve --config "$config" --rpc-socket "$OUT_DIR/$name.sock" \
    >>"$OUT_DIR/$name.stdout" 2>>"$OUT_DIR/$name.log" </dev/null &
  PID[$name]=$!
  _up() { kill -0 "${PID[$name]}" 2>/dev/null || return 2; port_listening "$port"; }
  wait_for 60 "gateway $name to listen on $port" _up ||
    { tail_file "$OUT_DIR/$name.log"; die "gateway $name did not come up"; }
  log "gateway $name (pid ${PID[$name]}) serves 127.0.0.1:$port"
}

# ana_state PORT: the state of ANA group 1 at PORT as Sluice's host reads it
ana_state() {
  "$SLUICE" ana-log -t tcp -a 127.0.0.1 -s "$1" -n "$NQN" -o json --timeout 3000 2>/dev/null |
    python3 -c 'import json, sys; d = json.load(sys.stdin); print(next(g["state"] for g in d["ana_log"] if g["grpid"] == 1))' \
    2>/dev/null || true
}
state_is() { [ "$(ana_state "$1")" = "$2" ]; }

log "gateways a and b from the unedited examples; cluster $CEPH_CONF; artifacts: $OUT_DIR"
start_gateway a "$CONFIG_A" $PORT_A
start_gateway b "$CONFIG_B" $PORT_B
if wait_for 30 "gateway a to report group 1 optimized" state_is $PORT_A optimized &&
    wait_for 30 "gateway b to report group 1 non-optimized" state_is $PORT_B non-optimized; then
  host_ok ana-log-both-paths "Sluice's host: a optimized, b non-optimized"
else
  host_fail ana-log-both-paths "a '$(ana_state $PORT_A)', b '$(ana_state $PORT_B)'"
fi
"$SLUICE" gateway status --socket "$OUT_DIR/b.sock" >"$OUT_DIR/status-1.txt" 2>&1 || true
cat "$OUT_DIR/status-1.txt"

capture_start "$OUT_DIR/capture.pcap" "$OUT_DIR/tshark-capture.log" $PORT_B || die "tshark could not start capturing on lo"

guest_env="PORT_A=$PORT_A PORT_B=$PORT_B NQN=$NQN FIO_SECONDS=${FIO_SECONDS:-45}"
log "booting the Linux host guest (timeout ${GUEST_TIMEOUT}s; output: guest.log, details: guest/)"
t_guest=$SECONDS
TMPDIR=$OUT_DIR/peer "$LNP" initiator --keep --timeout "$GUEST_TIMEOUT" --target-port $PORT_A \
  --share "$SHARE" --add "$GUEST_SCRIPT:/root/gateway-guest.sh" --add "$REPO/tests/interop/guest/checks.sh:/root/checks.sh" \
  -- "$guest_env sh /root/gateway-guest.sh" </dev/null >"$OUT_DIR/guest.log" 2>&1 &
GUEST_PID=$!
tail -n +1 -f "$OUT_DIR/guest.log" --pid "$GUEST_PID" &
TAIL_PID=$!
guest_alive() { kill -0 "$GUEST_PID" 2>/dev/null || return 2; }
wait_marker() {
  _marker_there() { [ -e "$SHARE/$1" ] || { guest_alive || return 2; return 1; }; }
  wait_for "$1" "the guest's $2" _marker_there "$2"
}

# Sluice's multipath host: 4 KiB random writes verified as they go (every 256
# writes are read back), 25 s, a region of the image the guest does not use.
start_host_fio() {
  log "Sluice's multipath host: fio with the Sluice engine on 127.0.0.1:$PORT_A,127.0.0.1:$PORT_B"
  (cd "$OUT_DIR" && timeout --kill-after=10 120 fio --name=multipath --ioengine=external:"$ENGINE" \
    --traddr="127.0.0.1:$PORT_A,127.0.0.1:$PORT_B" --subnqn="$NQN" --nsid=1 --thread=1 \
    --rw=randwrite --bs=4k --size=32m --offset=512m --iodepth=8 --verify=crc32c --verify_backlog=256 \
    --verify_fatal=1 --time_based=1 --runtime=25 --output-format=json --output=host-multipath.json) \
    >"$OUT_DIR/host-multipath.log" 2>&1 &
  HOST_FIO_PID=$!
}

# check_host_fio: the multipath fio run ended with status 0, no job error, and
# verified reads after the kill
check_host_fio() {
  local rc=0 summary
  wait "$HOST_FIO_PID" || rc=$?
  HOST_FIO_PID=''
  summary=$(python3 - "$OUT_DIR/host-multipath.json" <<'PY' 2>&1
import json, sys
text = open(sys.argv[1]).read()
job = json.loads(text[text.index("{"):])["jobs"][0]
print(f"error={job['error']} writes={job['write']['total_ios']} verified_reads={job['read']['total_ios']} "
      f"longest_write_ms={job['write']['clat_ns']['max'] / 1e6:.0f}")
PY
  ) || summary="no fio result: $summary"
  if [ "$rc" -eq 0 ] && [[ $summary == error=0\ * ]] && [[ $summary != *verified_reads=0\ * ]]; then
    host_ok multipath-failover "fio through Sluice's multipath host across the SIGKILL: $summary"
  else
    tail_file "$OUT_DIR/host-multipath.log"
    host_fail multipath-failover "fio status $rc: $summary"
  fi
}

TAKEOVER_S=''
if wait_marker 400 fio.started; then
  start_host_fio
  sleep 5
  log "SIGKILL gateway a (pid ${PID[a]}) while the guest's fio runs"
  t_kill=$(date +%s.%N)
  kill -KILL "${PID[a]}"
  wait "${PID[a]}" 2>/dev/null || true
  PID[a]=''
  if wait_for 30 "gateway b to take group 1" state_is $PORT_B optimized; then
    TAKEOVER_S=$(python3 -c "import sys, time; print(f'{time.time() - float(sys.argv[1]):.1f}')" "$t_kill")
    host_ok takeover "b reports group 1 optimized ${TAKEOVER_S} s after a was killed (lease 6000 ms)"
  else
    host_fail takeover "b reports '$(ana_state $PORT_B)'"
  fi
  if grep -q "fenced the previous owner" "$OUT_DIR/b.log"; then
    host_ok fenced "b blocklisted a before serving its group"
  else
    host_fail fenced "no fencing line in b.log"
  fi
  check_host_fio
  if wait_marker 300 fio.done; then
    log "restarting gateway a from $CONFIG_A"
    start_gateway a "$CONFIG_A" $PORT_A
    if wait_for 40 "a to get group 1 back" state_is $PORT_A optimized && state_is $PORT_B non-optimized; then
      host_ok failback "a optimized again, b non-optimized"
    else
      host_fail failback "a '$(ana_state $PORT_A)', b '$(ana_state $PORT_B)'"
    fi
    "$SLUICE" gateway status --socket "$OUT_DIR/a.sock" >"$OUT_DIR/status-2.txt" 2>&1 || true
    cat "$OUT_DIR/status-2.txt"
    if grep -q "^a .* held (this gateway)" "$OUT_DIR/status-2.txt" && grep -q "^b .* held" "$OUT_DIR/status-2.txt"; then
      host_ok rejoined "gateway status: both members hold their leases"
    else
      host_fail rejoined "$(tr '\n' ' ' <"$OUT_DIR/status-2.txt" | head -c 300)"
    fi
    : >"$SHARE/a.restarted"
  fi
else
  host_fail takeover "the guest never started fio"
fi

guest_rc=0
wait "$GUEST_PID" || guest_rc=$?
GUEST_PID=''
wait "$TAIL_PID" 2>/dev/null || true
log "guest finished with status $guest_rc after $((SECONDS - t_guest))s"

failures=()
case $guest_rc in
  0) ;;
  124) failures+=("guest run timed out after ${GUEST_TIMEOUT}s") ;;
  125) failures+=("linux-nvme-peer harness/boot error (status 125; see guest.log and peer/)") ;;
  *) failures+=("guest checks failed (status $guest_rc)") ;;
esac
[ ${#HOST_FAILED[@]} -eq 0 ] || failures+=("${#HOST_FAILED[@]} check(s) on this machine failed: ${HOST_FAILED[*]}")
for name in a b; do
  [ -n "${PID[$name]}" ] || continue
  if stop_pid "${PID[$name]}" "gateway $name" 20 TERM && [ "$STOP_RC" -eq 0 ]; then :; else
    failures+=("gateway $name did not exit cleanly on SIGTERM (status $STOP_RC)")
  fi
  PID[$name]=''
  grep -q 'panicked at' "$OUT_DIR/$name.log" && failures+=("gateway $name panicked (see $name.log)")
done
capture_stop "$OUT_DIR/tshark-capture.log"
capture_check "$OUT_DIR/capture.pcap" "$OUT_DIR/tshark-summary.txt" 0 $PORT_B ||
  failures+=("capture check failed (see tshark-summary.txt)")

worst=$(cat "$SHARE/worst-clat-us" 2>/dev/null || echo '?')
{
  echo "takeover_seconds=${TAKEOVER_S:-?}"
  echo "longest_io_completion_us=$worst"
} >"$OUT_DIR/failover.txt"
finish_with_verdict gateway ", takeover ${TAKEOVER_S:-?} s, longest I/O ${worst} us" "guest.log, a.log, b.log, failover.txt"
