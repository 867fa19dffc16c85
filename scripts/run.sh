#!/usr/bin/env bash
# `make run`: start holdfast locally (API + worker) against local Postgres and
# Redis, print how to use it, and stop both cleanly on Ctrl-C.
set -euo pipefail
cd "$(dirname "$0")/.."

export DATABASE_URL="${DATABASE_URL:-postgres://postgres@127.0.0.1:5432/holdfast?sslmode=disable}"
export REDIS_URL="${REDIS_URL:-redis://127.0.0.1:6379/0}"
export HTTP_ADDR="${HTTP_ADDR:-127.0.0.1:8080}"
export WORKER_ADDR="${WORKER_ADDR:-127.0.0.1:8081}"
# JWT_SECRET has no default (a deployment without one refuses to start):
# development gets a random one, made once per checkout and kept in bin/.
secret_file="${BIN:-bin}/.dev-jwt-secret"
if [ -z "${JWT_SECRET:-}" ]; then
  mkdir -p "$(dirname "$secret_file")"
  [ -s "$secret_file" ] || { umask 077; head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n' >"$secret_file"; }
  JWT_SECRET="$(cat "$secret_file")"
fi
export JWT_SECRET
# The probe write type shows the request lifecycle end to end (see README).
export HOLDFAST_PROBE="${HOLDFAST_PROBE:-true}"
# No load balancer to drain from here: Ctrl-C stops the API at once.
export SHUTDOWN_DRAIN_DELAY="${SHUTDOWN_DRAIN_DELAY:-0s}"
api="http://${HTTP_ADDR}"
bin="${BIN:-bin}"   # where `make build` put the binaries

pg_isready -q -d "$DATABASE_URL" 2>/dev/null || pg_isready -q -h 127.0.0.1 || {
  echo "Postgres is not answering on 127.0.0.1:5432; start it first (see README)." >&2; exit 1; }
redis-cli -u "$REDIS_URL" ping >/dev/null 2>&1 || {
  echo "Redis is not answering at $REDIS_URL; start it first (see README)." >&2; exit 1; }

"$bin/api" migrate   # creates the database if missing, applies migrations
eval "$("$bin/api" seed)"   # demo hotel and shop (idempotent): DEMO_HOTEL_ID, DEMO_ROOM_TYPE_ID, DEMO_SHOP_USER_ID, DEMO_OPTION_ID

logs="${LOG_DIR:-bin/logs}"
mkdir -p "$logs"
"$bin/api" >"$logs/api.log" 2>&1 & api_pid=$!
"$bin/worker" >"$logs/worker.log" 2>&1 & worker_pid=$!
stop() {
  trap - INT TERM EXIT
  echo; echo "stopping holdfast…"
  kill -TERM "$api_pid" "$worker_pid" 2>/dev/null || true
  wait "$api_pid" "$worker_pid" 2>/dev/null || true
  echo "stopped."
}
trap stop INT TERM EXIT

for url in "$api/readyz" "http://${WORKER_ADDR}/readyz"; do
  for _ in $(seq 1 100); do
    curl -sf "$url" >/dev/null && break
    kill -0 "$api_pid" 2>/dev/null && kill -0 "$worker_pid" 2>/dev/null || {
      echo "holdfast failed to start; see $logs/" >&2; tail -5 "$logs"/*.log >&2; exit 1; }
    sleep 0.1
  done
done

user_token=$("$bin/api" token -sub demo-user -role user)
admin_token=$("$bin/api" token -sub demo-admin -role admin)
staff_token=$("$bin/api" token -sub demo-staff -role staff)
shopper_token=$("$bin/api" token -sub "$DEMO_SHOP_USER_ID" -role user)
guest1_token=$("$bin/api" token -sub demo-guest-1 -role user)
guest2_token=$("$bin/api" token -sub demo-guest-2 -role user)
check_in=$(date -u -d '+7 days' +%F); check_out=$(date -u -d '+9 days' +%F)
hold_body="{\"roomTypeId\":$DEMO_ROOM_TYPE_ID,\"checkIn\":\"$check_in\",\"checkOut\":\"$check_out\",\"clientHoldKey\":\"6f1c1f9e-3c7a-4d2b-9a51-2f0a6f2b8c11\"}"

cat <<MSG

holdfast is running: API $api (logs $logs/api.log), worker http://${WORKER_ADDR} ($logs/worker.log).

  export TOKEN=$user_token
  export STAFF_TOKEN=$staff_token
  export SHOPPER_TOKEN=$shopper_token

Demo hotel $DEMO_HOTEL_ID, room type $DEMO_ROOM_TYPE_ID. Availability (staff), and the public copy:

  curl -s "$api/api/v1/hotels/$DEMO_HOTEL_ID/availability?from=$check_in&to=$check_out" -H "Authorization: Bearer \$STAFF_TOKEN"
  curl -s "$api/api/v1/public/hotels/$DEMO_HOTEL_ID/availability?from=$check_in&to=$check_out"

Hold a room (answers 202 with a requestId), then long-poll that request's outcome — the holdId to confirm:

  rid=\$(curl -s -X POST $api/api/v1/holds -H "Authorization: Bearer \$TOKEN" -H 'Content-Type: application/json' -d '$hold_body' | sed -n 's/.*"requestId":"\\([^"]*\\)".*/\\1/p'); echo "requestId \$rid"
  curl -s "$api/api/v1/requests/\$rid?wait=10s" -H "Authorization: Bearer \$TOKEN"

Then: curl -s -X POST $api/api/v1/holds/<holdId>/confirm -H "Authorization: Bearer \$TOKEN"   (or DELETE …/holds/<holdId>)

Shop (seed 002): put an item in the demo shopper's cart, reserve the cart for 30 minutes, read the stock:

  curl -s -X PUT $api/api/v1/cart/items/$DEMO_OPTION_ID -H "Authorization: Bearer \$SHOPPER_TOKEN" -H 'Content-Type: application/json' -d '{"quantity":2}'
  curl -s -X POST $api/api/v1/orders/reserve -H "Authorization: Bearer \$SHOPPER_TOKEN" -H 'Content-Type: application/json' -d '{"userId":$DEMO_SHOP_USER_ID}'
  curl -s $api/api/v1/product-options/$DEMO_OPTION_ID/stock -H "Authorization: Bearer \$SHOPPER_TOKEN"

Then POST $api/api/v1/orders (confirm, same body) or DELETE $api/api/v1/orders/reserve (release); poll each requestId as above.

The waiting-room page as two people see it (open each in a tab of its own; the sign-in is in the
fragment, which never reaches a server). One person chooses a seat at a time: the second waits
until the first has booked.

  $api/events/$DEMO_EVENT_ID/waiting-room#token=$guest1_token
  $api/events/$DEMO_EVENT_ID/waiting-room#token=$guest2_token

Events (seeds 003, 004): the public seat count, a first-come-first-served seat, the waiting room:

  curl -s $api/api/v1/public/events/$DEMO_EVENT_ID
  curl -s -X POST $api/api/v1/events/$DEMO_EVENT_ID/seats/fcfs -H "Authorization: Bearer \$TOKEN" -H 'Content-Type: application/json' -d '{"phone":"+821012345678"}'
  curl -s -X POST $api/api/v1/events/$DEMO_EVENT_ID/queue -H "Authorization: Bearer \$STAFF_TOKEN"
  curl -s $api/api/v1/events/$DEMO_EVENT_ID/queue/status -H "Authorization: Bearer \$STAFF_TOKEN"

Then POST …/queue/token for an entry token, and POST …/seats/<seatId>/reservation with header X-Entry-Token; live counts: curl -N …/public/events/$DEMO_EVENT_ID/stream

Retry any write safely with an Idempotency-Key (same key + same body = same requestId):

  curl -s -X POST $api/api/v1/probe -H "Authorization: Bearer \$TOKEN" -H 'Content-Type: application/json' -H 'Idempotency-Key: make-run-demo' -d '{"keys":["demo"]}'

Health, readiness and metrics:

  curl -s $api/healthz; curl -s $api/readyz; curl -s $api/metrics | grep ^holdfast_
  curl -s http://${WORKER_ADDR}/metrics | grep ^holdfast_keyed

Asynqmon (any user name, the admin token as password):

  $api/monitoring/
  admin token: $admin_token

More tokens: JWT_SECRET=\$(cat $secret_file) bin/api token -sub 42 -role user|staff|admin
Press Ctrl-C to stop.
MSG
wait "$api_pid" "$worker_pid"
