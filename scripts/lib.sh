# Shared by scripts/bench.sh, soak.sh, streams.sh and redis-away.sh: the
# run's own stores, start processes, wait for them, stop them all on exit.
pids=()
cleanup() { for p in "${pids[@]}"; do kill -TERM "$p" 2>/dev/null || true; done; wait 2>/dev/null || true; }
trap cleanup EXIT INT TERM
wait_ready() { # url pid
  for _ in $(seq 1 200); do
    curl -sf "$1" >/dev/null && return 0
    kill -0 "$2" 2>/dev/null || { echo "process for $1 died; see $out/*.log" >&2; exit 1; }
    sleep 0.1
  done
  echo "$1 never became ready" >&2; exit 1
}
stop() { kill -TERM "$1"; wait "$1" 2>/dev/null || true; }
step() { printf '\n== %s\n' "$*" >&2; }
# Each measured run starts right after a VACUUM ANALYZE and a checkpoint, so
# none of them pays for the dead rows, stale statistics or full-page writes
# the run before it left. A server with autovacuum on (any production one)
# gets there by itself between rushes; this machine's Postgres runs with it
# off, and a drop measured after a 40,000-user FCFS rush in the same
# database took 1.5 s against 0.9 s fresh (1.1 s after an ANALYZE).
settle() { psql -q "$DATABASE_URL" -c 'VACUUM ANALYZE' -c 'CHECKPOINT' >/dev/null; }
# fresh_stores NAME PREFIX PORT: stores of the run's own, so a make run or
# make test beside it is not disturbed: database holdfast_NAME of
# ${PREFIX}_PG (the local Postgres, $pg_base), dropped and migrated, as
# $DATABASE_URL; a redis-server on ${PREFIX}_REDIS_PORT (PORT) as $REDIS_URL;
# a JWT_SECRET of its own, LOG_LEVEL=warn, and $out, bin/NAME/<time>, for logs.
fresh_stores() {
  local pg="${2}_PG" port="${2}_REDIS_PORT"
  pg_base="${!pg:-postgres://postgres@127.0.0.1:5432}" redis_port="${!port:-$3}"
  export DATABASE_URL="$pg_base/holdfast_$1?sslmode=disable" REDIS_URL="redis://127.0.0.1:$redis_port/0" LOG_LEVEL=warn
  export JWT_SECRET="$1-$(head -c 16 /dev/urandom | od -An -tx1 | tr -d ' \n')"
  out="bin/$1/$(date -u +%Y%m%dT%H%M%SZ)"
  mkdir -p "$out"
  psql -q "$pg_base/postgres?sslmode=disable" -c "DROP DATABASE IF EXISTS holdfast_$1" 2>/dev/null
  redis-server --bind 127.0.0.1 --port "$redis_port" --save "" --appendonly no > "$out/redis.log" 2>&1 & pids+=("$!")
  for _ in $(seq 1 50); do redis-cli -u "$REDIS_URL" ping >/dev/null 2>&1 && break; sleep 0.1; done
  bin/api migrate
}
# start_holdfast: bin/api on $api_addr and bin/worker on $worker_addr, logs in
# $out, ready when it returns; their pids in $api_pid and $worker_pid.
start_holdfast() {
  HTTP_ADDR=$api_addr bin/api > "$out/api.log" 2>&1 & api_pid=$!; pids+=("$api_pid")
  WORKER_ADDR=$worker_addr bin/worker > "$out/worker.log" 2>&1 & worker_pid=$!; pids+=("$worker_pid")
  wait_ready "http://$api_addr/readyz" "$api_pid"
  wait_ready "http://$worker_addr/readyz" "$worker_pid"
}
