#!/usr/bin/env bash
# Build the Debian package of Sluice, sluice_<version>_amd64.deb, with dpkg-deb
# alone (no cargo-deb, no debhelper).
#
#   scripts/build-deb.sh [--bin PATH] [--out DIR] [--version VERSION] [--lintian]
#
#   --bin PATH   the sluice binary to package (or SLUICE_BIN). Without either:
#                cargo build --release -p sluice, and that build's binary. Tests
#                always pass the binary the test command built once.
#   --out DIR    where the .deb goes (default <repo>/target/deb)
#   --version V  the package version (default: what `sluice --version` says, which
#                should be the workspace Cargo.toml's version); tests build a
#                second package, VERSION+test1, to install as an upgrade
#   --lintian    run lintian on the package: errors fail the build, warnings are
#                listed (lintian must be installed)
# Prints the path of the .deb as the last line of stdout.
#
# What the package holds:
#   /usr/bin/sluice                      the binary (stripped, as dh_strip would)
#   /lib/systemd/system/sluice.service   dist/sluice.service with /usr/bin/sluice and
#                                        /usr/share/doc/sluice for the /usr/local paths
#                                        of a hand install, without its hand-install
#                                        steps (one unit file in the repository)
#   /usr/share/sluice/sluice.toml        the default config (dist/sluice.toml); postinst
#                                        copies it to /etc/sluice/sluice.toml when that
#                                        does not exist. Not a conffile: sluice serve
#                                        rewrites the file (dist/debian/postinst says why)
#   /usr/share/man/man1/sluice*.1.gz     help2man pages from `sluice --help` and
#                                        `sluice <subcommand> --help` (MAN_SUBCOMMANDS)
#   /usr/share/doc/sluice/               copyright, changelog, README.md,
#                                        operations.md, config.md
#   DEBIAN/{postinst,prerm,postrm}       dist/debian/: system user, directories, the
#                                        config file, the unit's enable/start/restart/stop
# Depends: what dpkg-shlibdeps finds for the binary (libc6, libgcc-s1, libssl3) and
# adduser (postinst; init-system-helpers, whose deb-systemd-helper the scripts use, is
# Essential; systemd is not required: where it does not run, the scripts only enable
# the unit).
# Suggests: librbd1 (the rbd backend loads librbd and librados at run time), nvme-cli.
# Needs dpkg-deb, dpkg-shlibdeps (dpkg-dev), help2man, strip (binutils), gzip.
set -euo pipefail

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
BIN=${SLUICE_BIN:-}
OUT=$REPO/target/deb
VERSION=''
LINTIAN=0
# One man page each besides sluice(1): the service, its configuration and the
# management commands an operator types.
MAN_SUBCOMMANDS="serve config subsystem ns host listener backend pool gateway limits rpc stat"

die() { echo "build-deb: ERROR: $*" >&2; exit 1; }
usage() { sed -n '2,/^set -euo/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//'; }

while [ $# -gt 0 ]; do
  case $1 in
    --bin) BIN=${2:?--bin needs a path}; shift 2 ;;
    --out) OUT=${2:?--out needs a directory}; shift 2 ;;
    --version) VERSION=${2:?--version needs a version}; shift 2 ;;
    --lintian) LINTIAN=1; shift ;;
    -h | --help) usage; exit 0 ;;
    *) echo "build-deb: unknown argument '$1' (try --help)" >&2; exit 2 ;;
  esac
done

for tool in dpkg-deb dpkg-shlibdeps help2man strip gzip; do
  command -v "$tool" >/dev/null || die "'$tool' is not installed (scripts/setup.sh installs it)"
done
[ "$LINTIAN" = 0 ] || command -v lintian >/dev/null || die "--lintian: lintian is not installed"

if [ -z "$BIN" ]; then
  echo "build-deb: cargo build --release -p sluice --bin sluice" >&2
  (cd "$REPO" && cargo build --release -p sluice --bin sluice) >&2 || die "cargo build failed"
  BIN=${CARGO_TARGET_DIR:-$REPO/target}/release/sluice
fi
[ -x "$BIN" ] || die "sluice binary $BIN not found or not executable"
BIN=$(cd "$(dirname "$BIN")" && pwd)/$(basename "$BIN")
case $(od -An -tx1 -j18 -N2 "$BIN" | tr -d ' ') in
  3e00) ;;  # ELF e_machine EM_X86_64
  *) die "$BIN is not an x86-64 ELF binary (the package is amd64)" ;;
esac

# --- version ------------------------------------------------------------------------
bin_version=$("$BIN" --version | sed -n 's/^sluice \([^ ]*\).*/\1/p')
[ -n "$bin_version" ] || die "'$BIN --version' did not print 'sluice VERSION'"
cargo_version=$(sed -n '/^\[workspace.package\]/,/^\[/s/^version *= *"\(.*\)"/\1/p' "$REPO/Cargo.toml")
if [ -n "$cargo_version" ] && [ "$cargo_version" != "$bin_version" ]; then
  echo "build-deb: WARNING: $BIN says version $bin_version, the workspace Cargo.toml $cargo_version (a stale binary?)" >&2
fi
VERSION=${VERSION:-$bin_version}
[[ $VERSION =~ ^[0-9][A-Za-z0-9.+~-]*$ ]] || die "'$VERSION' is not a Debian version"

# --- staging --------------------------------------------------------------------------
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
WORK=$(mktemp -d "${TMPDIR:-/tmp}/sluice-deb.XXXXXX")
trap 'rm -rf "$WORK"' EXIT
# dpkg-shlibdeps wants a source tree: debian/control and the package under debian/<name>
ROOT=$WORK/debian/sluice
mkdir -p "$ROOT/DEBIAN" "$ROOT/usr/bin" "$ROOT/lib/systemd/system" "$ROOT/usr/share/sluice" \
  "$ROOT/usr/share/man/man1" "$ROOT/usr/share/doc/sluice"
# Reproducible: every date is the commit's (or now, outside git).
SOURCE_DATE_EPOCH=${SOURCE_DATE_EPOCH:-$(git -C "$REPO" log -1 --format=%ct 2>/dev/null || date +%s)}
export SOURCE_DATE_EPOCH
commit=$(git -C "$REPO" rev-parse --short HEAD 2>/dev/null || echo unknown)
dirty=''
[ -z "$(git -C "$REPO" status --porcelain 2>/dev/null | head -n 1)" ] || dirty='with uncommitted changes'

install -m 0755 "$BIN" "$ROOT/usr/bin/sluice"
strip --remove-section=.comment --remove-section=.note --strip-unneeded "$ROOT/usr/bin/sluice"

# The unit: one source, dist/sluice.service. The hand-install steps go, the paths
# become the package's; the result is checked so a reshaped unit file cannot slip
# through with a path that does not exist.
sed -e '/^# Install by hand:$/,/^#$/d' \
  -e '/^[^#]/s|/usr/local/bin/|/usr/bin/|g' -e '/^[^#]/s|/usr/local/share/|/usr/share/|g' \
  "$REPO/dist/sluice.service" >"$ROOT/lib/systemd/system/sluice.service"
unit=$ROOT/lib/systemd/system/sluice.service
grep -q '^ExecStart=/usr/bin/sluice serve --config /etc/sluice/sluice.toml ' "$unit" ||
  die "dist/sluice.service: no 'ExecStart=/usr/local/bin/sluice serve --config /etc/sluice/sluice.toml ...' to adapt"
! grep -q '^[^#].*/usr/local/' "$unit" || die "dist/sluice.service: a /usr/local path is left: $(grep '^[^#].*/usr/local/' "$unit")"
! grep -q '^# Install by hand' "$unit" || die "dist/sluice.service: the hand-install steps were not removed"
chmod 0644 "$unit"

# The default config, checked as sluice will read it (its paths under a scratch
# directory: `config check` wants the directory of a new file to exist).
install -m 0644 "$REPO/dist/sluice.toml" "$ROOT/usr/share/sluice/sluice.toml"
mkdir -p "$WORK/check/var/lib/sluice"
sed "s|/var/lib/sluice|$WORK/check/var/lib/sluice|g" "$REPO/dist/sluice.toml" >"$WORK/check/sluice.toml"
"$BIN" config check "$WORK/check/sluice.toml" >"$WORK/check/out.txt" 2>&1 ||
  die "dist/sluice.toml does not check: $(cat "$WORK/check/out.txt")"

# --- man pages --------------------------------------------------------------------------
# help2man runs PROGRAM --help; a subcommand's page goes through a small wrapper
# named sluice-<subcommand> (the page's name), with the version given.
mkdir -p "$WORK/man/bin"
see_also=''
for sub in $MAN_SUBCOMMANDS; do
  # shellcheck disable=SC2016  # $@ is the wrapper's own
  printf '#!/bin/sh\nexec "%s" %s "$@"\n' "$BIN" "$sub" >"$WORK/man/bin/sluice-$sub"
  chmod 0755 "$WORK/man/bin/sluice-$sub"
  see_also+="${see_also:+,
}.BR sluice-$sub (1)"
done
cat >"$WORK/man/sluice.h2m" <<EOF
[FILES]
.TP
.I /etc/sluice/sluice.toml
The configuration sluice.service serves (\\fBsluice serve\\fR rewrites it on every change made through the management API).
.TP
.I /usr/share/sluice/sluice.toml
The package's default configuration, copied to /etc/sluice/sluice.toml when that does not exist.
.TP
.I /var/lib/sluice
The state directory: the default namespace's file, reservation records.
.TP
.I /run/sluice/sluice.sock
The management socket of sluice.service (root's default for the management commands).
.TP
.I /usr/share/doc/sluice/
operations.md (running the service), config.md (every key of the configuration).

[SEE ALSO]
$see_also,
.BR nvme (1),
.BR systemctl (1)
EOF
cat >"$WORK/man/sub.h2m" <<EOF
[SEE ALSO]
.BR sluice (1)
EOF
h2m() {  # h2m PROGRAM DESCRIPTION INCLUDE OUTPUT
  help2man --no-info --no-discard-stderr --section 1 --source "Sluice $VERSION" \
    --version-string "$VERSION" --manual "Sluice" --name "$2" --include "$3" \
    --output "$4" "$1" || die "help2man $1 failed"
}
h2m "$BIN" "userspace NVMe/TCP target, host and benchmark suite" "$WORK/man/sluice.h2m" "$WORK/man/sluice.1"
for sub in $MAN_SUBCOMMANDS; do
  # the first sentence of the subcommand's summary, e.g. "namespaces of a subsystem: ..."
  desc=$("$BIN" "$sub" --help | head -n 1 | sed 's/\. .*//; s/\.$//')
  desc="${desc,}"
  h2m "$WORK/man/bin/sluice-$sub" "$desc" "$WORK/man/sub.h2m" "$WORK/man/sluice-$sub.1"
done
for page in "$WORK"/man/*.1; do
  name=${page##*/}
  gzip -9n <"$page" >"$ROOT/usr/share/man/man1/$name.gz"
done

# --- documentation ---------------------------------------------------------------------------
doc=$ROOT/usr/share/doc/sluice
install -m 0644 "$REPO/README.md" "$REPO/docs/operations.md" "$REPO/docs/config.md" "$doc/"
year=$(date -u -d "@$SOURCE_DATE_EPOCH" +%Y)
cat >"$doc/copyright" <<EOF
Format: https://www.debian.org/doc/packaging-manuals/copyright-format/1.0/
Upstream-Name: sluice
Comment: The binary links Rust crates from crates.io statically; each is under its
 own license (MIT, Apache-2.0, BSD or similar), listed by the source tree's
 Cargo.lock with \`cargo metadata\`.

Files: *
Copyright: $year The Sluice authors
License: Apache-2.0

License: Apache-2.0
 Licensed under the Apache License, Version 2.0 (the "License"); you may not
 use this file except in compliance with the License. You may obtain a copy of
 the License at http://www.apache.org/licenses/LICENSE-2.0
 .
 Unless required by applicable law or agreed to in writing, software
 distributed under the License is distributed on an "AS IS" BASIS, WITHOUT
 WARRANTIES OR CONDITIONS OF ANY KIND, either express or implied. See the
 License for the specific language governing permissions and limitations under
 the License.
 .
 On Debian systems, the full text of the Apache License, Version 2.0 can be
 found in /usr/share/common-licenses/Apache-2.0.
EOF
MAINTAINER="${DEBFULLNAME:-Sluice maintainers} <${DEBEMAIL:-maintainers@sluice.invalid}>"
{
  printf 'sluice (%s) unstable; urgency=medium\n\n' "$VERSION"
  if [ -n "$dirty" ]; then
    printf '  * Built by scripts/build-deb.sh from commit %s\n    (%s).\n\n' "$commit" "$dirty"
  else
    printf '  * Built by scripts/build-deb.sh from commit %s.\n\n' "$commit"
  fi
  printf ' -- %s  %s\n' "$MAINTAINER" "$(date -u -R -d "@$SOURCE_DATE_EPOCH")"
} | gzip -9n >"$doc/changelog.gz"
chmod 0644 "$doc"/*

# --- control ---------------------------------------------------------------------------------
for f in postinst prerm postrm; do
  install -m 0755 "$REPO/dist/debian/$f" "$ROOT/DEBIAN/$f"
done
printf 'Source: sluice\nMaintainer: %s\n\nPackage: sluice\nArchitecture: amd64\n' "$MAINTAINER" >"$WORK/debian/control"
shlibs=$(cd "$WORK" && dpkg-shlibdeps -O -e debian/sluice/usr/bin/sluice 2>"$WORK/shlibdeps.err" |
  sed -n 's/^shlibs:Depends=//p') || true
[ -n "$shlibs" ] || die "dpkg-shlibdeps found no dependencies: $(cat "$WORK/shlibdeps.err")"
# init-system-helpers (deb-systemd-helper, deb-systemd-invoke) is Essential in Debian 12.
depends="$shlibs, adduser"
installed_kib=$(du -sk --exclude=DEBIAN "$ROOT" | cut -f1)
cat >"$ROOT/DEBIAN/control" <<EOF
Package: sluice
Version: $VERSION
Architecture: amd64
Maintainer: $MAINTAINER
Installed-Size: $installed_kib
Depends: $depends
Suggests: librbd1, nvme-cli
Section: net
Priority: optional
Description: userspace NVMe/TCP target, host and benchmark suite
 Sluice serves namespaces to any NVMe/TCP host, such as the Linux kernel's
 nvme-tcp: in RAM, in files or on block devices (through io_uring), on RAID0
 sets, thin or thick carves of a pool, behind a cache tier, or on Ceph RBD
 images. Subsystems, namespaces, hosts and listeners change while it runs,
 through a management API (sluice subsystem|ns|host|listener ...). It also
 speaks TLS with pre-shared keys, DH-HMAC-CHAP, persistent reservations and
 ANA across gateway groups, and includes an NVMe/TCP host with nvme-cli's
 vocabulary and a benchmark suite.
 .
 sluice.service runs \`sluice serve\` as the system user sluice from
 /etc/sluice/sluice.toml. The default configuration serves one 1 GiB namespace
 on a sparse file under /var/lib/sluice, on 127.0.0.1 only.
EOF
(cd "$ROOT" && find . -path ./DEBIAN -prune -o -type f -printf '%P\0' | LC_ALL=C sort -z |
  xargs -0 md5sum) >"$ROOT/DEBIAN/md5sums"
chmod 0644 "$ROOT/DEBIAN/control" "$ROOT/DEBIAN/md5sums"
find "$ROOT" -type d -exec chmod 0755 {} +
find "$ROOT" -exec touch -h -d "@$SOURCE_DATE_EPOCH" {} +

DEB=$OUT/sluice_${VERSION}_amd64.deb
dpkg-deb --root-owner-group -Zxz --build "$ROOT" "$DEB" >"$WORK/dpkg-deb.log" 2>&1 ||
  die "dpkg-deb --build failed: $(cat "$WORK/dpkg-deb.log")"
echo "build-deb: $(basename "$DEB"): $(du -h "$DEB" | cut -f1), Depends: $depends" >&2

if [ "$LINTIAN" = 1 ]; then
  rc=0
  lintian --tag-display-limit 0 "$DEB" >"$OUT/lintian.txt" 2>&1 || rc=$?
  if grep -q '^E: ' "$OUT/lintian.txt"; then
    sed 's/^/  /' "$OUT/lintian.txt" >&2
    die "lintian found errors (in $OUT/lintian.txt)"
  fi
  [ "$rc" -eq 0 ] || [ -s "$OUT/lintian.txt" ] || die "lintian failed (status $rc)"
  echo "build-deb: lintian: no errors, $(grep -c '^W: ' "$OUT/lintian.txt" || true) warning(s) (in $OUT/lintian.txt)" >&2
  grep '^W: ' "$OUT/lintian.txt" | sed 's/^/  /' >&2 || true
fi
echo "$DEB"
