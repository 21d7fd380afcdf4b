#!/bin/sh
# shellcheck shell=dash
# Guest half of tests/interop/storage.sh. Runs inside the linux-nvme-peer guest
# (busybox ash, Linux 6.1 nvme-tcp, nvme-cli 2.3, fio 3.33) and drives `sluice serve`
# on the host through 10.0.2.2. Not meant to be run on the host.
#
# Two subsystems: POOL_NQN (Namespace Management on a pool over RAID0 of files) and
# CACHE_NQN (one namespace on a write-back cache tier, file over file). In order:
#   1. connect both (the cache one with header + data digests);
#   2. the asynchronous event path: publish this host's CNTLID in $LOGDIR/cntlid,
#      wait for the host's `sluice attach-ns` ($LOGDIR/attach.done), then, without
#      running any nvme command, wait for namespace EVENT_NSID's block device to
#      appear; the same for `sluice detach-ns` and its disappearance;
#   3. nvme create-ns + attach-ns of 24 namespaces (3 "cache" + 21 "capacity"),
#      all visible in `nvme list` without reconnecting;
#   4. fio write + verify on 4 of them at once, then on the cache-tier namespace;
#   5. nvme detach-ns + delete-ns of all 24, gone from `nvme list`;
#   6. disconnect, and a kernel log without nvme errors.
#
# Every check prints "CHECK <name>: ok" or "CHECK <name>: FAIL (<why>)"; the script
# exits 0 only when no check failed. Detailed outputs go to $LOGDIR (the host's
# artifact directory, shared at /host).
#
# Environment (set by storage.sh / linux-nvme-peer):
#   LNP_TARGET_ADDR     target address (default 10.0.2.2 = host loopback)
#   IO_PORT             target port
#   POOL_NQN, CACHE_NQN the two subsystems
#   EVENT_NSID          the namespace the host creates and attaches to this host
#   EVENT_BLOCKS        its size in logical blocks
#   CACHE_NS_BLOCKS, CAPACITY_NS_BLOCKS  sizes of the namespaces created here
#   BLOCK_SIZE          the pool's logical block size in bytes
#   CACHE_TIER_BLOCKS   size of the cache-tier namespace in logical blocks
#   RBD_NSID            the namespace of CACHE_NQN on a Ceph RBD image, or "none"
#   RBD_BLOCKS          its size in logical blocks

ADDR=${LNP_TARGET_ADDR:-10.0.2.2}
IO_PORT=${IO_PORT:?IO_PORT is not set}
POOL_NQN=${POOL_NQN:?POOL_NQN is not set}
CACHE_NQN=${CACHE_NQN:?CACHE_NQN is not set}
EVENT_NSID=${EVENT_NSID:?EVENT_NSID is not set}
EVENT_BLOCKS=${EVENT_BLOCKS:?EVENT_BLOCKS is not set}
CACHE_NS_BLOCKS=${CACHE_NS_BLOCKS:?CACHE_NS_BLOCKS is not set}
CAPACITY_NS_BLOCKS=${CAPACITY_NS_BLOCKS:?CAPACITY_NS_BLOCKS is not set}
BLOCK_SIZE=${BLOCK_SIZE:?BLOCK_SIZE is not set}
CACHE_TIER_BLOCKS=${CACHE_TIER_BLOCKS:?CACHE_TIER_BLOCKS is not set}
# The field report's layout, scaled down: a few large namespaces for a cache tier
# and many smaller capacity ones.
CACHE_COUNT=3
CAPACITY_COUNT=21
TOTAL=$((CACHE_COUNT + CAPACITY_COUNT))
# How long the host's attach/detach may take to show up here (the kernel rescans
# when the asynchronous event arrives, which is at once).
EVENT_WAIT_S=10
# How long to wait for the host to act on a marker.
HOST_WAIT_S=120

if [ -d /host ] && : 2>/dev/null >/host/.writable; then LOGDIR=/host; rm -f /host/.writable
else LOGDIR=/tmp/storage; mkdir -p "$LOGDIR"; fi

# shellcheck source=tests/interop/guest/checks.sh
. /root/checks.sh  # ok, fail, section, show_tail, run, run_quiet, wait_until (tests/interop/guest/checks.sh)
POOL_CTRL='' CNTLID=''

# uptime in centiseconds (busybox date has whole seconds only)
now_cs() { awk '{ split($1, t, "."); print t[1] * 100 + t[2] }' /proc/uptime; }
elapsed() { awk -v cs="$(( $(now_cs) - $1 ))" 'BEGIN { printf "%.1f", cs / 100 }'; }

# is_ours DIR NQN: is the sysfs controller/subsystem DIR the one of NQN?
is_ours() { [ -r "$1/subsysnqn" ] && [ "$(cat "$1/subsysnqn")" = "$2" ]; }
# find_ctrl NQN: the live fabrics controller (nvmeN) connected to NQN
find_ctrl() {
  for c in /sys/class/nvme/nvme*; do
    is_ours "$c" "$1" || continue
    [ "$(cat "$c/state" 2>/dev/null)" = live ] || continue
    echo "${c##*/}"; return 0
  done
  return 1
}
# namespaces NQN: "NSID /dev/BLOCKDEV" per namespace block device of NQN (the
# multipath head when native multipath is on, else the controller's disk)
namespaces() {
  local found=0 s c n
  for s in /sys/class/nvme-subsystem/*; do
    is_ours "$s" "$1" || continue
    for n in "$s"/nvme*n*; do
      if [ ! -e "$n" ] || [ ! -b "/dev/${n##*/}" ]; then continue; fi
      echo "$(cat "/sys/block/${n##*/}/nsid" 2>/dev/null || echo '?') /dev/${n##*/}"; found=1
    done
  done
  [ $found -eq 1 ] && return 0
  for c in /sys/class/nvme/*; do
    is_ours "$c" "$1" || continue
    for n in "$c"/nvme*n*; do
      case ${n##*/} in *c*) continue ;; esac
      [ -b "/dev/${n##*/}" ] || continue
      echo "$(cat "/sys/block/${n##*/}/nsid" 2>/dev/null || echo '?') /dev/${n##*/}"
    done
  done
}
# device_of NQN NSID: the block device of namespace NSID of NQN
device_of() { namespaces "$1" | awk -v id="$2" '$1 == id { print $2; exit }'; }
count_of() { namespaces "$1" | wc -l; }
# size_blocks DEV: the block device's size in logical blocks of BLOCK_SIZE bytes
size_blocks() { echo $(( $(cat "/sys/block/${1#/dev/}/size") * 512 / BLOCK_SIZE )); }

# event_ns_present / event_ns_absent: has EVENT_NSID a block device (now)?
event_ns_present() { [ -n "$(device_of "$POOL_NQN" "$EVENT_NSID")" ]; }
event_ns_absent() { ! event_ns_present; }

# wait_for_file NAME: the host's marker $LOGDIR/NAME (at most HOST_WAIT_S)
wait_for_file() { wait_until "$HOST_WAIT_S" test -e "$LOGDIR/$1"; }

# connect NAME NQN [nvme connect options...]: connect and wait (<= 20 s) for the
# live controller; prints its name
connect() {
  local name="$1" nqn="$2" ctrl=''
  shift 2
  run "$name" 60 nvme connect -t tcp -a "$ADDR" -s "$IO_PORT" -n "$nqn" "$@" || return 1
  wait_until 20 find_ctrl "$nqn" && ctrl=$(find_ctrl "$nqn")
  if [ -n "$ctrl" ]; then
    echo "  $nqn: controller /dev/$ctrl, cntlid $(cat "/sys/class/nvme/$ctrl/cntlid")"
    echo "$ctrl" >"$LOGDIR/$name.ctrl"
    ok "$name-controller"
    return 0
  fi
  fail "$name-controller" "no live controller for $nqn within 20 s"
  return 1
}

# fio_verify NAME TIMEOUT FIO-ARGS...: write + read-back verify (crc32c)
fio_verify() {
  local name="$1" tmo="$2"
  shift 2
  if run "$name" "$tmo" fio --ioengine=libaio --direct=1 --verify=crc32c --do_verify=1 \
      --verify_fatal=1 --exitall_on_error=1 --group_reporting "$@"; then
    grep -E '^ *(READ|WRITE): bw=' "$LOGDIR/$name.txt" | sed 's/^ */  /'
  fi
}

# ---------------------------------------------------------------------------
section "environment"
echo "kernel $(uname -r); $(nvme version 2>&1 | head -n 1); $(fio --version)"
echo "target $ADDR:$IO_PORT; pool subsystem $POOL_NQN, cache-tier subsystem $CACHE_NQN"
echo "host NQN $(cat /etc/nvme/hostnqn 2>/dev/null); details in $LOGDIR"

section "connect"
connect connect-pool "$POOL_NQN" && POOL_CTRL=$(cat "$LOGDIR/connect-pool.ctrl")
# The cache-tier subsystem with digests, so the capture holds digest-protected PDUs.
connect connect-cache "$CACHE_NQN" --hdr-digest --data-digest
if [ -z "$POOL_CTRL" ]; then
  # Nothing below works without the pool subsystem; tell the host not to wait.
  echo none >"$LOGDIR/cntlid"
  section "summary"
  echo "guest checks: $passed ok, $failed FAILED (failed:$failed_names)"
  exit 1
fi

section "identify the pool subsystem's controller"
CNTLID=$(cat "/sys/class/nvme/$POOL_CTRL/cntlid")
if run id-ctrl 30 nvme id-ctrl "/dev/$POOL_CTRL"; then
  oacs=$(awk -F: '$1 ~ /^oacs *$/ { gsub(/ /, "", $2); print $2; exit }' "$LOGDIR/id-ctrl.txt")
  tnvmcap=$(awk -F: '$1 ~ /^tnvmcap *$/ { gsub(/[ ,]/, "", $2); print $2; exit }' "$LOGDIR/id-ctrl.txt")
  unvmcap=$(awk -F: '$1 ~ /^unvmcap *$/ { gsub(/[ ,]/, "", $2); print $2; exit }' "$LOGDIR/id-ctrl.txt")
  echo "  cntlid $CNTLID, oacs $oacs, tnvmcap $tnvmcap, unvmcap $unvmcap"
  if [ -n "$oacs" ] && [ $(( oacs & 0x8 )) -ne 0 ]; then ok id-ctrl-namespace-management
  else fail id-ctrl-namespace-management "OACS bit 3 (Namespace Management) is not set: oacs '$oacs'"; fi
fi

section "asynchronous event: the host attaches namespace $EVENT_NSID to controller $CNTLID"
# Publish the CNTLID atomically (the host polls for the file).
echo "$CNTLID" >"$LOGDIR/cntlid.tmp" && mv "$LOGDIR/cntlid.tmp" "$LOGDIR/cntlid"
if event_ns_present; then
  fail event-attach "namespace $EVENT_NSID is visible before the host attached it"
elif ! wait_for_file attach.done; then
  fail event-attach "the host did not attach within ${HOST_WAIT_S}s (no $LOGDIR/attach.done)"
else
  # From here on no nvme command runs: only the kernel's reaction to the
  # asynchronous event (Namespace Attribute Changed) can make the disk appear.
  start=$(now_cs)
  if wait_until "$EVENT_WAIT_S" event_ns_present; then
    dev=$(device_of "$POOL_NQN" "$EVENT_NSID")
    ok event-attach "$dev appeared $(elapsed "$start") s after the host's attach-ns, no nvme command run here"
    blocks=$(size_blocks "$dev")
    if [ "$blocks" -eq "$EVENT_BLOCKS" ]; then ok event-attach-size
    else fail event-attach-size "$dev has $blocks blocks, expected $EVENT_BLOCKS"; fi
    # Reading it works at once (the host wrote nothing: a new namespace reads zeroes).
    if dd if="$dev" of="$LOGDIR/event-read.bin" bs=4096 count=16 iflag=direct 2>"$LOGDIR/event-read.txt" &&
        [ "$(tr -d '\000' <"$LOGDIR/event-read.bin" | wc -c)" -eq 0 ]; then ok event-attach-read-zeroes
    else fail event-attach-read-zeroes "reading 64 KiB of $dev failed or returned non-zero data"; show_tail "$LOGDIR/event-read.txt"; fi
    rm -f "$LOGDIR/event-read.bin"
  else
    fail event-attach "no block device for namespace $EVENT_NSID within ${EVENT_WAIT_S}s of the host's attach-ns"
    namespaces "$POOL_NQN" | sed 's/^/  /'
  fi
  : >"$LOGDIR/event-attach.seen"
  if ! wait_for_file detach.done; then
    fail event-detach "the host did not detach within ${HOST_WAIT_S}s (no $LOGDIR/detach.done)"
  else
    start=$(now_cs)
    if wait_until "$EVENT_WAIT_S" event_ns_absent; then
      ok event-detach "the block device went away $(elapsed "$start") s after the host's detach-ns"
    else
      fail event-detach "namespace $EVENT_NSID still has a block device ${EVENT_WAIT_S}s after the host's detach-ns"
    fi
  fi
fi

section "nvme create-ns + attach-ns: $CACHE_COUNT cache and $CAPACITY_COUNT capacity namespaces"
nsids='' created=0 attached=0 i=1
while [ $i -le $TOTAL ]; do
  if [ $i -le $CACHE_COUNT ]; then
    # nvme-cli looks the format up from the block size (Identify Namespace FFFFFFFFh)
    size=$CACHE_NS_BLOCKS; format="--block-size=$BLOCK_SIZE"
  else
    size=$CAPACITY_NS_BLOCKS; format="--flbas=0"
  fi
  if run_quiet "create-ns-$i" 30 nvme create-ns "/dev/$POOL_CTRL" --nsze="$size" --ncap="$size" "$format"; then
    nsid=$(sed -n 's/.*created nsid:\([0-9][0-9]*\).*/\1/p' "$LOGDIR/create-ns-$i.txt")
    if [ -n "$nsid" ]; then
      created=$((created + 1)); nsids="$nsids $nsid"
      run_quiet "attach-ns-$nsid" 30 nvme attach-ns "/dev/$POOL_CTRL" --namespace-id="$nsid" --controllers="$CNTLID" &&
        attached=$((attached + 1))
    else
      fail "create-ns-$i" "no 'created nsid:N' in the output"; show_tail "$LOGDIR/create-ns-$i.txt"
    fi
  fi
  i=$((i + 1))
done
echo "  created:$nsids"
[ $created -eq $TOTAL ] && ok create-ns-all "$created namespaces"
[ $attached -eq $TOTAL ] && ok attach-ns-all "$attached namespaces attached to controller $CNTLID"

section "the $TOTAL namespaces are visible without reconnecting"
has_all() { [ "$(count_of "$POOL_NQN")" -ge "$TOTAL" ]; }
if wait_until 30 has_all; then ok block-devices "$(count_of "$POOL_NQN") block devices"
else fail block-devices "$(count_of "$POOL_NQN") block devices after 30 s, expected $TOTAL"; fi
namespaces "$POOL_NQN" | sort -n >"$LOGDIR/namespaces.txt"
if run list 60 nvme list; then
  missing=''
  for nsid in $nsids; do
    dev=$(device_of "$POOL_NQN" "$nsid")
    if [ -z "$dev" ] || ! grep -q "^$dev " "$LOGDIR/list.txt"; then missing="$missing $nsid"; fi
  done
  if [ -z "$missing" ]; then ok list-shows-all "nvme list shows all $TOTAL"
  else fail list-shows-all "namespaces missing from nvme list:$missing"; show_tail "$LOGDIR/list.txt" 40; fi
fi
if run list-ns 30 nvme list-ns "/dev/$POOL_CTRL"; then
  n=$(grep -c '^\[' "$LOGDIR/list-ns.txt")
  if [ "$n" -eq "$TOTAL" ]; then ok list-ns-count; else fail list-ns-count "nvme list-ns shows $n, expected $TOTAL"; fi
fi
# sizes: the first cache namespace and the first capacity one
# shellcheck disable=SC2086 # the NSIDs as positional parameters
set -- $nsids
cache_dev=$(device_of "$POOL_NQN" "${1:-0}")
capacity_dev=$(device_of "$POOL_NQN" "$(echo "$nsids" | awk -v n=$((CACHE_COUNT + 1)) '{ print $n }')")
if [ -n "$cache_dev" ] && [ -n "$capacity_dev" ] &&
    [ "$(size_blocks "$cache_dev")" -eq "$CACHE_NS_BLOCKS" ] &&
    [ "$(size_blocks "$capacity_dev")" -eq "$CAPACITY_NS_BLOCKS" ]; then
  ok namespace-sizes "$cache_dev $CACHE_NS_BLOCKS blocks, $capacity_dev $CAPACITY_NS_BLOCKS blocks"
else
  fail namespace-sizes "cache '$cache_dev' / capacity '$capacity_dev' do not have $CACHE_NS_BLOCKS / $CAPACITY_NS_BLOCKS blocks"
fi

section "fio: 4 namespaces at once (2 cache, 2 capacity), 4 KiB random write + verify, 8 MiB each"
# shellcheck disable=SC2086 # the NSIDs as positional parameters
set -- $nsids
devs=''
for nsid in "$1" "$2" "${4:-}" "${5:-}"; do
  dev=$(device_of "$POOL_NQN" "$nsid")
  [ -n "$dev" ] && devs="$devs $dev"
done
if [ "$(echo "$devs" | wc -w)" -eq 4 ]; then
  echo "  devices:$devs"
  jobs=''
  for dev in $devs; do
    jobs="$jobs --name=${dev#/dev/} --filename=$dev --rw=randwrite --bs=4k --iodepth=16 --size=8m"
  done
  # shellcheck disable=SC2086 # one word per fio option
  fio_verify fio-four-namespaces 300 $jobs
else
  fail fio-four-namespaces "fewer than 4 namespace block devices:$devs"
fi

section "fio: the write-back cache tier namespace"
tier=$(device_of "$CACHE_NQN" 1)
if [ -n "$tier" ]; then
  blocks=$(size_blocks "$tier")
  if [ "$blocks" -eq "$CACHE_TIER_BLOCKS" ]; then ok cache-tier-size "$tier, $blocks blocks"
  else fail cache-tier-size "$tier has $blocks blocks, expected $CACHE_TIER_BLOCKS"; fi
  # 4 KiB random over the start, then 48 MiB sequential: more than the 32 MiB fast
  # tier holds, so lines are evicted (destaged to the slow tier) and read back.
  fio_verify fio-cache-tier 300 --filename="$tier" \
    --name=tier-rand-4k --rw=randwrite --bs=4k --iodepth=16 --size=8m --offset=0 \
    --name=tier-seq-128k --rw=write --bs=128k --iodepth=8 --size=48m --offset=16m
else
  fail cache-tier-device "no block device for namespace 1 of $CACHE_NQN"
fi

section "fio: the Ceph RBD namespace"
if [ "${RBD_NSID:-none}" = none ]; then
  echo "  skipped: no Ceph cluster on the host side (CEPH_CONF)"
else
  rbd_dev=$(device_of "$CACHE_NQN" "$RBD_NSID")
  if [ -n "$rbd_dev" ]; then
    blocks=$(size_blocks "$rbd_dev")
    if [ "$blocks" -eq "$RBD_BLOCKS" ]; then ok rbd-size "$rbd_dev, $blocks blocks"
    else fail rbd-size "$rbd_dev has $blocks blocks, expected $RBD_BLOCKS"; fi
    # Random 4 KiB over 16 MiB at depth 16, then 128 KiB sequential over 32 MiB.
    fio_verify fio-rbd 300 --filename="$rbd_dev" \
      --name=rbd-rand-4k --rw=randwrite --bs=4k --iodepth=16 --size=16m --offset=0 \
      --name=rbd-seq-128k --rw=write --bs=128k --iodepth=8 --size=32m --offset=32m
  else
    fail rbd-device "no block device for namespace $RBD_NSID of $CACHE_NQN"
  fi
fi

section "nvme detach-ns + delete-ns of all $TOTAL"
# A namespace removal that never finishes blocks in the kernel (state D), beyond what
# a timeout can kill: after 90 s, dump every task's stack and every CPU's backtrace
# to the console (the peer keeps it) so the cause can be read.
( sleep 90; echo "  DIAG: detach/delete still running after 90 s; sysrq t + l" >/dev/console
  echo t >/proc/sysrq-trigger; echo l >/proc/sysrq-trigger; echo w >/proc/sysrq-trigger ) &
diag_pid=$!
detached=0 deleted=0
for nsid in $nsids; do
  run_quiet "detach-ns-$nsid" 30 nvme detach-ns "/dev/$POOL_CTRL" --namespace-id="$nsid" --controllers="$CNTLID" &&
    detached=$((detached + 1))
  run_quiet "delete-ns-$nsid" 30 nvme delete-ns "/dev/$POOL_CTRL" --namespace-id="$nsid" &&
    deleted=$((deleted + 1))
done
kill "$diag_pid" 2>/dev/null
[ $detached -eq $TOTAL ] && ok detach-ns-all "$detached detached"
[ $deleted -eq $TOTAL ] && ok delete-ns-all "$deleted deleted"
none_left() { [ "$(count_of "$POOL_NQN")" -eq 0 ]; }
if wait_until 30 none_left; then ok block-devices-gone
else fail block-devices-gone "$(count_of "$POOL_NQN") block devices left after 30 s"; namespaces "$POOL_NQN" | sed 's/^/  /'; fi
if run list-after 60 nvme list; then
  left=''
  while read -r _ dev; do
    grep -q "^$dev " "$LOGDIR/list-after.txt" && left="$left $dev"
  done <"$LOGDIR/namespaces.txt"
  if [ -z "$left" ]; then ok list-shows-none; else fail list-shows-none "still in nvme list:$left"; fi
fi
if run list-ns-after 30 nvme list-ns "/dev/$POOL_CTRL"; then
  n=$(grep -c '^\[' "$LOGDIR/list-ns-after.txt")
  if [ "$n" -eq 0 ]; then ok list-ns-empty; else fail list-ns-empty "nvme list-ns still shows $n"; fi
fi
if run list-ns-allocated 30 nvme list-ns "/dev/$POOL_CTRL" --all; then
  n=$(grep -c '^\[' "$LOGDIR/list-ns-allocated.txt")
  if [ "$n" -eq 0 ]; then ok allocated-none; else fail allocated-none "nvme list-ns --all still shows $n allocated"; fi
fi

section "disconnect"
run disconnect 60 nvme disconnect-all
gone() { ! find_ctrl "$POOL_NQN" >/dev/null && ! find_ctrl "$CACHE_NQN" >/dev/null; }
if wait_until 20 gone; then ok controllers-gone; else fail controllers-gone "controllers still present after 20 s"; fi

section "kernel log"
dmesg >"$LOGDIR/dmesg.txt" 2>&1
echo "--- dmesg | grep -i nvme (last 40 lines; all in dmesg.txt):"
grep -i nvme "$LOGDIR/dmesg.txt" | tail -n 40 | sed 's/^/  /'
grep -i nvme "$LOGDIR/dmesg.txt" |
  grep -Ei 'error|fail|timeout|timed out|reset|abort|invalid|unexpected|corrupt|digest|refused|unable|cannot|mismatch|bad |warn' |
  grep -Eiv 'shutdown timeout set to' >"$LOGDIR/dmesg-nvme-errors.txt"
grep -E 'BUG:|Oops|Call Trace|WARNING:|general protection|Kernel panic|blocked for more than|hung_task' \
  "$LOGDIR/dmesg.txt" >>"$LOGDIR/dmesg-nvme-errors.txt"
if [ -s "$LOGDIR/dmesg-nvme-errors.txt" ]; then
  fail kernel-log "$(wc -l <"$LOGDIR/dmesg-nvme-errors.txt") nvme error line(s)"
  sed 's/^/  ! /' "$LOGDIR/dmesg-nvme-errors.txt"
else
  ok kernel-log
fi

section "summary"
echo "guest checks: $passed ok, $failed FAILED${failed_names:+ (failed:$failed_names)}"
[ "$failed" -eq 0 ]
