#!/usr/bin/env bash
# Guest half of tests/interop/package.sh. Runs as run.sh in the systemd guest
# (tests/interop/lib/systemd-guest.sh: Debian 12, systemd, apt, Linux 6.1 nvme-tcp,
# nvme-cli 2.3; no network) from the payload disk, which also holds the two
# packages and env (PKG_VERSION, UPGRADE_VERSION, NQN). Not meant to be run on a host.
#
# Installs sluice_VERSION_amd64.deb with apt, checks what the maintainer scripts did
# (user, directories, config file, unit enabled and active as user sluice), connects
# the guest's own kernel host to 127.0.0.1:4420 and writes and reads a pattern with
# O_DIRECT, adds a namespace through the management API, restarts the unit (both
# namespaces and the data kept), edits the config by hand and reinstalls, then
# upgrades to UPGRADE_VERSION (the edit kept byte for byte, the unit restarted onto
# it), then removes (unit stopped, config kept) and purges (config and state gone).
# Every check prints "CHECK <name>: ok" or "CHECK <name>: FAIL (<why>)"; details go
# to $GUEST_OUT (the host's guest/ artifacts). Exit 0 only when no check failed.
# shellcheck disable=SC2317  # functions called through run/wait_until
set -u

LOGDIR=${GUEST_OUT:?GUEST_OUT is not set}
# shellcheck source=tests/interop/guest/checks.sh
. ./checks.sh  # ok, fail, section, show_tail, run, run_quiet, wait_until
# sections say when they start (seconds into this script)
section() { echo; echo "=== $* [+${SECONDS}s]"; }
# checks.sh's wait_until sleeps with busybox's usleep, which Debian has not
usleep() { sleep "$(awk -v u="$1" 'BEGIN { printf "%.3f", u / 1000000 }')"; }
# shellcheck source=/dev/null
. ./env
: "${PKG_VERSION:?} ${UPGRADE_VERSION:?} ${NQN:?}"
export DEBIAN_FRONTEND=noninteractive
CONF=/etc/sluice/sluice.toml
STATE=/var/lib/sluice
NS2_FILE=$STATE/ns2.img

# apt hands a local package to its sandbox user _apt, who cannot read the payload disk's
# directory: the packages go where it can.
mkdir -p /tmp/debs && chmod 0755 /tmp/debs
cp ./sluice_*.deb /tmp/debs/ && chmod 0644 /tmp/debs/*.deb
DEB=/tmp/debs/sluice_${PKG_VERSION}_amd64.deb
DEB_UP=/tmp/debs/sluice_${UPGRADE_VERSION}_amd64.deb

# check NAME OK-DETAIL FAIL-DETAIL CMD...: ok or fail by CMD's status
check() {
  local name=$1 yes=$2 no=$3
  shift 3
  if "$@"; then ok "$name" "$yes"; else fail "$name" "$no"; fi
}
not() { ! "$@"; }
all_nonempty() { local f; for f in "$@"; do [ -s "$f" ] || return 1; done; }
main_pid() { systemctl show -p MainPID --value sluice 2>/dev/null || echo 0; }
is_active() { [ "$(systemctl is-active sluice 2>/dev/null)" = active ]; }
# check_active NAME: the unit is active (waits up to 30 s: a restart may be under way)
check_active() {
  if wait_until 30 is_active; then ok "$1" "pid $(main_pid)"
  else
    fail "$1" "systemctl is-active: $(systemctl is-active sluice 2>&1)"
    systemctl status sluice --no-pager -l >"$LOGDIR/$1-status.txt" 2>&1
    journalctl -u sluice --no-pager -n 40 >>"$LOGDIR/$1-status.txt" 2>&1
    show_tail "$LOGDIR/$1-status.txt" 40
  fi
}
# sluice_processes: pids of processes running as the user sluice
sluice_processes() {
  local uid p
  uid=$(id -u sluice 2>/dev/null) || return 0
  for p in /proc/[0-9]*; do
    awk -v u="$uid" '/^Uid:/ { exit !($2 == u) }' "$p/status" 2>/dev/null && echo "${p#/proc/}"
  done
}
# timed NAME TIMEOUT CMD...: like checks.sh's run, the check line with the time taken
timed() {
  local t0=$SECONDS
  run_quiet "$@" && ok "$1" "$((SECONDS - t0)) s"
}
# apt_install NAME ARGS...: apt install -y ARGS (output in NAME.txt), exit status 0
apt_install() {
  local name=$1
  shift
  timed "$name" 300 apt install -y "$@"
}
conf_sha() { sha256sum "$CONF" 2>/dev/null | cut -d' ' -f1; }
# check_conf_kept NAME: the config file is byte for byte the one saved before
check_conf_kept() {
  if cmp -s "$CONF" "$LOGDIR/sluice.toml.edited"; then ok "$1" "sha256 $(conf_sha | cut -c1-16)"
  else
    fail "$1" "the file changed"
    diff -u "$LOGDIR/sluice.toml.edited" "$CONF" >"$LOGDIR/$1.diff" 2>&1
    show_tail "$LOGDIR/$1.diff"
  fi
}
# check_runs_edited NAME: the running target serves the edited file (config_show)
check_runs_edited() {
  local text
  text=$(timeout 20 sluice rpc config_show 2>"$LOGDIR/$1.err" | jq -r .text) || text=''
  if [ "$text" = "$(cat "$LOGDIR/sluice.toml.edited")" ]; then ok "$1" "config_show is the edited file"
  else fail "$1" "config_show differs from the edited file"; echo "$text" >"$LOGDIR/$1.txt"; fi
}

# --- the kernel host --------------------------------------------------------------------
# ns_dev NSID: the block device of namespace NSID of $NQN (multipath-aware)
ns_dev() {
  local s n
  for s in /sys/class/nvme-subsystem/*; do
    [ "$(cat "$s/subsysnqn" 2>/dev/null)" = "$NQN" ] || continue
    for n in "$s"/nvme*n*; do
      [ -e "$n" ] && [ "$(cat "$n/nsid" 2>/dev/null)" = "$1" ] && [ -b "/dev/${n##*/}" ] &&
        { echo "/dev/${n##*/}"; return 0; }
    done
  done
  return 1
}
have_ns() { ns_dev "$1" >/dev/null; }
# connect NAME NSIDS...: nvme connect to 127.0.0.1:4420 and wait (<= 20 s) for the
# namespaces' block devices
connect() {
  local name=$1 nsid devs=''
  shift
  run_quiet "$name" 60 nvme connect -t tcp -a 127.0.0.1 -s 4420 -n "$NQN" --ctrl-loss-tmo 10 || return 1
  for nsid in "$@"; do
    if ! wait_until 20 have_ns "$nsid"; then
      fail "$name" "no block device for namespace $nsid within 20 s"
      ls -l /sys/class/nvme-subsystem/*/ >>"$LOGDIR/$name.txt" 2>&1
      return 1
    fi
    devs="$devs $(ns_dev "$nsid")"
  done
  ok "$name" "namespace(s) $*:$devs"
}
disconnect() {
  run "$1" 60 nvme disconnect -n "$NQN"
}
# pattern_check NAME NSID PATTERN: read PATTERN's length from 1 MiB into NSID (O_DIRECT)
pattern_check() {
  local name=$1 dev mib
  dev=$(ns_dev "$2") || { fail "$name" "namespace $2 has no block device"; return 1; }
  mib=$(( $(stat -c %s "$3") / 1048576 ))
  if ! dd if="$dev" of="$LOGDIR/$name.bin" bs=1M skip=1 count="$mib" iflag=direct status=none 2>"$LOGDIR/$name.err"; then
    fail "$name" "dd from $dev: $(head -c 200 "$LOGDIR/$name.err")"; return 1
  fi
  if cmp -s "$3" "$LOGDIR/$name.bin"; then ok "$name" "$mib MiB from $dev match"; rm -f "$LOGDIR/$name.bin"
  else fail "$name" "$mib MiB read from $dev differ from what was written ($(cmp "$3" "$LOGDIR/$name.bin" 2>&1 | head -n 1))"; fi
}
# pattern_write NAME NSID PATTERN
pattern_write() {
  local dev
  dev=$(ns_dev "$2") || { fail "$1" "namespace $2 has no block device"; return 1; }
  run "$1" 60 dd if="$3" of="$dev" bs=1M seek=1 oflag=direct conv=fsync status=none
}
ns_count() { timeout 20 sluice ns list "$NQN" -o json 2>/dev/null | jq '.namespaces | length'; }
ns_ids() { timeout 20 sluice ns list "$NQN" -o json 2>/dev/null | jq -r '[.namespaces[] | "\(.nsid)=\(.nguid)"] | join(" ")'; }

echo "guest: $(uname -r), $(. /etc/os-release && echo "$PRETTY_NAME"), $(systemctl --version | head -n 1)"
echo "packages: $(ls /tmp/debs)"
head -c 4194304 /dev/urandom >/root/pattern1.bin
head -c 2097152 /dev/urandom >/root/pattern2.bin

# ----------------------------------------------------------------------------------------
section "install: apt install ./sluice_${PKG_VERSION}_amd64.deb (offline)"
apt_install apt-install "$DEB"
st=$(dpkg-query -W -f '${Status} ${Version}' sluice 2>&1)
check dpkg-status "$st" "$st" [ "$st" = "install ok installed $PKG_VERSION" ]
if [ -x /usr/bin/sluice ] && sluice --version | grep -qx "sluice ${PKG_VERSION%%+*}"; then ok binary "$(sluice --version)"
else fail binary "/usr/bin/sluice: $(sluice --version 2>&1 | head -n 1)"; fi
missing=''
for f in /lib/systemd/system/sluice.service /usr/share/man/man1/sluice.1.gz /usr/share/man/man1/sluice-serve.1.gz \
    /usr/share/sluice/sluice.toml /usr/share/doc/sluice/copyright /usr/share/doc/sluice/operations.md; do
  [ -s "$f" ] || missing="$missing $f"
done
check files "unit, man pages, default config, docs" "missing:$missing" [ -z "$missing" ]
pw=$(getent passwd sluice || true)
uid=$(echo "$pw" | cut -d: -f3)
if [ -n "$pw" ] && [ "$uid" -lt 1000 ] && [ "$(echo "$pw" | cut -d: -f6,7)" = /var/lib/sluice:/usr/sbin/nologin ] &&
    [ "$(id -gn sluice)" = sluice ]; then ok system-user "$pw"
else fail system-user "getent passwd sluice: '$pw', group $(id -gn sluice 2>&1)"; fi
perm() { stat -c '%U:%G %a' "$1" 2>&1; }
if [ "$(perm /etc/sluice)" = "sluice:sluice 700" ] && [ "$(perm "$CONF")" = "sluice:sluice 600" ] &&
    [ "$(perm "$STATE")" = "sluice:sluice 700" ]; then ok config-installed "$(perm "$CONF") in $(perm /etc/sluice)"
else fail config-installed "/etc/sluice: $(perm /etc/sluice), $CONF: $(perm "$CONF"), $STATE: $(perm "$STATE")"; fi
check config-is-default "" "differs from /usr/share/sluice/sluice.toml" cmp -s "$CONF" /usr/share/sluice/sluice.toml
dpkg-query --control-show sluice conffiles >"$LOGDIR/conffiles.txt" 2>&1 || true
check not-a-conffile "" "$(cat "$LOGDIR/conffiles.txt")" not grep -q /etc/sluice "$LOGDIR/conffiles.txt"
run config-check 30 sluice config check "$CONF"
en=$(systemctl is-enabled sluice 2>&1)
check unit-enabled "" "$en" [ "$en" = enabled ]
check_active unit-active
pid=$(main_pid)
puid=$(awk '/^Uid:/ { print $2 }' "/proc/$pid/status" 2>/dev/null)
check runs-as-sluice "pid $pid uid $puid" "pid $pid uid '$puid', sluice is $uid" [ "${puid:-none}" = "${uid:-missing}" ]
f1=$STATE/default-ns1.img
if [ "$(stat -c %s "$f1" 2>/dev/null)" = 1073741824 ] && [ "$(stat -c %U "$f1")" = sluice ] &&
    [ "$(du -k "$f1" | cut -f1)" -lt 65536 ]; then ok namespace-file "$f1: 1 GiB, $(du -k "$f1" | cut -f1) KiB allocated, owner sluice"
else fail namespace-file "$f1: $(ls -ls "$f1" 2>&1)"; fi

# ----------------------------------------------------------------------------------------
section "the kernel host: discover, connect, dd with O_DIRECT, disconnect"
run modprobe 30 modprobe nvme-tcp
if timeout 30 nvme discover -t tcp -a 127.0.0.1 -s 8009 >"$LOGDIR/discover.txt" 2>&1 &&
    grep -q "subnqn: *$NQN" "$LOGDIR/discover.txt"; then ok discover "127.0.0.1:8009 lists $NQN"
else fail discover "$(tail -n 3 "$LOGDIR/discover.txt" | tr '\n' ' ')"; fi
if connect connect-1 1; then
  pattern_write dd-write 1 /root/pattern1.bin
  pattern_check dd-read 1 /root/pattern1.bin
  disconnect disconnect-1
fi
# What the host wrote is in the namespace's file (which is why it outlives restarts).
if dd if="$f1" bs=1M skip=1 count=4 status=none 2>/dev/null | cmp -s - /root/pattern1.bin; then ok data-in-file "$f1"
else fail data-in-file "the pattern is not at 1 MiB in $f1"; fi

# ----------------------------------------------------------------------------------------
section "a second namespace through the management API (root, /run/sluice/sluice.sock)"
run ns-add 60 sluice ns add "$NQN" --backend file --path "$NS2_FILE" --size 256MiB
check ns-list-2 "$(ns_ids)" "sluice ns list: $(ns_ids)" [ "$(ns_count)" = 2 ]
check ns-add-in-config "$CONF names $NS2_FILE" "$CONF does not name $NS2_FILE" grep -q "path = \"$NS2_FILE\"" "$CONF"
check config-rewritten-perms "$(perm "$CONF")" "$(perm "$CONF")" [ "$(perm "$CONF")" = "sluice:sluice 600" ]
ids_before=$(ns_ids)

# ----------------------------------------------------------------------------------------
section "systemctl restart sluice: namespaces and data kept"
pid_before=$(main_pid)
timed restart 120 systemctl restart sluice
check_active active-after-restart
check new-process "pid $pid_before -> $(main_pid)" "pid still $pid_before" [ "$(main_pid)" != "$pid_before" ]
check ns-kept-after-restart "$(ns_ids)" "before: $ids_before; after: $(ns_ids)" [ "$(ns_ids)" = "$ids_before" ]
if connect connect-2 1 2; then
  pattern_check dd-read-after-restart 1 /root/pattern1.bin
  pattern_write dd-write-ns2 2 /root/pattern2.bin
  pattern_check dd-read-ns2 2 /root/pattern2.bin
  disconnect disconnect-2
fi

# ----------------------------------------------------------------------------------------
section "an edited config file through a reinstall and an upgrade"
# A comment of the operator's and a changed value that `config check` accepts
sed -i 's/^poll_mode = "sleep"$/poll_mode = "adaptive"/' "$CONF"
printf '# edited by hand (tests/interop/package.sh): keep this line\n' >>"$CONF"
cp "$CONF" "$LOGDIR/sluice.toml.edited"
if grep -q '^poll_mode = "adaptive"$' "$CONF" && sluice config check "$CONF" >"$LOGDIR/config-check-edited.txt" 2>&1; then
  ok config-edited "poll_mode adaptive, a comment line; config check accepts it"
else fail config-edited "$(tail -n 2 "$LOGDIR/config-check-edited.txt" | tr '\n' ' ')"; fi
pid_before=$(main_pid)
apt_install reinstall --reinstall "$DEB"
check_conf_kept config-kept-reinstall
check_active active-after-reinstall
check restarted-by-reinstall "pid $pid_before -> $(main_pid)" "pid still $pid_before" [ "$(main_pid)" != "$pid_before" ]
check_runs_edited runs-edited-config-reinstall

pid_before=$(main_pid)
apt_install upgrade "$DEB_UP"
st=$(dpkg-query -W -f '${Status} ${Version}' sluice 2>&1)
check upgraded "$PKG_VERSION -> $UPGRADE_VERSION" "$st" [ "$st" = "install ok installed $UPGRADE_VERSION" ]
check_conf_kept config-kept-upgrade
check_active active-after-upgrade
check restarted-by-upgrade "pid $pid_before -> $(main_pid)" "pid still $pid_before" [ "$(main_pid)" != "$pid_before" ]
check_runs_edited runs-edited-config-upgrade
check ns-kept-after-upgrade "$(ns_ids)" "before: $ids_before; after: $(ns_ids)" [ "$(ns_ids)" = "$ids_before" ]
if connect connect-3 1 2; then
  pattern_check dd-read-after-upgrade 1 /root/pattern1.bin
  pattern_check dd-read-ns2-after-upgrade 2 /root/pattern2.bin
  disconnect disconnect-3
fi

journalctl -u sluice --no-pager -o short-precise >"$LOGDIR/journal-sluice.txt" 2>&1
if grep -q 'panicked at' "$LOGDIR/journal-sluice.txt"; then fail no-panic "$(grep -m1 'panicked at' "$LOGDIR/journal-sluice.txt")"
else ok no-panic "$(grep -c 'sluice: ready' "$LOGDIR/journal-sluice.txt") start(s) in the journal"; fi

# ----------------------------------------------------------------------------------------
section "apt remove: the unit stops, config and data stay"
timed remove 300 apt remove -y sluice
not_active() { ! systemctl is-active --quiet sluice; }
wait_until 30 not_active || true
check stopped-by-remove "systemctl is-active: $(systemctl is-active sluice 2>&1)" \
  "systemctl is-active: $(systemctl is-active sluice 2>&1)" not_active
left=$(sluice_processes | tr '\n' ' ')
check no-process-left "" "still running as sluice: $left" [ -z "$left" ]
check binary-removed "" "/usr/bin/sluice is still there" [ ! -e /usr/bin/sluice ]
check_conf_kept config-kept-remove
check data-kept-remove "$f1, $NS2_FILE" "$(find "$STATE" -maxdepth 1 2>&1 | tr '\n' ' ')" all_nonempty "$f1" "$NS2_FILE"

# ----------------------------------------------------------------------------------------
section "apt purge: /etc/sluice and /var/lib/sluice go"
timed purge 300 apt purge -y sluice
check config-purged "" "$(find /etc/sluice 2>&1 | tr '\n' ' ')" [ ! -e /etc/sluice ]
check state-purged "" "$(find "$STATE" 2>&1 | tr '\n' ' ')" [ ! -e "$STATE" ]
st=$(dpkg-query -W -f '${Status}' sluice 2>/dev/null || echo 'not known')
case $st in *not-installed* | 'not known') ok package-purged "dpkg: $st" ;; *) fail package-purged "dpkg: $st" ;; esac
user_exists() { getent passwd sluice >/dev/null; }
check user-kept "the system user stays (postrm says why)" "the user sluice is gone" user_exists

dmesg >"$LOGDIR/dmesg.txt" 2>&1
grep -i nvme "$LOGDIR/dmesg.txt" | grep -Ei 'error|fail|timeout|timed out|reset|abort|invalid|corrupt' |
  grep -Eiv 'shutdown timeout set to' >"$LOGDIR/dmesg-nvme-errors.txt" || true
grep -E 'BUG:|Oops|Call Trace|WARNING:|general protection|blocked for more than' "$LOGDIR/dmesg.txt" >>"$LOGDIR/dmesg-nvme-errors.txt" || true
if [ -s "$LOGDIR/dmesg-nvme-errors.txt" ]; then
  fail kernel-log "$(wc -l <"$LOGDIR/dmesg-nvme-errors.txt") nvme error line(s)"
  sed 's/^/  ! /' "$LOGDIR/dmesg-nvme-errors.txt"
else ok kernel-log; fi

section "summary"
echo "guest checks: $passed ok, $failed FAILED${failed_names:+ (failed:$failed_names)} in ${SECONDS}s"
[ "$failed" -eq 0 ]
