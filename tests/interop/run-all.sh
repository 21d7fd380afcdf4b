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

# Lines repeated at the end for each failed test (its failing checks, the verdict).
FAILED_LINES_PER_TEST=8

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
rm -f "$OUT/skipped.txt" "$OUT/failed-checks.txt"
for t in "${tests[@]}"; do
  name=$(basename "$t" .sh)
  echo
  echo "#### interop test: $name"
  start=$SECONDS
  # The output is kept too (beside the test's directory, which the test empties), so
  # that a failure's own lines can be repeated at the end (CI shows only the tail).
  set +e
  bash "$t" 2>&1 | tee "$OUT/$name.out"
  rc=${PIPESTATUS[0]}
  set -e
  case $rc in
    0) passed+=("$name") ;;
    77) skipped+=("$name") ;;
    *)
      failed+=("$name")
      {
        echo "  $name (exit status $rc):"
        grep -E 'CHECK [^ ]+: FAIL|FAIL[:( ]|ERROR|panicked at' "$OUT/$name.out" | tail -n "$FAILED_LINES_PER_TEST" | cut -c1-300 | sed 's/^/    /'
      } >>"$OUT/failed-checks.txt"
      ;;
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
if [ -s "$OUT/failed-checks.txt" ]; then
  echo "#### what failed (the failed tests' FAIL lines; all of it in their artifacts)"
  cat "$OUT/failed-checks.txt"
fi
echo "interop: ${#passed[@]} passed, ${#skipped[@]} skipped, ${#failed[@]} failed"
[ ${#failed[@]} -eq 0 ]
