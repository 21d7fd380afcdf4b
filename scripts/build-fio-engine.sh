#!/usr/bin/env bash
# Builds the fio external ioengine target/fio/libsluice_fio.so (fio/sluice_engine.c
# over libsluice_host.a from crates/nvme-host-ffi).
#
# An external fio engine is compiled against fio's internal headers (fio.h,
# optgroup.h, ... and the config-host.h that fio's ./configure generates), and
# shares fio's structs, so the headers must be those of the very fio version that
# loads the engine. Debian's fio package ships no headers, so this script takes them
# from the Debian *source* package of the installed fio version:
#
#   1. apt-get source fio=<installed version>, with a private apt configuration
#      (deb-src for the archive the binary came from; lists under the cache
#      directory; the system's apt setup is not changed), into
#      ${SLUICE_FIO_SRC_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/sluice/fio-src}/<version>/
#   2. ./configure --disable-native in that tree (only config-host.h is needed;
#      fio itself is not compiled)
#   3. checks: `fio --version` matches the sources; FIO_IOOPS_VERSION is printed
#   4. cargo build --release -p nvme-host-ffi (libsluice_host.a)
#   5. make -C fio (the engine), then checks that every symbol the engine needs
#      from fio is exported by the fio binary, and that fio loads the engine.
#   6. when Debian's libiscsi-dev is installed: fio's own libiscsi engine
#      (engines/libiscsi.c of the same sources; Debian's fio is built without it) as
#      the external engine libfio_libiscsi.so, with the same checks. `sluice bench
#      --compare iscsi` needs it; without libiscsi-dev this step is skipped with a note.
#
# Every step is skipped when its result is already there (idempotent); a failing
# step says what to do.
#
# Usage: scripts/build-fio-engine.sh [--print-path]
# Environment:
#   SLUICE_FIO_SRC_CACHE   where fio sources are kept (see above)
#   SLUICE_FIO_OUT         output directory (default <repo>/target/fio)
#   CARGO_TARGET_DIR       cargo's target directory (default <repo>/target)
#   FIO                    fio binary (default: fio in PATH)
set -euo pipefail

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
OUT=${SLUICE_FIO_OUT:-$REPO/target/fio}
CACHE=${SLUICE_FIO_SRC_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/sluice/fio-src}
CARGO_TARGET=${CARGO_TARGET_DIR:-$REPO/target}
FIO=${FIO:-fio}
PRINT_PATH=0
[ "${1:-}" = --print-path ] && PRINT_PATH=1

say() { [ "$PRINT_PATH" = 1 ] && echo "build-fio-engine: $*" >&2 || echo "build-fio-engine: $*"; }
fail() {
  echo "build-fio-engine: ERROR: $1" >&2
  shift
  for line in "$@"; do echo "  $line" >&2; done
  exit 1
}
t0=$SECONDS

# ---------------------------------------------------------------------------
# 0. tools
# ---------------------------------------------------------------------------
command -v "$FIO" >/dev/null 2>&1 ||
  fail "fio is not installed" "install it: apt-get install fio"
for tool in cc make nm dpkg-query apt-get; do
  command -v "$tool" >/dev/null 2>&1 ||
    fail "'$tool' is not installed" "install it: apt-get install build-essential (cc, make), binutils (nm)"
done
command -v dpkg-source >/dev/null 2>&1 ||
  fail "dpkg-source is missing (apt-get source needs it to unpack Debian source packages)" \
    "install it: apt-get install dpkg-dev"
command -v cargo >/dev/null 2>&1 || fail "cargo is not installed" "install Rust (see README.md)"

fio_path=$(command -v "$FIO")
fio_version=$("$FIO" --version 2>/dev/null | head -n 1)   # e.g. fio-3.33
[ -n "$fio_version" ] || fail "'$FIO --version' printed nothing"

# The Debian package that owns the fio binary, its version and its source package.
pkg=$(dpkg-query -S "$(readlink -f "$fio_path")" 2>/dev/null | head -n 1 | cut -d: -f1 || true)
[ -n "$pkg" ] || pkg=$(dpkg-query -S "$fio_path" 2>/dev/null | head -n 1 | cut -d: -f1 || true)
[ -n "$pkg" ] ||
  fail "$fio_path ($fio_version) does not come from a Debian package" \
    "this script takes fio's headers from the Debian source package of the installed fio;" \
    "install Debian's fio (apt-get install fio) or put a configured fio source tree of" \
    "the same version in $CACHE/<version>/fio-src and re-run"
deb_version=$(dpkg-query -W -f='${Version}' "$pkg")
src_pkg=$(dpkg-query -W -f='${source:Package}' "$pkg")
src_version=$(dpkg-query -W -f='${source:Version}' "$pkg")

SRC_PARENT=$CACHE/$src_version
SRC=$SRC_PARENT/fio-src
say "fio binary: $fio_path ($fio_version, Debian package $pkg $deb_version, source $src_pkg $src_version)"

# ---------------------------------------------------------------------------
# 1. fetch the Debian source package (once)
# ---------------------------------------------------------------------------
fetch_source() {
  local apt_dir=$CACHE/apt work uri suite keyring line
  # The archive the installed version came from: the first non-dpkg-status line
  # under that version in `apt-cache policy` ("500 http://deb.debian.org/debian
  # bookworm/main amd64 Packages").
  line=$(apt-cache policy "$pkg" 2>/dev/null | awk -v v="$deb_version" '
    /^ *(\*\*\* )?[^ ]+ [0-9]+$/ { cur = ($1 == "***") ? $2 : $1; next }
    cur == v && $2 ~ /^(https?|file):/ { print $2, $3; exit }')
  if [ -n "$line" ]; then
    uri=${line%% *}
    suite=${line#* }
    suite=${suite%%/*}
  else
    # Fall back to the distribution's main archive.
    local codename
    codename=$(. /etc/os-release && echo "${VERSION_CODENAME:-}")
    [ -n "$codename" ] || fail "cannot tell which Debian archive $pkg $deb_version came from" \
      "run apt-get update, or provide the sources by hand in $SRC"
    uri=http://deb.debian.org/debian
    suite=$codename
  fi
  keyring=''
  for k in /usr/share/keyrings/debian-archive-keyring.gpg /usr/share/keyrings/debian-archive-keyring.pgp; do
    [ -r "$k" ] && { keyring="[signed-by=$k] "; break; }
  done

  mkdir -p "$apt_dir/lists/partial" "$apt_dir/cache/archives/partial" "$apt_dir/sources.list.d"
  printf 'deb-src %s%s %s main\n' "$keyring" "$uri" "$suite" >"$apt_dir/sources.list"
  local -a apt_opts=(
    -o "Dir::Etc::SourceList=$apt_dir/sources.list"
    -o "Dir::Etc::SourceParts=$apt_dir/sources.list.d"
    -o "Dir::State::Lists=$apt_dir/lists"
    -o "Dir::Cache=$apt_dir/cache"
    -o "Dir::Cache::Archives=$apt_dir/cache/archives"
    -o "Debug::NoLocking=1"
    -o "APT::Sandbox::User=$(id -un)"
    -o "Acquire::Retries=3"
  )
  say "fetching Debian source $src_pkg=$src_version from $uri $suite (private apt lists in $apt_dir)"
  apt-get "${apt_opts[@]}" -qq update >"$apt_dir/update.log" 2>&1 ||
    { tail -n 20 "$apt_dir/update.log" >&2
      fail "apt-get update for deb-src $uri $suite failed (log: $apt_dir/update.log)" \
        "the Debian mirror must be reachable; the source package is fetched through apt"; }

  work=$(mktemp -d "$SRC_PARENT.tmp.XXXXXX")
  if ! (cd "$work" && apt-get "${apt_opts[@]}" -q source "$src_pkg=$src_version") >"$work.log" 2>&1; then
    tail -n 20 "$work.log" >&2
    rm -rf "$work"
    fail "apt-get source $src_pkg=$src_version failed (log: $work.log)" \
      "is that version still in $uri $suite? (apt-cache policy $pkg)" \
      "alternatively unpack fio-${fio_version#fio-} sources by hand into $SRC and configure them"
  fi
  local tree
  tree=$(find "$work" -mindepth 1 -maxdepth 1 -type d -name "$src_pkg-*" | head -n 1)
  if [ -z "$tree" ] || [ ! -f "$tree/fio.h" ]; then
    rm -rf "$work"
    fail "the unpacked source has no fio.h ($work)"
  fi
  mkdir -p "$SRC_PARENT"
  rm -rf "$SRC"
  mv "$tree" "$SRC"
  mkdir -p "$SRC_PARENT/debian-source"
  find "$work" -maxdepth 1 -type f -exec mv {} "$SRC_PARENT/debian-source/" \;
  rm -rf "$work" "$work.log" "$apt_dir/lists" "$apt_dir/cache"   # the index is 20 MB; refetched if ever needed
  echo "$src_pkg $src_version from $uri $suite" >"$SRC/.sluice-fetched"
}

if [ -f "$SRC/.sluice-fetched" ] && [ -f "$SRC/fio.h" ]; then
  say "fio sources: $SRC (cached)"
else
  mkdir -p "$CACHE"
  t=$SECONDS
  fetch_source
  say "fio sources: $SRC (fetched in $((SECONDS - t))s)"
fi

# ---------------------------------------------------------------------------
# 2. configure (once): generates config-host.h, which fio.h needs
# ---------------------------------------------------------------------------
# Debian builds fio with `./configure --disable-native --prefix=/usr --enable-gfio
# --enable-libnbd`; gfio and libnbd only add programs/engines and need their
# -dev packages, and none of the conditionals they set changes a struct an engine
# uses, so they are left out here.
if [ -f "$SRC/.sluice-configured" ] && [ -f "$SRC/config-host.h" ]; then
  say "configured: $SRC/config-host.h (cached)"
else
  t=$SECONDS
  say "configuring fio sources (./configure --disable-native)"
  (cd "$SRC" && ./configure --disable-native --prefix=/usr) >"$SRC_PARENT/configure.log" 2>&1 ||
    { tail -n 20 "$SRC_PARENT/configure.log" >&2
      fail "fio's ./configure failed (log: $SRC_PARENT/configure.log)" "it needs a C compiler: apt-get install build-essential"; }
  [ -f "$SRC/config-host.h" ] || fail "./configure did not write $SRC/config-host.h"
  touch "$SRC/.sluice-configured"
  say "configured in $((SECONDS - t))s"
fi

# ---------------------------------------------------------------------------
# 3. same version as the binary?
# ---------------------------------------------------------------------------
src_fio_version=$(sed -n 's/^DEF_VER=//p' "$SRC/FIO-VERSION-GEN" | head -n 1)
[ "$src_fio_version" = "$fio_version" ] ||
  fail "the fio sources in $SRC are $src_fio_version but '$FIO --version' says $fio_version" \
    "remove $SRC_PARENT and re-run (the sources follow the installed Debian package)"
ioops=$(sed -n 's/^#define FIO_IOOPS_VERSION[[:space:]]*\([0-9]*\).*/\1/p' "$SRC/ioengines.h")
# Conditionals that change the layout of structs the engine reads (thread_data
# gains CUDA fields); Debian's binary is built without CUDA.
if grep -q '^#define CONFIG_CUDA' "$SRC/config-host.h"; then
  fail "$SRC/config-host.h enables CONFIG_CUDA, which Debian's fio does not: struct thread_data would not match" \
    "re-configure without --enable-cuda (remove $SRC/.sluice-configured and re-run)"
fi
say "headers: $src_fio_version (FIO_IOOPS_VERSION $ioops) match the binary $fio_version"

# ---------------------------------------------------------------------------
# 4. libsluice_host.a
# ---------------------------------------------------------------------------
say "cargo build --release -p nvme-host-ffi"
(cd "$REPO" && cargo build --release -p nvme-host-ffi --lib --quiet) ||
  fail "building libsluice_host (crates/nvme-host-ffi) failed"
LIB=$CARGO_TARGET/release/libsluice_host.a
[ -f "$LIB" ] || fail "$LIB was not built (is CARGO_TARGET_DIR=$CARGO_TARGET right?)"

# ---------------------------------------------------------------------------
# 5. the engine
# ---------------------------------------------------------------------------
mkdir -p "$OUT"
make_out=$OUT/make.log
make -C "$REPO/fio" --no-print-directory FIO_SRC="$SRC" SLUICE_LIB="$LIB" OUT="$OUT" >"$make_out" 2>&1 ||
  { cat "$make_out" >&2; fail "compiling fio/sluice_engine.c failed (log: $make_out)"; }
ENGINE=$OUT/libsluice_fio.so

# Every symbol the engine leaves undefined must come from the C library or from the
# fio binary's dynamic symbol table (fio exports only some of its functions).
provided=$(mktemp)
trap 'rm -f "$provided"' EXIT
nm -D --defined-only "$fio_path" | awk '{print $NF}' >"$provided"
missing=()
while read -r sym; do
  sym=${sym%%@*}
  grep -qx "$sym" "$provided" && continue
  case $sym in
    # resolved from libc/libm/libgcc_s etc. (versioned glibc symbols are filtered below)
    __gmon_start__ | _ITM_* | __cxa_finalize | __cxa_thread_atexit_impl | _Unwind_*) continue ;;
  esac
  missing+=("$sym")
done < <(nm -D --undefined-only "$ENGINE" | awk '$NF !~ /@/ {print $NF}')
if [ ${#missing[@]} -gt 0 ]; then
  fail "the engine needs symbols the fio binary does not export: ${missing[*]}" \
    "use only fio functions that '$fio_path' exports (nm -D --defined-only $fio_path)"
fi

# fio loads it: --enghelp dlopens the engine and lists its options.
if ! "$FIO" --enghelp="$ENGINE" >"$OUT/enghelp.txt" 2>&1 ||
  ! grep -q traddr "$OUT/enghelp.txt"; then
  cat "$OUT/enghelp.txt" >&2
  fail "fio could not load $ENGINE (output above)"
fi
say "built $ENGINE ($(du -h "$ENGINE" | cut -f1))"

# ---------------------------------------------------------------------------
# 6. fio's libiscsi engine (for sluice bench --compare iscsi)
# ---------------------------------------------------------------------------
ISCSI_HEADER=/usr/include/iscsi/iscsi.h
if [ -f "$ISCSI_HEADER" ]; then
  iscsi_out=$OUT/make-iscsi.log
  make -C "$REPO/fio" --no-print-directory FIO_SRC="$SRC" OUT="$OUT" iscsi >"$iscsi_out" 2>&1 ||
    { cat "$iscsi_out" >&2; fail "compiling fio's engines/libiscsi.c failed (log: $iscsi_out)"; }
  ISCSI_ENGINE=$OUT/libfio_libiscsi.so
  # Its undefined symbols come from fio, libiscsi or the C library.
  libiscsi=$(ldd "$ISCSI_ENGINE" | awk '/libiscsi/ {print $3; exit}')
  [ -n "$libiscsi" ] || fail "$ISCSI_ENGINE is not linked with libiscsi"
  nm -D --defined-only "$libiscsi" | awk '{print $NF}' >>"$provided"
  missing=()
  while read -r sym; do
    sym=${sym%%@*}
    grep -qx "$sym" "$provided" && continue
    case $sym in
      __gmon_start__ | _ITM_* | __cxa_finalize | __cxa_thread_atexit_impl | _Unwind_*) continue ;;
    esac
    missing+=("$sym")
  done < <(nm -D --undefined-only "$ISCSI_ENGINE" | awk '$NF !~ /@/ {print $NF}')
  [ ${#missing[@]} -eq 0 ] ||
    fail "fio's libiscsi engine needs symbols neither fio nor libiscsi export: ${missing[*]}"
  if ! "$FIO" --enghelp="$ISCSI_ENGINE" >"$OUT/enghelp-iscsi.txt" 2>&1 ||
    ! grep -q initiator "$OUT/enghelp-iscsi.txt"; then
    cat "$OUT/enghelp-iscsi.txt" >&2
    fail "fio could not load $ISCSI_ENGINE (output above)"
  fi
  say "built $ISCSI_ENGINE (fio's libiscsi engine, $(du -h "$ISCSI_ENGINE" | cut -f1))"
else
  say "skipped fio's libiscsi engine: $ISCSI_HEADER is missing (apt-get install libiscsi-dev, or scripts/setup.sh; only sluice bench --compare iscsi needs it)"
fi
say "done in $((SECONDS - t0))s"
[ "$PRINT_PATH" = 1 ] && echo "$ENGINE"
exit 0
