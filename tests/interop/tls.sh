#!/usr/bin/env bash
# Interop: NVMe/TCP over TLS 1.3 with a pre-shared key (TP 8011) between the real
# Linux kernel host and `sluice serve`.
#
# Sluice serves one subsystem on a listener with tls = "required"; the guest's host
# NQN has a tls_key (a `sluice gen-tls-key` 01 / SHA-256 key) with
# tls_key_derivation = "compat" (Debian 13's libnvme 1.13 derives the TLS PSK the
# pre-1.16 way). One linux-nvme-peer guest boot (bookworm-backports' 6.12 kernel,
# use_backports_kernel_peer in lib/common.sh) with Debian trixie's tlshd, nvme-cli
# 2.13 and keyctl and the kTLS modules added (lib/trixie-tls-tools.sh; built once
# from Debian's archive and cached) runs:
#   1. `nvme connect --tls --tls-key OTHER-KEY --tls-key-identity IDENTITY`: the
#      host offers the right identity with the wrong PSK (libnvme stores OTHER-KEY
#      as is under that identity), so the PSK binder of its ClientHello does not
#      verify: the connect fails and leaves no controller behind.
#   2. `nvme connect --tls --tls-key KEY`: the kernel host shakes hands through
#      tlshd (kTLS), the namespace appears, the PSK identity in the kernel keyring
#      is the one `sluice check-tls-key --compat` predicts; a block of canary text
#      is written and read back, fio writes 16 MiB (4 KiB random) and verifies it
#      (crc32c, zero errors); `nvme disconnect`.
#   3. `nvme connect --tls --tls-key OTHER-KEY`: an identity (its digest) Sluice
#      has no key for; fails, no controller left.
#   4. a plain `nvme connect` (no TLS) to the TLS-only listener fails.
# On this machine:
#   - sluice.log shows the PSK found for the predicted identity (derivation compat),
#     "TLS established" with TLS_AES_128_GCM_SHA256 for the admin and I/O queues,
#     the failed handshakes of steps 1 and 3 (3: no key for the other identity) and
#     the refused plain connection of step 4, and never a key; sluice stops
#     cleanly on SIGTERM.
#   - a tshark capture on lo of the whole run: decoded as TLS it holds ClientHellos
#     offering the predicted identity, ServerHellos choosing TLS 1.3 with
#     TLS_AES_128_GCM_SHA256, and application data records; decoded as NVMe/TCP, no
#     TCP stream that starts with a TLS handshake holds a well-formed NVMe/TCP PDU
#     (type with its header length), while the plain attempt of step 4 shows its
#     cleartext ICReq (the dissector works) and got no ICResp; the canary text
#     appears nowhere in the capture. Without tshark these are skipped (reported).
# Exit 77 (skipped) when Debian's archive cannot be reached to build the tools or the
# guest image the first time, or with SLUICE_GUEST_KERNEL=stock (6.1 has no NVMe TLS).
#
# Usage: tests/interop/tls.sh
# Environment:
#   OUT=DIR           artifact root (default <repo>/target/interop); writes DIR/tls/
#   SLUICE_BIN=PATH   sluice binary (default: build target/release/sluice)
#   GUEST_TIMEOUT=S   bound for the guest run (default 400)
#   SLUICE_TLS_TOOLS_CACHE, SLUICE_DEBIAN_MIRROR: see lib/trixie-tls-tools.sh
# Functions here are also called indirectly (traps, wait_for):
# shellcheck disable=SC2317
set -euo pipefail

TEST_NAME=tls
REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
INTEROP_REPO=$REPO
# shellcheck source=tests/interop/lib/common.sh
. "$REPO/tests/interop/lib/common.sh"
# shellcheck source=tests/interop/lib/trixie-tls-tools.sh
. "$REPO/tests/interop/lib/trixie-tls-tools.sh"

OUT_ROOT=${OUT:-$REPO/target/interop}
mkdir -p "$OUT_ROOT"
OUT_DIR=$(cd "$OUT_ROOT" && pwd)/$TEST_NAME
GUEST_TIMEOUT=${GUEST_TIMEOUT:-400}
SUBNQN=nqn.2026-11.io.sluice:tls
HOSTNQN=nqn.2014-08.org.nvmexpress:uuid:6a7f0c1e-0000-4000-8000-0000000071a5
NS_SIZE_MIB=64

TARGET_PID='' TARGET_NAME=''
cleanup() {
  local rc=$?
  trap - EXIT INT TERM
  [ -n "$TSHARK_PID" ] && stop_pid "$TSHARK_PID" tshark 10 TERM >/dev/null 2>&1
  [ -n "$TARGET_PID" ] && { stop_pid "$TARGET_PID" "$TARGET_NAME" 20 TERM || true; }
  exit "$rc"
}
trap cleanup EXIT
trap 'log "interrupted"; exit 130' INT TERM

rm -rf "$OUT_DIR"
mkdir -p "$OUT_DIR/peer"

skip_test() { record_skip "$1" "$2"; exit "$SKIP_STATUS"; }

# ---------------------------------------------------------------------------
# prerequisites: the 6.12 guest and the trixie TLS tools (both cached)
# ---------------------------------------------------------------------------
[ "${SLUICE_GUEST_KERNEL:-${SLUICE_AUTH_KERNEL:-backports}}" = stock ] &&
  skip_test "the whole test" "SLUICE_GUEST_KERNEL=stock: Debian bookworm's 6.1 kernel has no NVMe/TCP TLS (CONFIG_NVME_TCP_TLS)"
command -v ss >/dev/null || die "'ss' is not installed: run scripts/setup.sh"
[ -x "$LNP" ] || die "linux-nvme-peer not found at $LNP (expected in ../shared/ next to the repository)"
HAVE_TSHARK=1
command -v tshark >/dev/null || HAVE_TSHARK=0

# use_backports_kernel_peer dies when it cannot build the image; that is only a
# skip when Debian's archive cannot be reached. Its first call runs in a subshell
# (the one building the image, if needed), the second one sets the environment.
if ! (use_backports_kernel_peer); then
  log "could not prepare the guest image: can Debian's archive be reached?"
  tls_tools_registry_reachable ||
    skip_test "the whole test" "the bookworm-backports guest image is not built and Debian's archive cannot be reached"
  die "could not build the bookworm-backports guest image"
fi
use_backports_kernel_peer >/dev/null
rc=0
tls_tools_prepare "$LNP_CACHE_DIR/image/image.env" || rc=$?
case $rc in
  0) log "guest TLS tools: $TLS_TOOLS_SUMMARY" ;;
  2) skip_test "the whole test (no guest TLS tools)" "$TLS_TOOLS_ERROR" ;;
  *) die "preparing the guest's TLS tools failed: $TLS_TOOLS_ERROR" ;;
esac

use_sluice_binary
[ -x "$SLUICE" ] || die "sluice binary $SLUICE not found"

# ---------------------------------------------------------------------------
# keys, identity, configuration, target
# ---------------------------------------------------------------------------
KEY=$("$SLUICE" gen-tls-key --hmac 1) || die "sluice gen-tls-key failed"
OTHER_KEY=$("$SLUICE" gen-tls-key --hmac 1) || die "sluice gen-tls-key failed"
# The identity the guest's libnvme 1.13 inserts for KEY (format 1, compat digest)
# and, for the record, the one libnvme >= 1.16 would (RFC 8446 digest).
identity_of() { # KEY [--compat]
  SLUICE_TLS_KEY=$1 "$SLUICE" check-tls-key -n "$HOSTNQN" -c "$SUBNQN" "${@:2}" | sed -n 's/^PSK identity: //p'
}
IDENTITY=$(identity_of "$KEY" --compat)
IDENTITY_RFC=$(identity_of "$KEY")
OTHER_IDENTITY=$(identity_of "$OTHER_KEY" --compat)
if [ -z "$IDENTITY" ] || [ -z "$OTHER_IDENTITY" ] || [ "$IDENTITY" = "$IDENTITY_RFC" ]; then
  die "sluice check-tls-key gave no usable identity"
fi
log "PSK identity expected from the guest: $IDENTITY"
CANARY="SLUICE-TLS-CLEARTEXT-CANARY-$(od -An -N8 -tx1 /dev/urandom | tr -d ' \n')"

IO_PORT=$(( 20000 + RANDOM % 12000 ))
while port_listening "$IO_PORT"; do IO_PORT=$((IO_PORT + 1)); done
CONFIG=$OUT_DIR/sluice.toml
{
  echo "# generated by $TEST_NAME"
  printf '[[listener]]\naddress = "127.0.0.1:%s"\ntls = "required"\n\n' "$IO_PORT"
  printf '[[subsystem]]\nnqn = "%s"\n\n' "$SUBNQN"
  printf '[[subsystem.namespace]]\nnsid = 1\nbackend = "ram"\nsize = "%sMiB"\nblock_size = 512\n\n' "$NS_SIZE_MIB"
  printf '[[subsystem.host]]\nnqn = "%s"\ntls_key = "%s"\ntls_key_derivation = "compat"\n\n' "$HOSTNQN" "$KEY"
  printf '[runtime]\nthreads = 1\npoll_mode = "sleep"\n'
} >"$CONFIG"
"$SLUICE" config check "$CONFIG" >"$OUT_DIR/config-check.txt" 2>&1 ||
  { tail_file "$OUT_DIR/config-check.txt"; die "sluice config check rejected $CONFIG"; }
TARGET_NAME=sluice
log "starting sluice serve on 127.0.0.1:$IO_PORT (tls = required; log: sluice.log)"
NO_COLOR=1 SLUICE_LOG=${SLUICE_LOG:-info,runtime::tls=debug,nvme_target::secure_channel=debug} \
  "$SLUICE" serve --config "$CONFIG" --no-rpc-socket >"$OUT_DIR/sluice.stdout" 2>"$OUT_DIR/sluice.log" </dev/null &
TARGET_PID=$!
_sluice_up() { kill -0 "$TARGET_PID" 2>/dev/null || return 2; port_listening "$IO_PORT"; }
if ! wait_for 30 "sluice to listen on port $IO_PORT" _sluice_up; then
  tail_file "$OUT_DIR/sluice.stdout"; tail_file "$OUT_DIR/sluice.log"
  TARGET_PID=''
  die "sluice did not come up"
fi

if [ "$HAVE_TSHARK" = 1 ]; then
  capture_start "$OUT_DIR/capture.pcap" "$OUT_DIR/tshark-capture.log" "$IO_PORT" || die "tshark could not start capturing on lo"
fi

# ---------------------------------------------------------------------------
# the guest
# ---------------------------------------------------------------------------
cat >"$OUT_DIR/guest.sh" <<'EOF'
#!/bin/sh
# Guest half of tests/interop/tls.sh (busybox ash; trixie's nvme, tlshd, keyctl
# through the wrappers in /usr/local/{s,}bin; bookworm's fio).
fail=0
ok() { echo "CHECK $1: ok${2:+ ($2)}"; }
bad() { echo "CHECK $1: FAIL${2:+ ($2)}"; fail=1; }
# check NAME EXPECT(ok|fail) TIMEOUT CMD...: output in /tmp/NAME.out
check() {
  name=$1 expect=$2 tmo=$3; shift 3
  if timeout "$tmo" "$@" >"/tmp/$name.out" 2>&1; then rc=0; else rc=$?; fi
  if { [ "$expect" = ok ] && [ $rc -eq 0 ]; } || { [ "$expect" = fail ] && [ $rc -ne 0 ]; }; then
    ok "$name" "exit $rc"; return 0
  fi
  bad "$name" "exit $rc, expected $expect"; tail -n 15 "/tmp/$name.out" | sed 's/^/  | /'; return 1
}
is_ours() { [ "$(cat "$1/subsysnqn" 2>/dev/null)" = "$LNP_SUBNQN" ]; }
find_ctrl() {
  for c in /sys/class/nvme/nvme*; do is_ours "$c" && { echo "${c##*/}"; return 0; }; done
  return 1
}
find_ns() {
  for s in /sys/class/nvme-subsystem/* /sys/class/nvme/*; do
    is_ours "$s" || continue
    for n in "$s"/nvme*n*; do
      case ${n##*/} in *c*n*) continue ;; esac
      [ -b "/dev/${n##*/}" ] && { echo "/dev/${n##*/}"; return 0; }
    done
  done
  return 1
}
no_ctrl_left() { # NAME
  i=0; while find_ctrl >/dev/null && [ $i -lt 50 ]; do sleep 0.2; i=$((i + 1)); done
  if c=$(find_ctrl); then bad "$1" "controller $c of $LNP_SUBNQN still present"; else ok "$1"; fi
}

echo "kernel $(uname -r); $(nvme version | tr '\n' ' '); $(fio --version)"
check ktls-modules ok 60 sh -c 'depmod -a && modprobe -a tls gcm ghash-generic nvme_tcp'
# tlshd after the modules: it links the .nvme keyring (made by nvme_keyring) into
# its session keyring at start-up, then waits for the kernel's handshake requests
tlshd -s -c /etc/tlshd.conf >/tmp/tlshd.log 2>&1 &
tlshd_pid=$!
i=0; while ! grep -q "Keyring '.nvme' linked" /tmp/tlshd.log && kill -0 $tlshd_pid 2>/dev/null && [ $i -lt 100 ]; do
  sleep 0.2; i=$((i + 1)); done
sleep 1  # from the log line to listening on the handshake netlink family
if kill -0 $tlshd_pid 2>/dev/null && grep -q "Keyring '.nvme' linked" /tmp/tlshd.log; then ok tlshd-running "pid $tlshd_pid"
else bad tlshd-running; cat /tmp/tlshd.log; fi
T="-t tcp -a $LNP_TARGET_ADDR -s $LNP_TARGET_PORT -n $LNP_SUBNQN --hostnqn $LNP_HOSTNQN"

# 1. the right identity with the wrong PSK: libnvme 1.13 looks the identity up
# (in .nvme, which it links into the session keyring), finds no key, and stores
# OTHER_KEY's bytes as they are under that identity; the kernel offers it and the
# PSK binder of the ClientHello cannot verify. (Run first: with the right key in
# .nvme already, the lookup would find and use it. Step 2 replaces this key with
# the one derived from KEY.)
echo "=== 1. nvme connect --tls --tls-key OTHER-KEY --tls-key-identity IDENTITY"
check wrong-psk-refused fail 90 nvme connect $T --tls --tls-key "$OTHER_KEY" --tls-key-identity "$EXPECT_IDENTITY" &&
  sed 's/^/  | /' /tmp/wrong-psk-refused.out
no_ctrl_left wrong-psk-no-controller

# 2. TLS connect, identity, canary, fio verify, disconnect
echo "=== 2. nvme connect --tls --tls-key KEY"
if check tls-connect ok 90 nvme connect $T --tls --tls-key "$TLS_KEY"; then
  cat /tmp/tls-connect.out
  i=0 ctrl='' dev=''
  while [ $i -lt 100 ]; do
    ctrl=$(find_ctrl) || ctrl=''; dev=$(find_ns) || dev=''
    [ -n "$ctrl" ] && [ -n "$dev" ] && [ "$(cat "/sys/class/nvme/$ctrl/state" 2>/dev/null)" = live ] && break
    sleep 0.2; i=$((i + 1))
  done
  if [ -n "$ctrl" ] && [ -n "$dev" ]; then
    ok tls-device "controller $ctrl, namespace $dev, $(cat /sys/class/nvme/"$ctrl"/address)"
    serial=$(cat "/sys/class/nvme/$ctrl/tls_key" 2>/dev/null)
    # (not awk: a serial like 094e3516 compares as a number there)
    desc=$(grep "^$serial " /proc/keys | sed -e 's/^.* psk  *//' -e 's/: [0-9]*$//')
    echo "sysfs tls_key $serial, tls_configured_key $(cat "/sys/class/nvme/$ctrl/tls_configured_key" 2>/dev/null)," \
      "tls_keyring $(cat "/sys/class/nvme/$ctrl/tls_keyring" 2>/dev/null); keyring: $desc"
    if [ -n "$serial" ] && [ "$desc" = "$EXPECT_IDENTITY" ]; then ok tls-identity "$desc"
    else bad tls-identity "key '$serial' is '$desc', expected '$EXPECT_IDENTITY'"; grep ' psk ' /proc/keys; fi
    yes "$CANARY" | head -c 65536 >/tmp/canary
    if dd if=/tmp/canary of="$dev" bs=65536 seek=768 count=1 oflag=direct 2>/dev/null &&
      dd if="$dev" of=/tmp/canary.back bs=65536 skip=768 count=1 iflag=direct 2>/dev/null &&
      cmp -s /tmp/canary /tmp/canary.back; then ok canary-io "64 KiB written and read back at 48 MiB"
    else bad canary-io; fi
    if check fio-verify ok 240 fio --name=tls-randwrite --filename="$dev" --ioengine=libaio --direct=1 \
        --rw=randwrite --bs=4k --iodepth=16 --size=16m --verify=crc32c --do_verify=1 --verify_fatal=1 \
        --exitall_on_error=1 --group_reporting; then
      grep -E 'err= *[0-9]|^ *(READ|WRITE): bw=' /tmp/fio-verify.out | sed 's/^ */  /'
      if grep -q 'err= *0' /tmp/fio-verify.out && ! grep -Eq 'err= *[1-9]|verify: bad' /tmp/fio-verify.out; then
        ok fio-no-errors
      else bad fio-no-errors; fi
    fi
  else
    bad tls-device "controller '$ctrl' / namespace '$dev' did not appear"
  fi
  check tls-disconnect ok 60 nvme disconnect -n "$LNP_SUBNQN" && cat /tmp/tls-disconnect.out
  no_ctrl_left tls-disconnected
fi

# 3. a key the target does not know (its identity carries another digest)
echo "=== 3. nvme connect --tls --tls-key OTHER-KEY"
check wrong-key-refused fail 90 nvme connect $T --tls --tls-key "$OTHER_KEY" && sed 's/^/  | /' /tmp/wrong-key-refused.out
no_ctrl_left wrong-key-no-controller

# 4. no TLS at all
echo "=== 4. plain nvme connect to the TLS-only listener"
check plain-refused fail 90 nvme connect $T && sed 's/^/  | /' /tmp/plain-refused.out
no_ctrl_left plain-no-controller

echo "=== tlshd"
n=$(grep -c 'Handshake with .* was successful' /tmp/tlshd.log)
if [ "$n" -ge 2 ] && grep -qF "Using psk identity $EXPECT_IDENTITY" /tmp/tlshd.log &&
  grep -q 'Session description: (TLS1.3).*(AES-128-GCM)' /tmp/tlshd.log; then
  ok tlshd-handshakes "$n successful, TLS 1.3, AES-128-GCM, identity as expected"
else
  bad tlshd-handshakes "$n successful handshakes"
fi
grep -vE 'Querying|Parsing|No certificates|System config|priority string' /tmp/tlshd.log | tail -n 25 | sed 's/^/  tlshd| /'
echo "=== kernel log"
dmesg | grep -iE 'nvme|tls|handshake' | tail -n 20
kill $tlshd_pid 2>/dev/null
exit $fail
EOF

guest_env="TLS_KEY='$KEY' OTHER_KEY='$OTHER_KEY' EXPECT_IDENTITY='$IDENTITY' CANARY='$CANARY'"
log "booting the Linux host guest (timeout ${GUEST_TIMEOUT}s; output: guest.log)"
t_guest=$SECONDS
set +e
TMPDIR=$OUT_DIR/peer "$LNP" initiator --keep --timeout "$GUEST_TIMEOUT" --target-port "$IO_PORT" --subnqn "$SUBNQN" \
  --hostnqn "$HOSTNQN" "${TLS_TOOLS_ADD[@]}" --add "$OUT_DIR/guest.sh:/root/tls-guest.sh" \
  -- "$guest_env sh /root/tls-guest.sh" </dev/null 2>&1 | tee "$OUT_DIR/guest.log"
guest_rc=${PIPESTATUS[0]}
set -e
log "guest finished with status $guest_rc after $((SECONDS - t_guest))s"
console=$(find "$OUT_DIR/peer" -name console.log -print -quit 2>/dev/null || true)
[ -n "$console" ] && tr -d '\r' <"$console" >"$OUT_DIR/guest-console.log"
# the kept run directory (console log, overlay, ...) matters only when it failed
[ "$guest_rc" -ne 0 ] || rm -rf "$OUT_DIR/peer"

failures=()
case $guest_rc in
  0) ;;
  124) failures+=("guest run timed out after ${GUEST_TIMEOUT}s") ;;
  125) failures+=("linux-nvme-peer harness/boot error (status 125; see guest.log)") ;;
  *) failures+=("guest checks failed (status $guest_rc)") ;;
esac

stop_target
[ "$HAVE_TSHARK" = 1 ] && capture_stop "$OUT_DIR/tshark-capture.log"

# ---------------------------------------------------------------------------
# checks on this machine: sluice's log
# ---------------------------------------------------------------------------
HOST_OK=0 HOST_FAILED=()
host_check() { # NAME DETAIL ARITHMETIC-CONDITION (true: ok)
  local name=$1 detail=$2
  if (( $3 )); then
    log "CHECK $name: ok${detail:+ ($detail)}"; HOST_OK=$((HOST_OK + 1))
  else
    log "CHECK $name: FAIL${detail:+ ($detail)}"; HOST_FAILED+=("$name"); failures+=("$name")
  fi
}
slog=$OUT_DIR/sluice.log
n_found=$(grep 'TLS: PSK found' "$slog" | grep -F "$IDENTITY" | grep -c -i 'compat' || true)
host_check sluice-psk-found "$n_found handshake(s) for the expected identity, derivation compat" 'n_found >= 2'
n_est=$(grep 'TLS established' "$slog" | grep -c 'TLS_AES_128_GCM_SHA256' || true)
host_check sluice-tls-established "$n_est connection(s) with TLS_AES_128_GCM_SHA256 (admin + I/O queues)" 'n_est >= 2'
n_refused=$(grep -c 'TLS: closing the connection' "$slog" || true)
n_unknown=$(grep 'TLS: closing the connection' "$slog" | grep -cF "$OTHER_IDENTITY" || true)
host_check sluice-bad-handshakes-refused "$n_refused failed handshake(s) logged, $n_unknown naming the unknown identity" \
  'n_refused >= 2 && n_unknown >= 1'
n_plain=$(grep -c 'TLS is required on this listener' "$slog" || true)
host_check sluice-plain-refused "$n_plain plain connection(s) refused" 'n_plain >= 1'
n_leak=$(cat "$slog" "$OUT_DIR/sluice.stdout" | grep -cF -e "${KEY:16:24}" -e "${OTHER_KEY:16:24}" || true)
host_check no-key-in-log "$n_leak line(s) with key material" 'n_leak == 0'
grep -E 'TLS|PSK' "$slog" | head -n 12 | sed 's/^/  | /'

# ---------------------------------------------------------------------------
# checks on this machine: the capture
# ---------------------------------------------------------------------------
if [ "$HAVE_TSHARK" = 0 ]; then
  record_skip capture "tshark is not installed: the capture checks (TLS records, no cleartext NVMe/TCP) did not run"
else
  pcap=$OUT_DIR/capture.pcap
  [ -s "$pcap" ] || failures+=("the capture $pcap is missing or empty")
  tls_opt=(-n -r "$pcap" -d "tcp.port==$IO_PORT,tls")
  nvme_opt=(-n -r "$pcap" -d "tcp.port==$IO_PORT,nvme-tcp")
  summary=$OUT_DIR/capture-summary.txt
  # every pass must work: an empty answer from a failed tshark would pass the
  # negative checks
  tshark_fields() { # OUTFILE TSHARK-ARGS...
    local outf=$1
    shift
    tshark "$@" >"$outf" 2>"$outf.err" && { rm -f "$outf.err"; return 0; }
    log "tshark $* failed:"; tail_file "$outf.err" 5
    failures+=("tshark pass failed ($(basename "$outf"))")
    : >"$outf"
  }
  # streams that open with a ClientHello, and their offered identities (hex)
  tshark_fields "$OUT_DIR/capture-clienthello.txt" "${tls_opt[@]}" -Y 'tls.handshake.type == 1' -T fields \
    -e tcp.stream -e tls.handshake.extensions.psk.identity.identity
  tshark_fields "$OUT_DIR/capture-serverhello.txt" "${tls_opt[@]}" -Y 'tls.handshake.type == 2' -T fields \
    -e tcp.stream -e tls.handshake.ciphersuite -e tls.handshake.extensions.supported_version
  # TLS 1.3 records carry their (outer) type as opaque_type
  tshark_fields "$OUT_DIR/capture-appdata.txt" "${tls_opt[@]}" \
    -Y 'tls.record.opaque_type == 23 || tls.record.content_type == 23' -T fields -e frame.number
  n_appdata=$(wc -l <"$OUT_DIR/capture-appdata.txt")
  # well-formed NVMe/TCP PDUs: a known type with the header length it must have
  # (no set syntax: tshark 3 and 4 spell sets differently)
  valid='(nvme-tcp.type == 0 && nvme-tcp.hlen == 128) || (nvme-tcp.type == 1 && nvme-tcp.hlen == 128) ||'
  valid+=' (nvme-tcp.type == 4 && nvme-tcp.hlen == 72) || ((nvme-tcp.type == 5 || nvme-tcp.type == 6 ||'
  valid+=' nvme-tcp.type == 7 || nvme-tcp.type == 9) && nvme-tcp.hlen == 24)'
  tshark_fields "$OUT_DIR/capture-nvme-tcp.txt" "${nvme_opt[@]}" -Y "$valid" -T fields \
    -e tcp.stream -e nvme-tcp.type -e frame.number
  id_hex=$(printf '%s' "$IDENTITY" | od -An -v -tx1 | tr -d ' \n')
  tls_streams=$(cut -f1 "$OUT_DIR/capture-clienthello.txt" | sort -un | paste -sd' ' -)
  n_ch=$(wc -l <"$OUT_DIR/capture-clienthello.txt")
  other_hex=$(printf '%s' "$OTHER_IDENTITY" | od -An -v -tx1 | tr -d ' \n')
  n_ch_id=$(cut -f2 "$OUT_DIR/capture-clienthello.txt" | tr -d ':' | grep -cix "$id_hex" || true)
  n_ch_other=$(cut -f2 "$OUT_DIR/capture-clienthello.txt" | tr -d ':' | grep -cix "$other_hex" || true)
  n_sh=$(wc -l <"$OUT_DIR/capture-serverhello.txt")
  n_sh_ok=$(awk -F'\t' '$2 == "0x1301" && $3 ~ /0x0304/' "$OUT_DIR/capture-serverhello.txt" | wc -l)
  in_tls=$(awk -v s=" $tls_streams " 'index(s, " " $1 " ")' "$OUT_DIR/capture-nvme-tcp.txt" | wc -l)
  plain_icreq=$(awk -v s=" $tls_streams " '!index(s, " " $1 " ") && $2 == 0' "$OUT_DIR/capture-nvme-tcp.txt" | wc -l)
  any_icresp=$(awk '$2 == 1' "$OUT_DIR/capture-nvme-tcp.txt" | wc -l)
  {
    echo "capture $pcap, port $IO_PORT"
    echo "TLS streams (ClientHello): $tls_streams"
    echo "ClientHellos: $n_ch, offering the expected identity: $n_ch_id ($IDENTITY), the unknown one: $n_ch_other"
    echo "ServerHellos: $n_sh, TLS 1.3 + TLS_AES_128_GCM_SHA256: $n_sh_ok"
    echo "frames with application data records: $n_appdata"
    echo "well-formed NVMe/TCP PDUs (stream, type, frame) when decoded as nvme-tcp:"
    sed 's/^/  /' "$OUT_DIR/capture-nvme-tcp.txt"
  } >"$summary"
  # steps 1 and 2 (admin and I/O queues) offer the expected identity, step 3 the other
  host_check capture-tls-handshakes "$n_ch ClientHello(s): $n_ch_id with the expected identity, $n_ch_other with the unknown one" \
    'n_ch_id >= 3 && n_ch_other >= 1'
  host_check capture-tls13-aes128gcm "$n_sh_ok of $n_sh ServerHello(s) chose TLS 1.3, TLS_AES_128_GCM_SHA256" \
    'n_sh_ok >= 2 && n_sh_ok == n_sh'
  host_check capture-tls-appdata "$n_appdata frame(s) with application data records" 'n_appdata >= 100'
  host_check capture-no-cleartext-pdu "$in_tls well-formed NVMe/TCP PDU(s) in the TLS streams" 'in_tls == 0'
  host_check capture-plain-icreq-seen "the plain attempt's cleartext ICReq: $plain_icreq; ICResps: $any_icresp" \
    'plain_icreq >= 1 && any_icresp == 0'
  n_canary=$(grep -caF "$CANARY" "$pcap" || true)
  host_check capture-no-canary "$n_canary capture line(s) with the canary text written through TLS" 'n_canary == 0'
fi

finish_with_verdict "$TEST_NAME" ", TLS 1.3 PSK from the Linux host verified" "guest.log, sluice.log, capture.pcap, capture-summary.txt"
