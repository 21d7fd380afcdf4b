#!/bin/sh
# shellcheck shell=dash
# csi-sanity's --csi.checkpathcmd in the csi-node interop guest: prints what PATH is
# (file, directory, not_found, other), as csi-sanity asks. csi-sanity calls it on a
# volume's target path right after NodeStageVolume + NodePublishVolume, so when PATH
# is a mounted ext4 filesystem it also writes a file there, drops the page cache and
# reads the file back, and logs a CHECK line to $EXT4_CHECK_LOG: the proof that a
# staged and published volume is a working filesystem on the NVMe/TCP device.
path=$1
log=${EXT4_CHECK_LOG:-/dev/stderr}
if [ -d "$path" ] && awk -v p="$path" '$2 == p && $3 == "ext4" { found = 1 } END { exit !found }' /proc/mounts; then
  probe="$path/csi-node-check.$$"
  expected="sluice csi-node $$ $(date +%s)"
  if echo "$expected" >"$probe" && sync && echo 3 >/proc/sys/vm/drop_caches &&
    [ "$(cat "$probe")" = "$expected" ] && rm -f "$probe"; then
    echo "CHECK ext4 write/read at $path: ok" >>"$log"
  else
    echo "CHECK ext4 write/read at $path: FAIL" >>"$log"
  fi
fi
if [ -f "$path" ]; then echo file
elif [ -d "$path" ]; then echo directory
elif [ -e "$path" ]; then echo other
else echo not_found
fi
