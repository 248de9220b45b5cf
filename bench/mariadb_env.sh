# Sourced by the benches that drive the private mariadbd (bench/mariadb.sh)
# with dyni-inject: where it is, its pid, the injector of build dir $BUILD,
# and the server's Questions counter. Set BUILD before sourcing.
HERE=$(cd "$(dirname "${BASH_SOURCE[1]}")" && pwd)
DIR=${DYNI_MARIADB_DIR:-/var/tmp/dyni-mariadb}
PORT=${DYNI_MARIADB_PORT:-3307}
PID=$(cat "$DIR/mysqld.pid")
INJECT=$HERE/../$BUILD/tools/dyni-inject/dyni-inject
[ -x "$INJECT" ] || INJECT=$BUILD/tools/dyni-inject/dyni-inject

questions() { mariadb --socket="$DIR/mysqld.sock" -uroot -N -e "show global status like 'Questions'" | awk '{print $2}'; }
