#!/usr/bin/env bash
# A private mariadbd for benchmarks and live tests (own datadir; port
# $DYNI_MARIADB_PORT, default 3307; datadir $DYNI_MARIADB_DIR; the server
# binary $DYNI_MARIADBD, default mariadbd from PATH),
# with the settings measured in shared/MEASUREMENTS.md, and sysbench on it.
#
#   bench/mariadb.sh start [DIR]      create (first time) and start the server
#   bench/mariadb.sh prepare [DIR]    create the sbtest tables (4 x 100000 rows)
#   bench/mariadb.sh run SECONDS [THREADS] [DIR]   sysbench oltp_read_only, prints TPS
#   bench/mariadb.sh stop [DIR]
set -euo pipefail

cmd=${1:-}
DIR=${DYNI_MARIADB_DIR:-/var/tmp/dyni-mariadb}
PORT=${DYNI_MARIADB_PORT:-3307}
SOCK=$DIR/mysqld.sock
SYSBENCH=(sysbench oltp_read_only --db-driver=mysql --mysql-host=127.0.0.1 --mysql-port=$PORT
          --mysql-user=sbtest --mysql-password=sbtest --mysql-db=sbtest --tables=4 --table-size=100000)

write_config() {
  cat > "$DIR/my.cnf" <<CNF
[mysqld]
datadir=$DIR/data
socket=$SOCK
pid-file=$DIR/mysqld.pid
port=$PORT
bind-address=127.0.0.1
user=root
skip-name-resolve
innodb_buffer_pool_size=2G
innodb_log_file_size=512M
innodb_flush_log_at_trx_commit=2
performance_schema=OFF
skip-log-bin
log-error=$DIR/error.log
CNF
}

# Stops the server and waits until it has exited (a start right after must not
# find the old pid file).
stop() {
  running || return 0
  local pid; pid=$(cat "$DIR/mysqld.pid")
  kill "$pid"
  for _ in $(seq 1 600); do kill -0 "$pid" 2>/dev/null || { echo "mariadbd stopped"; return 0; }; sleep 0.1; done
  echo "mariadbd $pid did not exit within 60 s" >&2; return 1
}

# Ours only: a pid file left by a crash (or before a reboot) may name another
# process now, which must never be signalled.
running() {
  [ -f "$DIR/mysqld.pid" ] || return 1
  local pid; pid=$(cat "$DIR/mysqld.pid")
  [[ $pid =~ ^[0-9]+$ ]] && tr '\0' ' ' < "/proc/$pid/cmdline" 2>/dev/null | grep -qF -- "--defaults-file=$DIR/my.cnf"
}

start() {
  mkdir -p "$DIR"
  if running; then
    echo "mariadbd already running, pid $(cat "$DIR/mysqld.pid")"
    return
  fi
  write_config
  if [ ! -d "$DIR/data/mysql" ]; then
    mariadb-install-db --defaults-file="$DIR/my.cnf" --auth-root-authentication-method=normal \
      --skip-test-db >/dev/null
  fi
  "${DYNI_MARIADBD:-mariadbd}" --defaults-file="$DIR/my.cnf" >/dev/null 2>&1 &
  for _ in $(seq 1 100); do
    mariadb --socket="$SOCK" -uroot -e "select 1" >/dev/null 2>&1 && break
    sleep 0.2
  done
  mariadb --socket="$SOCK" -uroot -e "
    CREATE DATABASE IF NOT EXISTS sbtest;
    CREATE USER IF NOT EXISTS sbtest@'127.0.0.1' IDENTIFIED BY 'sbtest';
    GRANT ALL ON sbtest.* TO sbtest@'127.0.0.1';"
  echo "mariadbd running, pid $(cat "$DIR/mysqld.pid")"
}

case "$cmd" in
  start) start ;;
  prepare) "${SYSBENCH[@]}" cleanup >/dev/null 2>&1 || true
           "${SYSBENCH[@]}" prepare >/dev/null && echo "sbtest prepared" ;;
  run) "${SYSBENCH[@]}" --threads="${3:-2}" --time="${2:-10}" run | awk '/transactions:/ {gsub("\\(","",$3); print $3 " TPS"}' ;;
  stop) stop ;;
  *) sed -n '2,9p' "$0"; exit 2 ;;
esac
