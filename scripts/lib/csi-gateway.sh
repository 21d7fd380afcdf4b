# shellcheck shell=bash
# The `sluice serve` a CSI driver test talks to (sourced, not run): a file-backed
# Namespace Management pool (sparse, 2 GiB) that is one subsystem's pool, so that
# deleting a volume deletes its carve, and the network management API with mutual
# TLS, where the client certificate CN "csi-controller" may change things.
#
#   write_csi_gateway_config FILE DIR SUBSYSTEM API_PORT PKI_DIR LISTENER...
#
# Writes FILE; the pool's image and table go into DIR. Each LISTENER is
# "BIND_ADDRESS[=ADVERTISED_ADDRESS][/discovery]", e.g. "127.0.0.1:4420=10.0.2.2:4420"
# (announced in the discovery log as 10.0.2.2:4420) or "127.0.0.1:8009/discovery".
# PKI_DIR holds ca.pem, server.pem and server.key (scripts/lib/api-pki.sh).
# csi_management_network below writes the API's table alone (for gateway groups).
write_csi_gateway_config() {
  local file=$1 dir=$2 subsystem=$3 api_port=$4 pki=$5 listener bind advertise
  shift 5
  {
    for listener in "$@"; do
      bind=${listener%/discovery}
      advertise=
      case $bind in *=*) advertise=${bind#*=} bind=${bind%%=*} ;; esac
      printf '[[listener]]\naddress = "%s"\n' "$bind"
      [ -z "$advertise" ] || printf 'advertise = "%s"\n' "$advertise"
      [ "$listener" = "${listener%/discovery}" ] || printf 'discovery_only = true\n'
      echo
    done
    cat <<TOML
[[backend]]
name = "csi-disk"
kind = "file"
path = "$dir/pool.img"
size = "2GiB"

[[pool]]
name = "csi"
device = "csi-disk"
table = "$dir/pool.table.json"

[[subsystem]]
nqn = "$subsystem"
pool = "csi"

[runtime]
threads = 1
poll_mode = "sleep"

TOML
    csi_management_network "$api_port" "$pki"
  } >"$file"
}

# csi_management_network API_PORT PKI_DIR: the [management.network] table of a CSI
# test's gateway (listening on 127.0.0.1:API_PORT, the CN "csi-controller"
# read-write), on stdout.
csi_management_network() {
  cat <<TOML
[management.network]
listen = "127.0.0.1:$1"
certificate = "$2/server.pem"
private_key = "$2/server.key"
client_ca = "$2/ca.pem"

[[management.network.client]]
common_name = "csi-controller"
access = "read-write"
TOML
}
