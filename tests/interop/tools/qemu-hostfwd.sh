#!/usr/bin/env bash
# qemu-hostfwd.sh: qemu-system-x86_64 with host ports forwarded into the guest, for
# linux-nvme-peer's `initiator` mode, which forwards none (its `target` mode does,
# but configures nvmet itself, without TLS). A test points linux-nvme-peer at this
# script through LNP_QEMU; every argument reaches QEMU unchanged except the one after
# `-netdev` that starts with `user,`, which gets ",$SLUICE_QEMU_HOSTFWD" appended.
#
# Environment:
#   SLUICE_QEMU_HOSTFWD  the forwards, QEMU's syntax, comma-separated, e.g.
#                        hostfwd=tcp:127.0.0.1:4420-:4420,hostfwd=tcp:127.0.0.1:4421-:4421
#                        (only hostfwd=tcp:127.0.0.1:PORT-:PORT entries are accepted)
#   SLUICE_QEMU_REAL     the QEMU binary (default qemu-system-x86_64 from PATH)
# Used by tests/interop/linux-target-tls.sh. linux-nvme-peer also runs QEMU to probe
# KVM (`-machine none`, no -netdev): passed through as it is.
set -euo pipefail
real=${SLUICE_QEMU_REAL:-qemu-system-x86_64}
fwd=${SLUICE_QEMU_HOSTFWD:-}
if [ -n "$fwd" ]; then
  IFS=, read -r -a entries <<<"$fwd"
  for e in "${entries[@]}"; do
    [[ $e =~ ^hostfwd=tcp:127\.0\.0\.1:[0-9]+-:[0-9]+$ ]] ||
      { echo "qemu-hostfwd.sh: SLUICE_QEMU_HOSTFWD entry '$e' is not hostfwd=tcp:127.0.0.1:PORT-:PORT" >&2; exit 2; }
  done
fi
args=() prev='' patched=0
for a in "$@"; do
  if [ "$prev" = -netdev ] && [ -n "$fwd" ] && [[ $a == user,* ]]; then
    a="$a,$fwd"
    patched=1
  fi
  args+=("$a")
  prev=$a
done
# A guest run (one with a user-mode -netdev) that got no forward would leave the
# test waiting for ports that never answer: say so at once.
if [ -n "$fwd" ] && [ "$patched" = 0 ] && [[ " $* " == *" -netdev "* ]]; then
  echo "qemu-hostfwd.sh: no '-netdev user,...' argument to add $fwd to" >&2
  exit 2
fi
exec "$real" "${args[@]}"
