#!/bin/sh
# shellcheck shell=dash
# Guest half of apps/sluice/tests/gateway_linux_moves.rs (a measurement, issue 47):
# the Linux kernel host (6.1 nvme-tcp, native multipath) connected to both members of
# a gateway group on the host (10.0.2.2), running fio write+verify on several
# namespaces' multipath devices while the host drains, undrains and moves ANA groups.
#   1. connect to both gateways; wait until NAMESPACES namespace heads exist, each
#      with two paths (one optimized);
#   2. fio (libaio, direct, 4 KiB random writes at QD4, every write read back and
#      checked: verify_backlog) on the heads of NSIDs 1..JOBS, FIO_SECONDS long, with
#      a latency log of every I/O (fio's own clock, ms since the start); marker
#      fio.started in the share as fio starts (the host times its changes from it);
#   3. the fio result (JSON) and the latency logs go to the share; then disconnect.
# Exit status: fio's (0 only when every job ended without an error).

ADDR=${LNP_TARGET_ADDR:-10.0.2.2}
PORT_A=${PORT_A:?PORT_A is not set}
PORT_B=${PORT_B:?PORT_B is not set}
NQN=${NQN:?NQN is not set}
NAMESPACES=${NAMESPACES:?NAMESPACES is not set}
JOBS=${JOBS:-8}
FIO_SECONDS=${FIO_SECONDS:?FIO_SECONDS is not set}
LOGDIR=/host
WORK=/tmp/moves
mkdir -p "$WORK"

# shellcheck source=tests/interop/guest/checks.sh
. /root/checks.sh

# heads: the number of multipath namespace heads of the subsystem
heads() {
  local count=0 dev
  for dev in /sys/block/nvme*n*; do
    case ${dev##*/} in *c*) continue ;; esac
    [ "$(cat "$dev/device/subsysnqn" 2>/dev/null)" = "$NQN" ] && count=$((count + 1))
  done
  echo "$count"
}
# shellcheck disable=SC2317 # called through wait_until
all_heads() { [ "$(heads)" -ge "$NAMESPACES" ]; }

# head_of NSID: the head block device of NSID
head_of() {
  local dev
  for dev in /sys/block/nvme*n*; do
    case ${dev##*/} in *c*) continue ;; esac
    [ "$(cat "$dev/device/subsysnqn" 2>/dev/null)" = "$NQN" ] || continue
    [ "$(cat "$dev/nsid" 2>/dev/null)" = "$1" ] && { echo "/dev/${dev##*/}"; return 0; }
  done
  return 1
}

section "connect to both gateways ($NAMESPACES namespaces)"
started=$(date +%s)
run connect-a 600 nvme connect -t tcp -a "$ADDR" -s "$PORT_A" -n "$NQN"
run connect-b 600 nvme connect -t tcp -a "$ADDR" -s "$PORT_B" -n "$NQN"
if wait_until 900 all_heads; then
  ok heads "$(heads) namespace heads after $(( $(date +%s) - started )) s"
else
  fail heads "$(heads) of $NAMESPACES namespace heads"
  exit 1
fi

section "fio write+verify on NSIDs 1..$JOBS for $FIO_SECONDS s"
jobs=''
nsid=1
while [ "$nsid" -le "$JOBS" ] && [ "$nsid" -le "$NAMESPACES" ]; do
  dev=$(head_of "$nsid") || { fail head-of-$nsid "no head for NSID $nsid"; exit 1; }
  jobs="$jobs --name=ns$nsid --filename=$dev"
  nsid=$((nsid + 1))
done
echo "jobs:$jobs"
: >"$LOGDIR/fio.started"
# shellcheck disable=SC2086 # one word per job option
timeout $((FIO_SECONDS + 300)) fio --ioengine=libaio --direct=1 --rw=randwrite --bs=4k --size=8m --iodepth=4 \
  --verify=crc32c --verify_backlog=32 --verify_fatal=1 --time_based=1 --runtime="$FIO_SECONDS" \
  --write_lat_log="$WORK/lat" --log_avg_msec=0 --output-format=json --output="$WORK/fio.json" $jobs
rc=$?
echo "fio exit status $rc"
cp "$WORK"/fio.json "$WORK"/lat_*.log "$LOGDIR/" 2>/dev/null
cat /sys/class/nvme-subsystem/nvme-subsys*/nvme*/address 2>/dev/null | sed 's/^/path: /'
dmesg | grep -i nvme | tail -n 40 >"$LOGDIR/dmesg-nvme.txt"
nvme disconnect -n "$NQN" >/dev/null 2>&1
: >"$LOGDIR/guest.done"
exit "$rc"
