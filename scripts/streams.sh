#!/usr/bin/env bash
# `make streams`: hold STREAMS (2000) waiting-room position streams open on
# one API for STREAMS_HOLD (60s) and print what the API and Redis spend on
# them (bin/load idle-streams): the API's resident memory, and the CPU of
# the API and of Redis over the hold. Its own database (holdfast_streams,
# wiped first) and redis-server on a spare port (STREAMS_REDIS_PORT, 16398),
# so a running `make run` or `make test` is not disturbed.
set -euo pipefail
cd "$(dirname "$0")/.."

streams="${STREAMS:-2000}" hold="${STREAMS_HOLD:-60s}"
# Every stream is a connection: more than the default 1,024 open files.
ulimit -n $((streams * 2 + 1024)) 2>/dev/null || true
api_addr=127.0.0.1:18183 worker_addr=127.0.0.1:19193

# shellcheck source=scripts/lib.sh
. scripts/lib.sh

fresh_stores streams STREAMS 16398
PPROF_ADDR=${STREAMS_PPROF:-} start_holdfast
step "$streams position streams held open for $hold"
bin/load -url "http://$api_addr" -worker-metrics "http://$worker_addr/metrics" -users "$streams" -concurrency "$streams" \
  -hold "$hold" idle-streams | tee "$out/report.txt"
