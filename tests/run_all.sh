#!/usr/bin/env bash
# Builds dyni and runs every test (unit and integration) — the one command a
# newcomer runs, and what CI (.ci/run) runs. Must run as root on Debian 12:
# integration tests start real dynid daemons and target processes.
#
#   sudo ./tests/run_all.sh            install missing packages, build, test
#   DYNI_SKIP_APT=1 ./tests/run_all.sh skip the package step
set -euo pipefail

SRC=$(cd "$(dirname "$0")/.." && pwd)
BUILD=${DYNI_BUILD_DIR:-$SRC/build}
PACKAGES=(build-essential cmake pkg-config libzydis-dev llvm-16-dev libunwind-dev libinih-dev
          libssl-dev nlohmann-json3-dev libfmt-dev googletest util-linux
          linux-perf mariadb-server sysbench libclang-rt-16-dev libc6-dbg
          python3.11 php8.2-cli gawk systemtap-sdt-dev python3-prometheus-client gdb
          libseccomp-dev redis-server redis-tools go-md2man lintian postgresql-15 xz-utils sqlite3)

if [ "$(id -u)" -ne 0 ]; then
  echo "run_all.sh: must run as root (integration tests start dynid); use sudo" >&2
  exit 1
fi

missing=()
for p in "${PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ "${#missing[@]}" -gt 0 ] && [ -z "${DYNI_SKIP_APT:-}" ]; then
  echo "run_all.sh: installing ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -q
  apt-get install -y -q --no-install-recommends "${missing[@]}"
fi

# Release: the optimization level operators install with (-O3 warnings differ).
cmake -S "$SRC" -B "$BUILD" -DCMAKE_BUILD_TYPE=Release -DBUILD_TESTING=ON
cmake --build "$BUILD" -j"$(nproc)"
cd "$BUILD"
ctest --output-on-failure --timeout 300
