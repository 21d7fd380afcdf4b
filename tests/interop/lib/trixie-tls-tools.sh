# shellcheck shell=bash
# TLS_TOOLS_ERROR, TLS_TOOLS_SUMMARY and TLS_TOOLS_ADD are read by the caller:
# shellcheck disable=SC2034
# Tools for NVMe/TCP TLS in a linux-nvme-peer guest (sourced by tests/interop/tls.sh,
# where tlshd is the kernel host's handshake client, and linux-target-tls.sh, where it
# is nvmet's handshake server; after lib/common.sh, which provides log and tail_file).
#
# The guest image (bookworm userland, bookworm-backports' 6.12 kernel) has no TLS
# handshake daemon, no nvme-cli that speaks TLS (bookworm's 2.3 has no --tls), no
# keyctl and no kTLS modules. This builds, once, and caches:
#   sysroot/   Debian trixie's tlshd (ktls-utils 1.0), nvme (nvme-cli 2.13, libnvme
#              1.13) and keyctl (keyutils) with every library they load, trixie's
#              glibc and loader included; meant for /opt/trixie in the guest
#   wrap/      nvme, tlshd, keyctl: scripts that start those binaries through the
#              trixie loader (--library-path), for /usr/local/sbin in the guest,
#              which comes first in its PATH. Nothing of the guest's bookworm
#              userland (its libc) is replaced.
#   tlshd.conf /etc/tlshd.conf (tlshd exits without one); debug log level 2
#   kmods/<kernel release>-<package version>/
#              tls, gcm, ghash-generic and what they need (gf128mul, crypto_null),
#              taken from the very kernel package of the guest image (vermagic and
#              symbol versions must match), decompressed; for
#              /usr/lib/modules/<release>/extra (then `depmod -a` in the guest)
# Packages come from Debian's archive through apt-get download with a private apt
# configuration (trixie main only, lists, cache and an empty dpkg status of its own;
# the system's apt state is not touched), are unpacked with dpkg-deb -x, and only
# the ELF closure of the three binaries (resolved by the trixie loader itself, every
# library from the unpacked packages) is kept: about 22 MiB.
#
# Cache: ${SLUICE_TLS_TOOLS_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/sluice-tls-tools};
# delete it to rebuild. Mirror: SLUICE_DEBIAN_MIRROR (default http://deb.debian.org/debian).
#
# Entry point: tls_tools_prepare IMAGE_ENV (image.env of the guest image). On
# success it sets TLS_TOOLS_ADD (the linux-nvme-peer --add arguments, an array),
# TLS_TOOLS_SUMMARY and returns 0. It returns 2 when packages could not be
# fetched (no registry: the caller skips) and 1 on any other problem; in both
# cases TLS_TOOLS_ERROR says why.

TLS_TOOLS_CACHE=${SLUICE_TLS_TOOLS_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/sluice-tls-tools}
TLS_TOOLS_MIRROR=${SLUICE_DEBIAN_MIRROR:-http://deb.debian.org/debian}
# The trixie packages: the three tools and every library package of their ELF
# closure (checked after unpacking: a library that is not in here fails the build
# with its name, rather than being taken from the host). libc6 brings the loader.
TLS_TOOLS_PACKAGES=(
  ktls-utils nvme-cli libnvme1t64 keyutils libkeyutils1
  libc6 libgcc-s1 libatomic1
  libglib2.0-0t64 libffi8 libpcre2-8-0
  libgnutls30t64 libp11-kit0 libidn2-0 libunistring5 libtasn1-6 libnettle8t64 libhogweed6t64 libgmp10
  libnl-3-200 libnl-genl-3-200
  libjson-c5 libssl3t64 libzstd1 zlib1g
)
# binary (in the packages) : wrapper name : wrapper directory in the guest
TLS_TOOLS_BINARIES=(usr/sbin/tlshd:tlshd:/usr/local/sbin usr/sbin/nvme:nvme:/usr/local/sbin usr/bin/keyctl:keyctl:/usr/local/bin)
# kTLS modules the guest needs (their dependencies are added), and ones taken when
# the kernel has them: ghash-generic is a module up to Linux 6.x; from 7.x GHASH is a
# built-in library (CONFIG_CRYPTO_LIB_GF128HASH=y) and the module is gone.
TLS_TOOLS_MODULES=(tls gcm)
TLS_TOOLS_OPTIONAL_MODULES=(ghash-generic)
TLS_TOOLS_LIBDIR=usr/lib/x86_64-linux-gnu
TLS_TOOLS_LOADER=$TLS_TOOLS_LIBDIR/ld-linux-x86-64.so.2
TLS_TOOLS_GUEST_ROOT=/opt/trixie
TLS_TOOLS_FORMAT=1  # bump when the layout of the cache changes

TLS_TOOLS_ERROR='' TLS_TOOLS_SUMMARY=''
TLS_TOOLS_ADD=()

# private_apt_conf DIR LIST-LINE: a private apt configuration in DIR whose only
# source is LIST-LINE (no system sources or preferences; lists, cache and an empty
# dpkg status of its own); prints its path. (lib/merged-kernel.sh uses it too.)
private_apt_conf() {
  local d=$1
  mkdir -p "$d/lists/partial" "$d/cache/archives/partial" "$d/preferences.d" "$d/sources.list.d"
  printf '%s\n' "$2" >"$d/sources.list"
  [ -e "$d/status" ] || : >"$d/status"
  {
    printf 'Dir::Etc::SourceList "%s";\n' "$d/sources.list"
    printf 'Dir::Etc::SourceParts "%s";\n' "$d/sources.list.d"
    printf 'Dir::Etc::Preferences "%s";\n' "$d/preferences"
    printf 'Dir::Etc::PreferencesParts "%s";\n' "$d/preferences.d"
    printf 'Dir::State::Lists "%s";\n' "$d/lists"
    printf 'Dir::State::status "%s";\n' "$d/status"
    printf 'Dir::Cache "%s";\n' "$d/cache"
    printf 'Acquire::Languages "none";\n'
    printf 'APT::Architecture "amd64";\nAPT::Architectures { "amd64"; };\n'
    # the private directories belong to the user running the test, not to _apt
    printf 'APT::Sandbox::User "%s";\n' "$(id -un)"
  } >"$d/apt.conf"
  echo "$d/apt.conf"
}

# _tls_tools_apt_conf: write the private trixie apt configuration; prints its path
_tls_tools_apt_conf() {
  private_apt_conf "$TLS_TOOLS_CACHE/apt" \
    "deb [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] $TLS_TOOLS_MIRROR trixie main"
}

# _tls_tools_update LOG [env APT_CONFIG=...]: apt-get update; fails (2) also when
# apt only warns that it could not reach the archive
_tls_tools_update() {
  local logf=$1 out rc=0
  shift
  out=$("$@" apt-get update -q 2>&1) || rc=$?
  echo "$out" >>"$logf"
  [ "$rc" -eq 0 ] || return 2
  ! grep -qE '^(W|E): (Failed to fetch|Some index files failed)' <<<"$out" || return 2
}

# _tls_tools_download APT_CONF DIR LOG PKG...: apt-get download PKGs into DIR
# (APT_CONF '': the caller's APT_CONFIG); refreshes the package lists first when
# they are empty, and once more when a download fails (the archive moved on).
# Returns 2 when the archive cannot be reached (the caller skips), 1 when it
# answers but lacks a package or version (a real problem: the caller fails).
_tls_tools_download() {
  local conf=$1 dir=$2 logf=$3 lists
  shift 3
  mkdir -p "$dir"
  local -a env=()
  [ -z "$conf" ] || env=(env "APT_CONFIG=$conf")
  lists=$("${env[@]}" apt-config shell L Dir::State::Lists/d 2>/dev/null | sed "s/^L='\\(.*\\)'$/\\1/")
  if [ -n "$lists" ] && [ -z "$(find "$lists" -maxdepth 1 -name '*_Packages*' -print -quit 2>/dev/null)" ]; then
    _tls_tools_update "$logf" "${env[@]}" || return 2
  fi
  (cd "$dir" && "${env[@]}" apt-get download -q "$@") >>"$logf" 2>&1 && return 0
  echo "== apt-get download failed; refreshing the package lists and retrying" >>"$logf"
  _tls_tools_update "$logf" "${env[@]}" || return 2
  local out
  out=$(cd "$dir" && "${env[@]}" apt-get download -q "$@" 2>&1) && { echo "$out" >>"$logf"; return 0; }
  echo "$out" >>"$logf"
  grep -qE "^E: (Unable to locate package|Version '.*' for '.*' was not found|Can't select)" <<<"$out" && return 1
  return 2
}

# _tls_tools_sysroot: build $TLS_TOOLS_CACHE/sysroot (+ wrap/, tlshd.conf) unless done
_tls_tools_sysroot() {
  local c=$TLS_TOOLS_CACHE stamp=$TLS_TOOLS_CACHE/sysroot/.complete
  [ -s "$stamp" ] && grep -qx "format=$TLS_TOOLS_FORMAT" "$stamp" && return 0
  local conf work=$c/build.sysroot logf=$c/sysroot-build.log rc=0
  conf=$(_tls_tools_apt_conf)
  rm -rf "$work" "$c/sysroot" "$c/wrap"
  mkdir -p "$work/debs" "$work/root"
  : >"$logf"
  log "downloading Debian trixie's ktls-utils, nvme-cli, keyutils and their libraries (one-time; cache: $c)"
  _tls_tools_download "$conf" "$work/debs" "$logf" "${TLS_TOOLS_PACKAGES[@]}" || rc=$?
  if [ "$rc" -eq 1 ]; then
    TLS_TOOLS_ERROR="Debian trixie lacks a package of lib/trixie-tls-tools.sh's list (see $logf): $(grep -E '^E:' "$logf" | tail -n 2 | tr '\n' ' ')"
    return 1
  elif [ "$rc" -ne 0 ]; then
    TLS_TOOLS_ERROR="could not fetch Debian trixie packages from $TLS_TOOLS_MIRROR (see $logf): $(grep -E '^(E|W):' "$logf" | tail -n 2 | tr '\n' ' ')"
    return 2
  fi
  local deb
  for deb in "$work"/debs/*.deb; do
    dpkg-deb -x "$deb" "$work/root" 2>>"$logf" ||
      { TLS_TOOLS_ERROR="dpkg-deb -x $(basename "$deb") failed (see $logf)"; return 1; }
  done
  local r=$work/root s=$c/sysroot.new
  rm -rf "$s"
  mkdir -p "$s/$TLS_TOOLS_LIBDIR"
  [ -x "$r/$TLS_TOOLS_LOADER" ] || { TLS_TOOLS_ERROR="libc6 (trixie) has no $TLS_TOOLS_LOADER"; return 1; }
  cp -L "$r/$TLS_TOOLS_LOADER" "$s/$TLS_TOOLS_LOADER"
  # The ELF closure, as the trixie loader resolves it. A library found outside the
  # unpacked packages (the loader also looks at this machine's own directories)
  # or not at all is missing from TLS_TOOLS_PACKAGES.
  local entry bin list line lib path bad=''
  for entry in "${TLS_TOOLS_BINARIES[@]}"; do
    bin=${entry%%:*}
    [ -x "$r/$bin" ] || { TLS_TOOLS_ERROR="/$bin is not in the unpacked trixie packages"; return 1; }
    mkdir -p "$s/$(dirname "$bin")"
    cp -L "$r/$bin" "$s/$bin"
    list=$("$r/$TLS_TOOLS_LOADER" --library-path "$r/$TLS_TOOLS_LIBDIR" --list "$r/$bin" 2>&1) ||
      { TLS_TOOLS_ERROR="the trixie loader cannot list the libraries of /$bin: $list"; return 1; }
    echo "== /$bin" >>"$logf"; echo "$list" >>"$logf"
    while IFS= read -r line; do
      case $line in
        *'=> not found'*) bad+=" ${line%% *}(not found)"; continue ;;
        *' => '*) ;;
        *) continue ;;  # the vdso
      esac
      lib=$(awk '{ print $1 }' <<<"$line")
      path=$(awk '{ print $3 }' <<<"$line")
      case $lib in /*) continue ;; esac  # the loader itself, copied above
      case $path in
        "$r"/*) cp -L "$path" "$s/$TLS_TOOLS_LIBDIR/$lib" ||
          { TLS_TOOLS_ERROR="could not copy $path"; return 1; } ;;
        *) bad+=" $lib(from $path)" ;;
      esac
    done <<<"$list"
  done
  [ -z "$bad" ] || { TLS_TOOLS_ERROR="libraries missing from the trixie package list in lib/trixie-tls-tools.sh:$bad"; return 1; }
  # smoke test on this machine, through the copied closure only
  local ver
  ver=$("$s/$TLS_TOOLS_LOADER" --library-path "$s/$TLS_TOOLS_LIBDIR" "$s/usr/sbin/nvme" version 2>&1) ||
    { TLS_TOOLS_ERROR="the trixie nvme does not run: $ver"; return 1; }
  ver=$(tr '\n' ' ' <<<"$ver")
  "$s/$TLS_TOOLS_LOADER" --library-path "$s/$TLS_TOOLS_LIBDIR" "$s/usr/bin/keyctl" --version >>"$logf" 2>&1 ||
    { TLS_TOOLS_ERROR="the trixie keyctl does not run (see $logf)"; return 1; }
  # wrappers and the tlshd configuration
  mkdir -p "$c/wrap.new"
  local name
  for entry in "${TLS_TOOLS_BINARIES[@]}"; do
    bin=${entry%%:*} name=${entry#*:}; name=${name%%:*}
    # shellcheck disable=SC2016  # $T and "$@" are for the wrapper
    printf '#!/bin/sh\n# Debian trixie'"'"'s %s (lib/trixie-tls-tools.sh), through the trixie loader\nT=%s\nexec "$T/%s" --library-path "$T/%s" --argv0 %s "$T/%s" "$@"\n' \
      "$name" "$TLS_TOOLS_GUEST_ROOT" "$TLS_TOOLS_LOADER" "$TLS_TOOLS_LIBDIR" "$name" "$bin" >"$c/wrap.new/$name"
    chmod 755 "$c/wrap.new/$name"
  done
  printf '# tlshd configuration for the interop guest (lib/trixie-tls-tools.sh)\n[debug]\nloglevel=2\ntls=0\nnl=0\n\n[authenticate]\n' \
    >"$c/tlshd.conf"
  local pkgs
  # shellcheck disable=SC2016  # dpkg-deb's own ${Field} syntax
  pkgs=$(for deb in "$work"/debs/*.deb; do dpkg-deb -W --showformat='${Package}=${Version}\n' "$deb"; done | paste -sd' ' -)
  {
    echo "format=$TLS_TOOLS_FORMAT"
    echo "built=$(date -u +%Y-%m-%dT%H:%M:%SZ)"
    echo "nvme=$ver"
    echo "packages=$pkgs"
  } >"$s/.complete.new"
  rm -rf "$c/wrap"; mv "$c/wrap.new" "$c/wrap"
  mv "$s" "$c/sysroot"
  mv "$c/sysroot/.complete.new" "$stamp"
  # the package lists (about 25 MiB) are fetched again should a rebuild need them
  rm -rf "$work" "$c/apt/lists" "$c/apt/cache"
  log "trixie tools ready: $(du -sh "$c/sysroot" | cut -f1) ($ver)"
}

# _tls_tools_kmods KERNEL_PKG VERSION RELEASE IMAGE_MODULES: the kTLS modules of
# that kernel package into $TLS_TOOLS_CACHE/kmods/RELEASE-VERSION unless done. The
# package comes through the caller's APT_CONFIG (the one the guest image was built
# with). Modules already in the image (IMAGE_MODULES) are left out.
_tls_tools_kmods() {
  local pkg=$1 version=$2 release=$3 have=" ${4//-/_} "
  local c=$TLS_TOOLS_CACHE dest=$TLS_TOOLS_CACHE/kmods/$release-${version//[~:]/_}
  TLS_TOOLS_KMODS=$dest
  [ -s "$dest/.complete" ] && return 0
  local work=$c/build.kmods logf=$c/kmods-build.log rc=0 deb
  rm -rf "$work" "$dest"
  mkdir -p "$work/deb" "$work/root"
  : >"$logf"
  log "downloading $pkg $version for its kTLS modules (one-time)"
  _tls_tools_download '' "$work/deb" "$logf" "$pkg=$version" || rc=$?
  if [ "$rc" -eq 1 ]; then
    TLS_TOOLS_ERROR="the archive no longer has the guest image's kernel package $pkg=$version (see $logf): rebuild the guest image (delete ${LNP_CACHE_DIR:-its cache})"
    return 1
  elif [ "$rc" -ne 0 ]; then
    TLS_TOOLS_ERROR="could not fetch the guest's kernel package $pkg=$version (see $logf): $(grep -E '^(E|W):' "$logf" | tail -n 2 | tr '\n' ' ')"
    return 2
  fi
  deb=$(find "$work/deb" -name '*.deb' -print -quit)
  dpkg-deb -x "$deb" "$work/root" 2>>"$logf" || { TLS_TOOLS_ERROR="dpkg-deb -x $(basename "$deb") failed"; return 1; }
  # A split kernel (Debian, Linux 7.x: linux-image-<release> ships nothing itself)
  # has its modules in linux-modules-<release> and modules.builtin in
  # linux-base-<release>. (lib/merged-kernel.sh's merged package has them all.)
  if [ ! -d "$work/root/usr/lib/modules/$release/kernel" ] && [ ! -d "$work/root/lib/modules/$release/kernel" ]; then
    local part parts=()
    for part in linux-modules- linux-base-; do
      part=$(dpkg-deb -f "$deb" Depends | tr ',|' '\n' | sed -n "s/^ *\\(${part}[^ ]*\\).*/\\1/p" | head -n 1)
      [ -z "$part" ] || parts+=("$part=$version")
    done
    if [ "${#parts[@]}" -gt 0 ]; then
      mkdir -p "$work/split"
      rc=0
      _tls_tools_download '' "$work/split" "$logf" "${parts[@]}" || rc=$?
      [ "$rc" -eq 0 ] || { TLS_TOOLS_ERROR="could not fetch ${parts[*]} (see $logf)"; return "$rc"; }
      for part in "$work"/split/*.deb; do
        dpkg-deb -x "$part" "$work/root" 2>>"$logf" || { TLS_TOOLS_ERROR="dpkg-deb -x $(basename "$part") failed"; return 1; }
      done
    fi
  fi
  # depmod and modprobe -d look in BASE/lib/modules
  if [ ! -d "$work/root/lib/modules/$release" ] && [ -d "$work/root/usr/lib/modules/$release" ]; then
    mkdir -p "$work/root/lib"; ln -s ../usr/lib/modules "$work/root/lib/modules"
  fi
  [ -d "$work/root/lib/modules/$release" ] || { TLS_TOOLS_ERROR="$pkg has no modules for $release"; return 1; }
  depmod -b "$work/root" "$release" >>"$logf" 2>&1 || { TLS_TOOLS_ERROR="depmod on $pkg failed (see $logf)"; return 1; }
  local deps optional m
  deps=$(modprobe -d "$work/root" -S "$release" --show-depends -a "${TLS_TOOLS_MODULES[@]}" 2>>"$logf") ||
    { TLS_TOOLS_ERROR="$pkg lacks one of the modules ${TLS_TOOLS_MODULES[*]} (see $logf)"; return 1; }
  for m in "${TLS_TOOLS_OPTIONAL_MODULES[@]}"; do
    if optional=$(modprobe -d "$work/root" -S "$release" --show-depends "$m" 2>>"$logf"); then
      deps+=$'\n'"$optional"
    else
      echo "== optional module $m: not in $pkg (built in, or gone)" >>"$logf"
    fi
  done
  echo "$deps" >>"$logf"
  mkdir -p "$dest.new"
  local path base kept=''
  while read -r verb path _; do
    [ "$verb" = insmod ] || continue
    case " $kept " in *" $(basename "${path%.ko*}") "*) continue ;; esac
    base=$(basename "$path"); base=${base%.xz}; base=${base%.zst}; base=${base%.gz}
    case $have in *" ${base%.ko} "* | *" $(tr - _ <<<"${base%.ko}") "*) continue ;; esac
    case $path in
      *.ko.xz) xz -dc "$path" >"$dest.new/$base" ;;
      *.ko.zst) zstd -qdc "$path" >"$dest.new/$base" ;;
      *.ko.gz) gzip -dc "$path" >"$dest.new/$base" ;;
      *) cp "$path" "$dest.new/$base" ;;
    esac || { TLS_TOOLS_ERROR="could not decompress $path"; return 1; }
    kept+="${kept:+ }${base%.ko}"
  done <<<"$deps"
  echo "modules=$kept" >"$dest.new/.complete"
  mv "$dest.new" "$dest"
  rm -rf "$work"
  log "kTLS modules for $release ready: $kept"
}

tls_tools_prepare() {
  local image_env=$1 rc=0
  TLS_TOOLS_ERROR='' TLS_TOOLS_ADD=()
  [ -s "$image_env" ] || { TLS_TOOLS_ERROR="no guest image description $image_env"; return 1; }
  local kpkg kver krel kmods_have
  kpkg=$(sed -n 's/^KERNEL_PKG=//p' "$image_env")
  kver=$(sed -n 's/^KERNEL_PKG_VERSION=//p' "$image_env")
  krel=$(sed -n 's/^KERNEL_RELEASE=//p' "$image_env")
  kmods_have=$(sed -n 's/^MODULES="\{0,1\}\([^"]*\)"\{0,1\}$/\1/p' "$image_env")
  if [ -z "$kpkg" ] || [ -z "$kver" ] || [ -z "$krel" ]; then
    TLS_TOOLS_ERROR="$image_env lacks KERNEL_PKG/KERNEL_PKG_VERSION/KERNEL_RELEASE"; return 1
  fi
  local tool
  for tool in apt-get dpkg-deb depmod modprobe xz flock; do
    command -v "$tool" >/dev/null || { TLS_TOOLS_ERROR="'$tool' is not installed"; return 1; }
  done
  mkdir -p "$TLS_TOOLS_CACHE"
  # one builder at a time (other tests or runs may share the cache)
  exec {_tls_tools_lock}>"$TLS_TOOLS_CACHE/lock"
  flock -w 1800 "$_tls_tools_lock" || { TLS_TOOLS_ERROR="timed out waiting for the lock on $TLS_TOOLS_CACHE"; return 1; }
  _tls_tools_sysroot || rc=$?
  [ "$rc" -eq 0 ] && { _tls_tools_kmods "$kpkg" "$kver" "$krel" "$kmods_have" || rc=$?; }
  flock -u "$_tls_tools_lock"
  exec {_tls_tools_lock}>&-
  [ "$rc" -eq 0 ] || return "$rc"
  local c=$TLS_TOOLS_CACHE entry name dir
  TLS_TOOLS_ADD=(--add "$c/sysroot:$TLS_TOOLS_GUEST_ROOT" --add "$c/tlshd.conf:/etc/tlshd.conf"
    --add "$TLS_TOOLS_KMODS:/usr/lib/modules/$krel/extra")
  for entry in "${TLS_TOOLS_BINARIES[@]}"; do
    name=${entry#*:}; dir=${name#*:}; name=${name%%:*}
    TLS_TOOLS_ADD+=(--add "$c/wrap/$name:$dir/$name")
  done
  TLS_TOOLS_SUMMARY="$(sed -n 's/^nvme=\(.*[^ ]\) *$/\1/p' "$c/sysroot/.complete"); tlshd $(grep -o 'ktls-utils=[^ ]*' "$c/sysroot/.complete" | cut -d= -f2); kTLS modules of $krel: $(sed -n 's/^modules=//p' "$TLS_TOOLS_KMODS/.complete")"
}

# tls_tools_registry_reachable: can the trixie archive be reached (apt-get update
# of the private lists)? For telling "no registry" from other failures.
tls_tools_registry_reachable() {
  local conf
  mkdir -p "$TLS_TOOLS_CACHE"
  conf=$(_tls_tools_apt_conf)
  : >"$TLS_TOOLS_CACHE/registry-probe.log"
  _tls_tools_update "$TLS_TOOLS_CACHE/registry-probe.log" env "APT_CONFIG=$conf"
}
