#!/bin/sh
# shellcheck shell=dash
# Guest half of tests/interop/linux-host.sh. Runs inside the linux-nvme-peer guest
# (busybox ash, Linux 6.1 nvme-tcp, nvme-cli 2.3, fio 3.33) and drives the target
# on the host through 10.0.2.2. Not meant to be run on the host.
#
# Every check prints "CHECK <name>: ok" or "CHECK <name>: FAIL (<why>)"; the
# script exits 0 only when no check failed. A failed connect skips the checks
# that need the connection. Detailed outputs (id-ctrl, fio reports, dmesg, ...)
# go to $LOGDIR (the host's artifact directory, shared at /host).
#
# Environment (set by linux-host.sh / linux-nvme-peer):
#   LNP_SUBNQN        subsystem NQN (required)
#   LNP_TARGET_ADDR   target address (default 10.0.2.2 = host loopback)
#   IO_PORT           I/O (+ discovery) port (default 4420)
#   DISC_PORT         discovery-only port (default 8009)
#   EXPECT_SERIAL     expected id-ctrl serial number (optional)
#   EXPECT_NSZE       expected namespace size in logical blocks (optional)
#   EXPECT_LBADS      expected log2(logical block size) of the format in use (optional)

NQN=${LNP_SUBNQN:?LNP_SUBNQN is not set}
ADDR=${LNP_TARGET_ADDR:-10.0.2.2}
IO_PORT=${IO_PORT:-4420}
DISC_PORT=${DISC_PORT:-8009}
EXPECT_SERIAL=${EXPECT_SERIAL:-}
EXPECT_NSZE=${EXPECT_NSZE:-}
EXPECT_LBADS=${EXPECT_LBADS:-}

if [ -d /host ] && : 2>/dev/null >/host/.writable; then LOGDIR=/host; rm -f /host/.writable
else LOGDIR=/tmp/linux-host; mkdir -p "$LOGDIR"; fi

# shellcheck source=tests/interop/guest/checks.sh
. /root/checks.sh  # ok, fail, section, show_tail, run, run_quiet (tests/interop/guest/checks.sh)
CTRL='' NSDEV=''

# is_ours DIR: is the sysfs controller/subsystem DIR the one of $NQN?
is_ours() { [ -r "$1/subsysnqn" ] && [ "$(cat "$1/subsysnqn")" = "$NQN" ]; }
# find_ctrl: print the live fabrics controller (nvmeN) connected to $NQN
find_ctrl() {
  for c in /sys/class/nvme/nvme*; do
    is_ours "$c" || continue
    [ "$(cat "$c/state" 2>/dev/null)" = live ] || continue
    echo "${c##*/}"; return 0
  done
  return 1
}
# find_ns: print the block device of a namespace of $NQN (multipath-aware)
find_ns() {
  for s in /sys/class/nvme-subsystem/*; do
    is_ours "$s" || continue
    for n in "$s"/nvme*n*; do
      [ -e "$n" ] && [ -b "/dev/${n##*/}" ] && { echo "/dev/${n##*/}"; return 0; }
    done
  done
  for c in /sys/class/nvme/*; do
    is_ours "$c" || continue
    for n in "$c"/nvme*n*; do
      case ${n##*/} in *c*) continue ;; esac
      [ -b "/dev/${n##*/}" ] && { echo "/dev/${n##*/}"; return 0; }
    done
  done
  return 1
}

# connect NAME [nvme connect options...]: connect, wait (<= 20 s) for the
# controller and the namespace block device; sets CTRL and NSDEV
connect() {
  local name="$1" i
  shift
  CTRL='' NSDEV=''
  run "$name" 60 nvme connect -t tcp -a "$ADDR" -s "$IO_PORT" -n "$NQN" "$@" || return 1
  i=0
  while [ $i -lt 100 ]; do
    if [ -z "$CTRL" ]; then CTRL=$(find_ctrl) || CTRL=''; fi
    if [ -z "$NSDEV" ]; then NSDEV=$(find_ns) || NSDEV=''; fi
    [ -n "$CTRL" ] && [ -n "$NSDEV" ] && [ -c "/dev/$CTRL" ] && break
    usleep 200000; i=$((i + 1))
  done
  if [ -n "$CTRL" ] && [ -n "$NSDEV" ]; then
    echo "controller /dev/$CTRL, namespace $NSDEV (transport $(cat /sys/class/nvme/"$CTRL"/transport 2>/dev/null), address $(cat /sys/class/nvme/"$CTRL"/address 2>/dev/null))"
    ok "$name-device"
    return 0
  fi
  fail "$name-device" "controller '${CTRL:-none}' / namespace '${NSDEV:-none}' did not appear within 20 s"
  # shellcheck disable=SC2012
  ls -l /sys/class/nvme/ /sys/class/nvme-subsystem/ 2>&1 | sed 's/^/  | /'
  return 1
}

# disconnect NAME: nvme disconnect -n $NQN, then wait (<= 20 s) until the controller is gone
disconnect() {
  local name="$1" i
  run "$name" 60 nvme disconnect -n "$NQN" || return 1
  grep -q 'disconnected 1 controller' "$LOGDIR/$name.txt" ||
    { fail "$name-count" "expected 'disconnected 1 controller(s)'"; show_tail "$LOGDIR/$name.txt"; }
  i=0
  while find_ctrl >/dev/null && [ $i -lt 100 ]; do usleep 200000; i=$((i + 1)); done
  if find_ctrl >/dev/null; then fail "$name-gone" "controller $(find_ctrl) still present after 20 s"; return 1; fi
  CTRL='' NSDEV=''
}

# fio_verify NAME TIMEOUT FIO-ARGS...: write + read-back verify (crc32c), fail on any error
fio_verify() {
  local name="$1" tmo="$2"
  shift 2
  if run "$name" "$tmo" fio --ioengine=libaio --direct=1 --filename="$NSDEV" \
      --verify=crc32c --do_verify=1 --verify_fatal=1 --exitall_on_error=1 \
      --group_reporting "$@"; then
    grep -E '^ *(READ|WRITE): bw=' "$LOGDIR/$name.txt" | sed 's/^ */  /'
    return 0
  fi
  return 1
}

# discover NAME PORT: the discovery log from PORT must list $NQN
discover() {
  local name="$1" port="$2"
  run "$name" 60 nvme discover -t tcp -a "$ADDR" -s "$port" || return 1
  if awk -v nqn="$NQN" '$1 == "subnqn:" && $2 == nqn { found = 1 } END { exit !found }' "$LOGDIR/$name.txt"; then
    echo "  discovery log from port $port lists $NQN ($(grep -c '^=====Discovery Log Entry' "$LOGDIR/$name.txt") entries)"
    ok "$name-lists-subsystem"
  else
    fail "$name-lists-subsystem" "$NQN not in the discovery log from port $port"
    show_tail "$LOGDIR/$name.txt" 40
  fi
}

# field FILE KEY: value of a "key : value" line of nvme-cli's normal output
field() {
  awk -v k="$2" '{
    i = index($0, ":"); if (!i) next
    key = substr($0, 1, i - 1); gsub(/[ \t]/, "", key)
    if (key == k) { v = substr($0, i + 1); sub(/^[ \t]+/, "", v); sub(/[ \t]+$/, "", v); print v; exit }
  }' "$1"
}

# ---------------------------------------------------------------------------
section "environment"
echo "kernel $(uname -r); $(nvme version 2>&1 | head -n 1); $(fio --version)"
echo "target $ADDR ports $IO_PORT (I/O) and $DISC_PORT (discovery), subsystem $NQN; details in $LOGDIR"

section "discovery"
discover "discover-$DISC_PORT" "$DISC_PORT"
discover "discover-$IO_PORT" "$IO_PORT"

section "connect (no digests)"
if connect connect; then
  section "identify"
  if run list 30 nvme list; then
    if grep -q "^$NSDEV " "$LOGDIR/list.txt"; then ok list-shows-namespace
    else fail list-shows-namespace "$NSDEV not in 'nvme list'"; show_tail "$LOGDIR/list.txt"; fi
    grep -E "^(Node|-----|$NSDEV )" "$LOGDIR/list.txt" | sed 's/^/  /'
  fi

  if run id-ctrl 30 nvme id-ctrl "/dev/$CTRL"; then
    f=$LOGDIR/id-ctrl.txt
    echo "  sn='$(field "$f" sn)' mn='$(field "$f" mn)' fr='$(field "$f" fr)' subnqn='$(field "$f" subnqn)'"
    if [ "$(field "$f" subnqn)" = "$NQN" ]; then ok id-ctrl-subnqn
    else fail id-ctrl-subnqn "subnqn is '$(field "$f" subnqn)'"; fi
    if [ -n "$EXPECT_SERIAL" ]; then
      if [ "$(field "$f" sn)" = "$EXPECT_SERIAL" ]; then ok id-ctrl-serial
      else fail id-ctrl-serial "sn is '$(field "$f" sn)', expected '$EXPECT_SERIAL'"; fi
    fi
  fi

  if run id-ns 30 nvme id-ns "$NSDEV"; then
    f=$LOGDIR/id-ns.txt
    nsze=$(field "$f" nsze)
    inuse=$(grep -E '^lbaf +[0-9]+ *:.*in use' "$f" | head -n 1)
    echo "  nsze=$nsze ncap=$(field "$f" ncap) nuse=$(field "$f" nuse) format: ${inuse:-?}"
    if [ -n "$EXPECT_NSZE" ]; then
      if [ -n "$nsze" ] && [ "$((nsze))" -eq "$EXPECT_NSZE" ]; then ok id-ns-size
      else fail id-ns-size "nsze is '$nsze', expected $EXPECT_NSZE blocks"; fi
    fi
    if [ -n "$EXPECT_LBADS" ]; then
      case $inuse in *"lbads:$EXPECT_LBADS "*) ok id-ns-lbads ;;
        *) fail id-ns-lbads "format in use is '${inuse:-none}', expected lbads:$EXPECT_LBADS" ;; esac
    fi
  fi

  if run smart-log 30 nvme smart-log "/dev/$CTRL"; then
    if grep -Eq '^critical_warning' "$LOGDIR/smart-log.txt"; then ok smart-log-parsed
    else fail smart-log-parsed "no critical_warning field"; show_tail "$LOGDIR/smart-log.txt"; fi
  fi

  section "persistent reservations (nvme resv-*)"
  # Register, take Write Exclusive, read the extended report, release, unregister:
  # the Linux host's encoding of every reservation command against Sluice's.
  if run resv-register 30 nvme resv-register "$NSDEV" --nrkey=0xa1 --rrega=0 &&
      run resv-acquire 30 nvme resv-acquire "$NSDEV" --crkey=0xa1 --rtype=1 --racqa=0 &&
      run resv-report 30 nvme resv-report "$NSDEV" --eds; then
    f=$LOGDIR/resv-report.txt
    if grep -Eiq 'rtype *: *1' "$f" && grep -Eiq 'regctl *: *1' "$f" && grep -Eiq 'rkey *: *a1' "$f"; then
      ok resv-report-holder "write exclusive held with key 0xa1"
    else
      fail resv-report-holder "unexpected report"; show_tail "$f"
    fi
    if run resv-conflict-key 30 sh -c "! nvme resv-release '$NSDEV' --crkey=0xbad --rtype=1 --rrela=0"; then :; fi
    run resv-release 30 nvme resv-release "$NSDEV" --crkey=0xa1 --rtype=1 --rrela=0 &&
      run resv-unregister 30 nvme resv-register "$NSDEV" --crkey=0xa1 --rrega=1 &&
      run resv-report-empty 30 nvme resv-report "$NSDEV" --eds &&
      if grep -Eiq 'regctl *: *0' "$LOGDIR/resv-report-empty.txt"; then ok resv-cleared
      else fail resv-cleared "registrants remain"; show_tail "$LOGDIR/resv-report-empty.txt"; fi
  fi

  section "fio: 4 KiB random write + verify, 2 jobs x 16 MiB, iodepth 32"
  fio_verify fio-randwrite-4k 300 --name=randwrite-4k --rw=randwrite --bs=4k --iodepth=32 \
    --numjobs=2 --size=16m --offset=0 --offset_increment=16m

  section "fio: 128 KiB sequential write + verify, 32 MiB"
  fio_verify fio-seqwrite-128k 300 --name=seqwrite-128k --rw=write --bs=128k --iodepth=8 \
    --size=32m --offset=64m

  section "fio: 1 MiB sequential write + verify, 32 MiB"
  fio_verify fio-seqwrite-1m 300 --name=seqwrite-1m --rw=write --bs=1m --iodepth=4 \
    --size=32m --offset=128m

  section "disconnect"
  disconnect disconnect
fi

section "connect with header + data digests, 2 I/O queues"
if connect connect-digest --hdr-digest --data-digest --nr-io-queues 2; then
  qc=/sys/class/nvme/$CTRL/queue_count
  if [ -r "$qc" ]; then
    n=$(cat "$qc")
    echo "  queue_count=$n (admin + I/O queues)"
    if [ "$n" -eq 3 ]; then ok queue-count
    else fail queue-count "queue_count is $n, expected 3 (admin + 2 I/O queues)"; fi
  else
    echo "  $qc not available in this kernel: queue count not checked"
  fi
  section "fio with digests: 4 KiB random (8 MiB) + 128 KiB sequential (16 MiB), write + verify"
  fio_verify fio-digest 300 --name=digest-rand-4k --rw=randwrite --bs=4k --iodepth=16 --size=8m \
    --offset=192m --name=digest-seq-128k --rw=write --bs=128k --iodepth=8 --size=16m --offset=208m
  section "disconnect (digests)"
  disconnect disconnect-digest
fi

section "kernel log"
dmesg >"$LOGDIR/dmesg.txt" 2>&1
echo "--- dmesg | grep -i nvme:"
grep -i nvme "$LOGDIR/dmesg.txt" | sed 's/^/  /'
# nvme lines that report a problem (the benign "Shutdown timeout set to N seconds" aside)
grep -i nvme "$LOGDIR/dmesg.txt" |
  grep -Ei 'error|fail|timeout|timed out|reset|abort|invalid|unexpected|corrupt|digest|refused|unable|cannot|mismatch|bad |warn' |
  grep -Eiv 'shutdown timeout set to' >"$LOGDIR/dmesg-nvme-errors.txt"
# kernel trouble anywhere (oops, warnings, hung tasks)
grep -E 'BUG:|Oops|Call Trace|WARNING:|general protection|Kernel panic|blocked for more than|hung_task' \
  "$LOGDIR/dmesg.txt" >>"$LOGDIR/dmesg-nvme-errors.txt"
if [ -s "$LOGDIR/dmesg-nvme-errors.txt" ]; then
  fail kernel-log "$(wc -l <"$LOGDIR/dmesg-nvme-errors.txt") nvme error line(s)"
  echo "--- offending kernel log lines:"
  sed 's/^/  ! /' "$LOGDIR/dmesg-nvme-errors.txt"
else
  ok kernel-log
fi

section "summary"
echo "guest checks: $passed ok, $failed FAILED${failed_names:+ (failed:$failed_names)}"
[ "$failed" -eq 0 ]
