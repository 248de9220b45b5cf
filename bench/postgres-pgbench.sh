#!/usr/bin/env bash
# dyni on a postgres cluster under pgbench -S (issue 21): its busy backends
# dynimized as one group, measured side by side on the same cluster.
#
#   sudo bench/postgres-pgbench.sh [--clients N] [--block SECONDS] [--groups MIN[:MAX]] [--churn GROUPS] [--idle N] [--connect-each] [--build DIR]
#
# It touches nothing but what it starts itself: its own cluster (initdb as
# the postgres user, datadir and socket under /var/tmp/dyni-pgbench, no TCP),
# its executable copied there under the name dyni-postgres, and its own dynid
# that lists only that name. The host's license is copied in.
#
# What it does, printing progress as it goes:
# 1. pgbench -i (scale 10), a warm-up, the private dynid, then the load
#    (pgbench -S, N clients, one backend each); times load start to the first
#    dynimized backend and to every busy backend dynimized (the group);
# 2. alternates original and dynimized windows on those same backends with
#    `dyni -undo` and `-redo` (every member at once), in ABBA groups, until the
#    95 % interval of the TPS ratio is within +-3 % (default 6:20 groups);
# 3. churn (issue 21 item 3): pgbench -S -C, a new connection and so a new
#    backend per transaction, forked by the postmaster, which followed the
#    group's plan: ABBA groups (--churn, default 3) through -undo/-redo, TPS
#    dynimized/original, dynid's CPU meanwhile, and how many backends dynid
#    found at all;
# 4. --idle N (default 200) connections held open by psql sessions: the time
#    until every backend is seen inherited from the postmaster, then the time
#    `dyni -status` takes with them (beside the load, then beside pgbench -C
#    as well), and dynid's CPU while they idle;
# 5. prints one table: TPS (pg_stat_database's xact_commit) and the backends'
#    user CPU per transaction, dynimized/original, each with its interval,
#    and the churn figures.
#
# --connect-each: the load is pgbench -S -C from the start, a backend per
# transaction, none living long enough to be measured: the postmaster leads
# its group, profiled with what it forks and counted in the backends it
# forks while counting (dynid/process_group.h). Step 1 times load start to
# the postmaster dynimized, step 2 measures the backends' CPU from the
# postmaster's reaped children's time, and step 3 is step 2 already.
set -euo pipefail

CLIENTS=4; BLOCK=5; MIN_GROUPS=6; MAX_GROUPS=20; BUILD=""; CHURN_GROUPS=3; IDLE=200; CONNECT_EACH=""
HALF_WIDTH=0.03
WORK=${DYNI_PGBENCH_DIR:-/var/tmp/dyni-pgbench}
PGBIN=${DYNI_PGBIN:-/usr/lib/postgresql/15/bin}
PORT=5499   # names the socket only

say() { echo "postgres-pgbench: $*" >&2; }
die() { echo "postgres-pgbench: $*" >&2; exit 1; }
usage() { sed -n '5p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 2; }

while [ $# -gt 0 ]; do
  case "$1" in
    --clients) CLIENTS=${2:?}; shift ;;
    --block) BLOCK=${2:?}; shift ;;
    --groups) G=${2:?}; shift; MIN_GROUPS=${G%%:*}; [[ $G == *:* ]] && MAX_GROUPS=${G#*:} ;;
    --build) BUILD=${2:?}; shift ;;
    --churn) CHURN_GROUPS=${2:?}; shift ;;
    --idle) IDLE=${2:?}; shift ;;
    --connect-each) CONNECT_EACH=-C ;;
    -h|--help) usage ;;
    *) echo "postgres-pgbench: unknown argument: $1" >&2; usage ;;
  esac
  shift
done
for n in "$CLIENTS" "$BLOCK" "$MIN_GROUPS" "$MAX_GROUPS"; do
  [[ $n =~ ^[1-9][0-9]*$ ]] || die "--clients, --block and --groups take positive integers, not '$n'"
done
for n in "$CHURN_GROUPS" "$IDLE"; do
  [[ $n =~ ^[0-9]+$ ]] || die "--churn and --idle take integers (0: skip), not '$n'"
done
[ "$MIN_GROUPS" -le "$MAX_GROUPS" ] || die "--groups MIN:MAX needs MIN <= MAX"

[ "$(id -u)" = 0 ] || die "must be run as root: it starts its own postgres cluster and dynid"
for tool in initdb postgres pgbench psql; do
  [ -x "$PGBIN/$tool" ] || die "needs $PGBIN/$tool: apt-get install postgresql-15 (or set DYNI_PGBIN)"
done
id postgres >/dev/null 2>&1 || die "needs the postgres user: apt-get install postgresql-15"
command -v jq >/dev/null || die "needs jq: apt-get install jq"
if [ -n "$BUILD" ]; then DYNI=$(cd "$BUILD" && pwd)/dyni-cli/dyni
else DYNI=$(command -v dyni || true); fi
[ -x "$DYNI" ] || die "needs dyni: install it (sudo ./install/install.sh) or pass --build DIR"
dynids=$(pgrep -x dynid | tr '\n' ' ' || true)
[ -z "$dynids" ] || die "dynid already runs (pid $dynids): stop it first (sudo dyni -stop), the benchmark runs its own"

# ---- The private dynid, with the host's license ----------------------------
HOST_CONFIG=${DYNI_CONFIG:-/etc/dyni.conf}
HOST_STATE=${DYNI_STATE_DIR:-/var/lib/dyni}
mkdir -p "$WORK/run" "$WORK/state"
chmod 0700 "$WORK/state"
[ -f "$HOST_STATE/license.json" ] ||
  die "this host has no dyni license ($HOST_STATE/license.json): bind one first: sudo dyni -license=start -token=TOKEN"
cp "$HOST_STATE/license.json" "$WORK/state/license.json"
public_key=$( [ -f "$HOST_CONFIG" ] && awk -F= '/^\[/ { s = $0 } s == "[license]" && $1 ~ /^ *public_key *$/ {
                gsub(/^ +| +$/, "", $2); sub(/ +;.*/, "", $2); print $2 }' "$HOST_CONFIG" || true)
cat > "$WORK/dyni.conf" <<CONF
; written by bench/postgres-pgbench.sh: a private dynid for its own cluster
[exeList]
dyni-postgres
[options]
log_file = $WORK/dynid.log
metrics_textfile =
${DYNI_BENCH_OPTIONS:-}
[license]
$([ -n "$public_key" ] && echo "public_key = $public_key")
CONF
dyni() { DYNI_CONFIG=$WORK/dyni.conf DYNI_RUN_DIR=$WORK/run DYNI_STATE_DIR=$WORK/state "$DYNI" "$@"; }

# ---- The private cluster and the load --------------------------------------
DATA=$WORK/pgdata
EXE=$WORK/exe/dyni-postgres
as_pg() { setpriv --reuid=postgres --regid=postgres --init-groups "$@"; }
psql_() { "$PGBIN/psql" -X -At -h "$DATA" -p "$PORT" -U postgres -d postgres -c "$1"; }
LOAD=""
stop_cluster() { [ -f "$DATA/postmaster.pid" ] && as_pg "$PGBIN/pg_ctl" -D "$DATA" -m fast -w stop >/dev/null 2>&1 || true; }
cleanup() {
  [ -n "$LOAD" ] && { kill "$LOAD" 2>/dev/null || true; wait "$LOAD" 2>/dev/null || true; }
  dyni -stop >/dev/null 2>&1 || true
  stop_cluster
}
trap cleanup EXIT
trap 'exit 130' INT TERM
stop_cluster   # ours, left by an interrupted run
mkdir -p "$WORK/exe"
# A copy of the binary, in a directory not named bin: postgres finds its lib
# and share directories relative to a .../bin, else where they were built for.
cp "$PGBIN/postgres" "$EXE"
if [ ! -f "$DATA/PG_VERSION" ]; then
  say "initdb in $DATA"
  rm -rf "$DATA"; mkdir -p "$DATA"; chown postgres:postgres "$DATA"
  as_pg "$PGBIN/initdb" -D "$DATA" -U postgres --auth=trust --no-sync >/dev/null
fi
chown -R postgres:postgres "$DATA"
say "starting a private cluster (socket in $DATA)"
as_pg "$EXE" -D "$DATA" -p "$PORT" -k "$DATA" -c listen_addresses= -c max_connections=$((IDLE + 40)) \
  > "$WORK/postgres.log" 2>&1 &
for _ in $(seq 100); do [ "$(psql_ 'SELECT 1' 2>/dev/null)" = 1 ] && break; sleep 0.1; done
[ "$(psql_ 'SELECT 1' 2>/dev/null)" = 1 ] || die "the cluster did not start (see $WORK/postgres.log)"
POSTMASTER=$(head -1 "$DATA/postmaster.pid")
if [ "$(psql_ "SELECT count(*) FROM pg_tables WHERE tablename = 'pgbench_accounts'")" != 1 ]; then
  say "pgbench -i -s 10"
  "$PGBIN/pgbench" -i -s 10 -q -h "$DATA" -p "$PORT" -U postgres postgres >/dev/null 2>&1 || die "pgbench -i failed"
fi
pgbench_run() { "$PGBIN/pgbench" -S $CONNECT_EACH -n -c "$CLIENTS" -j 2 -T "$1" -h "$DATA" -p "$PORT" -U postgres postgres; }
say "warming the cluster up (10 s of pgbench -S)"
pgbench_run 10 >/dev/null 2>&1 || die "pgbench failed (see $WORK/postgres.log)"

TICK=$(getconf CLK_TCK)
# bash's own clock: a `date` forked inside a timed interval would be timed
# too (30-50 ms of fork and exec on a loaded 2-CPU VM).
now() { echo "$EPOCHREALTIME"; }
# The client backends: children of the postmaster that run pgbench's queries.
backends() { psql_ "SELECT pid FROM pg_stat_activity WHERE application_name = 'pgbench'" | tr '\n' ' '; }
# "time commits utime stime": one sample of the database and its backends
# (--connect-each: the backends the postmaster reaped, cutime and cstime).
sample() {
  local pids u
  pids=$(backends)
  if [ -n "$CONNECT_EACH" ]; then u=$(awk '{print $16, $17}' "/proc/$POSTMASTER/stat")
  else u=$(for p in $pids; do awk '{print $14, $15}' "/proc/$p/stat" 2>/dev/null; done | awk '{u += $1; s += $2} END {print u + 0, s + 0}')
  fi
  echo "$(now) $(psql_ "SELECT xact_commit FROM pg_stat_database WHERE datname = 'postgres'") $u"
}
rate() {
  awk -v t="$TICK" 'NR == 1 { t0 = $1; c0 = $2; u0 = $3; s0 = $4 } NR == 2 {
    n = $2 - c0; if (n <= 0) { print "0 0 0"; exit }
    printf "%.2f %.2f %.2f\n", n / ($1 - t0), ($3 - u0) / t * 1e6 / n, ($3 + $4 - u0 - s0) / t * 1e6 / n }'
}

# ---- 1. Load start to a dynimized group ------------------------------------
say "starting the private dynid"
dyni -start >/dev/null || die "dyni -start failed: $(tail -3 "$WORK/dynid.log" 2>/dev/null)"
pgbench_run 36000 >/dev/null 2>&1 &
LOAD=$!
LOAD_START=$(now)
say "load started: pgbench -S${CONNECT_EACH:+ $CONNECT_EACH}, $CLIENTS clients over a Unix socket"
FIRST=""; ALL=""
while :; do
  status=$(dyni -status -json 2>/dev/null || true)
  [ -n "$status" ] || { sleep 0.5; continue; }
  pids=$(backends)
  [ -n "$CONNECT_EACH" ] && pids=$POSTMASTER  # the backends live a transaction each: the group's leader
  n_dyn=0; n_bad=""
  for p in $pids; do
    st=$(jq -r --argjson pid "$p" '.targets[] | select(.pid == $pid) | .state' <<<"$status")
    case "$st" in
      dynimized*) n_dyn=$((n_dyn + 1)) ;;
      failed*|unsupported*) n_bad="$p: $(jq -r --argjson pid "$p" '.targets[] | select(.pid == $pid) | .status' <<<"$status")" ;;
    esac
  done
  elapsed=$(awk -v a="$LOAD_START" -v b="$(now)" 'BEGIN { printf "%.1f", b - a }')
  [ -z "$n_bad" ] || die "a backend ended $n_bad; see $WORK/dynid.log"
  if [ "$n_dyn" -ge 1 ] && [ -z "$FIRST" ]; then FIRST=$elapsed; say "  $elapsed s: the first backend dynimized"; fi
  if [ -n "$CONNECT_EACH" ] && [ "$n_dyn" -ge 1 ]; then ALL=$elapsed; say "  $elapsed s: the postmaster dynimized"; break; fi
  if [ "$n_dyn" -ge "$CLIENTS" ]; then ALL=$elapsed; say "  $elapsed s: all $CLIENTS backends dynimized"; break; fi
  awk -v e="$elapsed" 'BEGIN { exit !(e > 240) }' && die "$n_dyn of $CLIENTS backends dynimized 240 s after the load started"
  kill -0 "$LOAD" 2>/dev/null || die "pgbench stopped"
  sleep 0.5
done
FOLLOWERS=$(dyni -status -json | jq --argjson pm "$POSTMASTER" '[.targets[] | select(.dynimized.via == "group plan" and .pid != $pm)] | length')
LAYOUT=$(dyni -status -json | jq -r '[.targets[] | select(.group.leader == true)][0].dynimized.layout // ""')

# ---- 2. ABBA on the same backends ------------------------------------------
say "alternating original (A) and dynimized (B) windows of $BLOCK s: ABBA groups, ratios B/A"
block() {  # A|B: switch every member, settle 1 s, measure; prints "tps user cpu"
  if [ "$1" = A ]; then dyni -undo >/dev/null || die "dyni -undo failed"
  else dyni -redo >/dev/null || die "dyni -redo failed"; fi
  sleep 1
  local a b; a=$(sample); sleep "$BLOCK"; b=$(sample)
  printf '%s\n%s\n' "$a" "$b" | rate
}
stats() {  # COLUMN FILE: "mean half_width n"
  awk -v c="$1" '{ s += $c; ss += $c * $c; n++ } END { m = s / n; sd = n > 1 ? sqrt((ss - n * m * m) / (n - 1)) : 0
                   printf "%.4f %.4f %d\n", m, 1.96 * sd / sqrt(n), n }' "$2"
}
add3() { awk -v a="$1" -v b="$2" 'BEGIN { split(a, x); split(b, y); print x[1] + y[1], x[2] + y[2], x[3] + y[3] }'; }
RATIOS=$WORK/ratios.txt
: > "$RATIOS"
say "  group   TPS   user CPU/txn   CPU/txn"
for g in $(seq 1 "$MAX_GROUPS"); do
  order="A B B A"; [ $((g % 2)) = 0 ] && order="B A A B"
  sa=(0 0 0); sb=(0 0 0)
  for s in $order; do
    read -r tps user cpu < <(block "$s")
    awk -v x="$tps" 'BEGIN { exit !(x > 0) }' || die "a window served no transaction (pgbench stopped?)"
    if [ "$s" = A ]; then sa=($(add3 "${sa[*]}" "$tps $user $cpu")); else sb=($(add3 "${sb[*]}" "$tps $user $cpu")); fi
  done
  awk -v g="$g" -v a="${sa[*]}" -v b="${sb[*]}" 'BEGIN { split(a, x); split(b, y)
    printf "%d %.4f %.4f %.4f\n", g, y[1] / x[1], y[2] / x[2], y[3] / x[3] }' | tee -a "$RATIOS" |
    awk '{ printf "postgres-pgbench:   %5d  %6.3f  %6.3f  %6.3f\n", $1, $2, $3, $4 }' >&2
  read -r _ hw _ < <(stats 2 "$RATIOS")
  [ "$g" -ge "$MIN_GROUPS" ] && [ "$g" -gt 1 ] && awk -v h="$hw" -v w="$HALF_WIDTH" 'BEGIN { exit !(h <= w) }' && break
done
dyni -redo >/dev/null 2>&1 || true

# ---- 3. Churn: a new backend per transaction --------------------------------
DYNID_PID=$(dyni -status -json | jq -r '.daemon.pid')
dynid_ticks() { awk '{ print $14 + $15 }' "/proc/$DYNID_PID/stat"; }
found_targets() { grep -c 'target found: dyni-postgres' "$WORK/dynid.log" || true; }
kill "$LOAD" 2>/dev/null || true; wait "$LOAD" 2>/dev/null || true; LOAD=""
POSTMASTER_STATE=$(dyni -status -json | jq -r --argjson pid "$POSTMASTER" '.targets[] | select(.pid == $pid) | .status')
say "the postmaster (pid $POSTMASTER) is $POSTMASTER_STATE"
CHURN=$WORK/churn.txt
: > "$CHURN"
if [ "$CHURN_GROUPS" -gt 0 ] && [ -z "$CONNECT_EACH" ]; then
  say "churn: pgbench -S -C (a connection per transaction), ABBA groups of $BLOCK s, ratios B/A"
  churn_block() {  # A|B: prints "tps dynid_cpu_percent"
    if [ "$1" = A ]; then dyni -undo >/dev/null || die "dyni -undo failed"
    else dyni -redo >/dev/null || die "dyni -redo failed"; fi
    sleep 1
    local t0 c0 out
    t0=$(now); c0=$(dynid_ticks)
    out=$("$PGBIN/pgbench" -S -C -n -c "$CLIENTS" -j 2 -T "$BLOCK" -h "$DATA" -p "$PORT" -U postgres postgres 2>&1) ||
      die "pgbench -C failed: $out"
    local tps
    tps=$(printf '%s\n' "$out" | awk '/^tps = / { print $3; exit }')
    awk -v tps="${tps:-0}" -v t0="$t0" -v t1="$(now)" -v c0="$c0" -v c1="$(dynid_ticks)" -v hz="$TICK" \
      'BEGIN { printf "%.2f %.3f\n", tps, (c1 - c0) / hz / (t1 - t0) * 100 }'
  }
  FOUND0=$(found_targets)
  for g in $(seq 1 "$CHURN_GROUPS"); do
    order="A B B A"; [ $((g % 2)) = 0 ] && order="B A A B"
    ta=0; tb=0; cpu_max=0
    for s in $order; do
      read -r tps cpu < <(churn_block "$s")
      if [ "$s" = A ]; then ta=$(awk -v a="$ta" -v b="$tps" 'BEGIN { print a + b }')
      else tb=$(awk -v a="$tb" -v b="$tps" 'BEGIN { print a + b }'); fi
      cpu_max=$(awk -v a="$cpu_max" -v b="$cpu" 'BEGIN { print (b > a ? b : a) }')
    done
    awk -v g="$g" -v a="$ta" -v b="$tb" -v c="$cpu_max" 'BEGIN { printf "%d %.4f %.3f\n", g, b / a, c }' | tee -a "$CHURN" |
      awk '{ printf "postgres-pgbench:   churn %d  TPS %6.3f  dynid %.2f %% of a core (busiest block)\n", $1, $2, $3 }' >&2
  done
  CHURN_FOUND=$(( $(found_targets) - FOUND0 ))
  dyni -redo >/dev/null 2>&1 || true
fi

# ---- 4. Many idle connections: inherited backends, -status -----------------
# Milliseconds, one a line, as "N ms median, M ms slowest of K".
spread() { sort -n | awk '{ v[NR] = $1 } END { printf "%s ms median, %s ms slowest of %d", v[int((NR + 1) / 2)], v[NR], NR }'; }
# 20 runs of a command, 0.25 s apart, timed from this shell (fork and exec
# included).
time_command() {
  for _ in $(seq 20); do
    local t0; t0=$(now); "$@" >/dev/null; awk -v a="$t0" -v b="$(now)" 'BEGIN { printf "%.0f\n", (b - a) * 1000 }'
    sleep 0.25
  done | spread
}
# 20 plain -status requests on dynid's socket, 0.25 s apart: from the
# request to the whole answer, without a process's start.
time_answer() {
  python3 - "$WORK/run/dynid.sock" <<'PY' | spread
import json, socket, sys, time
request = (json.dumps({"version": 1, "command": "status", "args": {"brief": True}}) + "\n").encode()
for _ in range(20):
    t0 = time.monotonic()
    with socket.socket(socket.AF_UNIX) as s:
        s.connect(sys.argv[1])
        s.sendall(request)
        answer = b""
        while not answer.endswith(b"\n"):
            chunk = s.recv(1 << 20)
            if not chunk: sys.exit("dynid closed the socket without an answer")
            answer += chunk
    if not json.loads(answer).get("ok"): sys.exit("dynid refused the status request")
    print(round((time.monotonic() - t0) * 1000))
    time.sleep(0.25)
PY
}
# -status beside the load: the command, dynid's answer on its socket, and
# /bin/true (what starting any process costs on this host meanwhile).
time_status() {
  printf "command %s; answer %s; /bin/true %s" "$(time_command dyni -status)" "$(time_answer)" "$(time_command /bin/true)"
}
STATUS_MS=""; STATUS_CHURN_MS=""; IDLE_INHERITED=""; IDLE_CPU=""; IDLE_SETTLED=""
if [ "$IDLE" -gt 0 ]; then
  say "opening $IDLE idle connections (psql sessions in pg_sleep)"
  SLEEPERS=()
  for _ in $(seq "$IDLE"); do
    "$PGBIN/psql" -X -At -h "$DATA" -p "$PORT" -U postgres -d postgres -c "SELECT pg_sleep(300)" >/dev/null 2>&1 &
    SLEEPERS+=($!)
  done
  # Until every backend is seen as inherited (at most 60 s): then dynid's
  # CPU and -status with them all, idle.
  inherited() { dyni -status -json | jq '[.targets[] | select(.dynimized.via == "inherited")] | length'; }
  t_open=$(now); deadline=$(( $(date +%s) + 60 ))
  while [ "$(inherited)" -lt "$IDLE" ] && [ "$(date +%s)" -lt "$deadline" ]; do sleep 0.5; done
  IDLE_SETTLED=$(awk -v a="$t_open" -v b="$(now)" 'BEGIN { printf "%.1f", b - a }')
  [ "$(inherited)" -ge "$IDLE" ] && IDLE_SETTLED="all seen in $IDLE_SETTLED s" || IDLE_SETTLED="not all within 60 s"
  c0=$(dynid_ticks); t0=$(now); sleep 10
  IDLE_CPU=$(awk -v c0="$c0" -v c1="$(dynid_ticks)" -v t0="$t0" -v t1="$(now)" -v hz="$TICK" \
             'BEGIN { printf "%.2f", (c1 - c0) / hz / (t1 - t0) * 100 }')
  IDLE_INHERITED=$(inherited)
  STATUS_MS=$(time_status)
  # And while pgbench -C forks a backend per transaction beside them.
  "$PGBIN/pgbench" -S -C -n -c "$CLIENTS" -j 2 -T 25 -h "$DATA" -p "$PORT" -U postgres postgres >/dev/null 2>&1 &
  CHURNING=$!
  sleep 1
  STATUS_CHURN_MS=$(time_status)
  wait "$CHURNING" || die "pgbench -C beside the idle connections failed"
  kill "${SLEEPERS[@]}" 2>/dev/null || true
  wait "${SLEEPERS[@]}" 2>/dev/null || true
fi

# ---- 5. The table ----------------------------------------------------------
read -r TPS TPS_HW N < <(stats 2 "$RATIOS")
read -r USER USER_HW _ < <(stats 3 "$RATIOS")
read -r CPU CPU_HW _ < <(stats 4 "$RATIOS")
CPU_NAME=$(awk -F': ' '/^model name/ { print $2; exit }' /proc/cpuinfo)
echo
echo "dyni on postgres ($PGBIN/postgres), pgbench -S${CONNECT_EACH:+ $CONNECT_EACH}, $CLIENTS clients over a Unix socket"
ON="the same $CLIENTS backends"; [ -n "$CONNECT_EACH" ] && ON="the same cluster, a backend per transaction"
echo "CPU: $CPU_NAME ($(nproc) CPUs); $N ABBA groups of 4 x $BLOCK s on $ON"
echo
printf "%-42s %6.3f  (±%.3f)\n" "transactions per second" "$TPS" "$TPS_HW"
printf "%-42s %6.3f  (±%.3f)\n" "backends' user CPU per transaction" "$USER" "$USER_HW"
printf "%-42s %6.3f  (±%.3f)\n" "backends' CPU per transaction" "$CPU" "$CPU_HW"
if [ -n "$CONNECT_EACH" ]; then
  printf "%-42s %s s (the postmaster, its group's leader)\n" "load start to dynimized" "$ALL"
  printf "%-42s %s\n" "layout" "$LAYOUT"
else
  printf "%-42s %s s (first backend), %s s (all %s)\n" "load start to dynimized" "$FIRST" "$ALL" "$CLIENTS"
  printf "%-42s %s of %s by the group's plan (the leader aside); layout: %s\n" "dynimized backends" "$FOLLOWERS" "$CLIENTS" "$LAYOUT"
fi
printf "%-42s %s\n" "the postmaster" "$POSTMASTER_STATE"
if [ -s "$CHURN" ]; then
  read -r CH CH_HW CH_N < <(stats 2 "$CHURN")
  printf "%-42s %6.3f  (±%.3f, %s groups)\n" "pgbench -C TPS, dynimized/original" "$CH" "$CH_HW" "$CH_N"
  printf "%-42s %s %% of a core (busiest block)\n" "dynid's CPU under pgbench -C" "$(sort -k3 -n "$CHURN" | tail -1 | cut -d' ' -f3)"
  printf "%-42s %s\n" "backends dynid found under pgbench -C" "$CHURN_FOUND"
fi
if [ -n "$STATUS_MS" ]; then
  printf "%-42s %s of %s inherited (%s); dynid %s %% of a core\n" \
    "idle connections" "$IDLE_INHERITED" "$IDLE" "$IDLE_SETTLED" "$IDLE_CPU"
  printf "%-42s %s\n" "dyni -status with them" "$STATUS_MS" "dyni -status with them, under pgbench -C" "$STATUS_CHURN_MS"
fi
