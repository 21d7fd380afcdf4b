#!/usr/bin/env bash
# Interop, the Kubernetes issue's acceptance: a volume staged by the CSI driver on a
# two-gateway group survives killing one gateway during a fio verify, the node's
# native multipath carrying it.
#
# Two `sluice serve` gateways (a, b) of one gateway group run on the cluster at
# CEPH_CONF with the group's configuration in the cluster (config = "cluster"), so a
# namespace the driver adds through a's management API is served by b too. Each has
# the network management API (mutual TLS, throw-away certificates) and its I/O
# listener advertised as 10.0.2.2:PORT, the address the guest dials; the group's
# member addresses are those too, since every member's discovery log announces its
# peers' paths by member address.
#
# In one linux-nvme-peer guest (guest/csi-failover-guest.sh): sluice-csi --mode all
# with both APIs (--api a,b); csi-call (apps/sluice-csi/examples/csi-call.rs) issues
# CreateVolume (RBD StorageClass), ControllerPublishVolume, NodeStageVolume (ext4)
# and NodePublishVolume; the node must hold two paths (a optimized, b
# non-optimized) under one head device. fio writes and verifies a file on the
# volume while this script SIGKILLs gateway a; fio must end with zero errors through
# b, whose path turns optimized. Then NodeUnpublish, NodeUnstage, ControllerUnpublish
# and DeleteVolume with a dead: the driver's calls go to b, and b no longer lists the
# namespace.
#
# One guest boot, about 2-3 minutes. Usage: tests/interop/csi-failover.sh
# Environment:
#   OUT=DIR                artifact root (default <repo>/target/interop); this test
#                          writes to DIR/csi-failover/ (a.log, b.log, sluice-csi.log,
#                          fio.txt, guest.log, guest-dmesg.log, result.txt)
#   SLUICE_BIN=PATH        sluice binary (default: build target/release/sluice)
#   SLUICE_CSI_BIN=PATH    sluice-csi binary (default: build it)
#   CSI_CALL_BIN=PATH      the csi-call example (default: build it next to sluice-csi)
#   CEPH_CONF=PATH         the cluster (pool "rbd"); without it the test is skipped
#                          (exit 77), unless SLUICE_REQUIRE_CEPH is set (then it fails)
#   FIO_SECONDS=S          length of the fio run across the kill (default 30)
#   GUEST_TIMEOUT=S        bound for the whole guest run (default 400)
# Functions here are also called indirectly (traps, wait_for), which ShellCheck
# cannot see:
# shellcheck disable=SC2317
set -euo pipefail

TEST_NAME=csi-failover
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
SHARE=$OUT_DIR/guest
GUEST=$REPO/tests/interop/guest
GUEST_TIMEOUT=${GUEST_TIMEOUT:-400}
FIO_SECONDS=${FIO_SECONDS:-30}
SUBSYSTEM=nqn.2026-11.io.sluice:csi-failover
# The group: RADOS objects rbd/sluice.gateway.csi-failover (leases) and
# rbd/sluice.config.csi-failover (its configuration). A short lease keeps the test
# short; the takeover takes it plus at most a quarter.
GROUP=csi-failover
LEASE_MS=3000

if [ -z "${CEPH_CONF:-}" ]; then
  [ -n "${SLUICE_REQUIRE_CEPH:-}" ] && die "SLUICE_REQUIRE_CEPH is set but CEPH_CONF is not: start a cluster (scripts/test.sh does)"
  warn "CEPH_CONF is not set: the CSI failover test needs a Ceph cluster and is skipped"
  exit 77
fi
for tool in rbd rados openssl python3; do
  command -v "$tool" >/dev/null || die "'$tool' is not installed: run scripts/setup.sh"
done
[ -x "$LNP" ] || die "linux-nvme-peer not found at $LNP (expected in ../shared/ next to the repository)"

# remove_group_state: the group's objects and the volume images the driver made
# (rbd/csi-<uuid>), so that every run starts from an empty group
remove_group_state() {
  local image
  rados -c "$CEPH_CONF" -p rbd rm "sluice.config.$GROUP" >/dev/null 2>&1 || true
  rados -c "$CEPH_CONF" -p rbd rm "sluice.gateway.$GROUP" >/dev/null 2>&1 || true
  { rados -c "$CEPH_CONF" -p rbd ls 2>/dev/null || true; } | { grep "^sluice\.reservations\.$GROUP\." || true; } |
    while read -r image; do rados -c "$CEPH_CONF" -p rbd rm "$image" >/dev/null 2>&1 || true; done
  { rbd -c "$CEPH_CONF" ls rbd 2>/dev/null || true; } | { grep '^csi-[0-9a-f]\{32\}$' || true; } |
    while read -r image; do rbd -c "$CEPH_CONF" rm --no-progress "rbd/$image" >/dev/null 2>&1 || true; done
}

declare -A PID=()
GUEST_PID='' TAIL_PID=''
cleanup() {
  local rc=$? name
  trap - EXIT INT TERM
  [ -n "$GUEST_PID" ] && { stop_pid "$GUEST_PID" linux-nvme-peer 10 TERM >/dev/null 2>&1 || true; }
  [ -n "$TAIL_PID" ] && { kill "$TAIL_PID" 2>/dev/null || true; }
  for name in "${!PID[@]}"; do
    [ -n "${PID[$name]}" ] && { stop_pid "${PID[$name]}" "gateway $name" 20 TERM >/dev/null 2>&1 || true; }
  done
  remove_group_state
  exit "$rc"
}
trap cleanup EXIT
trap 'log "interrupted"; exit 130' INT TERM

rm -rf "$OUT_DIR"
mkdir -p "$SHARE" "$OUT_DIR/peer"
t_start=$SECONDS

# ---------------------------------------------------------------------------
# binaries: sluice, sluice-csi, csi-call, the node kit
# ---------------------------------------------------------------------------
use_sluice_binary
SLUICE_CSI=${SLUICE_CSI_BIN:-${CARGO_TARGET_DIR:-$REPO/target}/release/sluice-csi}
CSI_CALL=${CSI_CALL_BIN:-$(dirname "$SLUICE_CSI")/examples/csi-call}
if [ -z "${SLUICE_CSI_BIN:-}" ] || [ ! -x "$CSI_CALL" ]; then
  log "cargo build --release -p sluice-csi --bin sluice-csi --example csi-call"
  (cd "$REPO" && cargo build --release -p sluice-csi --bin sluice-csi --example csi-call --quiet) \
    >"$OUT_DIR/build-csi.log" 2>&1 || { tail_file "$OUT_DIR/build-csi.log"; die "building sluice-csi failed"; }
fi
[ -x "$SLUICE_CSI" ] || die "sluice-csi binary $SLUICE_CSI not found (cargo build --release -p sluice-csi)"
[ -x "$CSI_CALL" ] || die "csi-call $CSI_CALL not found (cargo build --release -p sluice-csi --example csi-call)"

log "building the guest node kit (ext4 modules, e2fsprogs, blkid)"
LNP=$LNP_REAL bash "$REPO/scripts/lib/guest-node-kit.sh" "$OUT_DIR/kit" >"$OUT_DIR/kit.log" 2>&1 ||
  { tail_file "$OUT_DIR/kit.log"; die "building the guest node kit failed"; }

# ---------------------------------------------------------------------------
# the gateway group: a seeds the group's configuration (members, ANA group 1
# preferring a, the subsystem without namespaces and without allow_any_host, so
# that ControllerPublishVolume's host_allow decides); b's file is its own part only
# ---------------------------------------------------------------------------
remove_group_state
io_port_a=$(free_port) io_port_b=$(free_port) api_port_a=$(free_port) api_port_b=$(free_port)
# b's port below a's: the node then connects b's (non-optimized) path first, so the
# first I/O to the new namespace goes through the gateway that learned of it from the
# group's configuration. That order once hung NodeStage (b's copy of the namespace's
# reservations stayed unknown: path errors for good); keep testing it.
if [ "$io_port_b" -gt "$io_port_a" ]; then
  swap=$io_port_a io_port_a=$io_port_b io_port_b=$swap
fi
make_api_pki "$OUT_DIR/pki" "IP:127.0.0.1,IP:10.0.2.2" csi-controller

# gateway_config NAME IO_PORT API_PORT [GROUP_KEYS]: the gateway's own part, with
# GROUP_KEYS (the group's keys of [gateway]) in its [gateway] table
gateway_config() {
  cat <<TOML
[[listener]]
address = "127.0.0.1:$2"
advertise = "10.0.2.2:$2"

[gateway]
name = "$1"
group = "$GROUP"
pool = "rbd"
config = "cluster"
${4:-}
[runtime]
threads = 1
poll_mode = "sleep"

TOML
  csi_management_network "$3" "$OUT_DIR/pki"
}
{
  gateway_config a "$io_port_a" "$api_port_a" "lease_ms = $LEASE_MS
failback = false
"
  cat <<TOML

# The group's part (the seed of sluice.config.$GROUP). Member addresses are what
# every member's discovery log announces for its peers: the guest's view of them.
[[gateway.member]]
name = "a"
address = "10.0.2.2:$io_port_a"

[[gateway.member]]
name = "b"
address = "10.0.2.2:$io_port_b"

[[gateway.ana_group]]
id = 1
preferred = "a"

[[subsystem]]
nqn = "$SUBSYSTEM"
serial = "SLUICECSIHA01"
TOML
} >"$OUT_DIR/a.toml"
gateway_config b "$io_port_b" "$api_port_b" >"$OUT_DIR/b.toml"

# start_gateway NAME IO_PORT API_PORT: sluice serve, ready once both ports listen
start_gateway() {
  local name=$1 io_port=$2 api_port=$3
  "$SLUICE" config check "$OUT_DIR/$name.toml" >"$OUT_DIR/config-check-$name.txt" 2>&1 ||
    { tail_file "$OUT_DIR/config-check-$name.txt"; die "sluice config check rejected $OUT_DIR/$name.toml"; }
  NO_COLOR=1 SLUICE_LOG=${SLUICE_LOG:-info} "$SLUICE" serve --config "$OUT_DIR/$name.toml" \
    --rpc-socket "$OUT_DIR/$name.sock" >>"$OUT_DIR/$name.stdout" 2>>"$OUT_DIR/$name.log" </dev/null &
  PID[$name]=$!
  _up() { kill -0 "${PID[$name]}" 2>/dev/null || return 2; port_listening "$io_port" && port_listening "$api_port"; }
  wait_for 60 "gateway $name to listen on $io_port and $api_port" _up ||
    { tail_file "$OUT_DIR/$name.log"; die "gateway $name did not come up"; }
  log "gateway $name (pid ${PID[$name]}): I/O 127.0.0.1:$io_port (advertised 10.0.2.2:$io_port), API :$api_port"
}
start_gateway a "$io_port_a" "$api_port_a"
start_gateway b "$io_port_b" "$api_port_b"
"$SLUICE" gateway status --socket "$OUT_DIR/a.sock" -o json >"$OUT_DIR/status-a.json" 2>&1 || true

# ---------------------------------------------------------------------------
# the guest
# ---------------------------------------------------------------------------
mkdir -p "$OUT_DIR/guest-pki"
cp "$OUT_DIR/pki/ca.pem" "$OUT_DIR/pki/csi-controller.pem" "$OUT_DIR/pki/csi-controller.key" "$OUT_DIR/guest-pki/"
guest_env="API_A=10.0.2.2:$api_port_a API_B=10.0.2.2:$api_port_b PORT_A=$io_port_a PORT_B=$io_port_b"
guest_env="$guest_env SUBSYSTEM=$SUBSYSTEM FIO_SECONDS=$FIO_SECONDS"
log "booting the node guest (timeout ${GUEST_TIMEOUT}s; output: guest.log)"
t_guest=$SECONDS
TMPDIR=$OUT_DIR/peer "$LNP" initiator --keep --timeout "$GUEST_TIMEOUT" --mem 1024 --share "$SHARE" \
  --add "$SLUICE_CSI:/root/sluice-csi" --add "$CSI_CALL:/root/csi-call" \
  --add "$OUT_DIR/kit:/root/kit" --add "$OUT_DIR/guest-pki:/root/pki" \
  --add "$GUEST/checks.sh:/root/checks.sh" --add "$GUEST/csi-failover-guest.sh:/root/csi-failover-guest.sh" \
  -- "$guest_env sh /root/csi-failover-guest.sh" </dev/null >"$OUT_DIR/guest.log" 2>&1 &
GUEST_PID=$!
tail -n +1 -f "$OUT_DIR/guest.log" --pid "$GUEST_PID" &
TAIL_PID=$!
guest_alive() { kill -0 "$GUEST_PID" 2>/dev/null || return 2; }
marker_there() { [ -e "$SHARE/$1" ] || { guest_alive || return 2; return 1; }; }

failures=()
takeover_s=''
# a dead: b takes ANA group 1 (its log says so; the host's own NQN is not allowed on
# the subsystem, so the ANA log is not read over NVMe/TCP here)
b_took_group() { grep -q 'ANA state changed.*ana_group=1.*to="\?optimized' "$OUT_DIR/b.log"; }
if wait_for "$GUEST_TIMEOUT" "the guest's fio to start" marker_there fio.started; then
  sleep 5
  log "SIGKILL gateway a (pid ${PID[a]}) while the guest's fio runs"
  t_kill=$(date +%s.%N)
  kill -KILL "${PID[a]}"
  wait "${PID[a]}" 2>/dev/null || true
  PID[a]=''
  if wait_for 30 "gateway b to take ANA group 1" b_took_group; then
    takeover_s=$(python3 -c "import sys, time; print(f'{time.time() - float(sys.argv[1]):.1f}')" "$t_kill")
    log "gateway b took ANA group 1 ${takeover_s} s after a was killed (lease $LEASE_MS ms)"
  else
    failures+=("gateway b did not take ANA group 1 within 30 s of the kill (b.log)")
  fi
else
  failures+=("the guest never started fio (guest.log)")
fi

guest_rc=0
wait "$GUEST_PID" || guest_rc=$?
GUEST_PID=''
wait "$TAIL_PID" 2>/dev/null || true
TAIL_PID=''
guest_seconds=$((SECONDS - t_guest))
log "guest finished with status $guest_rc after ${guest_seconds}s"
case $guest_rc in
  0) ;;
  124) failures+=("guest run timed out after ${GUEST_TIMEOUT}s") ;;
  125) failures+=("linux-nvme-peer harness/boot error (status 125; see guest.log and peer/)") ;;
  *) failures+=("guest checks failed: $(grep -o 'guest checks: .*' "$OUT_DIR/guest.log" | tail -n 1)") ;;
esac
# The guest's artifacts next to the others.
cp -r "$SHARE/." "$OUT_DIR/" 2>/dev/null || true
console=$(find "$OUT_DIR/peer" -name console.log -print -quit 2>/dev/null || true)
[ -n "$console" ] && tr -d '\r' <"$console" >"$OUT_DIR/guest-console.log"

# DeleteVolume went through b: b lists no namespace of the subsystem any more.
remaining=$("$SLUICE" ns list "$SUBSYSTEM" -o json --socket "$OUT_DIR/b.sock" 2>/dev/null |
  python3 -c 'import json, sys; print(len(json.load(sys.stdin)["namespaces"]))' 2>/dev/null || echo '?')
[ "$remaining" = 0 ] || failures+=("gateway b still lists $remaining namespace(s) of $SUBSYSTEM after DeleteVolume")
grep -q 'panicked at' "$OUT_DIR/sluice-csi.log" "$OUT_DIR/a.log" "$OUT_DIR/b.log" 2>/dev/null &&
  failures+=("a panic in sluice-csi.log, a.log or b.log")
if [ -n "${PID[b]}" ]; then
  stop_pid "${PID[b]}" "gateway b" 20 TERM || true
  PID[b]=''
fi

fio_line=$(grep -o 'FIO .*' "$OUT_DIR/fio-summary.txt" 2>/dev/null | tail -n 1 || true)
pause_ms=$(sed -n 's/.*longest_completion_ms=\([0-9]*\).*/\1/p' <<<"$fio_line")
wall=$((SECONDS - t_start))
verdict=PASS
[ ${#failures[@]} -eq 0 ] || verdict=FAIL
{
  echo "csi-failover interop ($(git -C "$REPO" rev-parse --short HEAD 2>/dev/null || echo '?')), guest ${guest_seconds}s, wall ${wall}s"
  echo "${fio_line:-FIO no result}"
  echo "takeover: ${takeover_s:-?} s (lease $LEASE_MS ms); longest I/O completion (pause) ${pause_ms:-?} ms"
  grep '^CHECK' "$OUT_DIR/guest.log" || true
  echo "problems: ${#failures[@]}"
  printf '  %s\n' "${failures[@]}"
} >"$OUT_DIR/result.txt"
if [ "$verdict" = PASS ]; then
  log "PASS: staged volume on a two-gateway group across SIGKILL of gateway a: ${fio_line#FIO }; takeover ${takeover_s}s; I/O pause ${pause_ms} ms; wall ${wall}s (artifacts: $OUT_DIR)"
  exit 0
fi
log "FAIL: ${#failures[@]} problem(s) (${fio_line:-no fio result}; takeover ${takeover_s:-?}s):"
printf '  - %s\n' "${failures[@]}"
echo "  artifacts: $OUT_DIR (guest.log, a.log, b.log, sluice-csi.log, fio.txt, guest-console.log)"
exit 1
