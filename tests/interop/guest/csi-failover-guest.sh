#!/bin/sh
# shellcheck shell=dash
# Guest half of tests/interop/csi-failover.sh. Runs inside the linux-nvme-peer guest
# (busybox ash, Linux 6.1 nvme-tcp with native multipath, nvme-cli 2.3, fio 3.33) as
# a Kubernetes node would, with the CSI calls of kubelet and the external
# provisioner/attacher issued one by one by csi-call (apps/sluice-csi/examples):
#   1. sluice-csi (all services) with both gateways' management APIs (--api a,b);
#      CreateVolume on an RBD StorageClass, ControllerPublishVolume to this node,
#      NodeStageVolume (ext4) and NodePublishVolume;
#   2. the node is connected to both gateways: one head device found by the volume's
#      UUID, two live paths, a optimized and b non-optimized;
#   3. fio writes and verifies a file on the published ext4 volume (marker
#      fio.started) while the host SIGKILLs gateway a: no error, and b's path turns
#      optimized; the longest completion is the pause the application saw;
#   4. NodeUnpublish, NodeUnstage (nothing of the subsystem left connected),
#      ControllerUnpublish and DeleteVolume with gateway a dead: the driver's calls go
#      to b.
#
# Environment (set by csi-failover.sh): API_A, API_B (HOST:PORT as the guest reaches
# them), PORT_A, PORT_B (the I/O listeners), SUBSYSTEM, FIO_SECONDS.
# Files: /root/kit, /root/sluice-csi, /root/csi-call, /root/pki, /root/checks.sh;
# artifacts and markers go to /host (the host's $OUT/csi-failover/guest).

# Functions here are also called indirectly (wait_until):
# shellcheck disable=SC2317
API_A=${API_A:?API_A is not set}
API_B=${API_B:?API_B is not set}
PORT_A=${PORT_A:?PORT_A is not set}
PORT_B=${PORT_B:?PORT_B is not set}
NQN=${SUBSYSTEM:?SUBSYSTEM is not set}
FIO_SECONDS=${FIO_SECONDS:-30}
SOCKET=/tmp/csi.sock
STAGING=/var/lib/kubelet/plugins/csi.sluice.io/staging/pvc-failover
TARGET=/var/lib/kubelet/pods/failover/volumes/pvc-failover/mount

if [ -d /host ] && : 2>/dev/null >/host/.writable; then LOGDIR=/host; rm -f /host/.writable
else LOGDIR=/tmp/csi-failover; mkdir -p "$LOGDIR"; fi

# shellcheck source=tests/interop/guest/checks.sh
. /root/checks.sh

# path_state PORT: "live optimized", "connecting ...", ... of the subsystem's
# controller connected through PORT ("" when none)
path_state() {
  local ctrl state ana
  for ctrl in /sys/class/nvme/nvme*; do
    [ -e "$ctrl/address" ] || continue
    grep -q "trsvcid=$1" "$ctrl/address" || continue
    [ "$(cat "$ctrl/subsysnqn")" = "$NQN" ] || continue
    state=$(cat "$ctrl/state")
    ana=$(cat "$ctrl"/nvme*c*n*/ana_state 2>/dev/null | head -n 1)
    echo "$state${ana:+ $ana}"
    return 0
  done
}
path_is() { [ "$(path_state "$1")" = "$2" ]; }
controllers() { cat /sys/class/nvme/*/subsysnqn 2>/dev/null | grep -c "^$NQN$"; }

# csi NAME CMD...: one CSI call through csi-call; its output in $LOGDIR/csi-NAME.txt
# and in CSI_OUT; a check line either way
csi() {
  local name=$1 rc
  shift
  timeout 90 /root/csi-call --endpoint "unix://$SOCKET" "$@" >"$LOGDIR/csi-$name.txt" 2>&1
  rc=$?
  CSI_OUT=$(cat "$LOGDIR/csi-$name.txt")
  if [ $rc -eq 0 ]; then ok "csi-$name" "$(echo "$CSI_OUT" | head -c 160)"
  else fail "csi-$name" "status $rc: $(echo "$CSI_OUT" | tail -n 2 | head -c 300)"; fi
  return $rc
}

# diagnose: what the node looks like when a step fails (paths, ANA states, what
# blocks in the kernel), into $LOGDIR/diagnosis.txt
diagnose() {
  {
    nvme list-subsys 2>&1
    for ctrl in /sys/class/nvme/nvme*; do
      echo "$ctrl: $(cat "$ctrl/address" 2>/dev/null) state=$(cat "$ctrl/state" 2>/dev/null)" \
        "ana=$(cat "$ctrl"/nvme*c*n*/ana_state 2>/dev/null | tr '\n' ' ')"
    done
    ls -l /sys/block 2>&1
    ps 2>&1
    for pid in $(pgrep -f 'blkid|mkfs|mount' 2>/dev/null); do echo "stack of $pid ($(tr '\0' ' ' <"/proc/$pid/cmdline")):"; cat "/proc/$pid/stack" 2>&1; done
  } >"$LOGDIR/diagnosis.txt" 2>&1
  tail -n 40 "$LOGDIR/diagnosis.txt"
}

finish() {
  # The kernel log first: a process stuck in I/O may not die.
  dmesg >"$LOGDIR/guest-dmesg.log" 2>&1 || true
  kill "$csi_pid" 2>/dev/null || true
  usleep 500000
  kill -KILL "$csi_pid" 2>/dev/null || true
  sed -i 's/\x1b\[[0-9;]*m//g' "$LOGDIR/sluice-csi.log" 2>/dev/null
  : >"$LOGDIR/guest.done"
  echo
  echo "guest checks: $passed ok, $failed failed${failed_names:+:$failed_names}"
  [ "$failed" -eq 0 ]
  exit $?
}

section "the node: kit, identity, sluice-csi with both gateways' APIs"
# shellcheck source=/dev/null
. /root/kit/env.sh || { fail node-kit "/root/kit did not load"; finish; }
mkdir -p /etc/nvme
HOSTID=$(cat /proc/sys/kernel/random/uuid)
HOSTNQN=$(nvme gen-hostnqn)
case $HOSTNQN in *:00000000-0000-0000-0000-000000000000|'') HOSTNQN=nqn.2014-08.org.nvmexpress:uuid:$HOSTID ;; esac
echo "$HOSTNQN" >/etc/nvme/hostnqn
echo "$HOSTID" >/etc/nvme/hostid
echo "node host NQN: $HOSTNQN"
NO_COLOR=1 /root/sluice-csi --mode all --endpoint "unix://$SOCKET" --api "https://$API_A,https://$API_B" \
  --api-ca /root/pki/ca.pem --api-cert /root/pki/csi-controller.pem --api-key /root/pki/csi-controller.key \
  --node-nqn "$HOSTNQN" --state-dir /run/sluice-csi >"$LOGDIR/sluice-csi.log" 2>&1 &
csi_pid=$!
if wait_until 10 test -S "$SOCKET"; then ok sluice-csi-up "--api https://$API_A,https://$API_B"
else fail sluice-csi-up "no socket after 10 s"; cat "$LOGDIR/sluice-csi.log"; finish; fi

section "create, controller-publish, node-stage, node-publish (gateway a answers)"
csi node-info node-info || finish
NODE_ID=$CSI_OUT
csi create create --name pvc-failover --size-bytes $((256 * 1024 * 1024)) \
  --parameter "subsystem=$NQN" --parameter rbdPool=rbd || finish
VOLUME=$CSI_OUT
echo "$VOLUME" >"$LOGDIR/volume-id"
csi controller-publish controller-publish --volume-id "$VOLUME" --node-id "$NODE_ID" || finish
CONTEXT=$CSI_OUT
csi node-stage node-stage --volume-id "$VOLUME" --staging-path "$STAGING" --publish-context "$CONTEXT" || { diagnose; finish; }
csi node-publish node-publish --volume-id "$VOLUME" --staging-path "$STAGING" --target-path "$TARGET" || finish

section "two paths under native multipath, one head device"
nvme list-subsys >"$LOGDIR/list-subsys-1.txt" 2>&1; cat "$LOGDIR/list-subsys-1.txt"
if wait_until 20 path_is "$PORT_A" "live optimized" && wait_until 20 path_is "$PORT_B" "live non-optimized"; then
  ok two-paths "$(controllers) controllers of $NQN: :$PORT_A live optimized, :$PORT_B live non-optimized"
else
  fail two-paths "a '$(path_state "$PORT_A")', b '$(path_state "$PORT_B")' ($(controllers) controllers)"
fi
device=$(awk -v t="$TARGET" '$2 == t { print $1 }' /proc/mounts | head -n 1)
case $device in
  /dev/nvme[0-9]*n[0-9]*) case $device in *c*) fail head-device "$device is a path, not the multipath head" ;;
                           *) ok head-device "$TARGET is ext4 on $device" ;; esac ;;
  *) fail head-device "nothing mounted at $TARGET ('$device')" ;;
esac

section "fio write+verify on the published volume while the host kills gateway a"
: >"$LOGDIR/fio.started"
timeout $((FIO_SECONDS + 150)) fio --name=failover --filename="$TARGET/fio.data" --ioengine=libaio --direct=1 \
  --rw=randwrite --bs=4k --size=32m --iodepth=4 --verify=crc32c --verify_backlog=64 --verify_fatal=1 \
  --do_verify=1 --time_based=1 --runtime="$FIO_SECONDS" --output="$LOGDIR/fio.txt" \
  --output-format=normal,terse --terse-version=3
fio_rc=$?
: >"$LOGDIR/fio.done"
cat "$LOGDIR/fio.txt"
# terse v3: field 5 is the job's error, 6 and 47 the KiB read (verified) and
# written, 15 and 56 the read and write completion latency maxima in microseconds.
terse=$(grep '^3;' "$LOGDIR/fio.txt" | tail -n 1)
job_error=$(echo "$terse" | awk -F';' '{ print $5 }')
max_us=$(echo "$terse" | awk -F';' '{ m = $56 + 0; if ($15 + 0 > m) m = $15 + 0; print m }')
written=$(echo "$terse" | awk -F';' '{ print $47 }')
verified=$(echo "$terse" | awk -F';' '{ print $6 }')
echo "FIO status=$fio_rc error=${job_error:-none} written_kib=${written:-?} verified_kib=${verified:-?} longest_completion_ms=$(( ${max_us:-0} / 1000 ))" |
  tee "$LOGDIR/fio-summary.txt"
if [ "$fio_rc" -eq 0 ] && [ "${job_error:-1}" = 0 ]; then
  ok fio-across-failover "0 errors, longest completion $(( ${max_us:-0} / 1000 )) ms"
else
  fail fio-across-failover "fio status $fio_rc, error ${job_error:-none reported}"
fi
if wait_until 30 path_is "$PORT_B" "live optimized"; then ok b-optimized "after a was killed: a '$(path_state "$PORT_A")'"
else fail b-optimized "b's path is '$(path_state "$PORT_B")'"; fi
nvme list-subsys >"$LOGDIR/list-subsys-2.txt" 2>&1; cat "$LOGDIR/list-subsys-2.txt"

section "teardown with gateway a dead: the driver's management calls go to b"
csi node-unpublish node-unpublish --volume-id "$VOLUME" --target-path "$TARGET"
csi node-unstage node-unstage --volume-id "$VOLUME" --staging-path "$STAGING"
if [ "$(controllers)" -eq 0 ]; then ok disconnected "no controller of $NQN left"
else fail disconnected "$(controllers) controller(s) of $NQN still connected"; nvme list-subsys 2>&1 | head -n 20; fi
csi controller-unpublish controller-unpublish --volume-id "$VOLUME" --node-id "$NODE_ID"
csi delete delete --volume-id "$VOLUME"
finish
