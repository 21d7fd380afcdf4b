#!/usr/bin/env bash
# Interop: the real Linux kernel NVMe/TCP host (Linux 6.1, nvme-cli 2.3, fio 3.33 in a
# linux-nvme-peer QEMU guest) against `sluice serve` with composed storage:
#   (a) subsystem POOL_NQN: Namespace Management on a pool over RAID0 of 3 files;
#   (b) subsystem CACHE_NQN: one namespace on a write-back cache tier (file fast
#       tier over file slow tier), and namespace 2 on a Ceph RBD image when a
#       cluster is given (CEPH_CONF; scripts/test.sh starts one), with fio verify.
#
# One guest boot (tests/interop/guest/storage-guest.sh) connects both, creates and
# attaches 24 namespaces with nvme-cli (3 "cache" + 21 "capacity"), sees them all in
# `nvme list` without reconnecting, runs fio write+verify on 4 of them at once and on
# the cache tier, detaches and deletes all 24, and checks the kernel log.
#
# The asynchronous event path is proven from outside the guest: before the guest
# boots, this script creates a namespace with `sluice create-ns` (as another host
# NQN); once the guest has published its CNTLID, `sluice attach-ns -c CNTLID`
# attaches it to the guest, whose kernel must show the new block device within
# seconds without any nvme command run there (Linux rescans only on the event);
# then `sluice detach-ns` must make it disappear the same way. Files in the shared
# artifact directory coordinate the two sides (cntlid, attach.done,
# event-attach.seen, detach.done).
#
# The traffic is captured with tshark on lo and dissected as NVMe/TCP (digests
# verified; the cache subsystem is connected with header and data digests). sluice
# must stop with exit status 0 on SIGTERM, and the pool must have all its space back
# once every namespace is deleted.
#
# Usage: tests/interop/storage.sh
# Environment:
#   OUT=DIR              artifact root (default <repo>/target/interop); this test
#                        writes to DIR/storage/ (the pool and cache files too:
#                        DIR/storage/data/, on a real filesystem for O_DIRECT)
#   SLUICE_BIN=PATH      sluice binary (default: build target/release/sluice)
#   GUEST_TIMEOUT=S      bound for the whole guest run (default 600)
#   SLUICE_LOG=...       sluice's log filter (default info)
#   CEPH_CONF=PATH       a Ceph cluster with pool "rbd": namespace 2 of CACHE_NQN is
#                        an RBD image there (removed afterwards); without it that part
#                        is skipped, unless SLUICE_REQUIRE_CEPH is set (then it fails)
# Functions here are also called indirectly (traps, wait_for), which ShellCheck
# cannot see:
# shellcheck disable=SC2317
set -euo pipefail

TEST_NAME=storage
REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
INTEROP_REPO=$REPO
# shellcheck source=tests/interop/lib/common.sh
. "$REPO/tests/interop/lib/common.sh"

OUT_ROOT=${OUT:-$REPO/target/interop}
mkdir -p "$OUT_ROOT"
OUT_DIR=$(cd "$OUT_ROOT" && pwd)/$TEST_NAME
DATA_DIR=$OUT_DIR/data
SHARE=$OUT_DIR/guest
GUEST_TIMEOUT=${GUEST_TIMEOUT:-600}
GUEST_SCRIPT=$REPO/tests/interop/guest/storage-guest.sh

POOL_NQN=nqn.2026-11.io.sluice:storage-pool
CACHE_NQN=nqn.2026-11.io.sluice:storage-cache
# The guest's host NQN, and the one `sluice` uses on this machine: attachment is per
# host NQN, so they must differ for the event to reach the guest only.
GUEST_HOSTNQN=nqn.2014-08.org.nvmexpress:uuid:5111ce00-0000-4000-8000-00000000a001
ADMIN_HOSTNQN=nqn.2014-08.org.nvmexpress:uuid:5111ce00-0000-4000-8000-00000000ad01

# Sizes. Files have 4096-byte blocks (sluice's default for files).
BLOCK_SIZE=4096
DISK_MIB=128                # x3 in RAID0: a 384 MiB pool
CACHE_NS_MIB=24             # x3
CAPACITY_NS_MIB=12          # x21: with the cache ones 324 MiB
EVENT_NS_MIB=16             # created from this machine
TIER_FAST_MIB=32
TIER_SLOW_MIB=128
RBD_MIB=64
RBD_IMAGE=interop-storage-$$
blocks_of() { echo $(( $1 * 1024 * 1024 / BLOCK_SIZE )); }
POOL_BLOCKS=$(blocks_of $((3 * DISK_MIB)))

TARGET_PID='' TARGET_NAME='' GUEST_PID='' RBD_NSID=''
cleanup() {
  local rc=$?
  trap - EXIT INT TERM
  [ -n "$GUEST_PID" ] && { stop_pid "$GUEST_PID" linux-nvme-peer 10 TERM >/dev/null 2>&1 || true; }
  [ -n "$TSHARK_PID" ] && stop_pid "$TSHARK_PID" tshark 10 TERM >/dev/null 2>&1
  [ -n "$TARGET_PID" ] && { stop_pid "$TARGET_PID" "$TARGET_NAME" 20 TERM || true; }
  [ -n "$RBD_NSID" ] && { rbd -c "$CEPH_CONF" rm "rbd/$RBD_IMAGE" >/dev/null 2>&1 || true; }
  exit "$rc"
}
trap cleanup EXIT
trap 'log "interrupted"; exit 130' INT TERM

# ---------------------------------------------------------------------------
# prerequisites
# ---------------------------------------------------------------------------
for tool in tshark ss capinfos; do
  command -v "$tool" >/dev/null || die "'$tool' is not installed: run scripts/setup.sh"
done
[ -x "$LNP" ] || die "linux-nvme-peer not found at $LNP (expected in ../shared/ next to the repository)"
[ -r "$GUEST_SCRIPT" ] || die "guest script $GUEST_SCRIPT is missing"

if [ -n "${CEPH_CONF:-}" ]; then
  command -v rbd >/dev/null || die "CEPH_CONF is set but the rbd tool is missing: run scripts/setup.sh"
  RBD_NSID=2
elif [ -n "${SLUICE_REQUIRE_CEPH:-}" ]; then
  die "SLUICE_REQUIRE_CEPH is set but CEPH_CONF is not: start a cluster (scripts/test.sh does)"
else
  warn "CEPH_CONF is not set: the RBD namespace is skipped"
fi

rm -rf "$OUT_DIR"
mkdir -p "$SHARE" "$OUT_DIR/peer" "$DATA_DIR"

use_sluice_binary
[ -x "$SLUICE" ] || die "sluice binary $SLUICE not found (build it with cargo build --release -p sluice)"

# Two free ports: I/O (+ discovery) and discovery only.
IO_PORT=$(( 20000 + RANDOM % 12000 ))
while port_listening "$IO_PORT" || port_listening "$((IO_PORT + 1))"; do IO_PORT=$((IO_PORT + 2)); done
DISC_PORT=$((IO_PORT + 1))

# O_DIRECT needs a filesystem that takes it; tmpfs (on older kernels) does not.
DIRECT_IO=true
if [ "$(stat -f -c %T "$DATA_DIR")" = tmpfs ]; then
  warn "$DATA_DIR is on tmpfs: the files are opened without O_DIRECT"
  DIRECT_IO=false
fi

log "subsystems $POOL_NQN (pool on RAID0 of 3 x ${DISK_MIB} MiB files) and $CACHE_NQN" \
  "(write-back cache ${TIER_FAST_MIB} MiB over ${TIER_SLOW_MIB} MiB) on 127.0.0.1:$IO_PORT"
log "artifacts: $OUT_DIR"

# ---------------------------------------------------------------------------
# the configuration (docs/config.md)
# ---------------------------------------------------------------------------
CONFIG=$OUT_DIR/sluice.toml
file_backend() {  # file_backend NAME MIB
  printf '[[backend]]\nname = "%s"\nkind = "file"\npath = "%s/%s.img"\nsize = "%sMiB"\nblock_size = %s\ndirect_io = %s\n\n' \
    "$1" "$DATA_DIR" "$1" "$2" "$BLOCK_SIZE" "$DIRECT_IO"
}
{
  echo "# generated by tests/interop/storage.sh"
  printf '[[listener]]\naddress = "127.0.0.1:%s"\n\n' "$IO_PORT"
  printf '[[listener]]\naddress = "127.0.0.1:%s"\ndiscovery_only = true\n\n' "$DISC_PORT"
  echo "# (a) a pool over RAID0 of three files, with Namespace Management"
  file_backend disk0 "$DISK_MIB"
  file_backend disk1 "$DISK_MIB"
  file_backend disk2 "$DISK_MIB"
  printf '[[backend]]\nname = "stripe"\nkind = "raid0"\nmembers = ["disk0", "disk1", "disk2"]\nstrip_size = "128KiB"\n\n'
  printf '[[pool]]\nname = "capacity"\ndevice = "stripe"\ntable = "%s/capacity.table.json"\nunit_size = "1MiB"\n\n' "$DATA_DIR"
  printf '[[subsystem]]\nnqn = "%s"\nserial = "SLUICESTORPOOL01"\npool = "capacity"\nallow_any_host = true\n\n' "$POOL_NQN"
  echo "# (b) a write-back cache tier: file fast tier over file slow tier"
  file_backend flash "$TIER_FAST_MIB"
  file_backend slow "$TIER_SLOW_MIB"
  printf '[[backend]]\nname = "tier"\nkind = "cache"\nfast = "flash"\nslow = "slow"\nmode = "write-back"\n\n'
  printf '[[subsystem]]\nnqn = "%s"\nserial = "SLUICESTORCACHE1"\nallow_any_host = true\n\n' "$CACHE_NQN"
  printf '[[subsystem.namespace]]\nnsid = 1\ndevice = "tier"\n\n'
  if [ -n "$RBD_NSID" ]; then
    echo "# (c) a Ceph RBD image (created at start)"
    printf '[[backend]]\nname = "rbdvol"\nkind = "rbd"\npool = "rbd"\nimage = "%s"\nsize = "%sMiB"\nblock_size = %s\n\n' \
      "$RBD_IMAGE" "$RBD_MIB" "$BLOCK_SIZE"
    printf '[[subsystem.namespace]]\nnsid = %s\ndevice = "rbdvol"\n\n' "$RBD_NSID"
  fi
  printf '[runtime]\nthreads = 2\npoll_mode = "sleep"\n'
} >"$CONFIG"

start_sluice "$SLUICE" "$CONFIG" "$IO_PORT" "$DISC_PORT"
log "sluice is up (pid $TARGET_PID)"

# ---------------------------------------------------------------------------
# checks run on this machine: CHECK lines like the guest's
# ---------------------------------------------------------------------------
HOST_OK=0
HOST_FAILED=()
host_ok() { HOST_OK=$((HOST_OK + 1)); echo "CHECK host-$1: ok${2:+ ($2)}"; }
host_fail() { HOST_FAILED+=("host-$1"); echo "CHECK host-$1: FAIL${2:+ ($2)}"; }
# admin NAME SUBCOMMAND ARGS...: `sluice SUBCOMMAND` against the pool subsystem as
# ADMIN_HOSTNQN; output (stdout + stderr) in NAME.txt; returns sluice's status
admin() {
  local name=$1 rc=0
  shift
  "$SLUICE" "$1" -a 127.0.0.1 -s "$IO_PORT" -n "$POOL_NQN" -q "$ADMIN_HOSTNQN" --timeout 20000 "${@:2}" \
    >"$OUT_DIR/$name.txt" 2>&1 </dev/null || rc=$?
  return "$rc"
}

# The namespace the guest must learn about through the asynchronous event.
EVENT_BLOCKS=$(blocks_of "$EVENT_NS_MIB")
EVENT_NSID=''
if admin create-ns create-ns --nsze "$EVENT_BLOCKS" &&
    EVENT_NSID=$(sed -n 's/^create-ns: Success, created nsid:\([0-9][0-9]*\)$/\1/p' "$OUT_DIR/create-ns.txt") &&
    [ -n "$EVENT_NSID" ]; then
  host_ok create-ns "namespace $EVENT_NSID, $EVENT_BLOCKS blocks, attached to nobody yet"
else
  host_fail create-ns "$(tail -n 1 "$OUT_DIR/create-ns.txt")"
  EVENT_NSID=1
fi
# A refusal: more than the pool holds.
if admin create-ns-too-big create-ns --nsze "$((POOL_BLOCKS + 1))"; then
  host_fail create-ns-too-big "a namespace larger than the pool was created"
elif grep -q 'Namespace Insufficient Capacity' "$OUT_DIR/create-ns-too-big.txt" &&
    grep -q 'the pool has not enough free space' "$OUT_DIR/create-ns-too-big.txt"; then
  host_ok create-ns-too-big "$(sed 's/^sluice: //' "$OUT_DIR/create-ns-too-big.txt")"
else
  host_fail create-ns-too-big "unexpected message: $(cat "$OUT_DIR/create-ns-too-big.txt")"
fi

# ---------------------------------------------------------------------------
# capture, then the guest (in the background: this side acts in the middle)
# ---------------------------------------------------------------------------
capture_start "$OUT_DIR/capture.pcap" "$OUT_DIR/tshark-capture.log" "$IO_PORT" "$DISC_PORT" ||
  die "tshark could not start capturing on lo"

guest_env="IO_PORT=$IO_PORT POOL_NQN=$POOL_NQN CACHE_NQN=$CACHE_NQN EVENT_NSID=$EVENT_NSID"
guest_env+=" EVENT_BLOCKS=$EVENT_BLOCKS BLOCK_SIZE=$BLOCK_SIZE CACHE_TIER_BLOCKS=$(blocks_of "$TIER_SLOW_MIB")"
guest_env+=" CACHE_NS_BLOCKS=$(blocks_of "$CACHE_NS_MIB") CAPACITY_NS_BLOCKS=$(blocks_of "$CAPACITY_NS_MIB")"
guest_env+=" RBD_NSID=${RBD_NSID:-none} RBD_BLOCKS=$(blocks_of "$RBD_MIB")"
# Debian 12's 6.1 kernel sometimes never finishes removing a namespace that had I/O
# (its scan work waits forever in del_gendisk's synchronize_srcu with no reader left;
# the task dump the guest takes shows it): this guest runs bookworm-backports' 6.12.
use_backports_kernel_peer
log "booting the Linux host guest (host NQN $GUEST_HOSTNQN; timeout ${GUEST_TIMEOUT}s; output: guest.log, details: guest/)"
t_guest=$SECONDS
TMPDIR=$OUT_DIR/peer "$LNP" initiator --keep --timeout "$GUEST_TIMEOUT" \
  --target-port "$IO_PORT" --hostnqn "$GUEST_HOSTNQN" \
  --share "$SHARE" --add "$GUEST_SCRIPT:/root/storage-guest.sh" --add "$REPO/tests/interop/guest/checks.sh:/root/checks.sh" \
  -- "$guest_env sh /root/storage-guest.sh" </dev/null >"$OUT_DIR/guest.log" 2>&1 &
GUEST_PID=$!
# Stream the guest's output here as it comes.
tail -n +1 -f "$OUT_DIR/guest.log" --pid "$GUEST_PID" &
TAIL_PID=$!

guest_alive() { kill -0 "$GUEST_PID" 2>/dev/null || return 2; }
# wait_marker SECONDS FILE: FILE in the share appears while the guest runs
wait_marker() {
  _marker_there() { [ -e "$SHARE/$1" ] || { guest_alive || return 2; return 1; }; }
  wait_for "$1" "the guest's $2" _marker_there "$2"
}

# The asynchronous event: attach the namespace to the guest's controller from here.
CNTLID=''
if wait_marker 300 cntlid; then
  CNTLID=$(cat "$SHARE/cntlid")
fi
if [[ "$CNTLID" =~ ^[0-9]+$ ]]; then
  log "the guest's controller on $POOL_NQN is CNTLID $CNTLID: attaching namespace $EVENT_NSID to it from here"
  if admin attach-ns attach-ns -N "$EVENT_NSID" -c "$CNTLID" &&
      grep -qx "attach-ns: Success, nsid:$EVENT_NSID" "$OUT_DIR/attach-ns.txt"; then
    host_ok attach-ns "namespace $EVENT_NSID to controller $CNTLID (host NQN $GUEST_HOSTNQN)"
  else
    host_fail attach-ns "$(tail -n 1 "$OUT_DIR/attach-ns.txt")"
  fi
  : >"$SHARE/attach.done"
  if admin list-ctrl list-ctrl -N "$EVENT_NSID" &&
      grep -qx "\[   0\]:$(printf '%#x' "$CNTLID")" "$OUT_DIR/list-ctrl.txt" &&
      grep -qx "num of ctrls present: 1" "$OUT_DIR/list-ctrl.txt"; then
    host_ok list-ctrl "namespace $EVENT_NSID is attached to controller $CNTLID only"
  else
    host_fail list-ctrl "$(tr '\n' ' ' <"$OUT_DIR/list-ctrl.txt")"
  fi
  if wait_marker 60 event-attach.seen; then
    if admin detach-ns detach-ns -N "$EVENT_NSID" -c "$CNTLID" &&
        grep -qx "detach-ns: Success, nsid:$EVENT_NSID" "$OUT_DIR/detach-ns.txt"; then
      host_ok detach-ns "namespace $EVENT_NSID from controller $CNTLID"
    else
      host_fail detach-ns "$(tail -n 1 "$OUT_DIR/detach-ns.txt")"
    fi
    : >"$SHARE/detach.done"
  else
    host_fail detach-ns "the guest never reported on the attached namespace"
  fi
else
  host_fail attach-ns "the guest did not publish its CNTLID ('$CNTLID')"
fi
if admin delete-ns delete-ns -N "$EVENT_NSID" &&
    grep -qx "delete-ns: Success, deleted nsid:$EVENT_NSID" "$OUT_DIR/delete-ns.txt"; then
  host_ok delete-ns "namespace $EVENT_NSID"
else
  host_fail delete-ns "$(tail -n 1 "$OUT_DIR/delete-ns.txt")"
fi

guest_rc=0
wait "$GUEST_PID" || guest_rc=$?
GUEST_PID=''
wait "$TAIL_PID" 2>/dev/null || true
log "guest finished with status $guest_rc after $((SECONDS - t_guest))s"
console=$(find "$OUT_DIR/peer" -name console.log -print -quit 2>/dev/null || true)
[ -n "$console" ] && tr -d '\r' <"$console" >"$OUT_DIR/guest-console.log"

# Every namespace is gone (the guest's 24 and ours): the pool has all its space back
# once no queue holds a deleted namespace (space release is deferred, so poll).
pool_space() {
  admin id-ctrl id-ctrl -o json || return 2
  python3 -c 'import json, sys; d = json.load(open(sys.argv[1])); sys.exit(0 if d["unvmcap"] == d["tnvmcap"] else 1)' \
    "$OUT_DIR/id-ctrl.txt"
}
if wait_for 20 "the pool's space to come back" pool_space; then
  host_ok pool-space-released "unvmcap = tnvmcap = $(python3 -c 'import json, sys; print(json.load(open(sys.argv[1]))["tnvmcap"])' "$OUT_DIR/id-ctrl.txt") bytes"
else
  host_fail pool-space-released "$(grep -E '"[ut]nvmcap"' "$OUT_DIR/id-ctrl.txt" | tr -d ' \n')"
fi

# ---------------------------------------------------------------------------
# stop the target and the capture, dissect
# ---------------------------------------------------------------------------
failures=()
case $guest_rc in
  0) ;;
  124) failures+=("guest run timed out after ${GUEST_TIMEOUT}s") ;;
  125) failures+=("linux-nvme-peer harness/boot error (status 125; see guest.log and peer/)") ;;
  *) failures+=("guest checks failed (status $guest_rc)") ;;
esac
[ ${#HOST_FAILED[@]} -eq 0 ] || failures+=("${#HOST_FAILED[@]} check(s) on this machine failed: ${HOST_FAILED[*]}")

stop_target
n_err=$(grep -c -E '(^|[^[:alnum:]])ERROR([^[:alnum:]]|$)' "$OUT_DIR/sluice.log" || true)
if [ "$n_err" -ne 0 ]; then
  failures+=("sluice.log has $n_err ERROR line(s)")
  grep -E '(^|[^[:alnum:]])ERROR([^[:alnum:]]|$)' "$OUT_DIR/sluice.log" | head -n 10 | sed 's/^/  | /'
fi
capture_stop "$OUT_DIR/tshark-capture.log"

log "dissecting the capture (NVMe/TCP on ports $IO_PORT and $DISC_PORT, digests verified)"
if ! capture_check "$OUT_DIR/capture.pcap" "$OUT_DIR/tshark-summary.txt" 1 "$IO_PORT" "$DISC_PORT"; then
  failures+=("capture check failed (see tshark-summary.txt)")
fi
# The event on the wire: Asynchronous Event Request completions with a Namespace
# Attribute Changed notice (type 2, information 0, log page 04h), each followed by
# the host reading the Changed Namespace List. At least two come from this
# machine's attach-ns and detach-ns; the guest's own changes add more.
notices=$OUT_DIR/namespace-notices.txt
if tshark -r "$OUT_DIR/capture.pcap" -n -d "tcp.port==$IO_PORT,nvme-tcp" \
    -Y 'nvme.cqe.dword0.aev.aet == 2 && nvme.cqe.dword0.aev.aei == 0 && nvme.cqe.dword0.aev.lpi == 4 || nvme.cmd.get_logpage.dword10.id == 4' \
    -T fields -e frame.number -e frame.time_relative -e tcp.stream -e _ws.col.Info >"$notices" 2>"$notices.err"; then
  n_notices=$(grep -c 'CQE for Async Event Request' "$notices" || true)
  n_reads=$(grep -c 'Get Log Page Changed Namespace List' "$notices" || true)
  if [ "$n_notices" -ge 2 ] && [ "$n_reads" -ge "$n_notices" ]; then
    host_ok capture-namespace-notices "$n_notices namespace attribute notices, $n_reads Changed Namespace List reads"
  else
    host_fail capture-namespace-notices "$n_notices notices and $n_reads Changed Namespace List reads on the wire (see namespace-notices.txt)"
    failures+=("namespace attribute notices missing on the wire")
  fi
else
  host_fail capture-namespace-notices "tshark failed: $(tail -n 1 "$notices.err")"
  failures+=("tshark could not list the namespace notices")
fi

# ---------------------------------------------------------------------------
# verdict
# ---------------------------------------------------------------------------
finish_with_verdict storage ", capture clean, sluice stopped cleanly" "guest.log, guest/*.txt, sluice.log, capture.pcap, tshark-summary.txt"
