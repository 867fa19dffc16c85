#!/usr/bin/env bash
# `make bench`: measure holdfast against the Asynq floor and, for each
# vertical, the strongest synchronous design (bin/baseline, one transaction
# per request), in one run on this machine, and print the comparison table.
# docs/benchmarks.md says what each part measures.
#
#   fcfs:  raw Asynq (bin/load floor); the lean synchronous FCFS (-mode lean,
#          baseline-fcfs); holdfast's fcfs-rush, then fcfs-rush -intake.
#   drop:  cart-rush -hot-options 1 beside -mode cart (baseline-cart).
#   cart:  cart-rush beside -mode cart.
#   hold:  hold-storm beside -mode hold (baseline-hold-storm).
#   group: group-rush beside -mode group (baseline-group-rush).
# A synchronous run writes its fixture into its design's tables, and reads
# its checks there (-database-url); group-rush's checks read holdfast's.
#   keys:  isolation (K4) and recovery (K5: a second worker killed mid-work).
# holdfast's runs fire the Asynq tasks they left deferred and measure them
# (-redis).
#
# Two commit regimes: drop, cart and hold run at local commits, then with
# every design's database at commit_delay = BENCH_COMMIT_DELAY_US µs (1000;
# 0: local commits only) and commit_siblings = 0, set with ALTER DATABASE
# before the processes connect, checked with SHOW and reset at the end; fcfs,
# group and keys at local commits only.
#
# Sizes: BENCH_USERS (40000), BENCH_SEATS (20000), BENCH_CONCURRENCY (200),
# BENCH_DROP_USERS (3000), BENCH_DROP_STOCK (1000), BENCH_CART_USERS (3000),
# BENCH_CART_STOCK (300 an option), BENCH_HOLD_USERS (3000),
# BENCH_ISOLATION_BACKLOG (20000), BENCH_RECOVERY_WRITES (10000),
# BENCH_GROUP_FANS (20000), BENCH_GROUP_SEATS (10000),
# BENCH_GROUP_HOLD_SECONDS (5). BENCH_ONLY=drop|cart|hold|keys|group runs
# that part alone and writes bin/bench/latest-PART.md. Results:
# bin/bench/<time>/ (JSON per run; the delayed regime's in commit-delay/) and
# bin/bench/latest.md. Its own databases (holdfast_bench, wiped first) and
# redis-server (BENCH_REDIS_PORT, 16399), so a make run or make test beside
# it is not disturbed.
set -euo pipefail
cd "$(dirname "$0")/.."

users="${BENCH_USERS:-40000}" seats="${BENCH_SEATS:-20000}" conc="${BENCH_CONCURRENCY:-200}"
drop_users="${BENCH_DROP_USERS:-3000}" drop_stock="${BENCH_DROP_STOCK:-1000}"
cart_users="${BENCH_CART_USERS:-3000}" cart_stock="${BENCH_CART_STOCK:-300}"
hold_users="${BENCH_HOLD_USERS:-3000}"
iso_backlog="${BENCH_ISOLATION_BACKLOG:-20000}" rec_writes="${BENCH_RECOVERY_WRITES:-10000}"
group_fans="${BENCH_GROUP_FANS:-20000}" group_seats="${BENCH_GROUP_SEATS:-10000}" group_hold="${BENCH_GROUP_HOLD_SECONDS:-5}"
delay="${BENCH_COMMIT_DELAY_US:-1000}"
only="${BENCH_ONLY:-}"
case "$only" in "" | drop | cart | hold | keys | group) ;; *) echo "BENCH_ONLY must be drop, cart, hold, keys, group or unset" >&2; exit 2 ;; esac
case "$only" in keys | group) delay=0 ;; esac # the keys and group parts run at local commits only
case "$delay" in "" | *[!0-9]*) echo "BENCH_COMMIT_DELAY_US must be a whole number of µs (0: local commits only)" >&2; exit 2 ;; esac
part() { [ -z "$only" ] || [ "$only" = "$1" ]; } # part NAME: whether this run measures part NAME (fcfs: a full run)
local_part() { part "$1" && [ "$regime" = 0 ]; } # local_part NAME: part NAME, measured at local commits only
export LEASE_TTL="${LEASE_TTL:-5s}" # holdfast's default, named for recovery's report
api_addr=127.0.0.1:18181 worker_addr=127.0.0.1:19191 baseline_addr=127.0.0.1:18191
victim_addr=127.0.0.1:19192

# shellcheck source=scripts/lib.sh
. scripts/lib.sh

# commit_regime DB: give database DB the regime's commits, commit_delay =
# $regime µs with commit_siblings = 0 (every commit waits), or the server's
# own at 0; sessions opened after it have them, which a new one checks.
commit_regime() {
  local admin="$pg_base/postgres?sslmode=disable" got
  if [ "$regime" = 0 ]; then
    psql -q "$admin" -c "ALTER DATABASE $1 RESET commit_delay" -c "ALTER DATABASE $1 RESET commit_siblings"
  else
    psql -q "$admin" -c "ALTER DATABASE $1 SET commit_delay = $regime" -c "ALTER DATABASE $1 SET commit_siblings = 0"
  fi
  got=$(psql -tA "$pg_base/$1?sslmode=disable" -c 'SHOW commit_delay')
  [ "$got" = "$regime" ] || { echo "$1: SHOW commit_delay says $got, not $regime" >&2; exit 1; }
}
# fresh_db DB: database DB of $pg_base, new and empty, at the regime's commits.
fresh_db() {
  psql -q "$pg_base/postgres?sslmode=disable" -c "DROP DATABASE IF EXISTS $1" 2>/dev/null
  psql -q "$pg_base/postgres?sslmode=disable" -c "CREATE DATABASE $1"
  commit_regime "$1"
}
# sync_db MODE: the database URL of bin/baseline -mode MODE's tables, where
# the load tool writes its fixture and reads its checks.
sync_db() { echo "$pg_base/holdfast_bench?sslmode=disable&search_path=$1_baseline"; }
# sync_run MODE NAME LOAD_ARGS...: serve bin/baseline -mode MODE (and
# $baseline_args) and rush it with bin/load LOAD_ARGS (flags, then the
# scenario); report in $out/NAME.json.
sync_run() {
  local mode=$1 name=$2; shift 2
  bin/baseline -mode "$mode" ${baseline_args[@]+"${baseline_args[@]}"} -addr "$baseline_addr" > "$out/$name.log" 2>&1 & pid=$!; pids+=("$pid")
  wait_ready "http://$baseline_addr/healthz" "$pid"
  settle
  bin/load -url "http://$baseline_addr" -concurrency "$conc" -worker-metrics '' -json "$@" > "$out/$name.json" || true
  stop "$pid"
}
# holdfast_run NAME LOAD_ARGS...: rush holdfast with bin/load LOAD_ARGS;
# report in $out/NAME.json.
holdfast_run() {
  local name=$1; shift
  settle
  bin/load -url "http://$api_addr" -worker-metrics "http://$worker_addr/metrics" -redis "$REDIS_URL" -concurrency "$conc" \
    -json "$@" > "$out/$name.json" || true
}

fresh_stores bench BENCH 16399
root=$out

cpu=$(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -1)
pgv=$(psql -tA "$DATABASE_URL" -c 'SHOW server_version' | cut -d' ' -f1)
rv=$(redis-cli -u "$REDIS_URL" info server | sed -n 's/^redis_version://p' | tr -d '\r')
echo "$(date -u '+%Y-%m-%d %H:%M UTC'), $(nproc) cores ($cpu), $(free -g | awk '/Mem:/{print $2}') GiB, Postgres $pgv, Redis $rv; everything on this machine" > "$out/machine.txt"

# measure: every part of this run, in the regime's directory $out.
measure() {
  if local_part fcfs; then
    step "floor: raw Asynq, $users no-op tasks"
    bin/load floor -tasks "$users" > "$out/floor.json"
    step "baseline: lean synchronous FCFS, $users users for $seats seats, $conc clients, $commits"
    # The lean design as it was tried against holdfast: 32 connections.
    baseline_args=(-pg-max-conns 32 -seats "$seats")
    sync_run lean lean -users "$users" -seats "$seats" baseline-fcfs
    baseline_args=()
  fi
  if part drop; then
    step "baseline: synchronous drop (seed 002's reserve), $drop_users users for $drop_stock units of one option, $conc clients, $commits"
    sync_run cart drop-baseline -users "$drop_users" -stock "$drop_stock" -hot-options 1 -database-url "$(sync_db cart)" baseline-cart
  fi
  if part cart; then
    step "baseline: synchronous cart reserve (seed 002), $cart_users users, carts of 1–2 of 5 options of $cart_stock units, $conc clients, $commits"
    sync_run cart cart-baseline -users "$cart_users" -stock "$cart_stock" -database-url "$(sync_db cart)" baseline-cart
  fi
  if part hold; then
    step "baseline: synchronous hold (seed 000's locked flow), hold storm of $hold_users users, $conc clients, $commits"
    sync_run hold hold-baseline -users "$hold_users" -database-url "$(sync_db hold)" baseline-hold-storm
  fi
  group_args=(-users "$group_fans" -seats "$group_seats" -seat-hold-seconds "$group_hold")
  if local_part group; then
    step "baseline: synchronous group holds, $group_fans fans for $group_seats seats, $conc clients, $commits"
    sync_run group group-baseline "${group_args[@]}" -database-url "$(sync_db group)" baseline-group-rush
  fi

  step "holdfast: API and worker, $commits"
  start_holdfast
  if part drop; then
    step "holdfast: drop, cart-rush -hot-options 1, $drop_users users for $drop_stock units, $conc clients, $commits"
    holdfast_run drop-rush -users "$drop_users" -stock "$drop_stock" -hot-options 1 cart-rush
  fi
  if part cart; then
    step "holdfast: cart-rush, $cart_users users, carts of 1–2 of 5 options of $cart_stock units, $conc clients, $commits"
    holdfast_run cart-rush -users "$cart_users" -stock "$cart_stock" cart-rush
  fi
  if part hold; then
    step "holdfast: hold-storm, $hold_users users, $conc clients, $commits"
    holdfast_run hold-storm -users "$hold_users" hold-storm
  fi
  if local_part group; then
    step "holdfast: group-rush, $group_fans fans for $group_seats seats, $conc clients, $commits"
    holdfast_run group-rush "${group_args[@]}" -database-url "$DATABASE_URL" group-rush
  fi
  if local_part fcfs; then
    step "holdfast: fcfs-rush, $commits"
    holdfast_run rush -users "$users" -seats "$seats" fcfs-rush
    step "holdfast: fcfs-rush -intake, $commits"
    holdfast_run intake -users "$users" -seats "$seats" -intake fcfs-rush
  fi
  if local_part keys; then
    step "holdfast: isolation (K4), a backlog of $iso_backlog grabs on one event, other events' grabs timed while it drains, $commits"
    holdfast_run isolation -users "$iso_backlog" isolation
    step "holdfast: recovery (K5), $rec_writes grabs on 100 events, a second worker killed with SIGKILL mid-work, LEASE_TTL $LEASE_TTL, $commits"
    WORKER_ADDR=$victim_addr bin/worker > "$out/victim.log" 2>&1 & victim_pid=$!; pids+=("$victim_pid")
    wait_ready "http://$victim_addr/readyz" "$victim_pid"
    holdfast_run recovery -users "$rec_writes" -kill-pid "$victim_pid" -victim-metrics "http://$victim_addr/metrics" -lease-ttl "$LEASE_TTL" recovery
    kill -KILL "$victim_pid" 2>/dev/null || true # when the run failed before it could
    wait "$victim_pid" 2>/dev/null || true
  fi
  stop "$worker_pid"; stop "$api_pid"
}

regimes=(0); [ "$delay" -gt 0 ] && regimes+=("$delay")
for regime in "${regimes[@]}"; do
  out=$root commits="local commits"
  if [ "$regime" != 0 ]; then out=$root/commit-delay commits="commit_delay $regime µs"; fi
  mkdir -p "$out"
  # Each regime on stores of its own: what the one before it left (the
  # FCFS rushes' 80,000 requests) would slow it down and not the other.
  if [ "$regime" != 0 ]; then
    fresh_db holdfast_bench
    bin/api migrate
    redis-cli -u "$REDIS_URL" flushall >/dev/null
  fi
  commit_regime holdfast_bench
  echo "$regime" > "$out/commit-delay-us.txt"
  measure
done
regime=0; commit_regime holdfast_bench

step "results ($root)"
status=0
bin/load table "$root" | tee "$root/table.md" || status=$?
cp "$root/table.md" "bin/bench/latest${only:+-$only}.md"
exit $status
