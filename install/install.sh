#!/usr/bin/env bash
# dyni installer for Debian 12 (run as root from a checkout of this repository).
#
#   sudo ./install/install.sh              install packages, build, install, enable
#   sudo ./install/install.sh --uninstall  remove binaries and the systemd unit
#                                          (keeps /etc/dyni.conf and /var/lib/dyni)
#   sudo ./install/install.sh --uninstall --purge   also remove config, state and logs
# For packaging and tests: --no-packages (skip apt-get), --no-build (install from
# $DYNI_BUILD_DIR as built), and DESTDIR=/some/root to install below another root
# (then no daemon is stopped and systemctl is not called).
set -euo pipefail

PREFIX=/usr/local
SRC=$(cd "$(dirname "$0")/.." && pwd)
BUILD=${DYNI_BUILD_DIR:-$SRC/build-release}
ROOT=${DESTDIR:-}
UNIT=$ROOT/etc/systemd/system/dynid.service

# Build and runtime packages (see README.md, "Dependencies").
PACKAGES=(build-essential cmake pkg-config libzydis-dev llvm-16-dev libunwind-dev libinih-dev
          libssl-dev nlohmann-json3-dev libfmt-dev googletest util-linux systemtap-sdt-dev
          libseccomp-dev go-md2man)

say() { echo "dyni-install: $*"; }
die() { echo "dyni-install: error: $*" >&2; exit 1; }

systemd_running() { [ -z "$ROOT" ] && [ -d /run/systemd/system ]; }

# Stops a running dynid so the new binary is the one that runs next.
stop_daemon() {
  if [ -z "$ROOT" ] && [ -x "$PREFIX/bin/dyni" ]; then "$PREFIX/bin/dyni" -stop >/dev/null 2>&1 || true; fi
}

install_packages() {
  say "installing packages: ${PACKAGES[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -q
  apt-get install -y -q --no-install-recommends "${PACKAGES[@]}"
}

build() {
  say "building (Release) in $BUILD"
  cmake -S "$SRC" -B "$BUILD" -DCMAKE_BUILD_TYPE=Release -DBUILD_TESTING=OFF -DDYNI_WERROR=OFF \
        -DCMAKE_INSTALL_PREFIX="$PREFIX" >/dev/null
  cmake --build "$BUILD" -j"$(nproc)"
}

install_files() {
  stop_daemon
  DESTDIR="$ROOT" cmake --install "$BUILD" --prefix "$PREFIX" >/dev/null
  say "installed $PREFIX/bin/dyni, $PREFIX/sbin/dynid, $PREFIX/bin/dyni-token, $PREFIX/bin/dyni-scan, $PREFIX/bin/dyni-record"
  if [ -e "$ROOT/etc/dyni.conf" ]; then
    say "keeping existing /etc/dyni.conf (new default: $PREFIX/share/doc/dyni/dyni.conf)"
  else
    install -D -m 0644 "$SRC/etc/dyni.conf" "$ROOT/etc/dyni.conf"
    say "installed default /etc/dyni.conf"
  fi
  install -d -m 0755 "$ROOT$PREFIX/share/doc/dyni"
  install -m 0644 "$SRC/README.md" "$SRC/etc/dyni.conf" "$ROOT$PREFIX/share/doc/dyni/"
  install -d -m 0700 "$ROOT/var/lib/dyni"
  install -d -m 0750 "$ROOT/var/log/dyni"
  # Both made by the build's install step for this prefix (packaging/CMakeLists.txt).
  install -D -m 0644 "$ROOT$PREFIX/share/dyni/dyni.logrotate" "$ROOT/etc/logrotate.d/dyni"
  if [ -z "$ROOT" ] && [ ! -s /etc/machine-id ] && command -v systemd-machine-id-setup >/dev/null; then
    systemd-machine-id-setup >/dev/null
  fi
}

install_unit() {
  if systemd_running || [ -n "$ROOT" ]; then
    install -D -m 0644 "$ROOT$PREFIX/share/dyni/dynid.service" "$UNIT"
  fi
  if systemd_running; then
    systemctl daemon-reload
    systemctl enable dynid.service >/dev/null 2>&1
    say "installed and enabled systemd unit dynid.service (dyni -start starts it)"
  else
    say "systemd is not running here: dyni -start runs dynid directly (log: /var/log/dyni/dynid.log)"
  fi
}

uninstall() {
  local purge=$1
  stop_daemon
  if [ -e "$UNIT" ]; then
    if systemd_running; then systemctl disable --now dynid.service >/dev/null 2>&1 || true; fi
    rm -f "$UNIT"
    if systemd_running; then systemctl daemon-reload; fi
  fi
  rm -f "$ROOT$PREFIX/bin/dyni" "$ROOT$PREFIX/sbin/dynid" "$ROOT$PREFIX/bin/dyni-token" \
        "$ROOT$PREFIX/bin/dyni-scan" "$ROOT$PREFIX/bin/dyni-record" \
        "$ROOT/etc/logrotate.d/dyni"
  rm -rf "$ROOT$PREFIX/share/doc/dyni" "$ROOT$PREFIX/share/dyni"
  rm -f "$ROOT$PREFIX"/share/man/man8/dyni.8.gz "$ROOT$PREFIX"/share/man/man8/dynid.8.gz \
        "$ROOT$PREFIX"/share/man/man8/dyni-scan.8.gz "$ROOT$PREFIX"/share/man/man8/dyni-record.8.gz \
        "$ROOT$PREFIX"/share/man/man8/dyni-token.8.gz
  say "removed binaries and unit"
  if [ "$purge" = yes ]; then
    rm -rf "$ROOT/etc/dyni.conf" "$ROOT/var/lib/dyni" "$ROOT/var/log/dyni" "$ROOT/run/dyni"
    say "purged /etc/dyni.conf, /var/lib/dyni, /var/log/dyni"
  else
    say "kept /etc/dyni.conf and /var/lib/dyni (use --uninstall --purge to remove them)"
  fi
}

main() {
  [ "$(id -u)" -eq 0 ] || die "run as root (sudo $0)"
  local mode=install purge=no packages=yes do_build=yes
  for arg in "$@"; do
    case "$arg" in
      --uninstall) mode=uninstall ;;
      --purge) purge=yes ;;
      --no-packages) packages=no ;;
      --no-build) do_build=no ;;
      -h|--help) sed -n '2,11p' "$0"; exit 0 ;;
      *) die "unknown option '$arg' (see --help)" ;;
    esac
  done
  [ "$purge" = no ] || [ "$mode" = uninstall ] || die "--purge goes with --uninstall"
  if [ "$mode" = uninstall ]; then uninstall "$purge"; exit 0; fi
  [ "$packages" = no ] || install_packages
  if [ "$do_build" = yes ]; then build; fi
  [ -x "$BUILD/dynid/dynid" ] || die "no build in $BUILD (drop --no-build or set DYNI_BUILD_DIR)"
  install_files
  install_unit
  say "done. Start dyni with: sudo dyni -start"
}

main "$@"
