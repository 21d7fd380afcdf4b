#!/usr/bin/env bash
# Runs the CSI conformance tests (csi-sanity, github.com/kubernetes-csi/csi-test) against
# sluice-csi talking to a real `sluice serve` over its network management API (mutual
# TLS, throw-away certificates; the driver's CN listed read-write): the Identity and
# Controller suites, twice:
# - pool: volumes are thin carves of a file-backed [[pool]]. Carves have no snapshots,
#   so the snapshot and clone specs are skipped in this pass (the driver refuses them
#   with INVALID_ARGUMENT for pool volumes);
# - rbd: volumes are RBD images in the Ceph pool "rbd" (StorageClass rbdPool), with
#   the snapshot and clone specs. It needs a cluster: CEPH_CONF names its ceph.conf
#   (the test command's cluster stage exports it). Without CEPH_CONF the pass is
#   skipped with a message, unless SLUICE_REQUIRE_CEPH=1, which makes that a failure.
#
# The Node suite is skipped here: it connects the kernel's NVMe/TCP host, formats and
# mounts, which needs root and the nvme-tcp module; it runs inside the Linux guest.
#
# Usage: scripts/csi-sanity.sh   (builds sluice and sluice-csi in release mode first
# unless SLUICE_BIN and SLUICE_CSI_BIN name binaries; CSI_SANITY names a csi-sanity
# binary, otherwise it is installed with `go install` into target/csi-tools).
# Prints csi-sanity's own summary line for each pass; exits non-zero if any test failed.
# cleanup runs from the trap, which ShellCheck cannot see:
# shellcheck disable=SC2317
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/lib/common.sh
# shellcheck source=scripts/lib/api-pki.sh
source scripts/lib/api-pki.sh
# shellcheck source=scripts/lib/csi-sanity.sh
source scripts/lib/csi-sanity.sh
# shellcheck source=scripts/lib/csi-gateway.sh
source scripts/lib/csi-gateway.sh

target_dir=${CARGO_TARGET_DIR:-$PWD/target}
if [[ -z ${SLUICE_BIN:-} || -z ${SLUICE_CSI_BIN:-} ]]; then
    cargo build --release -q -p sluice -p sluice-csi
    SLUICE_BIN=$target_dir/release/sluice
    SLUICE_CSI_BIN=$target_dir/release/sluice-csi
fi

CSI_SANITY=${CSI_SANITY:-$PWD/target/csi-tools/csi-sanity}
if [[ ! -x $CSI_SANITY ]]; then
    echo "installing csi-sanity $CSI_SANITY_VERSION into $(dirname "$CSI_SANITY")" >&2
    install_csi_sanity "$CSI_SANITY"
fi

work=$(mktemp -d /tmp/sluice-csi-sanity.XXXXXX)
serve_pid=
csi_pid=
cleanup() {
    [[ -n $csi_pid ]] && { kill "$csi_pid" 2>/dev/null || true; wait "$csi_pid" 2>/dev/null || true; }
    [[ -n $serve_pid ]] && { kill "$serve_pid" 2>/dev/null || true; wait "$serve_pid" 2>/dev/null || true; }
    rm -rf "$work"
}
trap cleanup EXIT

io_port=$(free_port)
discovery_port=$(free_port)
api_port=$(free_port)
make_api_pki "$work/pki" "IP:127.0.0.1" csi-controller
subsystem=nqn.2026-11.io.sluice:csi-sanity
write_csi_gateway_config "$work/sluice.toml" "$work" "$subsystem" "$api_port" "$work/pki" \
    "127.0.0.1:$io_port" "127.0.0.1:$discovery_port/discovery"

rbd_subsystem=nqn.2026-11.io.sluice:csi-sanity-rbd
rbd_pass=no
if [[ -n ${CEPH_CONF:-} ]]; then
    [[ -r $CEPH_CONF ]] || { echo "CEPH_CONF=$CEPH_CONF cannot be read: no cluster for the rbd pass" >&2; exit 1; }
    rbd_pass=yes
    # RBD volumes go into a subsystem of their own (the pool subsystem takes carves).
    printf '\n[[subsystem]]\nnqn = "%s"\n' "$rbd_subsystem" >> "$work/sluice.toml"
elif [[ ${SLUICE_REQUIRE_CEPH:-} == 1 ]]; then
    echo "SLUICE_REQUIRE_CEPH=1 but CEPH_CONF is not set: no cluster for the rbd pass" >&2
    exit 1
fi

cat > "$work/parameters.yaml" <<YAML
subsystem: "$subsystem"
pool: "csi"
YAML
cat > "$work/rbd-parameters.yaml" <<YAML
subsystem: "$rbd_subsystem"
rbdPool: "rbd"
YAML

"$SLUICE_BIN" serve --config "$work/sluice.toml" --threads 1 --rpc-socket "$work/api.sock" \
    > "$work/serve.log" 2>&1 &
serve_pid=$!
for _ in $(seq 100); do [[ -S $work/api.sock ]] && break; sleep 0.1; done
[[ -S $work/api.sock ]] || { echo "sluice serve did not start:" >&2; cat "$work/serve.log" >&2; exit 1; }
for _ in $(seq 100); do ss -Hltn "sport = :$api_port" | grep -q . && break; sleep 0.1; done
ss -Hltn "sport = :$api_port" | grep -q . ||
    { echo "sluice serve does not listen on its management API port $api_port:" >&2; cat "$work/serve.log" >&2; exit 1; }

# All services in one process: the controller suite calls NodeGetInfo for a node id,
# and its cleanup calls NodeUnpublish/NodeUnstage (no-ops for volumes never staged).
"$SLUICE_CSI_BIN" --endpoint "unix://$work/csi.sock" --api "https://127.0.0.1:$api_port" --mode all \
    --api-ca "$work/pki/ca.pem" --api-cert "$work/pki/csi-controller.pem" --api-key "$work/pki/csi-controller.key" \
    --node-nqn nqn.2014-08.org.nvmexpress:uuid:5a1c0e00-0000-4000-8000-00000000c510 \
    > "$work/csi.log" 2>&1 &
csi_pid=$!
for _ in $(seq 100); do [[ -S $work/csi.sock ]] && break; sleep 0.1; done
[[ -S $work/csi.sock ]] || { echo "sluice-csi did not start:" >&2; cat "$work/csi.log" >&2; exit 1; }

# run_pass NAME PARAMETERS SKIP: one csi-sanity run; prints its summary lines.
run_pass() {
    local name=$1 parameters=$2 skip=$3 pass_status=0
    "$CSI_SANITY" --csi.endpoint "unix://$work/csi.sock" \
        --csi.testvolumeparameters "$parameters" \
        --csi.testvolumesize 67108864 \
        --csi.mountdir "$work/mount" --csi.stagingdir "$work/staging" \
        --ginkgo.skip "$skip" --ginkgo.no-color \
        > "$work/sanity-$name.log" 2>&1 || pass_status=$?
    if [[ $pass_status -ne 0 ]]; then
        cat "$work/sanity-$name.log"
        echo "--- sluice-csi log" >&2; tail -n 50 "$work/csi.log" >&2
    fi
    # csi-sanity's (ginkgo's) own summary line, e.g. "Ran 30 of 91 Specs ... 30 Passed | 0 Failed | ..."
    echo "[$name] $(grep -E '^Ran [0-9]+ of [0-9]+ Specs' "$work/sanity-$name.log" || true)"
    echo "[$name] $(grep -E '(Passed|FAIL!|SUCCESS!).*\| [0-9]+ Failed' "$work/sanity-$name.log" || true)"
    return "$pass_status"
}

status=0
run_pass pool "$work/parameters.yaml" 'Node Service|Snapshot|source snapshot|source volume' || status=$?
if [[ $rbd_pass == yes ]]; then
    run_pass rbd "$work/rbd-parameters.yaml" 'Node Service' || status=$?
else
    echo "[rbd] skipped: CEPH_CONF is not set (no Ceph cluster; scripts run by the test command's cluster stage set it)"
fi
exit "$status"
