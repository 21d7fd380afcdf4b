#!/usr/bin/env bash
# Run every interop test (tests/interop/*.sh except this one) one after the
# other, report pass/fail per test, and exit non-zero if any failed. A new test is
# picked up by its file name alone; docs/testing.md lists what each one covers and
# the stage's time (e.g. linux-target-tls: Sluice's host against the Linux kernel
# target over TLS, one guest boot, about 35 s).
#
# Usage: tests/interop/run-all.sh [NAME...]   (NAME: e.g. linux-host; default: all)
# Artifacts: ${OUT:-target/interop}/<test>/ (see docs/testing.md)
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO=$(cd "$HERE/../.." && pwd)
export OUT=${OUT:-$REPO/target/interop}
mkdir -p "$OUT"

tests=()
if [ $# -gt 0 ]; then
  for name in "$@"; do
    name=${name%.sh}
    [ -f "$HERE/$name.sh" ] || { echo "run-all: no interop test $HERE/$name.sh" >&2; exit 2; }
    tests+=("$HERE/$name.sh")
  done
else
  for t in "$HERE"/*.sh; do
    [ "$(basename "$t")" = run-all.sh ] && continue
    tests+=("$t")
  done
fi
[ ${#tests[@]} -gt 0 ] || { echo "run-all: no interop tests found in $HERE" >&2; exit 1; }

passed=() failed=() skipped=()
declare -A took=()
# Tests that cannot run on this machine (exit 77) and parts of tests that could not
# (a peer that does not run on this CPU) are listed here, never counted as passed.
rm -f "$OUT/skipped.txt"
for t in "${tests[@]}"; do
  name=$(basename "$t" .sh)
  echo
  echo "#### interop test: $name"
  start=$SECONDS
  rc=0
  bash "$t" || rc=$?
  case $rc in
    0) passed+=("$name") ;;
    77) skipped+=("$name") ;;
    *) failed+=("$name") ;;
  esac
  took[$name]=$((SECONDS - start))
done

echo
echo "#### interop results"
for n in "${passed[@]}"; do printf '  PASS  %-24s %4ss\n' "$n" "${took[$n]}"; done
for n in "${skipped[@]}"; do printf '  SKIP  %-24s %4ss\n' "$n" "${took[$n]}"; done
for n in "${failed[@]}"; do printf '  FAIL  %-24s %4ss   (artifacts: %s/%s/)\n' "$n" "${took[$n]}" "$OUT" "$n"; done
if [ -s "$OUT/skipped.txt" ]; then
  echo "#### skipped checks (the machine cannot run them)"
  sed 's/^/  /' "$OUT/skipped.txt"
fi
echo "interop: ${#passed[@]} passed, ${#skipped[@]} skipped, ${#failed[@]} failed"
[ ${#failed[@]} -eq 0 ]
