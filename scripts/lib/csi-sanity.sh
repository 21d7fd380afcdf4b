# shellcheck shell=bash
# csi-sanity (kubernetes-csi/csi-test), the CSI conformance suite, at the version the
# tests were written against (sourced by scripts/setup.sh and scripts/csi-sanity.sh).
CSI_SANITY_VERSION=v5.6.0

# install_csi_sanity PATH: `go install` it to PATH's directory (a static binary, about
# 30 s once, from the Go module proxy). Needs Go 1.22 or newer.
install_csi_sanity() {
  local path=$1 go
  go=$(command -v go || echo /usr/local/go/bin/go)
  [ -x "$go" ] || { echo "csi-sanity needs Go 1.22 or newer for go install; there is no go on PATH or in /usr/local/go" >&2; return 1; }
  mkdir -p "$(dirname "$path")"
  GOBIN=$(cd "$(dirname "$path")" && pwd) GOFLAGS=-mod=mod "$go" install \
    "github.com/kubernetes-csi/csi-test/v5/cmd/csi-sanity@$CSI_SANITY_VERSION"
}
