# shellcheck shell=bash
# HOST_OK, HOST_FAILED, failures, HAVE_TSHARK, CONFIG and the capture counts are
# read by the caller:
# shellcheck disable=SC2034
# The parts the NVMe/TCP TLS interop tests share (sourced by tests/interop/tls.sh,
# concat.sh and linux-target-tls.sh, after lib/common.sh and lib/trixie-tls-tools.sh;
# the caller defines skip_test). Each of them boots one linux-nvme-peer guest with
# Debian trixie's TLS tools:
#   tls_prerequisites IMAGE USE-PEER-CMD...  tools, the guest image and its TLS
#                                            tools, the sluice binary
#   tls_guest_sh NAME [host]                 the start of the guest script (busybox
#                                            ash): check reporting, tlshd; with
#                                            `host`, the kernel host's controller,
#                                            connect, canary, fio, refusals
#   tls_serve_sluice TLS WHAT HOST-LINE...   `sluice serve` on one listener
#   run_host_guest CMD LNP-ARG...            the guest as the host of sluice serve
#   guest_outcome RC SINCE [DETAIL]          the guest's exit status into `failures`
#   host_check                               a check on this machine
#   tshark_fields, NVME_TCP_WELL_FORMED, offered_count, tls_capture_hellos
#                                            the capture's TLS handshakes and PDUs

# tls_prerequisites IMAGE USE-PEER-CMD...: ss and linux-nvme-peer (dies without
# them), tshark (HAVE_TSHARK 1 or 0), the guest image USE-PEER-CMD builds when it
# is missing and points linux-nvme-peer at (use_backports_kernel_peer,
# use_merged_kernel_peer SUITE), the trixie TLS tools for its kernel
# (TLS_TOOLS_ADD), and the sluice binary (SLUICE, use_sluice_binary). USE-PEER-CMD
# runs first in a subshell (building what is missing; it dies on failure, which is
# only a skip when Debian's archive cannot be reached), then again to set the
# environment. IMAGE names the image in messages. Skips the test (skip_test) when
# Debian's archive cannot be reached to build what is missing.
tls_prerequisites() {
  local image=$1 rc=0
  shift
  command -v ss >/dev/null || die "'ss' is not installed: run scripts/setup.sh"
  [ -x "$LNP" ] || die "linux-nvme-peer not found at $LNP (expected in ../shared/ next to the repository)"
  HAVE_TSHARK=1
  command -v tshark >/dev/null || HAVE_TSHARK=0
  if ! ("$@"); then
    log "could not prepare the $image guest image: can Debian's archive be reached?"
    tls_tools_registry_reachable ||
      skip_test "the whole test" "the $image guest image is not built and Debian's archive cannot be reached"
    die "could not build the $image guest image"
  fi
  "$@" >/dev/null
  tls_tools_prepare "$LNP_CACHE_DIR/image/image.env" || rc=$?
  case $rc in
    0) log "guest TLS tools: $TLS_TOOLS_SUMMARY" ;;
    2) skip_test "the whole test (no guest TLS tools)" "$TLS_TOOLS_ERROR" ;;
    *) die "preparing the guest's TLS tools failed: $TLS_TOOLS_ERROR" ;;
  esac
  use_sluice_binary
}

# ---------------------------------------------------------------------------
# guest script text (busybox ash), printed for the caller's guest.sh
# ---------------------------------------------------------------------------

# tls_guest_sh NAME [host]: the start of the guest half of tests/interop/NAME.sh:
# its header; fail, ok, bad, check, start_tlshd, tlshd_log; with `host` (the guest's
# kernel is the host of the target under test) tls_guest_sh_host's functions too
tls_guest_sh() {
  local fio=''
  [ "${2:-}" != host ] || fio="; bookworm's fio"
  cat <<EOF
#!/bin/sh
# Guest half of tests/interop/$1.sh (busybox ash; the functions from
# lib/tls-guest.sh; trixie's nvme, tlshd, keyctl through the wrappers in
# /usr/local/{s,}bin$fio).
EOF
  cat <<'EOF'
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
# start_tlshd: tlshd, after the modules: it links the .nvme keyring (made by
# nvme_keyring, which nvme_tcp and nvmet load) into its session keyring at start-up,
# then waits for the kernel's handshake requests. Sets tlshd_pid; check
# tlshd-running; fails when tlshd did not get that far.
start_tlshd() {
  tlshd -s -c /etc/tlshd.conf >/tmp/tlshd.log 2>&1 &
  tlshd_pid=$!
  i=0; while ! grep -q "Keyring '.nvme' linked" /tmp/tlshd.log && kill -0 $tlshd_pid 2>/dev/null && [ $i -lt 100 ]; do
    sleep 0.2; i=$((i + 1)); done
  sleep 1  # from the log line to listening on the handshake netlink family
  if kill -0 $tlshd_pid 2>/dev/null && grep -q "Keyring '.nvme' linked" /tmp/tlshd.log; then
    ok tlshd-running "pid $tlshd_pid"; return 0
  fi
  bad tlshd-running; cat /tmp/tlshd.log; return 1
}
# tlshd_log LINES: the last LINES lines of tlshd's log, without its start-up chatter
tlshd_log() {
  grep -vE 'Querying|Parsing|No certificates|System config|priority string' /tmp/tlshd.log | tail -n "$1" |
    sed 's/^/  tlshd| /'
}
EOF
  [ "${2:-}" != host ] || tls_guest_sh_host
}

# tls_guest_sh_host: for a guest whose kernel is the host of the target under test
# (LNP_*): find_ctrl, find_ns, no_ctrl_left, wait_live, connected, canary_io,
# fio_verify, refused, disconnect_ours, tlshd_handshakes, guest_exit, and T (nvme
# connect's arguments for the target)
tls_guest_sh_host() {
  cat <<'EOF'
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
# wait_live: sets ctrl and dev once our controller is live with its namespace (at
# most 20 s); fails when they did not both appear
wait_live() {
  i=0 ctrl='' dev=''
  while [ $i -lt 100 ]; do
    ctrl=$(find_ctrl) || ctrl=''; dev=$(find_ns) || dev=''
    [ -n "$ctrl" ] && [ -n "$dev" ] && [ "$(cat "/sys/class/nvme/$ctrl/state" 2>/dev/null)" = live ] && break
    sleep 0.2; i=$((i + 1))
  done
  [ -n "$ctrl" ] && [ -n "$dev" ]
}
# connected NAME TIMEOUT USE CONNECT-ARG...: `nvme connect $T CONNECT-ARG...` (check
# NAME-connect); once our controller is live with its namespace (NAME-device), USE
# runs, with ctrl, dev, serial (its sysfs tls_key) and desc (that key's description
# in /proc/keys); then nvme disconnect (disconnect_ours NAME). Fails when the
# connect did.
connected() {
  cn_name=$1 cn_tmo=$2 cn_use=$3; shift 3
  check "$cn_name-connect" ok "$cn_tmo" nvme connect $T "$@" || return 1
  cat "/tmp/$cn_name-connect.out"
  if wait_live; then
    ok "$cn_name-device" "controller $ctrl, namespace $dev, $(cat /sys/class/nvme/"$ctrl"/address)"
    serial=$(cat "/sys/class/nvme/$ctrl/tls_key" 2>/dev/null)
    # (not awk: a serial like 094e3516 compares as a number there)
    desc=$(grep "^$serial " /proc/keys | sed -e 's/^.* psk  *//' -e 's/: [0-9]*$//')
    $cn_use
  else
    bad "$cn_name-device" "controller '$ctrl' / namespace '$dev' did not appear"
  fi
  disconnect_ours "$cn_name"
}
# canary_io DEV AT: 64 KiB of $CANARY written to DEV at AT (64 KiB blocks) and read back
canary_io() {
  yes "$CANARY" | head -c 65536 >/tmp/canary
  if dd if=/tmp/canary of="$1" bs=65536 seek="$2" count=1 oflag=direct 2>/dev/null &&
    dd if="$1" of=/tmp/canary.back bs=65536 skip="$2" count=1 iflag=direct 2>/dev/null &&
    cmp -s /tmp/canary /tmp/canary.back; then ok canary-io "64 KiB written and read back at $(($2 / 16)) MiB"
  else bad canary-io; fi
}
# fio_verify DEV JOB SIZE: fio writes SIZE to DEV (4 KiB random, queue depth 16) and
# verifies it (crc32c): checks fio-verify and fio-no-errors
fio_verify() {
  if check fio-verify ok 240 fio --name="$2" --filename="$1" --ioengine=libaio --direct=1 \
      --rw=randwrite --bs=4k --iodepth=16 --size="$3" --verify=crc32c --do_verify=1 --verify_fatal=1 \
      --exitall_on_error=1 --group_reporting; then
    grep -E 'err= *[0-9]|^ *(READ|WRITE): bw=' /tmp/fio-verify.out | sed 's/^ */  /'
    if grep -q 'err= *0' /tmp/fio-verify.out && ! grep -Eq 'err= *[1-9]|verify: bad' /tmp/fio-verify.out; then
      ok fio-no-errors
    else bad fio-no-errors; fi
  fi
}
# refused NAME CONNECT-ARG...: `nvme connect $T CONNECT-ARG...` fails (check
# NAME-refused) and leaves no controller behind (NAME-no-controller)
refused() {
  what=$1; shift
  check "$what-refused" fail 90 nvme connect $T "$@" && sed 's/^/  | /' "/tmp/$what-refused.out"
  no_ctrl_left "$what-no-controller"
}
# disconnect_ours NAME: nvme disconnect of our subsystem (check NAME-disconnect), no
# controller left (NAME-disconnected)
disconnect_ours() {
  check "$1-disconnect" ok 60 nvme disconnect -n "$LNP_SUBNQN" && cat "/tmp/$1-disconnect.out"
  no_ctrl_left "$1-disconnected"
}
# tlshd_handshakes IDENTITY SESSION DETAIL: "=== tlshd", check tlshd-handshakes (at
# least two successful handshakes, the PSK identity IDENTITY... used, a session
# "(TLS1.3)SESSION"; DETAIL when ok), then tlshd's log
tlshd_handshakes() {
  echo "=== tlshd"
  n=$(grep -c 'Handshake with .* was successful' /tmp/tlshd.log)
  if [ "$n" -ge 2 ] && grep -qF "Using psk identity $1" /tmp/tlshd.log &&
    grep -q "Session description: (TLS1.3)$2" /tmp/tlshd.log; then
    ok tlshd-handshakes "$n successful, $3"
  else
    bad tlshd-handshakes "$n successful handshakes"
  fi
  tlshd_log 25
}
# guest_exit PATTERN LINES: "=== kernel log" (its last LINES lines matching PATTERN,
# grep -iE), tlshd stopped, exit with the checks' verdict
guest_exit() {
  echo "=== kernel log"
  dmesg | grep -iE "$1" | tail -n "$2"
  kill $tlshd_pid 2>/dev/null
  exit $fail
}
T="-t tcp -a $LNP_TARGET_ADDR -s $LNP_TARGET_PORT -n $LNP_SUBNQN --hostnqn $LNP_HOSTNQN"
EOF
}

# ---------------------------------------------------------------------------
# this machine: sluice serve, the guest run, checks
# ---------------------------------------------------------------------------

# tls_serve_sluice TLS WHAT HOST-LINE...: `sluice serve` on a free port of
# 127.0.0.1 (IO_PORT) with tls = "TLS", subsystem SUBNQN with one RAM namespace
# (NS_SIZE_MIB, 512-byte blocks) and host HOSTNQN with the HOST-LINEs (TOML) in
# CONFIG ($OUT_DIR/sluice.toml), checked by `sluice config check`; no RPC socket, TLS
# and the secure channel logged at debug (stdout/log in $OUT_DIR/sluice.stdout /
# sluice.log). Waits at most 30 s until IO_PORT listens. WHAT (may be empty) adds to
# the listener's description in the log. Sets TARGET_NAME and TARGET_PID.
# (_tls_sluice_up is called through wait_for.)
# shellcheck disable=SC2317
tls_serve_sluice() {
  local tls=$1 what=$2
  shift 2
  IO_PORT=$(( 20000 + RANDOM % 12000 ))
  while port_listening "$IO_PORT"; do IO_PORT=$((IO_PORT + 1)); done
  CONFIG=$OUT_DIR/sluice.toml
  {
    echo "# generated by $TEST_NAME"
    printf '[[listener]]\naddress = "127.0.0.1:%s"\ntls = "%s"\n\n' "$IO_PORT" "$tls"
    printf '[[subsystem]]\nnqn = "%s"\n\n' "$SUBNQN"
    printf '[[subsystem.namespace]]\nnsid = 1\nbackend = "ram"\nsize = "%sMiB"\nblock_size = 512\n\n' "$NS_SIZE_MIB"
    printf '[[subsystem.host]]\nnqn = "%s"\n' "$HOSTNQN"
    printf '%s\n' "$@"
    printf '\n[runtime]\nthreads = 1\npoll_mode = "sleep"\n'
  } >"$CONFIG"
  "$SLUICE" config check "$CONFIG" >"$OUT_DIR/config-check.txt" 2>&1 ||
    { tail_file "$OUT_DIR/config-check.txt"; die "sluice config check rejected $CONFIG"; }
  TARGET_NAME=sluice
  log "starting sluice serve on 127.0.0.1:$IO_PORT (tls = $tls${what:+, $what}; log: sluice.log)"
  NO_COLOR=1 SLUICE_LOG=${SLUICE_LOG:-info,runtime::tls=debug,nvme_target::secure_channel=debug} \
    "$SLUICE" serve --config "$CONFIG" --no-rpc-socket >"$OUT_DIR/sluice.stdout" 2>"$OUT_DIR/sluice.log" </dev/null &
  TARGET_PID=$!
  _tls_sluice_up() { kill -0 "$TARGET_PID" 2>/dev/null || return 2; port_listening "$IO_PORT"; }
  if ! wait_for 30 "sluice to listen on port $IO_PORT" _tls_sluice_up; then
    tail_file "$OUT_DIR/sluice.stdout"; tail_file "$OUT_DIR/sluice.log"
    TARGET_PID=''
    die "sluice did not come up"
  fi
}

# run_host_guest CMD LNP-ARG...: boots the guest as the host of sluice serve on
# IO_PORT (SUBNQN, HOSTNQN; the TLS tools and the LNP-ARGs added), runs CMD there
# (bounded by GUEST_TIMEOUT; output also in guest.log), then guest_outcome; starts
# `failures` afresh.
run_host_guest() {
  local cmd=$1 t0=$SECONDS rc
  shift
  log "booting the Linux host guest (timeout ${GUEST_TIMEOUT}s; output: guest.log)"
  set +e
  TMPDIR=$OUT_DIR/peer "$LNP" initiator --keep --timeout "$GUEST_TIMEOUT" --target-port "$IO_PORT" --subnqn "$SUBNQN" \
    --hostnqn "$HOSTNQN" "${TLS_TOOLS_ADD[@]}" "$@" -- "$cmd" </dev/null 2>&1 | tee "$OUT_DIR/guest.log"
  rc=${PIPESTATUS[0]}
  set -e
  failures=()
  guest_outcome "$rc" "$t0" "after ${GUEST_TIMEOUT}s"
}

# guest_outcome RC SINCE [DETAIL]: the guest run ($SECONDS was SINCE at its boot)
# ended with status RC: its console log into guest-console.log, its kept run
# directory (console log, overlay, ...) removed unless it failed, and what RC says
# added to `failures` (DETAIL follows "timed out" for 124)
guest_outcome() {
  local rc=$1 console
  log "guest finished with status $rc after $((SECONDS - $2))s"
  console=$(find "$OUT_DIR/peer" -name console.log -print -quit 2>/dev/null || true)
  [ -z "$console" ] || tr -d '\r' <"$console" >"$OUT_DIR/guest-console.log"
  [ "$rc" -ne 0 ] || rm -rf "$OUT_DIR/peer"
  case $rc in
    0) ;;
    124) failures+=("guest run timed out${3:+ $3}") ;;
    125) failures+=("linux-nvme-peer harness/boot error (status 125; see guest.log)") ;;
    *) failures+=("guest checks failed (status $rc)") ;;
  esac
}

HOST_OK=0 HOST_FAILED=()
host_check() { # NAME DETAIL ARITHMETIC-CONDITION (true: ok)
  local name=$1 detail=$2
  if (( $3 )); then
    log "CHECK $name: ok${detail:+ ($detail)}"; HOST_OK=$((HOST_OK + 1))
  else
    log "CHECK $name: FAIL${detail:+ ($detail)}"; HOST_FAILED+=("$name"); failures+=("$name")
  fi
}

# ---------------------------------------------------------------------------
# the capture (tshark)
# ---------------------------------------------------------------------------

# tshark_fields OUTFILE TSHARK-ARGS...: every pass must work (an empty answer from a
# failed tshark would pass the negative checks): a failed one is added to `failures`
tshark_fields() {
  local outf=$1
  shift
  tshark "$@" >"$outf" 2>"$outf.err" && { rm -f "$outf.err"; return 0; }
  log "tshark $* failed:"; tail_file "$outf.err" 5
  failures+=("tshark pass failed ($(basename "$outf"))")
  : >"$outf"
}

# Well-formed NVMe/TCP PDUs (display filter): a known type with the header length it
# must have (no set syntax: tshark 3 and 4 spell sets differently)
NVME_TCP_WELL_FORMED='(nvme-tcp.type == 0 && nvme-tcp.hlen == 128) || (nvme-tcp.type == 1 && nvme-tcp.hlen == 128) ||'
NVME_TCP_WELL_FORMED+=' (nvme-tcp.type == 4 && nvme-tcp.hlen == 72) || ((nvme-tcp.type == 5 || nvme-tcp.type == 6 ||'
NVME_TCP_WELL_FORMED+=' nvme-tcp.type == 7 || nvme-tcp.type == 9) && nvme-tcp.hlen == 24)'

# tls_capture_hellos PCAP PORT: the handshakes on PORT, decoded as TLS: into
# $OUT_DIR/capture-clienthello.txt (tcp stream, offered PSK identity) and
# capture-serverhello.txt (stream, cipher suite, version). Sets n_ch (ClientHellos),
# n_sh (ServerHellos), n_sh_ok (of those, TLS 1.3 with TLS_AES_128_GCM_SHA256) and
# tls_streams (the streams with a ClientHello, space-separated).
tls_capture_hellos() {
  local -a opt=(-n -r "$1" -d "tcp.port==$2,tls")
  tshark_fields "$OUT_DIR/capture-clienthello.txt" "${opt[@]}" -Y "tcp.port == $2 && tls.handshake.type == 1" \
    -T fields -e tcp.stream -e tls.handshake.extensions.psk.identity.identity
  tshark_fields "$OUT_DIR/capture-serverhello.txt" "${opt[@]}" -Y "tcp.port == $2 && tls.handshake.type == 2" \
    -T fields -e tcp.stream -e tls.handshake.ciphersuite -e tls.handshake.extensions.supported_version
  n_ch=$(wc -l <"$OUT_DIR/capture-clienthello.txt")
  n_sh=$(wc -l <"$OUT_DIR/capture-serverhello.txt")
  n_sh_ok=$(awk -F'\t' '$2 == "0x1301" && $3 ~ /0x0304/' "$OUT_DIR/capture-serverhello.txt" | wc -l)
  tls_streams=$(cut -f1 "$OUT_DIR/capture-clienthello.txt" | sort -un | paste -sd' ' -)
}

# offered_count IDENTITY: how many ClientHellos (tls_capture_hellos) offered IDENTITY
offered_count() {
  cut -f2 "$OUT_DIR/capture-clienthello.txt" | tr -d ':' |
    grep -cix "$(printf '%s' "$1" | od -An -v -tx1 | tr -d ' \n')" || true
}
