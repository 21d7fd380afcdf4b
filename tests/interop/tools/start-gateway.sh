#!/usr/bin/env bash
# start-gateway.sh SLUICE OUT_DIR NAME: starts `sluice serve` for gateway NAME of
# tests/interop/gateway.sh in the background (config CONFIG_<NAME>, port PORT_<NAME>
# from the environment; management socket OUT_DIR/NAME.sock, log OUT_DIR/NAME.log)
# and returns once its port listens. A wrapper subshell writes the gateway's pid to
# OUT_DIR/pid-NAME and, once it exits, its exit status to OUT_DIR/exit-NAME: the
# gateway is not the caller's child (scripts/rolling-restart.sh starts it), so the
# test reads its status from there.
set -euo pipefail
sluice=$1 out=$2 name=$3
config_var=CONFIG_$name port_var=PORT_$name
config=${!config_var:?$config_var is not set}
port=${!port_var:?$port_var is not set}
rm -f "$out/exit-$name"
(
  NO_COLOR=1 SLUICE_LOG=${SLUICE_LOG:-info} "$sluice" serve --config "$config" --rpc-socket "$out/$name.sock" \
    >>"$out/$name.stdout" 2>>"$out/$name.log" </dev/null &
  echo $! >"$out/pid-$name"
  status=0
  wait $! || status=$?
  echo "$status" >"$out/exit-$name"
) &
for _ in $(seq 600); do
  ss -ltn | grep -q ":$port " && exit 0
  [ -e "$out/exit-$name" ] && { echo "gateway $name exited with status $(cat "$out/exit-$name")" >&2; exit 1; }
  sleep 0.1
done
echo "gateway $name does not listen on $port after 60 s" >&2
exit 1
