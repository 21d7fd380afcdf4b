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
# Persistent reservations, one state across the group (the issue's acceptance):
# host A is the Linux host in the guest (nvme-cli on the multipath device, both
# paths), host B Sluice's CLI with its own host NQN and Host Identifier. A registers
# and takes Write Exclusive through a (the guest, before its fio rounds, so its own
# writes are the holder's); B's `resv-report` through b shows A as holder (A's Host
# Identifier, which the guest hands over in the share) and B's write through b gets
# Reservation Conflict; the same right after the takeover; the guest, through b
# alone, still holds it and writes; B registers and preempts A through b; the
# guest's next write fails with Reservation Conflict and b's controller has the
# Reservation Notification log; a, restarted, reports B as holder and B clears the
# reservation through it before the failback round. Sluice's own multipath fio host
# writes during the SIGKILL too: it connects with the guest's host NQN (a UUID NQN,
# so the guest's Host Identifier), i.e. as another controller of host A. Each CLI
# command's wall time (connect, command, disconnect) goes to resv-commands.txt.
# The reservation objects (rados rbd/sluice.reservations.ha.*) are removed before
# and after the run.
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
# The image of the namespace added through gateway a's management API.
IMAGE_2=rbd/ha-demo-2
# Host B, Sluice's CLI: an identity of its own, unlike the guest's (and this
# machine's /etc/nvme). KEY_A is the key the guest registers.
HOSTNQN_B=nqn.2026-11.io.sluice:interop-host-b
HOSTID_B=0b0b0b0b-5e51-4c1e-8b0b-00000000000b
KEY_A=0xa1 KEY_B=0xb2

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

# remove_group_state: the group's configuration in the cluster (gateway-a.toml seeds
# it), the second namespace's image, and the reservation records (one per namespace)
remove_group_state() {
  rados -c "$CEPH_CONF" -p rbd rm sluice.config.ha >/dev/null 2>&1 || true
  rbd -c "$CEPH_CONF" rm --no-progress "$IMAGE_2" >/dev/null 2>&1 || true
  remove_reservation_objects
}
remove_reservation_objects() {
  local object
  { rados -c "$CEPH_CONF" -p rbd ls 2>/dev/null || true; } | { grep '^sluice\.reservations\.ha\.' || true; } |
    while read -r object; do
      log "removing the reservation record rbd/$object"
      rados -c "$CEPH_CONF" -p rbd rm "$object" || true
    done
}

rm -rf "$OUT_DIR"
mkdir -p "$SHARE" "$OUT_DIR/peer"
use_sluice_binary
remove_group_state

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
  for name in "${RESTARTED[@]}"; do
    [ -e "$OUT_DIR/exit-$name" ] || stop_restarted "$name" >/dev/null 2>&1 || true
  done
  rbd -c "$CEPH_CONF" rm --no-progress "$IMAGE" >/dev/null 2>&1 || true
  rados -c "$CEPH_CONF" -p rbd rm sluice.gateway.ha >/dev/null 2>&1 || true
  remove_group_state >/dev/null 2>&1 || true
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
  echo "${PID[$name]}" >"$OUT_DIR/pid-$name"
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

# host_b STEP PORT SUBCOMMAND ARGS...: Sluice's CLI as host B through the gateway at
# PORT; its output in resv-STEP.txt, one line (step, port, status, wall time of the
# whole command in ms, command) in resv-commands.txt. Sets B_RC and B_OUT (stdout
# and stderr).
host_b() {
  local step=$1 port=$2 t0 ms
  shift 2
  t0=$(date +%s%N)
  B_RC=0
  "$SLUICE" "$@" --traddr 127.0.0.1 --trsvcid "$port" --nqn "$NQN" --hostnqn "$HOSTNQN_B" --hostid "$HOSTID_B" \
    --timeout 10000 >"$OUT_DIR/resv-$step.txt" 2>&1 || B_RC=$?
  ms=$(( ($(date +%s%N) - t0) / 1000000 ))
  B_OUT=$(cat "$OUT_DIR/resv-$step.txt")
  printf '%-22s %-5s %-3s %6s ms  sluice %s\n' "$step" "$port" "$B_RC" "$ms" "$*" >>"$OUT_DIR/resv-commands.txt"
  log "host B: sluice $1 through :$port: status $B_RC, ${ms} ms"
}

# holder_is STEP PORT HOSTID KEY: host B's resv-report through PORT shows Write
# Exclusive held by HOSTID (a UUID) with KEY; HOLDER_SEEN says what it showed. The
# report has one entry per registered controller (CNTLID FFFFh for a registered
# host with no controller on that gateway), so a host with two controllers there
# (the guest and Sluice's fio host, both host A) is listed twice: hosts are
# compared, each with its number of entries.
holder_is() {
  host_b "$1" "$2" resv-report --output-format json
  HOLDER_SEEN=$(python3 -c '
import collections, json, sys
d = json.loads(sys.stdin.read())
def hosts(entries):
    count = collections.Counter("%s/%x" % (r["hostid"], r["rkey"]) for r in entries)
    return ",".join(h + ("(x%d)" % n if n > 1 else "") for h, n in sorted(count.items())) or "none"
entries = d.get("regctlext", [])
print("rtype=%d regctl=%d holder=%s registrants=%s" % (d["rtype"], d["regctl"],
      hosts([r for r in entries if r["rcsts"] & 1]), hosts(entries)))' \
    <<<"$B_OUT" 2>/dev/null) || HOLDER_SEEN="no report (status $B_RC): $(head -c 200 <<<"$B_OUT")"
  [[ $HOLDER_SEEN =~ ^rtype=1\ .*\ holder=${3//-/}/${4#0x}(\(x[0-9]+\))?\ registrants= ]]
}

# b_write_conflicts STEP PORT: host B's 4 KiB write through PORT is refused with
# Reservation Conflict
b_write_conflicts() {
  host_b "$1" "$2" write --start-block 0 --data-size 4096 --data "$OUT_DIR/host-b-block.bin"
  [ "$B_RC" = 1 ] && [[ $B_OUT == *"Reservation Conflict"* ]]
}
head -c 4096 /dev/urandom >"$OUT_DIR/host-b-block.bin"

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
    --traddr="127.0.0.1:$PORT_A,127.0.0.1:$PORT_B" --subnqn="$NQN" --nsid=1 --thread=1 ${GUEST_HOSTNQN:+--hostnqn="$GUEST_HOSTNQN"} \
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

# ns_listed SOCKET: the gateway at SOCKET lists namespace 2 of the subsystem
ns_listed() {
  "$SLUICE" ns list "$NQN" -o json --socket "$1" 2>/dev/null |
    python3 -c 'import json, sys; sys.exit(0 if any(n["nsid"] == 2 for n in json.load(sys.stdin)["namespaces"]) else 1)'
}
ns_unlisted() { ! ns_listed "$1"; }

# group_configuration_change: a namespace added through gateway a's management API
# (on a new image) reaches gateway b through the group's configuration in the
# cluster, and the guest sees it through both paths and verifies data on it; then it
# is removed through b.
group_configuration_change() {
  wait_marker "$HOST_WAIT" ns2.wanted || { host_fail ns-add "the guest never asked for the namespace"; return; }
  local t0 delay_ms
  t0=$(date +%s%N)
  if "$SLUICE" ns add "$NQN" --rbd "$IMAGE_2" --size 64MiB -N 2 --socket "$OUT_DIR/a.sock" >"$OUT_DIR/ns-add.txt" 2>&1 &&
      wait_for 10 "gateway b to list namespace 2" ns_listed "$OUT_DIR/b.sock"; then
    delay_ms=$(( ($(date +%s%N) - t0) / 1000000 ))
    host_ok ns-add "namespace 2 on $IMAGE_2 added through a, listed by b ${delay_ms} ms after the call started"
  else
    tail_file "$OUT_DIR/ns-add.txt"
    host_fail ns-add "not added through a, or b never listed it"
  fi
  "$SLUICE" gateway status --socket "$OUT_DIR/b.sock" >"$OUT_DIR/status-3.txt" 2>&1 || true
  if grep -q "group configuration: cluster, version" "$OUT_DIR/status-3.txt"; then
    host_ok group-config-version "b: $(grep 'group configuration' "$OUT_DIR/status-3.txt")"
  else
    host_fail group-config-version "$(tr '\n' ' ' <"$OUT_DIR/status-3.txt" | head -c 300)"
  fi
  : >"$SHARE/ns2.added"
  wait_marker "$HOST_WAIT" ns2.verified || true
  if "$SLUICE" ns remove "$NQN" 2 --socket "$OUT_DIR/b.sock" >"$OUT_DIR/ns-remove.txt" 2>&1 &&
      wait_for 10 "gateway a to drop namespace 2" ns_unlisted "$OUT_DIR/a.sock"; then
    host_ok ns-remove "namespace 2 removed through b, gone from a"
  else
    tail_file "$OUT_DIR/ns-remove.txt"
    host_fail ns-remove "not removed through b, or a still lists it"
  fi
  : >"$SHARE/ns2.removed"
}
HOST_WAIT=200

# rolling_restart: scripts/rolling-restart.sh restarts a then b (SIGTERM, start
# again) while the guest runs fio with verification on the multipath device. The
# restarted gateways are not this shell's children: each runs under a wrapper
# (tests/interop/tools/start-gateway.sh) that records its pid and, once it exits,
# its status.
RESTARTED=()
rolling_restart() {
  wait_marker "$HOST_WAIT" rolling.ready || { host_fail rolling-restart "the guest never started its fio run"; return; }
  sleep 3
  local old_a=${PID[a]} old_b=${PID[b]} rc=0 status_a=0 status_b=0 starter
  starter="$REPO/tests/interop/tools/start-gateway.sh $SLUICE $OUT_DIR %n"
  log "rolling restart of a then b (scripts/rolling-restart.sh; log: rolling-restart.log)"
  CONFIG_a=$CONFIG_A CONFIG_b=$CONFIG_B PORT_a=$PORT_A PORT_b=$PORT_B SLUICE=$SLUICE STEP_TIMEOUT=60 \
    bash "$REPO/scripts/rolling-restart.sh" --stop "kill -TERM \$(cat $OUT_DIR/pid-%n)" \
    --start "$starter" --socket "$OUT_DIR/%n.sock" a b >"$OUT_DIR/rolling-restart.log" 2>&1 || rc=$?
  cat "$OUT_DIR/rolling-restart.log"
  wait "$old_a" 2>/dev/null || status_a=$?
  wait "$old_b" 2>/dev/null || status_b=$?
  PID[a]='' PID[b]=''
  RESTARTED=(a b)
  if [ "$rc" = 0 ] && [ "$status_a" = 0 ] && [ "$status_b" = 0 ]; then
    host_ok rolling-restart "$(grep -c 'is back with its hosts' "$OUT_DIR/rolling-restart.log") gateways restarted in turn, each exited 0 on SIGTERM"
  else
    host_fail rolling-restart "script status $rc, a exited $status_a, b exited $status_b"
  fi
  : >"$SHARE/rolling.done"
}

# stop_restarted NAME: SIGTERM to a gateway rolling_restart started; its exit status
# (from its wrapper) in STOP_RC
stop_restarted() {
  local pid deadline=$((SECONDS + 20))
  pid=$(cat "$OUT_DIR/pid-$1" 2>/dev/null) || { STOP_RC=1; return 1; }
  kill -TERM "$pid" 2>/dev/null || true
  while [ ! -e "$OUT_DIR/exit-$1" ]; do
    [ $SECONDS -ge $deadline ] && { kill -KILL "$pid" 2>/dev/null || true; STOP_RC=137; return 1; }
    sleep 0.1
  done
  STOP_RC=$(cat "$OUT_DIR/exit-$1")
}

# The guest (host A) took Write Exclusive through a: host B sees it through b and
# cannot write. The guest's host NQN is what Sluice's fio host connects with.
GUEST_HOSTID='' GUEST_HOSTNQN=''
if wait_marker 400 resv.taken; then
  GUEST_HOSTID=$(cat "$SHARE/hostid" 2>/dev/null || true)
  GUEST_HOSTNQN=$(cat "$SHARE/hostnqn" 2>/dev/null || true)
  log "the guest (host A): host identifier '$GUEST_HOSTID', host NQN '$GUEST_HOSTNQN'"
  if holder_is report-b-1 $PORT_B "$GUEST_HOSTID" $KEY_A; then
    host_ok resv-report-b "through b: $HOLDER_SEEN"
  else
    host_fail resv-report-b "through b: $HOLDER_SEEN"
  fi
  if b_write_conflicts write-b-1 $PORT_B; then
    host_ok resv-conflict-b "host B's write through b: $(tail -n 1 <<<"$B_OUT")"
  else
    host_fail resv-conflict-b "status $B_RC: $(tail -n 1 <<<"$B_OUT")"
  fi
else
  host_fail resv-report-b "the guest never took the reservation"
fi

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
  if holder_is report-b-2 $PORT_B "$GUEST_HOSTID" $KEY_A && b_write_conflicts write-b-2 $PORT_B; then
    host_ok resv-after-takeover "through b, a dead: $HOLDER_SEEN; host B's write refused"
  else
    host_fail resv-after-takeover "through b: $HOLDER_SEEN; host B's write: status $B_RC: $(tail -n 1 <<<"$B_OUT")"
  fi
  check_host_fio
  if wait_marker 300 fio.done && wait_marker 120 resv.failover; then
    # Host B preempts the guest through b (a still dead): it registers, then
    # acquires Write Exclusive preempting the guest's key.
    host_b register-b $PORT_B resv-register --nrkey $KEY_B --rrega 0
    rc_register=$B_RC
    host_b preempt-b $PORT_B resv-acquire --crkey $KEY_B --prkey $KEY_A --rtype 1 --racqa 1
    if [ "$rc_register" = 0 ] && [ "$B_RC" = 0 ] && holder_is report-b-3 $PORT_B "$HOSTID_B" $KEY_B &&
        [[ $HOLDER_SEEN != *"${GUEST_HOSTID//-/}"* ]]; then
      host_ok resv-preempt-b "host B registered and preempted through b: $HOLDER_SEEN"
    else
      host_fail resv-preempt-b "register status $rc_register, preempt status $B_RC: $HOLDER_SEEN"
    fi
    : >"$SHARE/resv.preempted"
    wait_marker 180 resv.conflict || true
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
    # a was dead when B preempted: restarted, it enforces the group's state.
    held=0
    holder_is report-a-restarted $PORT_A "$HOSTID_B" $KEY_B || held=$?
    host_b write-a-holder $PORT_A write --start-block 0 --data-size 4096 --data "$OUT_DIR/host-b-block.bin"
    if [ "$held" = 0 ] && [ "$B_RC" = 0 ]; then
      host_ok resv-restarted-a "through the restarted a: $HOLDER_SEEN; the holder B writes through it"
    else
      host_fail resv-restarted-a "through a: $HOLDER_SEEN; B's write: status $B_RC $(tail -n 1 <<<"$B_OUT")"
    fi
    # Clean up for the failback round (and the next run): B clears through a.
    host_b clear-a $PORT_A resv-release --crkey $KEY_B --rtype 1 --rrela 1
    if [ "$B_RC" = 0 ] && host_b report-b-4 $PORT_B resv-report --output-format json &&
        [[ $(tr -d ' \n' <<<"$B_OUT") == *'"rtype":0,"regctl":0'* ]]; then
      host_ok resv-cleared "host B cleared the reservation through a; b reports no registrant"
    else
      host_fail resv-cleared "clear status $B_RC; b reports: $(head -c 200 <<<"$B_OUT")"
    fi
    : >"$SHARE/a.restarted"
    group_configuration_change
    rolling_restart
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
for name in "${RESTARTED[@]}"; do
  if stop_restarted "$name" && [ "$STOP_RC" = 0 ]; then :; else
    failures+=("restarted gateway $name did not exit cleanly on SIGTERM (status $STOP_RC)")
  fi
  grep -q 'panicked at' "$OUT_DIR/$name.log" && failures+=("gateway $name panicked (see $name.log)")
done
RESTARTED=()
capture_stop "$OUT_DIR/tshark-capture.log"
capture_check "$OUT_DIR/capture.pcap" "$OUT_DIR/tshark-summary.txt" 0 $PORT_B ||
  failures+=("capture check failed (see tshark-summary.txt)")

worst=$(cat "$SHARE/worst-clat-us" 2>/dev/null || echo '?')
{
  echo "takeover_seconds=${TAKEOVER_S:-?}"
  echo "longest_io_completion_us=$worst"
  # host B's CLI commands (step, port, status, wall ms incl. connect, command)
  sed 's/^/resv_command: /' "$OUT_DIR/resv-commands.txt" 2>/dev/null || true
} >"$OUT_DIR/failover.txt"
log "host B's reservation commands (step, port, status, wall time incl. connect and disconnect):"
sed 's/^/  /' "$OUT_DIR/resv-commands.txt" 2>/dev/null || true
resv_ms=$(awk '{ print $4 }' "$OUT_DIR/resv-commands.txt" 2>/dev/null | sort -n | sed -n '1p;$p' | paste -sd- -)
finish_with_verdict gateway ", takeover ${TAKEOVER_S:-?} s, longest I/O ${worst} us, host B's reservation commands ${resv_ms:-?} ms" \
  "guest.log, a.log, b.log, failover.txt, resv-commands.txt"
