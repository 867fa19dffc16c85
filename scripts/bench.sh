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
#   3. cart:     seed 002's order reserve, a limited drop: BENCH_CART_USERS
#                users with carts of one or two of 5 options of
#                BENCH_CART_STOCK units each, every client reserving at once;
#                first done synchronously, one transaction per request that
#                locks the cart's options (bin/baseline -mode cart,
#                bin/load baseline-cart), then holdfast's cart-rush (carts
#                filled before the measured phase; clients wait for each
#                outcome; its deferred tasks measured after it);
#   4. hold:     seed 000's holds, a hold storm: BENCH_HOLD_USERS users each
#                hold one of 10 room types of 10 rooms for 1–3 nights in the
#                next two weeks; of the holds granted, half are confirmed, a
#                quarter cancelled, a quarter abandoned; first done
#                synchronously, one transaction per request that locks the
#                stay's stock rows (bin/baseline -mode hold, bin/load
#                baseline-hold-storm), then holdfast's hold-storm (clients
#                wait for each outcome; its deferred tasks measured after it);
#   5. holdfast: fcfs-rush (clients wait for every outcome), then fcfs-rush
#                -intake (clients submit everything, outcomes followed after);
#                after each, the load tool fires the Asynq tasks the run left
#                scheduled and measures them too (-redis); then -intake again
#                with the workers held back until the last 202 (-hold-apply):
#                the API's intake alone, as with workers on other machines.
#
# Sizes: BENCH_USERS (40000), BENCH_SEATS (20000), BENCH_CONCURRENCY (200),
# BENCH_CART_USERS (3000), BENCH_CART_STOCK (300 units an option),
# BENCH_CART_TAIL (0: with N, every cart also holds one of N options of an
# older catalog product, in both cart runs; load -cart-tail),
# BENCH_HOLD_USERS (3000). BENCH_ONLY=cart or BENCH_ONLY=hold runs that part
# alone (step 3 or 4), with the same stores and sizes, and writes its table
# to bin/bench/latest-cart.md or latest-hold.md.
# Results: bin/bench/<time>/ (JSON per run, HTML for the holdfast runs) and
# bin/bench/latest.md. Everything uses its own database (holdfast_bench,
# wiped first) and its own redis-server on a spare port (BENCH_REDIS_PORT,
# 16399), so a running `make run` or `make test` is not disturbed.
set -euo pipefail
cd "$(dirname "$0")/.."

users="${BENCH_USERS:-40000}" seats="${BENCH_SEATS:-20000}" conc="${BENCH_CONCURRENCY:-200}"
cart_users="${BENCH_CART_USERS:-3000}" cart_stock="${BENCH_CART_STOCK:-300}" cart_tail="${BENCH_CART_TAIL:-0}"
hold_users="${BENCH_HOLD_USERS:-3000}"
only="${BENCH_ONLY:-}"
case "$only" in "" | cart | hold) ;; *) echo "BENCH_ONLY must be cart, hold or unset" >&2; exit 2 ;; esac
part() { [ -z "$only" ] || [ "$only" = "$1" ]; } # part NAME: whether this run measures part NAME
pg_base="${BENCH_PG:-postgres://postgres@127.0.0.1:5432}"
export DATABASE_URL="$pg_base/holdfast_bench?sslmode=disable"
redis_port="${BENCH_REDIS_PORT:-16399}"
export REDIS_URL="redis://127.0.0.1:$redis_port/0"
export JWT_SECRET="bench-$(head -c 16 /dev/urandom | od -An -tx1 | tr -d ' \n')"
export LOG_LEVEL=warn
api_addr=127.0.0.1:18181 worker_addr=127.0.0.1:19191 baseline_addr=127.0.0.1:18191 baseline_tasks_addr=127.0.0.1:18192
out="bin/bench/$(date -u +%Y%m%dT%H%M%SZ)"
mkdir -p "$out"

# shellcheck source=scripts/lib.sh
. scripts/lib.sh

fresh_stores holdfast_bench "$redis_port"

cpu=$(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -1)
pgv=$(psql -tA "$DATABASE_URL" -c 'SHOW server_version' | cut -d' ' -f1)
rv=$(redis-cli -u "$REDIS_URL" info server | sed -n 's/^redis_version://p' | tr -d '\r')
echo "$(date -u '+%Y-%m-%d %H:%M UTC'), $(nproc) cores ($cpu), $(free -g | awk '/Mem:/{print $2}') GiB, Postgres $pgv, Redis $rv; everything on this machine" > "$out/machine.txt"

if [ -z "$only" ]; then
  step "floor: raw Asynq, $users no-op tasks"
  bin/load floor -tasks "$users" > "$out/floor.json"

  step "floor: HTTP handler that only enqueues, $users POSTs, $conc clients"
  bin/baseline -mode enqueue -addr "$baseline_addr" > "$out/baseline-enqueue.log" 2>&1 & pid=$!; pids+=("$pid")
  wait_ready "http://$baseline_addr/healthz" "$pid"
  bin/load -url "http://$baseline_addr" -users "$users" -concurrency "$conc" -worker-metrics '' -json enqueue-floor > "$out/enqueue.json"
  stop "$pid"

  step "floor: HTTP handler that stores each request in Postgres, then enqueues, $users POSTs, $conc clients"
  floor_db="$pg_base/holdfast_bench_floor?sslmode=disable"
  psql -q "$pg_base/postgres?sslmode=disable" -c 'DROP DATABASE IF EXISTS holdfast_bench_floor' 2>/dev/null
  DATABASE_URL=$floor_db bin/baseline -mode durable -addr "$baseline_addr" > "$out/baseline-durable.log" 2>&1 & pid=$!; pids+=("$pid")
  wait_ready "http://$baseline_addr/healthz" "$pid"
  psql -q "$floor_db" -c 'CHECKPOINT' >/dev/null
  bin/load -url "http://$baseline_addr" -users "$users" -concurrency "$conc" -worker-metrics '' -json enqueue-floor > "$out/durable.json"
  stop "$pid"
  psql -q "$pg_base/postgres?sslmode=disable" -c 'DROP DATABASE holdfast_bench_floor'

  step "plain round trip: stored, each task processed as it comes by a worker process, a long poll, $users users, $conc clients"
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
    step "baseline: synchronous FCFS ($mode), $users users for $seats seats, $conc clients"
    # The lean design as it was tried against holdfast: 32 connections.
    conns=(); [ "$mode" = lean ] && conns=(-pg-max-conns 32)
    bin/baseline -mode "$mode" ${conns[@]+"${conns[@]}"} -seats "$seats" -addr "$baseline_addr" > "$out/baseline-$mode.log" 2>&1 & pid=$!; pids+=("$pid")
    wait_ready "http://$baseline_addr/healthz" "$pid"
    settle
    bin/load -url "http://$baseline_addr" -users "$users" -seats "$seats" -concurrency "$conc" -worker-metrics '' -json baseline-fcfs > "$out/$mode.json" || true
    stop "$pid"
  done
fi

if part cart; then
  step "baseline: synchronous cart reserve (seed 002), $cart_users users, carts of 1–2 of 5 options of $cart_stock units, $conc clients"
  bin/baseline -mode cart -addr "$baseline_addr" > "$out/baseline-cart.log" 2>&1 & pid=$!; pids+=("$pid")
  wait_ready "http://$baseline_addr/healthz" "$pid"
  settle
  bin/load -url "http://$baseline_addr" -users "$cart_users" -stock "$cart_stock" -cart-tail "$cart_tail" -concurrency "$conc" -worker-metrics '' -json baseline-cart > "$out/cart-baseline.json" || true
  stop "$pid"
fi

if part hold; then
  step "baseline: synchronous hold (seed 000's locked flow), hold storm of $hold_users users, $conc clients"
  bin/baseline -mode hold -addr "$baseline_addr" > "$out/baseline-hold.log" 2>&1 & pid=$!; pids+=("$pid")
  wait_ready "http://$baseline_addr/healthz" "$pid"
  settle
  bin/load -url "http://$baseline_addr" -users "$hold_users" -concurrency "$conc" -worker-metrics '' -json baseline-hold-storm > "$out/hold-baseline.json" || true
  stop "$pid"
fi

step "holdfast: API and worker"
start_holdfast
holdfast=(-url "http://$api_addr" -worker-metrics "http://$worker_addr/metrics" -redis "$REDIS_URL" -concurrency "$conc")

if part cart; then
  step "holdfast: cart-rush, $cart_users users, carts of 1–2 of 5 options of $cart_stock units, $conc clients"
  settle
  bin/load "${holdfast[@]}" -users "$cart_users" -stock "$cart_stock" -cart-tail "$cart_tail" -json -html "$out/cart-rush.html" cart-rush > "$out/cart-rush.json" || true
fi

if part hold; then
  step "holdfast: hold-storm, $hold_users users, $conc clients"
  settle
  bin/load "${holdfast[@]}" -users "$hold_users" -json -html "$out/hold-storm.html" hold-storm > "$out/hold-storm.json" || true
fi

if [ -z "$only" ]; then
  common=("${holdfast[@]}" -users "$users" -seats "$seats")
  step "holdfast: fcfs-rush"
  settle
  bin/load "${common[@]}" -json -html "$out/rush.html" fcfs-rush > "$out/rush.json" || true
  step "holdfast: fcfs-rush -intake"
  settle
  bin/load "${common[@]}" -json -html "$out/intake.html" -intake fcfs-rush > "$out/intake.json" || true
  step "holdfast: fcfs-rush -intake -hold-apply (the workers wait until the last 202)"
  settle
  bin/load "${common[@]}" -json -intake -hold-apply fcfs-rush > "$out/intake-held.json" || true
fi
stop "$worker_pid"; stop "$api_pid"

step "results ($out)"
status=0
bin/load table "$out" | tee "$out/table.md" || status=$?
cp "$out/table.md" "bin/bench/latest${only:+-$only}.md"
exit $status
