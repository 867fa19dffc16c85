# Shared by scripts/bench.sh and scripts/ab.sh: start processes, wait for
# them, stop them all on exit. Set $out (where logs go) before sourcing.
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
# Each measured run starts right after a checkpoint, so none of them pays for
# the full-page writes left over from the run before it.
settle() { psql -q "$DATABASE_URL" -c 'CHECKPOINT' >/dev/null; }
