#!/usr/bin/env bash
# `make soak`: run holdfast as an operator would for SOAK_DURATION (5m) at
# SOAK_RATE (300) probe writes/s, each on a new serialization key, then
# SOAK_IDLE (2m) with no writes, and check that what it keeps is bounded by
# what is live (issue 20; bin/load soak): the API's and the worker's RSS
# hold after warm-up, Redis returns to its baseline once the keys are idle,
# and the requests rows stay under rate × REQUEST_RETENTION. A sample every
# SOAK_SAMPLE (30s). The run's retention is shortened to SOAK_RETENTION
# (60s), and the time after which an idle key's fencing state is forgotten
# to SOAK_FORGET_AFTER (KEY_FORGET_AFTER, 60s, its least with the default
# LEASE_TTL), so both pass within the idle wait. Its own database (holdfast_soak,
# wiped first) and redis-server on a spare port (SOAK_REDIS_PORT, 16397), so
# a running `make run` or `make test` is not disturbed. The report lands in
# bin/soak/<time>/report.txt; a failed check exits 1.
set -euo pipefail
cd "$(dirname "$0")/.."

duration="${SOAK_DURATION:-5m}" rate="${SOAK_RATE:-300}" sample="${SOAK_SAMPLE:-30s}" idle="${SOAK_IDLE:-2m}"
warmup="${SOAK_WARMUP:-0}" # memory must hold from this far into the writes (0: a fifth of them)
export REQUEST_RETENTION="${SOAK_RETENTION:-60s}" KEY_FORGET_AFTER="${SOAK_FORGET_AFTER:-60s}"
export HOLDFAST_PROBE=true
api_addr=127.0.0.1:18184 worker_addr=127.0.0.1:19194

# shellcheck source=scripts/lib.sh
. scripts/lib.sh

fresh_stores soak SOAK 16397
start_holdfast
step "soak: $rate probe writes/s on new keys for $duration, then $idle idle (REQUEST_RETENTION=$REQUEST_RETENTION, KEY_FORGET_AFTER=$KEY_FORGET_AFTER, a sample every $sample)"
bin/load -url "http://$api_addr" -worker-metrics "http://$worker_addr/metrics" -redis "$REDIS_URL" -database-url "$DATABASE_URL" \
  -rate "$rate" -duration "$duration" -sample-every "$sample" -idle "$idle" -warm-up "$warmup" -retention "$REQUEST_RETENTION" \
  soak | tee "$out/report.txt"
