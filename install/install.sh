#!/usr/bin/env bash
# dyni installer for Debian 12 (run as root from a checkout of this repository).
#
#   sudo ./install/install.sh              install packages, build, install, enable
#   sudo ./install/install.sh --uninstall  remove binaries and the systemd unit
#                                          (keeps /etc/dyni.conf and /var/lib/dyni)
#   sudo ./install/install.sh --uninstall --purge   also remove config, state and logs
set -euo pipefail

PREFIX=/usr/local
SRC=$(cd "$(dirname "$0")/.." && pwd)
BUILD=${DYNI_BUILD_DIR:-$SRC/build-release}
UNIT=/etc/systemd/system/dynid.service

# Build and runtime packages (see README.md, "Dependencies").
PACKAGES=(build-essential cmake pkg-config libzydis-dev llvm-16-dev libunwind-dev libinih-dev
          libssl-dev nlohmann-json3-dev libfmt-dev googletest util-linux)

say() { echo "dyni-install: $*"; }
die() { echo "dyni-install: error: $*" >&2; exit 1; }

systemd_running() { [ -d /run/systemd/system ]; }

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
  # A running dynid keeps its old binary; stop it first so the new one starts.
  if [ -x "$PREFIX/bin/dyni" ]; then "$PREFIX/bin/dyni" -stop >/dev/null 2>&1 || true; fi
  cmake --install "$BUILD" >/dev/null
  say "installed $PREFIX/bin/dyni, $PREFIX/sbin/dynid, $PREFIX/bin/dyni-token"
  if [ -e /etc/dyni.conf ]; then
    say "keeping existing /etc/dyni.conf (new default: $PREFIX/share/doc/dyni/dyni.conf)"
  else
    install -m 0644 "$SRC/etc/dyni.conf" /etc/dyni.conf
    say "installed default /etc/dyni.conf"
  fi
  install -d -m 0755 "$PREFIX/share/doc/dyni"
  install -m 0644 "$SRC/README.md" "$SRC/etc/dyni.conf" "$PREFIX/share/doc/dyni/"
  install -d -m 0700 /var/lib/dyni
  install -d -m 0750 /var/log/dyni
  if [ -d /etc/logrotate.d ]; then install -m 0644 "$SRC/etc/dyni.logrotate" /etc/logrotate.d/dyni; fi
  [ -s /etc/machine-id ] || { command -v systemd-machine-id-setup >/dev/null && systemd-machine-id-setup; } || true
}

install_unit() {
  if systemd_running; then
    install -m 0644 "$SRC/etc/dynid.service" "$UNIT"
    systemctl daemon-reload
    systemctl enable dynid.service >/dev/null 2>&1
    say "installed and enabled systemd unit dynid.service (dyni -start starts it)"
  else
    say "systemd is not running: dyni -start runs dynid directly (log: /var/log/dyni/dynid.log)"
  fi
}

uninstall() {
  local purge=$1
  if [ -x "$PREFIX/bin/dyni" ]; then "$PREFIX/bin/dyni" -stop >/dev/null 2>&1 || true; fi
  if [ -e "$UNIT" ]; then
    systemctl disable --now dynid.service >/dev/null 2>&1 || true
    rm -f "$UNIT"
    systemd_running && systemctl daemon-reload
  fi
  rm -f "$PREFIX/bin/dyni" "$PREFIX/sbin/dynid" "$PREFIX/bin/dyni-token" /etc/logrotate.d/dyni
  rm -rf "$PREFIX/share/doc/dyni"
  say "removed binaries and unit"
  if [ "$purge" = yes ]; then
    rm -rf /etc/dyni.conf /var/lib/dyni /var/log/dyni /run/dyni
    say "purged /etc/dyni.conf, /var/lib/dyni, /var/log/dyni"
  else
    say "kept /etc/dyni.conf and /var/lib/dyni (use --uninstall --purge to remove them)"
  fi
}

main() {
  [ "$(id -u)" -eq 0 ] || die "run as root (sudo $0)"
  local mode=install purge=no
  for arg in "$@"; do
    case "$arg" in
      --uninstall) mode=uninstall ;;
      --purge) purge=yes ;;
      -h|--help) sed -n '2,8p' "$0"; exit 0 ;;
      *) die "unknown option '$arg' (see --help)" ;;
    esac
  done
  [ "$purge" = no ] || [ "$mode" = uninstall ] || die "--purge goes with --uninstall"
  if [ "$mode" = uninstall ]; then uninstall "$purge"; exit 0; fi
  install_packages
  build
  install_files
  install_unit
  say "done. Start dyni with: sudo dyni -start"
}

main "$@"
