#!/usr/bin/env bash
# Compare two revisions of holdfast in interleaved fcfs-rush runs on this
# machine: A, B, A, B, ... each on a fresh database and Redis, and print each
# run's rate and CPU per journey by process (the load tool's report). The
# machine's speed drifts within minutes, so a change is judged by pairs run
# back to back, not by runs far apart.
#
#   scripts/ab.sh REV_A REV_B [PAIRS]     # PAIRS defaults to 3
#
# A revision is anything git names, or "." for the working tree. Each one's
# api, worker and load tool are built from a worktree of it, so a change to
# the load tool is measured with the load tool it came with. Sizes:
# AB_USERS (40000), AB_SEATS (20000), AB_CONCURRENCY (200). AB_SCENARIO
# (fcfs-rush) names another of the load tool's scenarios, hold-storm or
# cart-rush say, run with the same flags. AB_ENV_A and AB_ENV_B are
# settings (NAME=value, space-separated) for that side's API and worker
# only, to measure a switch on one revision:
#
#   AB_ENV_B="GROUP_COMMIT=false" scripts/ab.sh HEAD HEAD
#
# AB_LOAD_A and AB_LOAD_B are more flags for that side's load tool:
#
#   AB_LOAD_B="-idempotency-keys" scripts/ab.sh HEAD HEAD
#
# AB_LOAD_FROM=A (or B) runs that side's load tool for both sides: a
# change to the load tool between the revisions then does not count as a
# change of holdfast's speed.
#
# Reports land in bin/ab/<time>/.
set -euo pipefail
cd "$(dirname "$0")/.."
[ $# -ge 2 ] || { echo "usage: scripts/ab.sh REV_A REV_B [PAIRS]" >&2; exit 2; }
pairs="${3:-3}" users="${AB_USERS:-40000}" seats="${AB_SEATS:-20000}" conc="${AB_CONCURRENCY:-200}"
scenario="${AB_SCENARIO:-fcfs-rush}"
root=$(pwd)
out="bin/ab/$(date -u +%Y%m%dT%H%M%SZ)"
mkdir -p "$out"
pg_base="${AB_PG:-postgres://postgres@127.0.0.1:5432}"
export DATABASE_URL="$pg_base/holdfast_ab?sslmode=disable"
redis_port="${AB_REDIS_PORT:-16398}"
export REDIS_URL="redis://127.0.0.1:$redis_port/0"
export JWT_SECRET="ab-$(head -c 16 /dev/urandom | od -An -tx1 | tr -d ' \n')"
export LOG_LEVEL=warn
api_addr=127.0.0.1:18281 worker_addr=127.0.0.1:19291

# shellcheck source=scripts/lib.sh
. scripts/lib.sh

build() { # label rev
  local src=. dir="$root/$out/$1"
  mkdir -p "$dir"
  if [ "$2" != . ]; then
    src="$out/src-$1"
    git worktree add -q --detach "$src" "$2"
  fi
  for c in api worker load; do (cd "$src" && go build -o "$dir/$c" "./cmd/$c"); done
  if [ "$src" != . ]; then git worktree remove --force "$src"; fi
  local side_env="AB_ENV_$1"
  local side_load="AB_LOAD_$1"
  echo "$1 = $2 ($(git rev-parse --short "${2/#./HEAD}")$([ "$2" = . ] && echo ', working tree'))${!side_env:+ with ${!side_env}}${!side_load:+, load tool ${!side_load}}" >> "$out/revisions.txt"
}
case "${AB_LOAD_FROM:-}" in
  "") ;;
  A | B) echo "both sides run the load tool of $AB_LOAD_FROM" >> "$out/revisions.txt" ;;
  *) echo "AB_LOAD_FROM is A or B, not $AB_LOAD_FROM" >&2; exit 2 ;;
esac
step "building A ($1) and B ($2)"
build A "$1"
build B "$2"

redis-server --bind 127.0.0.1 --port "$redis_port" --save "" --appendonly no > "$out/redis.log" 2>&1 & pid=$!; pids+=("$pid")
for _ in $(seq 1 50); do redis-cli -u "$REDIS_URL" ping >/dev/null 2>&1 && break; sleep 0.1; done

run() { # label pair
  local bin="$out/$1" api_pid worker_pid
  psql -q "$pg_base/postgres?sslmode=disable" -c 'DROP DATABASE IF EXISTS holdfast_ab' 2>/dev/null
  redis-cli -u "$REDIS_URL" flushall >/dev/null
  "$bin/api" migrate
  local side_env="AB_ENV_$1"
  # shellcheck disable=SC2086 # the settings are words on purpose
  env ${!side_env:-} HTTP_ADDR=$api_addr "$bin/api" > "$out/$1-$2-api.log" 2>&1 & api_pid=$!; pids+=("$api_pid")
  # shellcheck disable=SC2086
  env ${!side_env:-} WORKER_ADDR=$worker_addr "$bin/worker" > "$out/$1-$2-worker.log" 2>&1 & worker_pid=$!; pids+=("$worker_pid")
  wait_ready "http://$api_addr/readyz" "$api_pid"
  wait_ready "http://$worker_addr/readyz" "$worker_pid"
  settle
  local side_load="AB_LOAD_$1"
  # shellcheck disable=SC2086
  "$out/${AB_LOAD_FROM:-$1}/load" ${!side_load:-} -url "http://$api_addr" -worker-metrics "http://$worker_addr/metrics" -redis "$REDIS_URL" \
    -users "$users" -seats "$seats" -concurrency "$conc" "$scenario" > "$out/$1-$2.txt" 2> /dev/null || true
  stop "$worker_pid"; stop "$api_pid"
}
for i in $(seq 1 "$pairs"); do
  step "pair $i of $pairs"
  run A "$i"
  run B "$i"
done

step "results ($out)"
cat "$out/revisions.txt"
for i in $(seq 1 "$pairs"); do
  for l in A B; do
    echo "$l, pair $i:"
    grep -E '^  (completed|CPU per journey|… their CPU per journey|invariants)' "$out/$l-$i.txt" || echo "  (no report: see $out/$l-$i.txt)"
  done
done
