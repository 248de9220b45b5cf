#!/usr/bin/env bash
# The Debian package (issue 23 item 6): cpack builds it from the test build;
# dpkg-deb shows it installs under /usr with its unit, man page and
# conffiles; lintian finds no error in it; it installs, reinstalls over
# itself (an upgrade's scripts), is removed and purged in a throwaway root
# (dpkg --root; the maintainer scripts run with DPKG_ROOT and touch nothing
# outside it). The scripts' live part (stop across an upgrade, undo before a
# removal) is Daemon.ThePackagesScripts* in daemon_test.cpp.
# usage: deb_test.sh SOURCE_DIR BUILD_DIR
set -euo pipefail
SRC=$1 BUILD=$2
if [ "$(id -u)" -ne 0 ]; then
  echo "SKIPPED: dpkg --root and the package's files need root; run the tests as root"
  exit 77
fi
for tool in cpack dpkg-deb dpkg lintian go-md2man; do
  if ! command -v "$tool" >/dev/null; then
    echo "SKIPPED: $tool is missing (apt-get install lintian go-md2man)"
    exit 77
  fi
done
WORK=$(mktemp -d /tmp/dyni-deb-test-XXXXXX)
trap '[ -n "${KEEP:-}" ] || rm -rf "$WORK"' EXIT
. "$(dirname "$0")/checks.sh"
version=$(sed -n 's/^project(dyni VERSION \([0-9.]*\).*/\1/p' "$SRC/CMakeLists.txt")

(cd "$BUILD" && cpack -G DEB -B "$WORK/out") > "$WORK/cpack.log" 2>&1 || { cat "$WORK/cpack.log"; exit 1; }
deb=$WORK/out/dyni_${version}_amd64.deb
check "cpack made $(basename "$deb")" test -s "$deb"
dpkg-deb --info "$deb" > "$WORK/info"
dpkg-deb --contents "$deb" | awk '{ print $6 }' > "$WORK/contents"
dpkg-deb --ctrl-tarfile "$deb" | tar -xO ./conffiles > "$WORK/conffiles"
has() { grep -qx "$1" "$WORK/contents"; }
check "package name and version" grep -q "^ Version: $version$" "$WORK/info"
check "depends on the libraries it links (dpkg-shlibdeps)" grep -q "^ Depends: .*libzydis" "$WORK/info"
for f in ./usr/bin/dyni ./usr/sbin/dynid ./usr/bin/dyni-scan ./usr/bin/dyni-record ./usr/bin/dyni-token \
         ./lib/systemd/system/dynid.service ./etc/dyni.conf ./etc/logrotate.d/dyni \
         ./usr/share/man/man8/dyni.8.gz ./usr/share/man/man8/dynid.8.gz \
         ./usr/share/doc/dyni/copyright ./usr/share/doc/dyni/changelog.gz; do
  check "holds $f" has "$f"
done
check "directories are 0755" bash -c "! dpkg-deb --contents '$deb' | grep '^d' | grep -v '^drwxr-xr-x'"
check "refuses to go over an install.sh install" bash -c \
  "mkdir -p '$WORK/src-root/usr/local/sbin' && touch '$WORK/src-root/usr/local/sbin/dynid' && \
   dpkg-deb --ctrl-tarfile '$deb' | tar -xO ./preinst > '$WORK/preinst' && \
   ! DPKG_ROOT='$WORK/src-root' sh '$WORK/preinst' install 2>/dev/null"
check "nothing under /usr/local" bash -c "! grep -q '^./usr/local' '$WORK/contents'"
check "conffiles: /etc/dyni.conf and the logrotate rule" \
  test "$(sort "$WORK/conffiles" | tr '\n' ' ')" = "/etc/dyni.conf /etc/logrotate.d/dyni "
dpkg-deb --fsys-tarfile "$deb" | tar -xO ./lib/systemd/system/dynid.service > "$WORK/unit"
check "the unit runs /usr/sbin/dynid" grep -qx "ExecStart=/usr/sbin/dynid --log-stderr" "$WORK/unit"
check "the man page names dynid's commands" bash -c \
  "dpkg-deb --fsys-tarfile '$deb' | tar -xO ./usr/share/man/man8/dyni.8.gz | gzip -dc | grep -q 'dyni -undo'"

# lintian: no error (warnings are printed).
status=0
lintian --fail-on error "$deb" > "$WORK/lintian" 2>&1 || status=$?
sed 's/^/lintian: /' "$WORK/lintian"
check "lintian finds no error" test "$status" -eq 0

# A throwaway root: install, reinstall (upgrade), remove, purge.
root=$WORK/root
mkdir -p "$root/var/lib/dpkg/info" "$root/var/lib/dpkg/updates" "$root/var/lib/dpkg/triggers"
touch "$root/var/lib/dpkg/status"
rootdpkg() { dpkg --root="$root" --force-script-chrootless --force-depends --log=/dev/null "$@" >> "$WORK/dpkg.log" 2>&1; }
check "dpkg --root installs it" rootdpkg -i "$deb"
check "dpkg lists it installed" bash -c "dpkg --root='$root' -s dyni 2>/dev/null | grep -q '^Status: install ok installed'"
check "dyni runs from it" test "$("$root/usr/bin/dyni" -version)" = "dyni $version"
check "its default config is valid" "$root/usr/sbin/dynid" --check-config --config="$root/etc/dyni.conf"
check "postinst made the state directory, 0700" test "$(stat -c %a "$root/var/lib/dyni" 2>/dev/null)" = 700
check "postinst made the log directory" test -d "$root/var/log/dyni"
echo "; edited by the operator" >> "$root/etc/dyni.conf"
echo '{"kept":1}' > "$root/var/lib/dyni/license.json"
check "reinstalling over itself (an upgrade's scripts) works" rootdpkg -i "$deb"
check "an upgrade keeps the edited config" grep -q "edited by the operator" "$root/etc/dyni.conf"
check "an upgrade keeps the license binding" test -f "$root/var/lib/dyni/license.json"
check "dpkg --root removes it" rootdpkg -r dyni
check "removal takes the binaries" test ! -e "$root/usr/bin/dyni" -a ! -e "$root/usr/sbin/dynid"
check "removal takes the unit" test ! -e "$root/lib/systemd/system/dynid.service"
check "removal keeps the config and the state" test -f "$root/etc/dyni.conf" -a -f "$root/var/lib/dyni/license.json"
check "dpkg --root purges it" rootdpkg -P dyni
check "purge takes the config" test ! -e "$root/etc/dyni.conf"
check "purge takes the state and the logs" test ! -e "$root/var/lib/dyni" -a ! -e "$root/var/log/dyni"
check "nothing of it is left" bash -c "! dpkg --root='$root' -s dyni >/dev/null 2>&1"
left=$(cd "$root" && find . -mindepth 1 -not -path './var/lib/dpkg*' | grep -vx -e ./var -e ./var/lib -e ./var/log || true)
check "nothing is left under the root but dpkg's own (left: ${left//$'\n'/ })" test -z "$left"
[ "$fails" -eq 0 ] || sed 's/^/dpkg: /' "$WORK/dpkg.log"
checks_summary
