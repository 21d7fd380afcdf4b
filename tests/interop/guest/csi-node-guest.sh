#!/bin/sh
# shellcheck shell=dash
# Guest half of tests/interop/csi-node.sh. Runs inside the linux-nvme-peer guest
# (busybox ash, Linux 6.1 nvme-tcp with native multipath, nvme-cli 2.3) as a
# Kubernetes node would: sluice-csi (all services) talks to `sluice serve` on the
# host over its network management API (mutual TLS) and attaches volumes with the
# kernel's NVMe/TCP host; csi-sanity runs every suite (Identity, Controller, Node)
# against it. Not meant to be run on the host.
#
# Environment (set by csi-node.sh):
#   API_ADDRESS   the management API as the guest reaches it (10.0.2.2:PORT)
#   SUBSYSTEM     the subsystem the test volumes are made in
# Files: /root/kit (scripts/lib/guest-node-kit.sh), /root/sluice-csi, /root/csi-sanity,
# /root/pki (ca.pem, csi-controller.pem/.key), /root/parameters.yaml,
# /root/csi-check-path.sh; artifacts go to /host (the host's $OUT/csi-node).

API_ADDRESS=${API_ADDRESS:?API_ADDRESS is not set}
LOGDIR=/host
[ -d "$LOGDIR" ] || { LOGDIR=/tmp/csi-node; mkdir -p "$LOGDIR"; }

fail() { echo "csi-node-guest: $*" >&2; exit 1; }

# ext4 (modules) and mkfs.ext4 / blkid, which the guest image does not have.
# shellcheck source=/dev/null
. /root/kit/env.sh || fail "the node kit (/root/kit) did not load"

# A node's identity, as `nvme gen-hostnqn` gives one; a fixed host ID with it, so
# that every path of a subsystem is the same host to the kernel and the gateway.
# nvme-cli 2.3 derives the NQN from the DMI product UUID, which is all zeros under
# QEMU without -uuid: a random UUID then, as a node's would be unique.
mkdir -p /etc/nvme
HOSTID=$(cat /proc/sys/kernel/random/uuid)
HOSTNQN=$(nvme gen-hostnqn) || fail "nvme gen-hostnqn failed"
case $HOSTNQN in *:00000000-0000-0000-0000-000000000000) HOSTNQN=nqn.2014-08.org.nvmexpress:uuid:$HOSTID ;; esac
echo "$HOSTNQN" >/etc/nvme/hostnqn
echo "$HOSTID" >/etc/nvme/hostid
echo "node host NQN: $HOSTNQN"

NO_COLOR=1 /root/sluice-csi --mode all --endpoint unix:///tmp/csi.sock --api "https://$API_ADDRESS" \
  --api-ca /root/pki/ca.pem --api-cert /root/pki/csi-controller.pem --api-key /root/pki/csi-controller.key \
  --node-nqn "$HOSTNQN" --state-dir /run/sluice-csi >"$LOGDIR/sluice-csi.log" 2>&1 &
csi_pid=$!
i=0
while [ ! -S /tmp/csi.sock ] && [ $i -lt 100 ]; do
  kill -0 "$csi_pid" 2>/dev/null || { cat "$LOGDIR/sluice-csi.log"; fail "sluice-csi exited at start"; }
  usleep 100000; i=$((i + 1))
done
[ -S /tmp/csi.sock ] || fail "sluice-csi does not listen on /tmp/csi.sock after 10 s"

# Every suite. NodeExpandVolume runs: the controller grows the carve through
# ns_resize, the kernel host re-reads the namespace on the gateway's notice, and the
# node grows ext4 online (resize2fs). NodeGetVolumeHealth and NodeGetStorageHealth
# skip themselves: the driver does not offer those capabilities. The snapshot and clone specs are skipped: the volumes here are pool
# carves, which have none (the driver refuses them, naming rbdPool); they run in the
# RBD pass of scripts/csi-sanity.sh. The check-path command also writes and reads back a file on each
# published filesystem volume it is asked about (csi-node-check-path.sh).
: >"$LOGDIR/ext4-checks.log"
status=0
EXT4_CHECK_LOG=$LOGDIR/ext4-checks.log /root/csi-sanity --csi.endpoint unix:///tmp/csi.sock \
  --csi.testvolumeparameters /root/parameters.yaml --csi.testvolumesize 67108864 \
  --csi.stagingdir /tmp/csi-staging --csi.mountdir /tmp/csi-mount \
  --csi.checkpathcmd /root/csi-check-path.sh \
  --ginkgo.skip 'Snapshot|source snapshot|source volume' \
  --ginkgo.no-color --ginkgo.v --ginkgo.timeout 20m >"$LOGDIR/sanity.log" 2>&1 || status=$?
# csi-sanity's (ginkgo's) own summary lines
grep -E '^Ran [0-9]+ of [0-9]+ Specs' "$LOGDIR/sanity.log"
grep -E '(Passed|FAIL!|SUCCESS!).*\| [0-9]+ Failed' "$LOGDIR/sanity.log"
if [ "$status" -ne 0 ]; then
  grep -E '^\s*\[FAIL\]|^  \[FAILED\]' "$LOGDIR/sanity.log" | head -n 20
  echo "csi-sanity failed (status $status): see sanity.log and sluice-csi.log"
fi

# The hand check: at least one staged and published filesystem volume held a working
# ext4 filesystem (a file written, the page cache dropped, the file read back).
cat "$LOGDIR/ext4-checks.log"
grep -q '^CHECK ext4 .*: ok$' "$LOGDIR/ext4-checks.log" || { echo "CHECK ext4 write/read: FAIL (no published ext4 volume was checked)"; status=1; }
grep -q ': FAIL' "$LOGDIR/ext4-checks.log" && status=1

# Expansion: the grown namespace reached the kernel through the gateway's Namespace
# Attribute Changed notice (no rescan was needed) before NodeExpandVolume grew ext4.
if grep -q "the kernel sees the new size on the gateway's notice" "$LOGDIR/sluice-csi.log"; then
  echo "CHECK expansion seen through the namespace notice: ok"
else
  echo "CHECK expansion seen through the namespace notice: FAIL"
  grep -E "new size|expanded" "$LOGDIR/sluice-csi.log" | head -n 5
  status=1
fi

# Nothing of the test is left connected: every unstage disconnected its subsystem.
left=$(cat /sys/class/nvme/*/subsysnqn 2>/dev/null | grep -c "^${SUBSYSTEM:-}$" || true)
if [ "$left" -ne 0 ]; then
  echo "CHECK disconnected after unstage: FAIL ($left controller(s) of ${SUBSYSTEM:-} still connected)"
  nvme list-subsys 2>&1 | head -n 20
  status=1
else
  echo "CHECK disconnected after unstage: ok"
fi

kill "$csi_pid" 2>/dev/null || true
wait "$csi_pid" 2>/dev/null || true
dmesg >"$LOGDIR/guest-dmesg.log" 2>&1 || true
exit "$status"
