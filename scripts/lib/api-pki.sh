# shellcheck shell=bash
# Throw-away certificates for the management API's mutual TLS (docs/operations.md,
# "Making a CA and certificates"), for scripts and tests (sourced, not run).
#
#   make_api_pki DIR SERVER_SAN CLIENT_CN...
#
# Writes DIR/ca.pem, DIR/server.pem + server.key (subjectAltName SERVER_SAN, e.g.
# "IP:127.0.0.1,IP:10.0.2.2") and DIR/<CN>.pem + <CN>.key for each client CN.
make_api_pki() {
  local dir=$1 san=$2 cn
  shift 2
  mkdir -p "$dir"
  openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 2 \
    -subj "/CN=sluice test CA" -keyout "$dir/ca.key" -out "$dir/ca.pem" \
    -addext basicConstraints=critical,CA:TRUE -addext keyUsage=critical,keyCertSign,cRLSign 2>/dev/null
  _api_pki_sign "$dir" server "$san" serverAuth
  for cn in "$@"; do _api_pki_sign "$dir" "$cn" "" clientAuth; done
  chmod 600 "$dir"/*.key
}

_api_pki_sign() {
  local dir=$1 name=$2 san=$3 usage=$4 extensions
  extensions="extendedKeyUsage=$usage"
  [ -n "$san" ] && extensions="subjectAltName=$san"$'\n'"$extensions"
  openssl req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -subj "/CN=$name" \
    -keyout "$dir/$name.key" -out "$dir/$name.csr" 2>/dev/null
  openssl x509 -req -in "$dir/$name.csr" -CA "$dir/ca.pem" -CAkey "$dir/ca.key" -CAcreateserial -days 2 \
    -out "$dir/$name.pem" -extfile <(printf '%s\n' "$extensions") 2>/dev/null
  rm -f "$dir/$name.csr"
}
