#!/usr/bin/env bash
# `make redis-away`: the API's intake while Redis does not answer, against
# its intake with Redis up, in one run on this machine. Both runs are
# fcfs-rush -intake (every client submits first, outcomes followed after)
# with the workers idle while the clients submit: first with the queues
# paused (-hold-apply), then with holdfast's Redis frozen (SIGSTOP,
# -redis-away) from before the first write until the last answer. Prints
# each run's 202s a second and submit latency, and the ratio.
#
# Sizes: AWAY_USERS (20000), AWAY_CONCURRENCY (200). Everything uses its own
# database (holdfast_away) and redis-server (AWAY_REDIS_PORT, 16398), so a
# running `make run` or `make test` is not disturbed.
set -euo pipefail
cd "$(dirname "$0")/.."
users="${AWAY_USERS:-20000}" conc="${AWAY_CONCURRENCY:-200}"
api_addr=127.0.0.1:18183 worker_addr=127.0.0.1:19193
# shellcheck source=scripts/lib.sh
. scripts/lib.sh

fresh_stores away AWAY 16398
redis_pid=${pids[-1]}
LOG_LEVEL=error start_holdfast
field() { grep -o "\"$1\": *[0-9.]*" "$2" | head -1 | sed 's/.*: *//'; } # NAME FILE: its first value
run() { # NAME LOAD_ARGS...
  local name=$1; shift
  settle
  bin/load -url "http://$api_addr" -worker-metrics '' -concurrency "$conc" -users "$users" -seats "$users" \
    -json -intake "$@" fcfs-rush > "$out/$name.json" || true
  printf '%-14s %8s 202s/s   submit p50 %6s ms  p95 %6s ms  p99 %7s ms  max %8s ms   ok %s\n' "$name" \
    "$(field acceptedPerSec "$out/$name.json")" "$(field p50Ms "$out/$name.json")" "$(field p95Ms "$out/$name.json")" \
    "$(field p99Ms "$out/$name.json")" "$(field maxMs "$out/$name.json")" "$(grep -o '"ok": *[a-z]*' "$out/$name.json" | sed 's/.*: *//')"
}
step "intake, Redis up (workers held back until the last 202)"
run "redis up" -redis "$REDIS_URL" -hold-apply | tee "$out/table.txt"
step "intake, Redis frozen until the last 202"
run "redis frozen" -redis-away "$redis_pid" | tee -a "$out/table.txt"
up=$(field acceptedPerSec "$out/redis up.json") away=$(field acceptedPerSec "$out/redis frozen.json")
awk -v u="$up" -v a="$away" 'BEGIN { if (u > 0) printf "Redis frozen / Redis up: %.2f of the intake rate\n", a / u }' | tee -a "$out/table.txt"
echo "results: $out" >&2
