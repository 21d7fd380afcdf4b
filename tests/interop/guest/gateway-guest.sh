#!/bin/sh
# shellcheck shell=dash
# Guest half of tests/interop/gateway.sh. Runs inside the linux-nvme-peer guest
# (busybox ash, Linux 6.1 nvme-tcp with native multipath, nvme-cli 2.3, fio 3.33) and
# drives two `sluice serve` gateways of one gateway group on the host (10.0.2.2).
#   1. connect to both gateways: one subsystem, one namespace head, two live paths,
#      one optimized (gateway a, port PORT_A) and one non-optimized (b);
#   2. fio write + verify rounds on the multipath device, for FIO_SECONDS; the host
#      SIGKILLs gateway a during them (marker fio.started) and every round must end
#      without an error; the longest completion latency of a round is the stall the
#      application saw during the failover;
#   3. after the rounds: the path through b is optimized;
#   4. the host restarts a ($LOGDIR/a.restarted): its path comes back live and
#      optimized (failback), b non-optimized; one more fio verify round;
#   5. disconnect; a kernel log without nvme errors besides the killed path's.

ADDR=${LNP_TARGET_ADDR:-10.0.2.2}
PORT_A=${PORT_A:?PORT_A is not set}
PORT_B=${PORT_B:?PORT_B is not set}
NQN=${NQN:?NQN is not set}
FIO_SECONDS=${FIO_SECONDS:-45}
# How long to wait for the host to act on a marker.
HOST_WAIT_S=180

if [ -d /host ] && : 2>/dev/null >/host/.writable; then LOGDIR=/host; rm -f /host/.writable
else LOGDIR=/tmp/gateway; mkdir -p "$LOGDIR"; fi

# shellcheck source=tests/interop/guest/checks.sh
. /root/checks.sh

wait_until() {
  local limit=$(( $1 * 10 )) i=0
  shift
  while ! "$@"; do
    i=$((i + 1)); [ $i -ge $limit ] && return 1
    usleep 100000
  done
}

# path_state PORT: "live optimized", "live non-optimized", "connecting ..." of the
# controller connected through PORT ("" when none)
path_state() {
  local ctrl
  for ctrl in /sys/class/nvme/nvme*; do
    [ -e "$ctrl/address" ] || continue
    grep -q "trsvcid=$1" "$ctrl/address" || continue
    [ "$(cat "$ctrl/subsysnqn")" = "$NQN" ] || continue
    state=$(cat "$ctrl/state")
    # The ANA state of the namespace on this path (nvmeXcYnZ/ana_state).
    ana=$(cat "$ctrl"/nvme*c*n*/ana_state 2>/dev/null | head -n 1)
    echo "$state${ana:+ $ana}"
    return 0
  done
}
path_is() { [ "$(path_state "$1")" = "$2" ]; }

section "modules and multipath"
modprobe nvme-tcp 2>/dev/null
multipath=$(cat /sys/module/nvme_core/parameters/multipath 2>/dev/null)
if [ "$multipath" = Y ]; then ok native-multipath; else fail native-multipath "nvme_core.multipath=$multipath"; fi

section "connect both gateways"
run connect-a 60 nvme connect -t tcp -a "$ADDR" -s "$PORT_A" -n "$NQN"
run connect-b 60 nvme connect -t tcp -a "$ADDR" -s "$PORT_B" -n "$NQN"
wait_until 20 path_is "$PORT_A" "live optimized"
wait_until 20 path_is "$PORT_B" "live non-optimized"
# The multipath head: nvmeXnY with no controller letter.
DEV=''
for block in /sys/block/nvme*n*; do
  name=${block##*/}
  case $name in *c*) continue ;; esac
  [ -e "$block/device" ] || [ -e "$block/holders" ] || continue
  DEV=/dev/$name
done
if [ -b "$DEV" ]; then ok multipath-device "$DEV"; else fail multipath-device "no nvmeXnY head"; fi

# With a namespace device, list-subsys prints each path's ANA state.
nvme list-subsys "$DEV" >"$LOGDIR/list-subsys-1.txt" 2>&1
cat "$LOGDIR/list-subsys-1.txt"
subsystems=$(grep -c "nqn=$NQN\|NQN=$NQN" "$LOGDIR/list-subsys-1.txt")
paths_ok=$(grep -c "live optimized\|live non-optimized" "$LOGDIR/list-subsys-1.txt")
if [ "$subsystems" -eq 1 ] && grep -q "trsvcid=$PORT_A.* live optimized" "$LOGDIR/list-subsys-1.txt" &&
    grep -q "trsvcid=$PORT_B.* live non-optimized" "$LOGDIR/list-subsys-1.txt"; then
  ok list-subsys "one subsystem, $paths_ok live paths: $PORT_A optimized, $PORT_B non-optimized"
else
  fail list-subsys "subsystems: $subsystems; paths: a '$(path_state "$PORT_A")', b '$(path_state "$PORT_B")'"
fi

section "fio rounds while the host kills gateway a"
: >"$LOGDIR/fio.started"
round=0 errors=0 worst_us=0
end=$(( $(date +%s) + FIO_SECONDS ))
while [ "$(date +%s)" -lt "$end" ] && [ -b "$DEV" ]; do
  round=$((round + 1))
  out=$LOGDIR/fio-round-$round.txt
  timeout 120 fio --name=failover --filename="$DEV" --ioengine=libaio --direct=1 --rw=randwrite --bs=4k \
    --size=8m --offset=$(( (round % 8) * 8 ))m --iodepth=4 --verify=crc32c --do_verify=1 --verify_fatal=1 \
    --output-format=terse --terse-version=3 >"$out" 2>&1
  rc=$?
  # terse v3: field 5 is the job's error, 15 and 56 the read (verify) and write
  # completion latency maxima in microseconds.
  job_error=$(awk -F';' 'NF > 56 { print $5 }' "$out" | tail -n 1)
  if [ $rc -ne 0 ] || [ "${job_error:-1}" != 0 ]; then
    errors=$((errors + 1)); echo "round $round: fio status $rc, error ${job_error:-none reported}"; show_tail "$out"
  fi
  max_us=$(awk -F';' 'NF > 56 { m = $56 + 0; if ($15 + 0 > m) m = $15 + 0; print m }' "$out" | tail -n 1)
  [ "${max_us:-0}" -gt "$worst_us" ] && worst_us=$max_us
done
: >"$LOGDIR/fio.done"
if [ $errors -eq 0 ] && [ $round -gt 1 ]; then
  ok fio-across-failover "$round write+verify rounds, 0 errors, longest completion $((worst_us / 1000)) ms"
else
  fail fio-across-failover "$errors of $round rounds failed"
fi
echo "$worst_us" >"$LOGDIR/worst-clat-us"
if wait_until 30 path_is "$PORT_B" "live optimized"; then ok b-optimized "after a was killed"
else fail b-optimized "b's path is '$(path_state "$PORT_B")'"; fi
nvme list-subsys "$DEV" >"$LOGDIR/list-subsys-2.txt" 2>&1; cat "$LOGDIR/list-subsys-2.txt"

section "gateway a restarted: it rejoins and gets its group back"
if wait_until "$HOST_WAIT_S" test -e "$LOGDIR/a.restarted"; then
  # The kernel reconnects every 10 s (reconnect_delay) until ctrl_loss_tmo.
  if wait_until 60 path_is "$PORT_A" "live optimized" && wait_until 20 path_is "$PORT_B" "live non-optimized"; then
    ok failback "a live optimized, b live non-optimized"
  else
    fail failback "a '$(path_state "$PORT_A")', b '$(path_state "$PORT_B")'"
  fi
  run fio-after-failback 180 fio --name=failback --filename="$DEV" --ioengine=libaio --direct=1 --rw=randwrite \
    --bs=16k --size=16m --iodepth=8 --verify=crc32c --do_verify=1 --verify_fatal=1
else
  fail failback "the host never restarted gateway a"
fi
nvme list-subsys "$DEV" >"$LOGDIR/list-subsys-3.txt" 2>&1; cat "$LOGDIR/list-subsys-3.txt"

section "disconnect"
run disconnect 60 nvme disconnect -n "$NQN"
dmesg >"$LOGDIR/dmesg.txt" 2>&1
# The killed gateway's path logs its reconnect attempts; anything else nvme-related
# that is an error is a finding.
bad=$(grep -i "nvme" "$LOGDIR/dmesg.txt" | grep -i "error\|fail\|warn\|bug" |
  grep -v "could not connect\|failed to connect\|reconnect\|Reconnecting\|I/O Cmd\|starting error recovery\|ANA" | head -n 5)
if [ -z "$bad" ]; then ok kernel-log; else fail kernel-log "$(echo "$bad" | head -n 2 | tr '\n' ' ')"; fi

echo
echo "guest checks: $passed ok, $failed failed${failed_names:+:$failed_names}"
[ "$failed" -eq 0 ]
