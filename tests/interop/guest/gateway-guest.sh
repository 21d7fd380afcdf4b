#!/bin/sh
# shellcheck shell=dash
# Guest half of tests/interop/gateway.sh. Runs inside the linux-nvme-peer guest
# (busybox ash, Linux 6.1 nvme-tcp with native multipath, nvme-cli 2.3, fio 3.33) and
# drives two `sluice serve` gateways of one gateway group on the host (10.0.2.2).
#   1. connect to both gateways: one subsystem, one namespace head, two live paths,
#      one optimized (gateway a, port PORT_A) and one non-optimized (b);
#   2. persistent reservation, host A (this guest): its Host Identifier (the one both
#      controllers connected with, /etc/nvme/hostid) and host NQN go to the share
#      (hostid, hostnqn); on the multipath device, whose commands go to the optimized
#      path a, `nvme resv-register` (key 0xa1) and `resv-acquire` Write Exclusive;
#      `resv-report --eds` shows it; marker resv.taken (the host then checks, as
#      host B with Sluice's CLI through b, that A holds it and B's write conflicts);
#   3. fio write + verify rounds on the multipath device, for FIO_SECONDS; the host
#      SIGKILLs gateway a during them (marker fio.started) and every round must end
#      without an error (the holder's writes, through a and then b); the longest
#      completion latency of a round is the stall the application saw during the
#      failover;
#   4. after the rounds: the path through b is optimized; through b alone the guest
#      still holds the reservation (resv-report) and a write succeeds (resv.failover);
#   5. host B preempts A through b (the host writes resv.preempted): the guest's next
#      write fails with Reservation Conflict (fio's errno text, nvme write's status),
#      b's controller has the Reservation Notification log (type 1, registration
#      preempted, nsid 1: nvme resv-notif-log) and resv-report shows B as holder
#      (resv.conflict);
#   6. the host restarts a, which must report B as holder, and B clears the
#      reservation through it ($LOGDIR/a.restarted): a's path comes back live and
#      optimized (failback), b non-optimized; one more fio verify round; resv-report
#      shows no registrant;
#   7. a namespace the host adds through gateway a's management API (the group's
#      configuration is in the cluster) appears through both paths, and a fio verify
#      round on it passes; the host removes it through b and it goes from both paths;
#   8. the host restarts a, then b (scripts/rolling-restart.sh) while a fio run with
#      verification writes: no error, both paths live again afterwards;
#   9. disconnect; a kernel log without nvme errors besides the killed path's and
#      the refused write's.

ADDR=${LNP_TARGET_ADDR:-10.0.2.2}
PORT_A=${PORT_A:?PORT_A is not set}
PORT_B=${PORT_B:?PORT_B is not set}
NQN=${NQN:?NQN is not set}
FIO_SECONDS=${FIO_SECONDS:-45}
# How long to wait for the host to act on a marker.
HOST_WAIT_S=180
# The reservation key of this host (A) and where its single writes go (900 MiB: no
# fio round of this script or of the host's writes there).
KEY_A=0xa1
RESV_OFFSET=900m

if [ -d /host ] && : 2>/dev/null >/host/.writable; then LOGDIR=/host; rm -f /host/.writable
else LOGDIR=/tmp/gateway; mkdir -p "$LOGDIR"; fi

# shellcheck source=tests/interop/guest/checks.sh
. /root/checks.sh

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

# ctrl_of PORT: the controller (nvmeX) connected to the subsystem through PORT
ctrl_of() {
  local ctrl
  for ctrl in /sys/class/nvme/nvme*; do
    [ -e "$ctrl/address" ] || continue
    grep -q "trsvcid=$1" "$ctrl/address" || continue
    [ "$(cat "$ctrl/subsysnqn")" = "$NQN" ] || continue
    echo "${ctrl##*/}"
    return 0
  done
}

# report_has FILE PATTERN...: the resv-report output FILE matches every (extended)
# regular expression
report_has() {
  local f=$1 pattern
  shift
  for pattern in "$@"; do grep -Eiq "$pattern" "$f" || return 1; done
}

# one_write NAME: a 4 KiB O_DIRECT write (fio, one I/O) to the multipath device at
# RESV_OFFSET, a region no fio round uses; its output in $LOGDIR/NAME.txt, fio's status
one_write() {
  timeout 120 fio --name="$1" --filename="$DEV" --ioengine=psync --direct=1 --rw=write --bs=4k --size=4k \
    --offset="$RESV_OFFSET" >"$LOGDIR/$1.txt" 2>&1
}

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

section "reservation: host A (this guest) takes Write Exclusive through gateway a"
HOSTID=$(cat /etc/nvme/hostid 2>/dev/null)
HOSTNQN=$(cat /etc/nvme/hostnqn 2>/dev/null)
CTRL_A=$(ctrl_of "$PORT_A") CTRL_B=$(ctrl_of "$PORT_B")
# The Host Identifier each controller connected with (Connect data HOSTID): what the
# gateways record for this host's registration.
sys_a=$(cat "/sys/class/nvme/$CTRL_A/hostid" 2>/dev/null) sys_b=$(cat "/sys/class/nvme/$CTRL_B/hostid" 2>/dev/null)
echo "host identifier: /etc/nvme/hostid '$HOSTID', $CTRL_A (a) '$sys_a', $CTRL_B (b) '$sys_b'; host NQN $HOSTNQN"
if [ -n "$HOSTID" ] && [ "$sys_a" = "$HOSTID" ] && [ "$sys_b" = "$HOSTID" ]; then
  ok host-identifier "$HOSTID on both paths"
else
  fail host-identifier "/etc/nvme/hostid '$HOSTID', path a '$sys_a', path b '$sys_b'"
fi
echo "$HOSTID" >"$LOGDIR/hostid"
echo "$HOSTNQN" >"$LOGDIR/hostnqn"
if path_is "$PORT_A" "live optimized" &&
    run resv-register-a 30 nvme resv-register "$DEV" --nrkey=$KEY_A --rrega=0 &&
    run resv-acquire-a 30 nvme resv-acquire "$DEV" --crkey=$KEY_A --rtype=1 --racqa=0 &&
    run resv-report-a 30 nvme resv-report "$DEV" --eds; then
  cat "$LOGDIR/resv-report-a.txt"
  if report_has "$LOGDIR/resv-report-a.txt" 'rtype *: *1' 'regctl *: *1' 'rkey *: *a1' "hostid *: *$(echo "$HOSTID" | tr -d -)"; then
    ok resv-holder-a "Write Exclusive held with key $KEY_A by $HOSTID"
  else
    fail resv-holder-a "unexpected report"
  fi
else
  fail resv-taken "path a '$(path_state "$PORT_A")', or a reservation command failed"
fi
: >"$LOGDIR/resv.taken"

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

section "reservation after the failover: through b alone, the guest still holds it"
if run resv-report-failover 30 nvme resv-report "$DEV" --eds &&
    report_has "$LOGDIR/resv-report-failover.txt" 'rtype *: *1' 'rkey *: *a1' "hostid *: *$(echo "$HOSTID" | tr -d -)"; then
  ok resv-holder-after-failover "Write Exclusive still held by this host, read through b"
else
  fail resv-holder-after-failover "unexpected report"; show_tail "$LOGDIR/resv-report-failover.txt"
fi
if one_write write-after-failover; then ok holder-write-after-failover "4 KiB at $RESV_OFFSET through b"
else fail holder-write-after-failover "fio failed"; show_tail "$LOGDIR/write-after-failover.txt"; fi
: >"$LOGDIR/resv.failover"

section "host B preempted this host through b: its writes fail with Reservation Conflict"
if wait_until "$HOST_WAIT_S" test -e "$LOGDIR/resv.preempted"; then
  # The block layer's answer to Reservation Conflict is BLK_STS_NEXUS, EBADE for
  # the application: fio names it "Invalid exchange".
  if one_write write-after-preempt; then
    fail write-refused "the write succeeded"
  else
    err=$(grep -m 1 "io_u error\|error=" "$LOGDIR/write-after-preempt.txt")
    echo "$err"
    if grep -q "Invalid exchange" "$LOGDIR/write-after-preempt.txt"; then ok write-refused "fio: ${err#fio: }"
    else fail write-refused "not EBADE (reservation conflict)"; show_tail "$LOGDIR/write-after-preempt.txt"; fi
  fi
  # The NVMe status itself, through the passthrough path (4 KiB at 900 MiB).
  lbs=$(cat "/sys/block/${DEV#/dev/}/queue/logical_block_size")
  head -c 4096 /dev/zero >/tmp/zero.4k
  timeout 60 nvme write "$DEV" --start-block=$((900 * 1024 * 1024 / lbs)) --block-count=$((4096 / lbs - 1)) \
    --data-size=4096 --data=/tmp/zero.4k \
    >"$LOGDIR/nvme-write-after-preempt.txt" 2>&1
  rc=$?
  cat "$LOGDIR/nvme-write-after-preempt.txt"
  if [ $rc -ne 0 ] && grep -qi "reservation.conflict" "$LOGDIR/nvme-write-after-preempt.txt"; then
    ok nvme-write-refused "$(grep -i -m 1 'reservation.conflict' "$LOGDIR/nvme-write-after-preempt.txt" | cut -c1-120)"
  else
    fail nvme-write-refused "nvme write exit $rc"
  fi
  CTRL_B=$(ctrl_of "$PORT_B")
  if run_quiet resv-notif-log-read 30 nvme resv-notif-log "/dev/$CTRL_B" -o json; then
    f=$LOGDIR/resv-notif-log-read.txt
    cat "$f"
    # nvme-cli 2.3's JSON: count (log page count), rn_log_type, num_logs, nsid
    lpc=$(sed -n 's/.*"count" *: *\([0-9]*\).*/\1/p' "$f" | head -n 1)
    lpt=$(sed -n 's/.*"rn_log_type" *: *\([0-9]*\).*/\1/p' "$f" | head -n 1)
    lnsid=$(sed -n 's/.*"nsid" *: *\([0-9]*\).*/\1/ip' "$f" | head -n 1)
    if [ "${lpc:-0}" -ge 1 ] && [ "$lpt" = 1 ] && [ "$lnsid" = 1 ]; then
      ok resv-notif-log "$CTRL_B (gateway b): log page count $lpc, type 1 (registration preempted), nsid 1"
    else
      fail resv-notif-log "count '$lpc', type '$lpt', nsid '$lnsid'"
    fi
  fi
  if run resv-report-preempted 30 nvme resv-report "$DEV" --eds; then
    cat "$LOGDIR/resv-report-preempted.txt"
    if report_has "$LOGDIR/resv-report-preempted.txt" 'rtype *: *1' 'regctl *: *1' 'rkey *: *b2' &&
        ! grep -Eqi "hostid *: *$(echo "$HOSTID" | tr -d -)" "$LOGDIR/resv-report-preempted.txt"; then
      ok resv-holder-b "Write Exclusive held by host B (key 0xb2); this host is no registrant"
    else
      fail resv-holder-b "unexpected report"
    fi
  fi
else
  fail write-refused "the host never preempted (no resv.preempted within ${HOST_WAIT_S}s)"
fi
: >"$LOGDIR/resv.conflict"

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
# Host B cleared the reservation before the host wrote a.restarted: nobody is
# registered (the next run of the test starts from that too).
if run resv-report-cleared 30 nvme resv-report "$DEV" --eds && report_has "$LOGDIR/resv-report-cleared.txt" 'regctl *: *0' 'rtype *: *0'; then
  ok resv-cleared "no registrant, no reservation"
else
  fail resv-cleared "unexpected report"; show_tail "$LOGDIR/resv-report-cleared.txt"
fi

section "a namespace added through gateway a's management API, served by both"
# The head is nvmeXn2 next to nvmeXn1; its paths are nvmeXcYn2, one per controller.
SUBSYS=${DEV#/dev/}; SUBSYS=${SUBSYS%n1}
ns2_paths() {
  local count=0 path
  for path in /sys/block/"${SUBSYS}"c*n2; do [ -e "$path" ] && count=$((count + 1)); done
  echo "$count"
}
ns2_on_both() { [ -b "/dev/${SUBSYS}n2" ] && [ "$(ns2_paths)" -ge 2 ]; }
ns2_gone() { [ ! -b "/dev/${SUBSYS}n2" ] && [ "$(ns2_paths)" -eq 0 ]; }
: >"$LOGDIR/ns2.wanted"
if wait_until "$HOST_WAIT_S" test -e "$LOGDIR/ns2.added"; then
  if wait_until 30 ns2_on_both; then
    ok ns-added "/dev/${SUBSYS}n2 with $(ns2_paths) paths"
    run fio-ns2 180 fio --name=ns2 --filename="/dev/${SUBSYS}n2" --ioengine=libaio --direct=1 --rw=randwrite \
      --bs=16k --size=16m --iodepth=8 --verify=crc32c --do_verify=1 --verify_fatal=1
  else
    fail ns-added "/dev/${SUBSYS}n2: $( [ -b "/dev/${SUBSYS}n2" ] && echo present || echo missing ), $(ns2_paths) path(s)"
    ls /sys/block >"$LOGDIR/block-devices.txt" 2>&1
  fi
  : >"$LOGDIR/ns2.verified"
  if wait_until "$HOST_WAIT_S" test -e "$LOGDIR/ns2.removed" && wait_until 30 ns2_gone; then
    ok ns-removed "removed through gateway b: gone from both paths"
  else
    fail ns-removed "/dev/${SUBSYS}n2 still there with $(ns2_paths) path(s)"
  fi
else
  fail ns-added "the host never added the namespace"
fi

section "rolling restart of both gateways under fio verify"
# The host restarts a, then b (scripts/rolling-restart.sh) while this fio run writes
# and verifies as it goes; each path goes away and comes back in turn.
: >"$LOGDIR/rolling.ready"
run fio-rolling-restart 300 fio --name=rolling --filename="$DEV" --ioengine=libaio --direct=1 --rw=randwrite \
  --bs=16k --size=64m --offset=256m --iodepth=8 --verify=crc32c --verify_backlog=64 --verify_fatal=1 \
  --time_based=1 --runtime="${ROLLING_SECONDS:-40}"
if wait_until "$HOST_WAIT_S" test -e "$LOGDIR/rolling.done"; then
  if wait_until 30 path_is "$PORT_A" "live optimized" && wait_until 30 path_is "$PORT_B" "live non-optimized"; then
    ok rolling-restart-paths "after the rolling restart: a live optimized, b live non-optimized"
  else
    fail rolling-restart-paths "a '$(path_state "$PORT_A")', b '$(path_state "$PORT_B")'"
  fi
else
  fail rolling-restart-paths "the host never finished the rolling restart"
fi

section "disconnect"
run disconnect 60 nvme disconnect -n "$NQN"
dmesg >"$LOGDIR/dmesg.txt" 2>&1
# The killed gateway's path logs its reconnect attempts, and the write refused with
# Reservation Conflict its block layer error (BLK_STS_NEXUS, "critical nexus error",
# at 900 MiB = sector 1843200); anything else nvme-related that is an error is a
# finding.
bad=$(grep -i "nvme" "$LOGDIR/dmesg.txt" | grep -i "error\|fail\|warn\|bug" |
  grep -v "could not connect\|failed to connect\|reconnect\|Reconnecting\|I/O Cmd\|starting error recovery\|ANA" |
  grep -v "critical nexus error, dev nvme[0-9]*c[0-9]*n[0-9]*, sector 1843200 op 0x1:(WRITE)" | head -n 5)
if [ -z "$bad" ]; then ok kernel-log; else fail kernel-log "$(echo "$bad" | head -n 2 | tr '\n' ' ')"; fi

echo
echo "guest checks: $passed ok, $failed failed${failed_names:+:$failed_names}"
[ "$failed" -eq 0 ]
