#!/usr/bin/env bash
# `make bench`: measure holdfast against its floor and the synchronous design
# it replaces, in one run on this machine, and print the comparison table.
#
#   1. floor:    raw Asynq, enqueue + no-op processing (bin/load floor), an
#                HTTP handler that only enqueues (bin/baseline -mode enqueue),
#                and one that stores each request in Postgres first, with
#                holdfast's own group commit (-mode durable, in a database of
#                its own, holdfast_bench_floor); and that plus the rest of a
#                write's round trip built the plain way, with nothing of
#                holdfast's in it: each task processed as it comes by a
#                worker process of its own (-mode roundtrip-tasks) and a long
#                poll for it (-mode roundtrip; clients waiting for each
#                outcome, then all submitting first);
#   2. baseline: seed 004's FCFS done synchronously per HTTP request, in the
#                seed's literal form and with FOR UPDATE SKIP LOCKED;
#   3. drop:     seed 002's order reserve, the drop of ONE product option:
#                BENCH_DROP_USERS users, each with one unit of it in the
#                cart, for BENCH_DROP_STOCK units, every client reserving at
#                once; first done synchronously, one transaction per request
#                that locks the option (bin/baseline -mode cart, bin/load
#                -hot-options 1 baseline-cart), then holdfast's cart-rush
#                -hot-options 1 (carts filled before the measured phase;
#                clients wait for each outcome; its deferred tasks measured
#                after it);
#   4. cart:     the same with carts of one or two of 5 options of
#                BENCH_CART_STOCK units each, BENCH_CART_USERS users;
#   5. hold:     seed 000's holds, a hold storm: BENCH_HOLD_USERS users each
#                hold one of 10 room types of 10 rooms for 1–3 nights in the
#                next two weeks; of the holds granted, half are confirmed, a
#                quarter cancelled, a quarter abandoned; first done
#                synchronously, one transaction per request that locks the
#                stay's stock rows (bin/baseline -mode hold, bin/load
#                baseline-hold-storm), then holdfast's hold-storm (clients
#                wait for each outcome; its deferred tasks measured after it);
#   6. holdfast: fcfs-rush (clients wait for every outcome), then fcfs-rush
#                -intake (clients submit everything, outcomes followed after);
#                after each, the load tool fires the Asynq tasks the run left
#                scheduled and measures them too (-redis); then -intake again
#                with the workers held back until the last 202 (-hold-apply):
#                the API's intake alone, as with workers on other machines.
#   7. keys:     isolation (K4) and recovery (K5: a worker killed mid-work), local commits.
#   8. group:    best-available seats for groups, a group rush: BENCH_GROUP_FANS
#                fans each ask for 1–6 seats side by side in one row of a map
#                of BENCH_GROUP_SEATS seats (sections of 20 rows of 50); of
#                the holds granted, two thirds are confirmed and a third let
#                expire (holds last BENCH_GROUP_HOLD_SECONDS); first done
#                synchronously, one transaction per request that locks a row
#                of the map FOR UPDATE SKIP LOCKED (bin/baseline -mode
#                group-skiplocked, bin/load baseline-group-rush; with
#                BENCH_GROUP_LOCKED=1 also plain FOR UPDATE, -mode group, about
#                three times slower), then holdfast's group-rush (clients wait
#                for each outcome); each run's checks read its design's tables
#                (-database-url). Local commits only.
#
# Two commit regimes. The hot-row parts (3, 4, 5: drop, cart, hold) run twice:
# at local commits, then with every design's database at
# commit_delay = BENCH_COMMIT_DELAY_US µs (1000: 1 ms, as cloud storage
# commits; 0 runs local commits only) and commit_siblings = 0, set with
# ALTER DATABASE before the processes connect, checked with SHOW commit_delay
# from a new connection and reset at the end. Every design of a part uses
# holdfast_bench (the durable floor and the plain round trip
# holdfast_bench_floor), so every design in a regime has the same setting.
# The floors and the FCFS part (1, 2, 6) run at local commits only, unless
# BENCH_FCFS_DELAYED=1: then they run in both regimes too.
#
# Sizes: BENCH_USERS (40000), BENCH_SEATS (20000), BENCH_CONCURRENCY (200),
# BENCH_DROP_USERS (3000), BENCH_DROP_STOCK (1000 units of the one option),
# BENCH_CART_USERS (3000), BENCH_CART_STOCK (300 units an option),
# BENCH_CART_TAIL (0: with N, every cart of the cart part also holds one of
# N options of an older catalog product, in both cart runs; load -cart-tail),
# BENCH_HOLD_USERS (3000), BENCH_ISOLATION_BACKLOG (20000),
# BENCH_RECOVERY_WRITES (10000), BENCH_GROUP_FANS (20000), BENCH_GROUP_SEATS
# (10000), BENCH_GROUP_HOLD_SECONDS (5), BENCH_GROUP_LOCKED (0). BENCH_ONLY=drop, cart or hold runs
# that part alone (in both regimes), with the same stores and sizes, and
# writes its table to bin/bench/latest-drop.md, latest-cart.md or
# latest-hold.md; BENCH_ONLY=keys runs part 7 alone (latest-keys.md), and
# BENCH_ONLY=group part 8 (latest-group.md).
# Results: bin/bench/<time>/ (JSON per run, the runs at the commit delay in
# its subdirectory commit-delay/) and
# bin/bench/latest.md. Everything uses its own databases (holdfast_bench,
# wiped first) and its own redis-server on a spare port (BENCH_REDIS_PORT,
# 16399), so a running `make run` or `make test` is not disturbed.
set -euo pipefail
cd "$(dirname "$0")/.."

users="${BENCH_USERS:-40000}" seats="${BENCH_SEATS:-20000}" conc="${BENCH_CONCURRENCY:-200}"
drop_users="${BENCH_DROP_USERS:-3000}" drop_stock="${BENCH_DROP_STOCK:-1000}"
cart_users="${BENCH_CART_USERS:-3000}" cart_stock="${BENCH_CART_STOCK:-300}" cart_tail="${BENCH_CART_TAIL:-0}"
hold_users="${BENCH_HOLD_USERS:-3000}"
iso_backlog="${BENCH_ISOLATION_BACKLOG:-20000}" rec_writes="${BENCH_RECOVERY_WRITES:-10000}"
group_fans="${BENCH_GROUP_FANS:-20000}" group_seats="${BENCH_GROUP_SEATS:-10000}" group_hold="${BENCH_GROUP_HOLD_SECONDS:-5}"
group_modes=(group-skiplocked); [ "${BENCH_GROUP_LOCKED:-0}" = 1 ] && group_modes+=(group)
delay="${BENCH_COMMIT_DELAY_US:-1000}" fcfs_delayed="${BENCH_FCFS_DELAYED:-0}"
only="${BENCH_ONLY:-}"
case "$only" in "" | drop | cart | hold | keys | group) ;; *) echo "BENCH_ONLY must be drop, cart, hold, keys, group or unset" >&2; exit 2 ;; esac
case "$only" in keys | group) delay=0 ;; esac # the keys and group parts run at local commits only
case "$delay" in "" | *[!0-9]*) echo "BENCH_COMMIT_DELAY_US must be a whole number of µs (0: local commits only)" >&2; exit 2 ;; esac
case "$fcfs_delayed" in 0 | 1) ;; *) echo "BENCH_FCFS_DELAYED must be 0 or 1" >&2; exit 2 ;; esac
part() { [ -z "$only" ] || [ "$only" = "$1" ]; } # part NAME: whether this run measures part NAME
# fcfs: whether this regime measures the floors and the FCFS part.
fcfs() { [ -z "$only" ] && { [ "$regime" = 0 ] || [ "$fcfs_delayed" = 1 ]; }; }
keys() { part keys && [ "$regime" = 0 ]; } # keys: whether this regime measures the keys part
group() { part group && [ "$regime" = 0 ]; } # group: whether this regime measures the group part
pg_base="${BENCH_PG:-postgres://postgres@127.0.0.1:5432}"
export DATABASE_URL="$pg_base/holdfast_bench?sslmode=disable"
redis_port="${BENCH_REDIS_PORT:-16399}"
export REDIS_URL="redis://127.0.0.1:$redis_port/0"
export JWT_SECRET="bench-$(head -c 16 /dev/urandom | od -An -tx1 | tr -d ' \n')"
export LOG_LEVEL=warn
export LEASE_TTL="${LEASE_TTL:-5s}" # holdfast's default, named for recovery's report
api_addr=127.0.0.1:18181 worker_addr=127.0.0.1:19191 baseline_addr=127.0.0.1:18191 baseline_tasks_addr=127.0.0.1:18192
victim_addr=127.0.0.1:19192
root="bin/bench/$(date -u +%Y%m%dT%H%M%SZ)" out=$root
mkdir -p "$out"

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
# sync_run MODE NAME LOAD_ARGS...: serve bin/baseline -mode MODE and rush it
# with bin/load LOAD_ARGS (flags, then the scenario); report in $out/NAME.json.
sync_run() {
  local mode=$1 name=$2; shift 2
  bin/baseline -mode "$mode" -addr "$baseline_addr" > "$out/$name.log" 2>&1 & pid=$!; pids+=("$pid")
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

fresh_stores holdfast_bench "$redis_port"

cpu=$(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -1)
pgv=$(psql -tA "$DATABASE_URL" -c 'SHOW server_version' | cut -d' ' -f1)
rv=$(redis-cli -u "$REDIS_URL" info server | sed -n 's/^redis_version://p' | tr -d '\r')
echo "$(date -u '+%Y-%m-%d %H:%M UTC'), $(nproc) cores ($cpu), $(free -g | awk '/Mem:/{print $2}') GiB, Postgres $pgv, Redis $rv; everything on this machine" > "$out/machine.txt"

# measure: every part of this run, in the regime's directory $out.
measure() {
  if fcfs; then
    step "floor: raw Asynq, $users no-op tasks"
    bin/load floor -tasks "$users" > "$out/floor.json"

    step "floor: HTTP handler that only enqueues, $users POSTs, $conc clients"
    bin/baseline -mode enqueue -addr "$baseline_addr" > "$out/baseline-enqueue.log" 2>&1 & pid=$!; pids+=("$pid")
    wait_ready "http://$baseline_addr/healthz" "$pid"
    bin/load -url "http://$baseline_addr" -users "$users" -concurrency "$conc" -worker-metrics '' -json enqueue-floor > "$out/enqueue.json"
    stop "$pid"

    step "floor: HTTP handler that stores each request in Postgres, then enqueues, $users POSTs, $conc clients, $commits"
    floor_db="$pg_base/holdfast_bench_floor?sslmode=disable"
    fresh_db holdfast_bench_floor
    DATABASE_URL=$floor_db bin/baseline -mode durable -addr "$baseline_addr" > "$out/baseline-durable.log" 2>&1 & pid=$!; pids+=("$pid")
    wait_ready "http://$baseline_addr/healthz" "$pid"
    psql -q "$floor_db" -c 'CHECKPOINT' >/dev/null
    bin/load -url "http://$baseline_addr" -users "$users" -concurrency "$conc" -worker-metrics '' -json enqueue-floor > "$out/durable.json"
    stop "$pid"

    step "plain round trip: stored, each task processed as it comes by a worker process, a long poll, $users users, $conc clients, $commits"
    fresh_db holdfast_bench_floor
    DATABASE_URL=$floor_db bin/baseline -mode roundtrip -addr "$baseline_addr" > "$out/baseline-roundtrip.log" 2>&1 & pid=$!; pids+=("$pid")
    wait_ready "http://$baseline_addr/healthz" "$pid"
    bin/baseline -mode roundtrip-tasks -addr "$baseline_tasks_addr" > "$out/baseline-roundtrip-tasks.log" 2>&1 & tasks_pid=$!; pids+=("$tasks_pid")
    wait_ready "http://$baseline_tasks_addr/healthz" "$tasks_pid"
    for run in roundtrip roundtrip-intake; do
      psql -q "$floor_db" -c 'CHECKPOINT' >/dev/null
      intake=(); [ "$run" = roundtrip-intake ] && intake=(-intake)
      bin/load -url "http://$baseline_addr" -users "$users" -concurrency "$conc" -worker-metrics "http://$baseline_tasks_addr/metrics" -json "${intake[@]}" baseline-roundtrip > "$out/$run.json"
    done
    stop "$tasks_pid"; stop "$pid"
    psql -q "$pg_base/postgres?sslmode=disable" -c 'DROP DATABASE holdfast_bench_floor'

    for mode in literal skiplocked lean; do
      step "baseline: synchronous FCFS ($mode), $users users for $seats seats, $conc clients, $commits"
      # The lean design as it was tried against holdfast: 32 connections.
      conns=(); [ "$mode" = lean ] && conns=(-pg-max-conns 32)
      bin/baseline -mode "$mode" ${conns[@]+"${conns[@]}"} -seats "$seats" -addr "$baseline_addr" > "$out/baseline-$mode.log" 2>&1 & pid=$!; pids+=("$pid")
      wait_ready "http://$baseline_addr/healthz" "$pid"
      settle
      bin/load -url "http://$baseline_addr" -users "$users" -seats "$seats" -concurrency "$conc" -worker-metrics '' -json baseline-fcfs > "$out/$mode.json" || true
      stop "$pid"
    done
  fi

  if part drop; then
    step "baseline: synchronous drop (seed 002's reserve), $drop_users users for $drop_stock units of one option, $conc clients, $commits"
    sync_run cart drop-baseline -users "$drop_users" -stock "$drop_stock" -hot-options 1 baseline-cart
  fi
  if part cart; then
    step "baseline: synchronous cart reserve (seed 002), $cart_users users, carts of 1–2 of 5 options of $cart_stock units, $conc clients, $commits"
    sync_run cart cart-baseline -users "$cart_users" -stock "$cart_stock" -cart-tail "$cart_tail" baseline-cart
  fi
  if part hold; then
    step "baseline: synchronous hold (seed 000's locked flow), hold storm of $hold_users users, $conc clients, $commits"
    sync_run hold hold-baseline -users "$hold_users" baseline-hold-storm
  fi
  if group; then
    group_args=(-users "$group_fans" -seats "$group_seats" -seat-hold-seconds "$group_hold")
    for mode in "${group_modes[@]}"; do
      step "baseline: synchronous group holds ($mode), $group_fans fans for $group_seats seats, $conc clients, $commits"
      name=group-baseline; [ "$mode" = group ] && name=group-locked
      sync_run "$mode" "$name" "${group_args[@]}" -database-url "$pg_base/holdfast_bench?sslmode=disable&search_path=group_baseline" baseline-group-rush
    done
  fi

  step "holdfast: API and worker, $commits"
  start_holdfast
  if part drop; then
    step "holdfast: drop, cart-rush -hot-options 1, $drop_users users for $drop_stock units, $conc clients, $commits"
    holdfast_run drop-rush -users "$drop_users" -stock "$drop_stock" -hot-options 1 cart-rush
  fi
  if part cart; then
    step "holdfast: cart-rush, $cart_users users, carts of 1–2 of 5 options of $cart_stock units, $conc clients, $commits"
    holdfast_run cart-rush -users "$cart_users" -stock "$cart_stock" -cart-tail "$cart_tail" cart-rush
  fi
  if part hold; then
    step "holdfast: hold-storm, $hold_users users, $conc clients, $commits"
    holdfast_run hold-storm -users "$hold_users" hold-storm
  fi
  if group; then
    step "holdfast: group-rush, $group_fans fans for $group_seats seats, $conc clients, $commits"
    holdfast_run group-rush "${group_args[@]}" -database-url "$DATABASE_URL" group-rush
  fi
  if fcfs; then
    step "holdfast: fcfs-rush, $commits"
    holdfast_run rush -users "$users" -seats "$seats" fcfs-rush
    step "holdfast: fcfs-rush -intake, $commits"
    holdfast_run intake -users "$users" -seats "$seats" -intake fcfs-rush
    step "holdfast: fcfs-rush -intake -hold-apply (the workers wait until the last 202), $commits"
    holdfast_run intake-held -users "$users" -seats "$seats" -intake -hold-apply fcfs-rush
  fi
  if keys; then
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
  # Each regime on stores of its own: what the one before it left (an
  # FCFS rush's 120,000 requests) would slow it down and not the other.
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
