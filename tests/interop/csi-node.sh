#!/usr/bin/env bash
# Interop: the CSI driver's Node service on a real Linux NVMe/TCP host. sluice-csi
# runs inside a linux-nvme-peer guest (Linux 6.1 nvme-tcp with native multipath,
# nvme-cli 2.3, ext4 and e2fsprogs from scripts/lib/guest-node-kit.sh) and talks to
# `sluice serve` on this machine over the network management API (mutual TLS,
# throw-away certificates). csi-sanity runs every suite there (Identity,
# Controller, Node): volumes are carved from a file-backed pool, the node discovers
# them, connects both I/O listeners as two paths, finds the multipath head by UUID,
# makes ext4, mounts, bind-mounts, and unstage disconnects. The check-path hook
# writes and reads back a file on each published ext4 volume
# (guest/csi-node-check-path.sh).
#
# The gateway binds 127.0.0.1, which the guest reaches as 10.0.2.2: its listeners
# say so with `advertise`, so that the discovery log and the controller's publish
# context name addresses the node can dial.
#
# One guest boot. Usage: tests/interop/csi-node.sh
# Environment:
#   OUT=DIR              artifact root (default <repo>/target/interop); this test
#                        writes to DIR/csi-node/ (sluice.log, sluice-csi.log, sanity.log,
#                        ext4-checks.log, guest.log, guest-dmesg.log)
#   SLUICE_BIN=PATH      sluice binary (default: build target/release/sluice)
#   SLUICE_CSI_BIN=PATH  sluice-csi binary (default: build target/release/sluice-csi)
#   CSI_SANITY=PATH      csi-sanity binary (default: target/csi-tools/csi-sanity,
#                        installed with `go install` when missing)
#   GUEST_TIMEOUT=S      bound for the whole guest run (default 1500)
# Functions here are also called indirectly (traps, wait_for), which ShellCheck
# cannot see:
# shellcheck disable=SC2317
set -euo pipefail

TEST_NAME=csi-node
REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
INTEROP_REPO=$REPO
# shellcheck source=tests/interop/lib/common.sh
. "$REPO/tests/interop/lib/common.sh"
# shellcheck source=scripts/lib/common.sh
. "$REPO/scripts/lib/common.sh"
# shellcheck source=scripts/lib/api-pki.sh
. "$REPO/scripts/lib/api-pki.sh"
# shellcheck source=scripts/lib/csi-gateway.sh
. "$REPO/scripts/lib/csi-gateway.sh"

OUT_ROOT=${OUT:-$REPO/target/interop}
mkdir -p "$OUT_ROOT"
OUT_DIR=$(cd "$OUT_ROOT" && pwd)/$TEST_NAME
GUEST_TIMEOUT=${GUEST_TIMEOUT:-1500}
SUBSYSTEM=nqn.2026-11.io.sluice:csi-node
GUEST=$REPO/tests/interop/guest

TARGET_PID='' TARGET_NAME=''
cleanup() {
  local rc=$?
  trap - EXIT INT TERM
  [ -n "$TARGET_PID" ] && { stop_pid "$TARGET_PID" "$TARGET_NAME" 20 TERM || true; }
  exit "$rc"
}
trap cleanup EXIT
trap 'log "interrupted"; exit 130' INT TERM

[ -x "$LNP" ] || die "linux-nvme-peer not found at $LNP (expected in ../shared/ next to the repository)"
rm -rf "$OUT_DIR"
mkdir -p "$OUT_DIR/guest" "$OUT_DIR/peer" "$OUT_DIR/gateway"

# ---------------------------------------------------------------------------
# binaries: sluice, sluice-csi, csi-sanity, the node kit
# ---------------------------------------------------------------------------
use_sluice_binary
if [ -n "${SLUICE_CSI_BIN:-}" ]; then
  SLUICE_CSI=$SLUICE_CSI_BIN
else
  SLUICE_CSI=${CARGO_TARGET_DIR:-$REPO/target}/release/sluice-csi
  log "cargo build --release -p sluice-csi"
  (cd "$REPO" && cargo build --release -p sluice-csi --quiet) >"$OUT_DIR/build-csi.log" 2>&1 ||
    { tail_file "$OUT_DIR/build-csi.log"; die "building sluice-csi failed"; }
fi
[ -x "$SLUICE_CSI" ] || die "sluice-csi binary $SLUICE_CSI not found (build it with cargo build --release -p sluice-csi)"

CSI_SANITY=${CSI_SANITY:-$REPO/target/csi-tools/csi-sanity}
if [ ! -x "$CSI_SANITY" ]; then
  # shellcheck source=scripts/lib/csi-sanity.sh
  . "$REPO/scripts/lib/csi-sanity.sh"
  log "installing csi-sanity $CSI_SANITY_VERSION into $(dirname "$CSI_SANITY")"
  install_csi_sanity "$CSI_SANITY" >"$OUT_DIR/csi-sanity-install.log" 2>&1 ||
    { tail_file "$OUT_DIR/csi-sanity-install.log"; die "cannot install csi-sanity"; }
fi

log "building the guest node kit (ext4 modules, e2fsprogs, blkid)"
LNP=$LNP_REAL bash "$REPO/scripts/lib/guest-node-kit.sh" "$OUT_DIR/kit" >"$OUT_DIR/kit.log" 2>&1 ||
  { tail_file "$OUT_DIR/kit.log"; die "building the guest node kit failed"; }

# ---------------------------------------------------------------------------
# the gateway: two I/O listeners (two paths for multipath), one discovery-only,
# each advertised as the guest reaches it; the management API on 127.0.0.1
# ---------------------------------------------------------------------------
io_port_a=$(free_port) io_port_b=$(free_port) discovery_port=$(free_port) api_port=$(free_port)
make_api_pki "$OUT_DIR/pki" "IP:127.0.0.1,IP:10.0.2.2" csi-controller
write_csi_gateway_config "$OUT_DIR/sluice.toml" "$OUT_DIR/gateway" "$SUBSYSTEM" "$api_port" "$OUT_DIR/pki" \
  "127.0.0.1:$io_port_a=10.0.2.2:$io_port_a" "127.0.0.1:$io_port_b=10.0.2.2:$io_port_b" \
  "127.0.0.1:$discovery_port=10.0.2.2:$discovery_port/discovery"
printf 'subsystem: "%s"\npool: "csi"\n' "$SUBSYSTEM" >"$OUT_DIR/parameters.yaml"
start_sluice "$SLUICE" "$OUT_DIR/sluice.toml" "$io_port_a" "$discovery_port"
wait_for 30 "the management API on port $api_port" port_listening "$api_port" ||
  { tail_file "$OUT_DIR/sluice.log"; die "sluice serve does not listen on its management API port $api_port"; }
log "sluice is up (pid $TARGET_PID): I/O on :$io_port_a and :$io_port_b, discovery on :$discovery_port, API on :$api_port"

# ---------------------------------------------------------------------------
# the guest: sluice-csi + csi-sanity
# ---------------------------------------------------------------------------
# Only what the guest needs of the certificates: the CA and the driver's client pair.
mkdir -p "$OUT_DIR/guest-pki"
cp "$OUT_DIR/pki/ca.pem" "$OUT_DIR/pki/csi-controller.pem" "$OUT_DIR/pki/csi-controller.key" "$OUT_DIR/guest-pki/"
log "booting the node guest (timeout ${GUEST_TIMEOUT}s; output: guest.log)"
t_guest=$SECONDS
set +e
TMPDIR=$OUT_DIR/peer "$LNP" initiator --keep --timeout "$GUEST_TIMEOUT" --mem 1024 \
  --share "$OUT_DIR/guest" \
  --add "$SLUICE_CSI:/root/sluice-csi" --add "$CSI_SANITY:/root/csi-sanity" \
  --add "$OUT_DIR/kit:/root/kit" --add "$OUT_DIR/guest-pki:/root/pki" \
  --add "$OUT_DIR/parameters.yaml:/root/parameters.yaml" \
  --add "$GUEST/csi-node-check-path.sh:/root/csi-check-path.sh" \
  --add "$GUEST/csi-node-guest.sh:/root/csi-node-guest.sh" \
  -- "API_ADDRESS=10.0.2.2:$api_port SUBSYSTEM=$SUBSYSTEM sh /root/csi-node-guest.sh" </dev/null 2>&1 | tee "$OUT_DIR/guest.log"
guest_rc=${PIPESTATUS[0]}
set -e
guest_seconds=$((SECONDS - t_guest))
log "guest finished with status $guest_rc after ${guest_seconds}s"
# The guest's artifacts next to the others.
cp -r "$OUT_DIR/guest/." "$OUT_DIR/" 2>/dev/null || true
[ -f "$OUT_DIR/sluice-csi.log" ] && sed -i 's/\x1b\[[0-9;]*m//g' "$OUT_DIR/sluice-csi.log"
console=$(find "$OUT_DIR/peer" -name console.log -print -quit 2>/dev/null || true)
[ -n "$console" ] && tr -d '\r' <"$console" >"$OUT_DIR/guest-console.log"

failures=()
case $guest_rc in
  0) ;;
  124) failures+=("guest run timed out after ${GUEST_TIMEOUT}s") ;;
  125) failures+=("linux-nvme-peer harness/boot error (status 125; see guest.log and peer/)") ;;
  *) failures+=("csi-sanity or the guest checks failed (status $guest_rc; see sanity.log, sluice-csi.log)") ;;
esac
stop_target
grep -q 'panicked at' "$OUT_DIR/sluice-csi.log" 2>/dev/null && failures+=("sluice-csi panicked (see sluice-csi.log)")

summary=$(grep -E '^Ran [0-9]+ of [0-9]+ Specs|(Passed|FAIL!|SUCCESS!).*\| [0-9]+ Failed' "$OUT_DIR/sanity.log" 2>/dev/null | tr '\n' ' ' || true)
{
  echo "csi-node interop ($(git -C "$REPO" rev-parse --short HEAD 2>/dev/null || echo '?')), guest ${guest_seconds}s"
  echo "csi-sanity: ${summary:-no summary (see guest.log)}"
  echo "problems: ${#failures[@]}"
  printf '  %s\n' "${failures[@]}"
} >"$OUT_DIR/result.txt"
if [ ${#failures[@]} -eq 0 ]; then
  log "PASS: csi-sanity in the guest: $summary (artifacts: $OUT_DIR)"
  exit 0
fi
log "FAIL: ${#failures[@]} problem(s):"
printf '  - %s\n' "${failures[@]}"
echo "  artifacts: $OUT_DIR (guest.log, sanity.log, sluice-csi.log, sluice.log, guest-console.log)"
exit 1
