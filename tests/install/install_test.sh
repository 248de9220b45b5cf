#!/usr/bin/env bash
# install/install.sh into a scratch root (DESTDIR) from the test build:
# files in place, an existing config never overwritten, --uninstall keeps
# config and state, --purge removes them, bad options refused.
# usage: install_test.sh SOURCE_DIR BUILD_DIR
set -euo pipefail
SRC=$1 BUILD=$2
ROOT=$(mktemp -d /tmp/dyni-install-test-XXXXXX)
trap 'rm -rf "$ROOT"' EXIT
. "$(dirname "$0")/checks.sh"
installer() { DESTDIR=$ROOT DYNI_BUILD_DIR=$BUILD "$SRC/install/install.sh" "$@"; }

installer --no-packages --no-build > "$ROOT.log"
check "dyni installed and runs" test "$("$ROOT/usr/local/bin/dyni" -version)" = "dyni $(sed -n 's/^project(dyni VERSION \([0-9.]*\).*/\1/p' "$SRC/CMakeLists.txt")"
check "dynid installed in sbin" test -x "$ROOT/usr/local/sbin/dynid"
check "dyni-token installed" test -x "$ROOT/usr/local/bin/dyni-token"
check "dyni-scan installed" test -x "$ROOT/usr/local/bin/dyni-scan"
check "dyni-record installed" test -x "$ROOT/usr/local/bin/dyni-record"
check "default config installed" cmp -s "$SRC/etc/dyni.conf" "$ROOT/etc/dyni.conf"
check "default config is valid" "$ROOT/usr/local/sbin/dynid" --check-config --config="$ROOT/etc/dyni.conf"
check "state dir 0700" test "$(stat -c %a "$ROOT/var/lib/dyni")" = 700
check "log dir exists" test -d "$ROOT/var/log/dyni"
check "systemd unit installed" test -f "$ROOT/etc/systemd/system/dynid.service"
check "the unit runs the installed dynid" grep -qx "ExecStart=/usr/local/sbin/dynid --log-stderr" "$ROOT/etc/systemd/system/dynid.service"
check "logrotate reloads through the installed dyni" grep -q "/usr/local/bin/dyni -reload" "$ROOT/etc/logrotate.d/dyni"
check "man page installed" test -s "$ROOT/usr/local/share/man/man8/dyni.8.gz"
check "logrotate rule installed" test -f "$ROOT/etc/logrotate.d/dyni"

echo "; edited by the operator" >> "$ROOT/etc/dyni.conf"
echo '{"kept":1}' > "$ROOT/var/lib/dyni/license.json"
installer --no-packages --no-build > "$ROOT.log"
check "reinstall keeps an edited config" grep -q "edited by the operator" "$ROOT/etc/dyni.conf"

installer --uninstall > "$ROOT.log"
check "uninstall removes dyni" test ! -e "$ROOT/usr/local/bin/dyni"
check "uninstall removes dynid" test ! -e "$ROOT/usr/local/sbin/dynid"
check "uninstall removes dyni-scan, dyni-record and dyni-token" test ! -e "$ROOT/usr/local/bin/dyni-scan" -a ! -e "$ROOT/usr/local/bin/dyni-record" -a ! -e "$ROOT/usr/local/bin/dyni-token"
check "uninstall removes the unit" test ! -e "$ROOT/etc/systemd/system/dynid.service"
check "uninstall removes the man pages" test ! -e "$ROOT/usr/local/share/man/man8/dyni.8.gz" -a ! -e "$ROOT/usr/local/share/man/man8/dynid.8.gz"
check "uninstall keeps the config" grep -q "edited by the operator" "$ROOT/etc/dyni.conf"
check "uninstall keeps the state" test -f "$ROOT/var/lib/dyni/license.json"

installer --uninstall --purge > "$ROOT.log"
check "purge removes the config" test ! -e "$ROOT/etc/dyni.conf"
check "purge removes the state" test ! -e "$ROOT/var/lib/dyni"

check "unknown option refused" bash -c "! DESTDIR=$ROOT '$SRC/install/install.sh' --bogus 2>/dev/null"
check "--purge alone refused" bash -c "! DESTDIR=$ROOT '$SRC/install/install.sh' --purge 2>/dev/null"
rm -f "$ROOT.log"
checks_summary
