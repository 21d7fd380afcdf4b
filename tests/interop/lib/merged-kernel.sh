# shellcheck shell=bash
# A linux-nvme-peer guest image with a Debian kernel that ships split in three
# packages (sourced by interop tests after lib/common.sh, which provides log, die,
# tail_file and LNP, and lib/trixie-tls-tools.sh, which provides private_apt_conf).
#
# From Linux 7.x Debian splits the kernel: linux-image-<release> is empty and
# depends on linux-binary-<release> (the kernel, as /usr/lib/modules/<release>/vmlinuz),
# linux-modules-<release> (the modules) and linux-base-<release> (config,
# modules.builtin, modules.order). linux-nvme-peer wants one package that ships
# /boot/vmlinuz-<release> and the modules. This builds that package once, from
# Debian's own packages, and a local package repository holding it:
#   <cache>/debs/    the four packages as Debian ships them (apt-get download)
#   <cache>/repo/    linux-image-<release>-merged_<version>_amd64.deb: the three
#                    packages' files, plus /boot/vmlinuz-<release> and
#                    /boot/config-<release> copied from the kernel's own; and Packages
#   <cache>/apt/     the private apt configuration the peer uses: the system's
#                    sources plus the local repository ([trusted=yes], copy:), lists
#                    and cache of its own. The system's apt state is not touched.
#   <cache>/peer/    the guest image (LNP_CACHE_DIR)
# lib/trixie-tls-tools.sh takes the kTLS modules from the merged package through the
# same APT_CONFIG (the image's KERNEL_PKG).
#
# Cache: ${SLUICE_MERGED_KERNEL_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/sluice-<suite>-kernel};
# delete it to rebuild. Mirror: SLUICE_DEBIAN_MIRROR (default http://deb.debian.org/debian).

MERGED_KERNEL_FORMAT=1  # bump when the layout of the cache changes

# _merged_kernel_depends DEB PREFIX: the first dependency of DEB whose name starts
# with PREFIX
_merged_kernel_depends() {
  dpkg-deb -f "$1" Depends | tr ',|' '\n' | sed -n "s/^ *\\($2[^ ]*\\).*/\\1/p" | head -n 1
}

# _merged_kernel_build SUITE BASE: download and merge, unless done (stamp)
_merged_kernel_build() {
  local suite=$1 base=$2 mirror=${SLUICE_DEBIAN_MIRROR:-http://deb.debian.org/debian}
  local stamp=$base/repo/.complete logf=$base/build.log conf
  [ -s "$stamp" ] && grep -qx "format=$MERGED_KERNEL_FORMAT" "$stamp" && return 0
  : >"$logf"
  conf=$(private_apt_conf "$base/download-apt" \
    "deb [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] $mirror $suite main")
  log "downloading Debian $suite's kernel packages (one-time; cache: $base)"
  APT_CONFIG=$conf apt-get update -q >>"$logf" 2>&1 || { tail_file "$logf"; die "apt-get update ($suite) failed"; }
  rm -rf "$base/debs" "$base/root" "$base/repo"
  mkdir -p "$base/debs" "$base/root/DEBIAN" "$base/repo"
  local meta image version release pkg deb
  (cd "$base/debs" && APT_CONFIG=$conf apt-get download -q linux-image-amd64) >>"$logf" 2>&1 ||
    { tail_file "$logf"; die "apt-get download linux-image-amd64 ($suite) failed"; }
  meta=$(ls "$base"/debs/linux-image-amd64_*.deb)
  version=$(dpkg-deb -f "$meta" Version)
  image=$(_merged_kernel_depends "$meta" linux-image-)
  [ -n "$image" ] || die "linux-image-amd64 $version ($suite) depends on no linux-image-* package"
  release=${image#linux-image-}
  (cd "$base/debs" && APT_CONFIG=$conf apt-get download -q "$image=$version") >>"$logf" 2>&1 ||
    { tail_file "$logf"; die "apt-get download $image=$version failed"; }
  local -a parts=()
  for pkg in linux-binary- linux-modules- linux-base-; do
    pkg=$(_merged_kernel_depends "$(ls "$base"/debs/"$image"_*.deb)" "$pkg")
    [ -n "$pkg" ] && parts+=("$pkg=$version")
  done
  [ "${#parts[@]}" -eq 3 ] || die "$image $version does not depend on linux-binary-, linux-modules- and linux-base- packages (not a split kernel?)"
  (cd "$base/debs" && APT_CONFIG=$conf apt-get download -q "${parts[@]}") >>"$logf" 2>&1 ||
    { tail_file "$logf"; die "apt-get download ${parts[*]} failed"; }
  for deb in "$base"/debs/linux-{binary,modules,base}-*.deb; do
    dpkg-deb -x "$deb" "$base/root" 2>>"$logf" || die "dpkg-deb -x $(basename "$deb") failed"
  done
  local moddir=$base/root/usr/lib/modules/$release
  [ -s "$moddir/vmlinuz" ] || die "no kernel at /usr/lib/modules/$release/vmlinuz in the $suite packages"
  mkdir -p "$base/root/boot"
  cp "$moddir/vmlinuz" "$base/root/boot/vmlinuz-$release"
  [ ! -s "$moddir/config" ] || cp "$moddir/config" "$base/root/boot/config-$release"
  local name=$image-merged
  {
    printf 'Package: %s\nVersion: %s\nArchitecture: amd64\nSection: kernel\nPriority: optional\n' "$name" "$version"
    printf 'Maintainer: Sluice interop tests <interop@sluice.invalid>\n'
    printf 'Description: Linux %s (%s): %s merged into one package for linux-nvme-peer\n' \
      "$release" "$suite" "${parts[*]}"
  } >"$base/root/DEBIAN/control"
  # The modules are compressed one by one (.ko.xz): another layer would only cost time.
  dpkg-deb --root-owner-group -Znone -b "$base/root" "$base/repo/${name}_${version}_amd64.deb" >>"$logf" 2>&1 ||
    { tail_file "$logf"; die "dpkg-deb -b $name failed"; }
  (cd "$base/repo" && dpkg-scanpackages -m . /dev/null >Packages 2>>"$logf") || die "dpkg-scanpackages failed"
  rm -rf "$base/root"
  { echo "format=$MERGED_KERNEL_FORMAT"; echo "package=$name"; echo "version=$version"; echo "release=$release"
    echo "from=${parts[*]}"; echo "built=$(date -u +%Y-%m-%dT%H:%M:%SZ)"; } >"$stamp"
  log "merged kernel package ready: $name $version ($(du -m "$base/repo/${name}_${version}_amd64.deb" | cut -f1) MiB)"
}

# use_merged_kernel_peer SUITE: point linux-nvme-peer (for the rest of this test) at
# a guest image with SUITE's (e.g. trixie-backports) split kernel, merged as above.
# Sets APT_CONFIG, LNP_KERNEL_PKG and LNP_CACHE_DIR; dies when something cannot be
# built (the caller tells "no registry" apart with a probe of its own if it must).
use_merged_kernel_peer() {
  local suite=$1
  local base=${SLUICE_MERGED_KERNEL_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/sluice-$suite-kernel}
  local tool
  for tool in apt-get dpkg-deb dpkg-scanpackages flock; do
    command -v "$tool" >/dev/null || die "'$tool' is not installed (apt-get install dpkg-dev for dpkg-scanpackages)"
  done
  mkdir -p "$base"
  exec {_merged_kernel_lock}>"$base/lock"
  flock -w 1800 "$_merged_kernel_lock" || die "timed out waiting for the lock on $base"
  _merged_kernel_build "$suite" "$base"
  local name version
  name=$(sed -n 's/^package=//p' "$base/repo/.complete")
  version=$(sed -n 's/^version=//p' "$base/repo/.complete")
  # The peer's own apt view: the system's sources (busybox, host tools) and the repo.
  local d=$base/apt
  mkdir -p "$d/lists/partial" "$d/cache/archives/partial"
  printf 'deb [trusted=yes] copy:%s ./\n' "$base/repo" >"$d/merged.list"
  {
    printf 'Dir::Etc::SourceList "%s";\n' "$d/merged.list"
    printf 'Dir::State::Lists "%s";\n' "$d/lists"
    printf 'Dir::Cache "%s";\n' "$d/cache"
    printf 'Acquire::Languages "none";\n'
    printf 'APT::Sandbox::User "%s";\n' "$(id -un)"
  } >"$d/apt.conf"
  export APT_CONFIG=$d/apt.conf LNP_KERNEL_PKG=$name LNP_CACHE_DIR=$base/peer
  if [ ! -s "$LNP_CACHE_DIR/image/image.env" ] ||
     ! grep -qx "KERNEL_PKG_VERSION=$version" "$LNP_CACHE_DIR/image/image.env" ||
     ! grep -qx "KERNEL_PKG=$name" "$LNP_CACHE_DIR/image/image.env"; then
    log "building the $suite-kernel guest image (one-time; cache: $LNP_CACHE_DIR)"
    apt-get update -q >"$base/apt-update.log" 2>&1 || { tail_file "$base/apt-update.log"; die "apt-get update (merged kernel repo) failed"; }
    "$LNP" build >"$base/peer-build.log" 2>&1 || { tail_file "$base/peer-build.log"; die "building the $suite-kernel guest image failed"; }
  fi
  flock -u "$_merged_kernel_lock"
  exec {_merged_kernel_lock}>&-
  log "guest kernel ($suite): $name $(sed -n 's/^KERNEL_PKG_VERSION=//p' "$LNP_CACHE_DIR/image/image.env")"
}
