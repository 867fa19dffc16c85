# holdfast — `make help` lists the targets.
SHELL := /bin/bash
GO    ?= go

# Builds and tests name source files by their path in the module, not on
# disk, so the Go build cache and golangci-lint's serve every checkout of the
# repository: a fresh clone compiles only what changed. Measured in a second
# clone on two cores (2026-11-27): the -race compile of every test 131 → 38 s,
# make lint 104 → 2 s.
export GOFLAGS := $(strip $(GOFLAGS) -trimpath)

.DEFAULT_GOAL := help

help: ## List the targets
	@awk 'BEGIN {FS = ":.*## "} /^[a-z-]+:.*## / {printf "  %-12s %s\n", $$1, $$2}' $(MAKEFILE_LIST)

build: ## Build bin/api and bin/worker
	@# -buildvcs=auto: stamp the commit (--version, /healthz) even where the
	@# environment's GOFLAGS turns stamping off; nothing when not in git.
	$(GO) build -buildvcs=auto -o bin/api ./cmd/api
	$(GO) build -buildvcs=auto -o bin/worker ./cmd/worker

image: ## Build the OCI images bin/holdfast-api.tar and bin/holdfast-worker.tar (docker load) in Go, without Docker; docs/images.md
	@# Static, with the time zone database inside (deploy/image.BuildFlags):
	@# the images have neither a libc nor /usr/share/zoneinfo.
	CGO_ENABLED=0 $(GO) build -trimpath -buildvcs=auto -tags timetzdata -o bin/static/api ./cmd/api
	CGO_ENABLED=0 $(GO) build -trimpath -buildvcs=auto -tags timetzdata -o bin/static/worker ./cmd/worker
	@# The builder runs here, even when GOOS or GOARCH name another platform.
	cd deploy && GOOS= GOARCH= $(GO) build -o ../bin/image-builder ./cmd/image
	bin/image-builder -bin bin/static -out bin

run: build ## Start API + worker on local Postgres/Redis, print a token and curl lines (Ctrl-C stops both)
	@scripts/run.sh

migrate: build ## Create the database if missing and apply migrations (DATABASE_URL)
	bin/api migrate

lint-api: ## Lint api/openapi.yaml with Redocly CLI and Spectral (pinned in api/lint); a warning fails too
	@# Installed from api/lint/package-lock.json when missing or older than it. No install
	@# scripts: the only one is Scarf's install analytics, which Spectral pulls in.
	@[ api/lint/node_modules/.package-lock.json -nt api/lint/package-lock.json ] || \
		npm ci --prefix api/lint --ignore-scripts --no-audit --no-fund --loglevel=error
	@# Offline while linting: no usage data (REDOCLY_TELEMETRY), no version check.
	@# Redocly's output is shown when it fails (on Node 20 it also prints a banner).
	@cd api/lint && out=$$(REDOCLY_TELEMETRY=off REDOCLY_SUPPRESS_UPDATE_NOTICE=true \
		node_modules/.bin/redocly lint --config redocly.yaml ../openapi.yaml 2>&1) || { echo "$$out"; exit 1; }
	@cd api/lint && node_modules/.bin/spectral lint --ruleset .spectral.yaml --fail-severity=warn --quiet ../openapi.yaml
	@echo "lint-api: api/openapi.yaml: no error or warning from Redocly (recommended) or Spectral (spectral:oas)"

lint: lint-tool ## Lint the Go code with golangci-lint (pinned in tools/lint/go.mod; .golangci.yml): the layering, staticcheck, errorlint, unused
	bin/golangci-lint run ./...
	cd deploy && ../bin/golangci-lint run ./...

lint-tool:
	cd tools/lint && $(GO) build -o ../../bin/golangci-lint github.com/golangci/golangci-lint/v2/cmd/golangci-lint

warm: lint-tool ## Compile golangci-lint and every package's tests under -race without running them (.ci/run does it while it installs packages)
	$(GO) test -race -count=1 -run '^$$' ./... > /dev/null
	cd deploy && $(GO) test -race -count=1 -run '^$$' ./... > /dev/null

test: lint-api lint ## Lint the OpenAPI document and the Go code, then run every test with -race against real Postgres and Redis (and the pages in headless Chromium)
	@# go vet runs inside make lint (golangci-lint's standard set).
	@# axe-core, which the browser tests run inside the pages, pinned by e2e/browser/package-lock.json.
	@[ -f e2e/browser/node_modules/axe-core/axe.min.js ] || npm ci --prefix e2e/browser --no-audit --no-fund --silent
	@# Two parts at a time. First the packages, and beside them the matrix:
	@# the protocol's property tests again with every speed-up off
	@# (internal/testenv/speedups.go), so each guarantee is shown to rest on
	@# the protocol alone; both wait on leases and stores more than they use
	@# the CPU. The matrix's e2e tests run two at a time: four, beside the
	@# packages and a make run, passed Postgres' 100 connections. Its output
	@# goes to bin/test-speedups-off.log, printed after; the deploy module's
	@# tests (make test-deploy) run beside them too. Then e2e alone: its
	@# rushes of hundreds of clients need the two cores (all at once, the
	@# stores answered them 503). Each part runs even when one before it
	@# failed. Timings: docs/testing.md.
	@mkdir -p bin; \
	HOLDFAST_TEST_SPEEDUPS=off $(GO) test -race -count=1 -timeout 10m -skip Control ./keyed > bin/test-speedups-off.log 2>&1 & offk=$$!; \
	HOLDFAST_TEST_SPEEDUPS=off $(GO) test -race -count=1 -timeout 10m -parallel 2 -run '$(SPEEDUPS_OFF_E2E)' -skip Control ./e2e > bin/test-speedups-off-e2e.log 2>&1 & offe=$$!; \
	$(MAKE) --no-print-directory test-deploy > bin/test-deploy.log 2>&1 & deploy=$$!; \
	$(GO) test -race -count=1 -timeout 10m $$($(GO) list ./... | grep -v '/e2e$$'); units=$$?; \
	wait $$deploy || units=1; cat bin/test-deploy.log; \
	wait $$offk; off=$$?; wait $$offe; off=$$((off + $$?)); cat bin/test-speedups-off-e2e.log >> bin/test-speedups-off.log; \
	echo "--- the speed-ups-off run (bin/test-speedups-off.log):"; cat bin/test-speedups-off.log; \
	first=$$SECONDS; \
	$(GO) test -race -count=1 -timeout 15m -parallel $(TEST_PARALLEL) ./e2e; e2e=$$?; \
	pf() { [ $$1 = 0 ] && echo passed || echo FAILED; }; \
	echo "make test: packages $$(pf $$units), speed-ups off $$(pf $$off) (together $$first s), e2e $$(pf $$e2e) ($$((SECONDS - first)) s)"; \
	[ $$units = 0 ] && [ $$e2e = 0 ] && [ $$off = 0 ]

check: lint ## The inner loop: lint, then every package's tests but e2e's, eight packages at once, without -race (make test is the whole suite)
	@# Most of these tests wait on Postgres, Redis and leases rather than the
	@# CPU, so eight packages at once fit two cores.
	$(GO) test -count=1 -p 8 $$($(GO) list ./... | grep -v '/e2e$$')

# How many e2e tests run at once (go test -parallel; GOMAXPROCS, 2 here, by
# default): most wait on their systems, not the CPU. The other packages keep
# the default: at 4 (keyed 19 s instead of 34) the suite took as long and
# its rigs, which take no system slot, passed Postgres' 100 connections.
TEST_PARALLEL ?= 4

# The e2e tests of the speed-ups-off run: K2–K6, multi-key order, durability
# and each vertical's race for its last unit, without the controls, which run
# no speed-up. (K1, one task per request, is keyed's, whose tests run all but
# the controls.)
SPEEDUPS_OFF_E2E := ^Test(K[2-6]|MultiKey|DurableAcrossRedisFlushall|IdempotencyKey|RequestLifecycle|LongPollWakesOnOutcome|UndispatchedRequestIsNotOvertaken|LostDispatchOnBusyKey|FCFS100UsersFor50Seats|SeatReservationUniqueness|BookingRaceForOneSeat|WaitingRoomAdmitsInOrderWithinCap|ShopRace300For100|ShopOppositeOrderCarts|HoldRaceForLastRooms)

cluster: ## Run holdfast on a private 3-master Redis Cluster and via a Sentinel (also part of make test)
	$(GO) test -race -count=1 -run '^TestRedis(Cluster|Sentinel)$$' -v ./e2e/

jepsen: ## Run the fault histories (kill -9 of workers and APIs, Redis flushed, killed and frozen, Postgres restarted and frozen, a worker paused past its lease), each checked for linearizability, and their control; one line per history (~3 min; make test skips them)
	@# HOLDFAST_JEPSEN=1 turns them on; one history at a time. The whole
	@# output, with the checker's account of any failure, is bin/jepsen.log.
	@mkdir -p bin; \
	HOLDFAST_JEPSEN=1 $(GO) test -race -count=1 -timeout 60m -run '^TestJepsen' -v ./e2e > bin/jepsen.log 2>&1; rc=$$?; \
	sed -n 's/^ *jepsen_test\.go:[0-9]*: jepsen: /jepsen: /p' bin/jepsen.log; \
	grep -E '^ *--- (FAIL|PASS)|^(ok|FAIL)\s|^vet: |^[^ ]+\.go:[0-9]+:[0-9]+: ' bin/jepsen.log; \
	[ $$rc = 0 ] || { echo "--- the failures (bin/jepsen.log without the processes' own logs):"; \
		awk '/^ *--- (FAIL|SKIP)/ {print; next} /^ *--- PASS/ || /^=== / {next} \
			/^ +[A-Za-z0-9_]+\.go:[0-9]+: / {keep = !/^ +systest\.go:/ && !/\.go:[0-9]+: jepsen: /} \
			/^ / {if (keep) print; next} {print}' bin/jepsen.log; }; \
	echo "make jepsen: whole output in bin/jepsen.log"; exit $$rc

chaos: ## Kill -9 and SIGSTOP each store and process (2 APIs, 3 workers) under an FCFS rush; one line per scenario: answers by status, the slowest, invariants (~2 min; make test skips them)
	@# HOLDFAST_CHAOS=1 turns them on; one scenario at a time. The whole
	@# output, processes' logs included, is bin/chaos.log.
	@mkdir -p bin; \
	HOLDFAST_CHAOS=1 $(GO) test -race -count=1 -timeout 30m -run '^TestChaos$$' -v ./e2e > bin/chaos.log 2>&1; rc=$$?; \
	sed -n 's/^ *chaos_test\.go:[0-9]*: chaos: /chaos: /p' bin/chaos.log; \
	grep -E '^ *--- (FAIL|PASS)|^(ok|FAIL)\s|^vet: |^[^ ]+\.go:[0-9]+:[0-9]+: |Error Trace|Error:|Messages:' bin/chaos.log; \
	echo "make chaos: whole output in bin/chaos.log"; exit $$rc

load-check: ## Run the load tool's scenarios, small, against a real API and worker, and a 3 s soak, checking every report (make test skips them)
	@# HOLDFAST_LOAD=1 turns them on (e2e/loadtest_test.go); the load tool's
	@# checks themselves are tested in make test (go test ./loadtest).
	HOLDFAST_LOAD=1 $(GO) test -race -count=1 -timeout 10m -run '^TestLoad(Scenarios|Soak)$$' ./e2e

bench: build ## Measure holdfast against raw Asynq and the synchronous FCFS, drop, cart, hold and group designs (drop, cart, hold at local and at 1 ms commits); print the table (at most ~6 min here; BENCH_ONLY=drop|cart|hold|keys|group for one part)
	$(GO) build -o bin/load ./cmd/load
	$(GO) build -o bin/baseline ./cmd/baseline
	@scripts/bench.sh

redis-away: build ## Measure the API's intake with Redis frozen against it with Redis up (fcfs-rush -intake, AWAY_USERS 20000); print both and the ratio (~2 min)
	$(GO) build -o bin/load ./cmd/load
	@scripts/redis-away.sh

streams: build ## Hold STREAMS (2000) position streams open on one API; print its memory and the CPU of it and Redis (~2 min)
	$(GO) build -o bin/load ./cmd/load
	@scripts/streams.sh

soak: build ## Write SOAK_RATE (300)/s, a new key each, for SOAK_DURATION (5m), idle 2m; check memory, Redis and requests stay bounded (~8 min)
	$(GO) build -o bin/load ./cmd/load
	@scripts/soak.sh

benchgo: ## Go benchmarks of the hot paths: intake, keyed batch apply, availability query
	$(GO) test -run '^$$' -bench 'Intake|BatchApply' -benchtime 5000x ./keyed
	$(GO) test -run '^$$' -bench Availability31Nights -benchtime 300x ./stays

fuzz: ## Fuzz the request decoding path, the Prefer header and every documented operation for FUZZTIME (default 30s) per target
	$(GO) test -run '^$$' -fuzz FuzzDecode -fuzztime $${FUZZTIME:-30s} ./probe
	$(GO) test -run '^$$' -fuzz FuzzPreferredWait -fuzztime $${FUZZTIME:-30s} ./api
	$(GO) test -run '^$$' -fuzz FuzzWriteOverHTTP -fuzztime $${FUZZTIME:-30s} ./e2e
	$(GO) test -run '^$$' -fuzz FuzzEveryOperationOverHTTP -fuzztime $${FUZZTIME:-30s} ./e2e

manifests: ## Write deploy/kubernetes/base/generated/ (PrometheusRule, Grafana dashboard ConfigMap) from dashboards/
	cd deploy && $(GO) run ./cmd/manifests

test-deploy: ## The deploy module's tests: the images built and read back (deploy/image), every kustomization built and checked (deploy/manifests)
	@# deploy/image builds the binaries four ways (static, with cgo, without
	@# a commit, without time-zone data): on a machine whose Go cache has
	@# none of them, beside make test's packages, it took 600 s,
	@# go test's default limit; warm, about 190 s.
	cd deploy && $(GO) test -race -count=1 -timeout 20m ./...

clean: ## Remove build output
	rm -rf bin

.PHONY: help build image run migrate lint-api lint lint-tool warm test check cluster jepsen chaos load-check bench streams redis-away soak benchgo fuzz manifests test-deploy clean
