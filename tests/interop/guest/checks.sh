# shellcheck shell=dash
# Check reporting shared by the guest scripts (sourced from /root/checks.sh in the
# linux-nvme-peer guest; busybox ash). Every check prints one line,
# "CHECK <name>: ok[ (<detail>)]" or "CHECK <name>: FAIL[ (<why>)]", which the host
# scripts count; detail files go to $LOGDIR (set by the sourcing script first).

passed=0 failed=0 failed_names=''
ok() { echo "CHECK $1: ok${2:+ ($2)}"; passed=$((passed + 1)); }
fail() {
  echo "CHECK $1: FAIL${2:+ ($2)}"
  failed=$((failed + 1)); failed_names="$failed_names $1"
}
section() { echo; echo "=== $*"; }
# wait_until SECONDS CMD...: run CMD every 100 ms until it succeeds; 1 if it never
# did within SECONDS
wait_until() {
  local limit=$(( $1 * 10 )) i=0
  shift
  while ! "$@"; do
    i=$((i + 1)); [ $i -ge $limit ] && return 1
    usleep 100000
  done
}
# show the last lines of a detail file (on failure)
show_tail() { [ -s "$1" ] && { echo "--- last lines of ${1##*/}:"; tail -n "${2:-25}" "$1" | sed 's/^/  | /'; }; }

# run_quiet NAME TIMEOUT CMD...: run CMD bounded, output to $LOGDIR/NAME.txt; no check
# line unless it fails (returns CMD's status)
run_quiet() {
  local name="$1" tmo="$2" out rc
  shift 2
  out=$LOGDIR/$name.txt
  echo "+ $*" >"$out"
  timeout "$tmo" "$@" >>"$out" 2>&1
  rc=$?
  [ $rc -eq 0 ] && return 0
  if [ $rc -eq 143 ] || [ $rc -eq 124 ]; then fail "$name" "timed out after ${tmo}s"
  else fail "$name" "exit $rc"; fi
  show_tail "$out"
  return 1
}
# run NAME TIMEOUT CMD...: like run_quiet, and a check line on success
run() { run_quiet "$@" && ok "$1"; }
