# skiplock: make bench runs the main job, make test runs the tests.
# make bench-compare measures skiplock beside River, pg-boss and the SQL limit (docs/benchmarks.md).
GO ?= go
BIN := bin/skiplock
# pipefail: a recipe that filters a test's output still fails with the test.
SHELL := /bin/bash
.SHELLFLAGS := -o pipefail -c

.PHONY: all setup build test bench lint clean

all: build

setup:
	@bash scripts/setup.sh

build:
	$(GO) build -o $(BIN) ./cmd/skiplock

# internal/crdbcheck is its own module (CockroachDB's parser stays out of
# go.mod): it parses every statement skiplock sends with CockroachDB's grammar.
# The CockroachDB grammar check (its own module: a large parser to build)
# runs beside the main suite, whose tests spend much of their time waiting
# on the database; both must pass.
test: setup
	@log=$$(mktemp); $(GO) -C internal/crdbcheck test -count=1 ./... > $$log 2>&1 & crdb=$$!; \
	$(GO) test -race -count=1 -timeout 25m ./...; main=$$?; \
	wait $$crdb; check=$$?; echo "internal/crdbcheck:"; cat $$log; rm -f $$log; \
	[ $$main -eq 0 ] && [ $$check -eq 0 ]

# The test suite, the reliability suite, the claims' EXPLAIN shapes and short
# bench latency and bench tombstones runs against distributed engines: the
# server in SKIPLOCK_TEST_DSN when set, CockroachDB and YugabyteDB in
# containers when a Docker daemon answers (without one, a three-node
# CockroachDB from cockroach-go's testserver where a cockroach binary can be
# had). Reports what ran and what was skipped and why; skips are not
# failures. Its own module keeps testcontainers and cockroach-go out of go.mod.
.PHONY: test-engines
test-engines: setup
	$(GO) -C internal/enginematrix run . -root ../..

# The engine-sensitive tests under each engine personality
# (SKIPLOCK_TEST_EMULATE; docs/engines.md): both layouts' delivery tests,
# the client's, the maintenance leader and rescuer, periodic jobs, the
# chaos suite's kill and poison runs, at the goal's scale (20,000 jobs), and
# the global concurrency limit across Workers and through a worker kill,
# and the rate limit across Workers (measured at the claims: the processes'
# rate test measures at the handlers, which a personality's retries on a
# loaded machine delay past its tolerance; make test runs it).
# The cockroach personality injects retry errors and ambiguous commits, in
# the tests' own transactions (SKIPLOCK_TEST_INJECT's default) and in the
# CLI processes the chaos suite starts (SKIPLOCK_EMULATE_OPTS). Tests of what
# only PostgreSQL's own rules offer (held claims, COPY, plan shapes) and
# tests that call the layouts' claims directly and treat an ambiguous
# commit as a failure are not in the list.
PERSONALITIES := cockroach yugabyte yugabyte-snapshot
EMULATED_TESTS := TestEveryJobCompletesUnderThePersonality|TestSlotHandedOverBeforeTheResultIsWritten|TestBatchCallsBackOnceWithCounts|TestHandlerRecordsOutputAndProgress|TestUniqueInsertsRaceToOneJob|TestUniqueStatesHoldTheKey|TestFanoutGlobalLimitAcrossWorkers|TestFanoutLoweredLimitStartsNothingUntilUnder|TestFanoutClaimPassesOverSlotsHeldElsewhere|TestWorkerRetries|TestWorkerGracefulStop|TestJobThatKillsItsWorkerEndsFailed|TestEveryJobOnceUnderThePersonality|TestKindsAndQueuesExactlyOnce|TestKilledWithPrefetchedJobsLosesNone|TestOnCompleteRecordsExactlyOnce|TestPeriodicOncePerTick|TestPeriodicSurvivesLeaderKills|TestOneLeaderActsAtATime|TestLeaderKilledHandsOver|TestRescuer|TestPruner|TestWorkerCrashes|TestPoisonJobsKillTheirWorkers|TestSubscribeHearsEveryOutcome|TestOperations|TestGlobalConcurrencyLimitAcrossWorkers|TestGlobalLimitHoldsThroughKills|TestRateLimitAcrossWorkers|TestRatePerPartition|TestPartitionLimitsAcrossWorkers|TestFairPartitionsStartSmallBesideLarge|TestPartitionLimitsHoldThroughKills|TestPartitionKeyLimits|TestSequencesRunInOrder|TestWorkflowRunsInDependencyOrder|TestRetryMeetsCompletionInFlight|TestRetryInWorkflowWaitsOnlyForWhatCanFinish|TestWorkflowRunAnywayAndOutputs|TestWorkflowThroughKills|TestHandlerStopsBeforeAnUnextendedLeaseLapses|TestHandlerStopsWhenItsTransactionIsLost|TestWorkflowReleaseWakesIdleWorkers|TestFanoutGlobalLimitHoldsThroughKills|TestPermitsStartJobsWithoutSlotWrites|TestPermitsOutliveLongJobs|TestLoweredLimitHoldsWorkersPermits
.PHONY: test-emulate
test-emulate: setup
	@for p in $(PERSONALITIES); do \
	  opts=""; [ $$p = cockroach ] && opts="inject=0.005/0.001"; \
	  echo "== personality $$p"; \
	  SKIPLOCK_TEST_EMULATE=$$p SKIPLOCK_EMULATE=$$p SKIPLOCK_EMULATE_OPTS=$$opts SKIPLOCK_TEST_SCALE=full \
	    $(GO) test -count=1 -timeout 15m -run '^($(EMULATED_TESTS))$$' ./bucketed ./fanout ./client ./maintenance ./internal/chaos || exit 1; \
	done

# Faults a deployment lives through, in a target of its own so that make
# test gets no slower: PgBouncer (from the OS packages, started by the
# tests) in transaction and session mode (pooler detection, six concurrent
# migrates, session settings that stay in their transactions, both
# layouts' work with every job recorded once, the client's fallback to
# polling), work --until-empty and the limits through a database restart, and a failover
# (a primary with a synchronous replica, the primary SIGKILLed and the
# replica promoted under workers on a multi-host DSN).
.PHONY: test-faults
test-faults: setup
	SKIPLOCK_FAULTS=1 $(GO) test -count=1 -timeout 10m -run '^(TestPooler.*|TestMigrateThroughTransactionPooler|TestSettingsStayInTheirTransactions|TestWorkThroughPoolers|TestClientThroughTransactionPooler|TestUntilEmptyRidesARestart|TestPartitionLimitsHoldThroughRestart|TestGlobalLimitHoldsThroughRestart|TestFailover)$$' ./internal/chaos

# The latency test of the article "Scalable Job Queue in SQL" (500 workers, 1 s jobs), scaled down to
# 30 s, in lease mode on the embedded PostgreSQL (started if need be).
# BENCH_FLAGS adds flags, e.g. make bench BENCH_FLAGS="--mode tx --baseline".
BENCH_FLAGS ?=
bench: setup build
	$(BIN) bench latency --workers 500 --work 1s --duration 30s $(BENCH_FLAGS)

# skiplock's burn-down beside River's and pg-boss's (pinned in
# bench/compare/river/go.mod and bench/compare/pgboss/package.json, each run
# by a small harness of its own) and the SQL limit's (pgbench), in
# alternating rounds on the embedded PostgreSQL, directly and through a delay
# proxy at each of RTTS: writes the bench-compare section of
# docs/benchmarks.md (bench/compare/cmd). ROUNDS, JOBS and RTTS override the
# defaults (5 rounds of 100,000 jobs: about 15 minutes on 2 cores); COMPARE_FLAGS adds the driver's
# flags (go run ./bench/compare/cmd -h). A peer that cannot run here (npm
# registry or Go module proxy unreachable) is skipped and the section says why.
ROUNDS ?= 5
JOBS ?= 100000
RTTS ?= 0,1ms,5ms,20ms
COMPARE_FLAGS ?=
.PHONY: bench-compare
bench-compare: setup
	@start=$$(date +%s); \
	if command -v npm >/dev/null 2>&1; then \
	  (cd bench/compare/pgboss && npm ci --no-audit --no-fund) || echo "bench-compare: npm ci failed: pg-boss will be skipped"; \
	else echo "bench-compare: no npm on PATH: pg-boss will be skipped"; fi; \
	$(GO) run ./bench/compare/cmd -rounds $(ROUNDS) -jobs $(JOBS) -rtts $(RTTS) -since $$start $(COMPARE_FLAGS)

# The reliability suite at full scale (20,000 jobs, 10 worker kills, two
# database restarts, connection cuts, jobs that SIGKILL their worker on
# every attempt, a worker SIGSTOPped past its lease) and fanout's exactly-once runs at
# 50,000 jobs, then bounded fuzzing of the CLI's
# input parsing, of identifier quoting and of DSN redaction. Prints its
# figures.
.PHONY: test-chaos
test-chaos: setup
	SKIPLOCK_CHAOS=full $(GO) test -count=1 -timeout 30m -v ./internal/chaos 2>&1 | grep -E '^(chaos:|--- |ok|FAIL|PASS|panic)'
	SKIPLOCK_CHAOS=full SKIPLOCK_FAULTS=1 $(GO) test -count=1 -timeout 30m -run '^(TestWorkThroughPoolers|TestFailover)$$' -v ./internal/chaos 2>&1 | grep -E '^(chaos:|--- |ok|FAIL|PASS|panic)'
	SKIPLOCK_CHAOS=full $(GO) test -count=1 -timeout 30m -run 'TestExactlyOnce' -v ./fanout 2>&1 | grep -E '^(\s+fanout_test|--- |ok|FAIL|PASS|panic)'
	$(GO) test -run '^$$' -fuzz FuzzSchemaPrint -fuzztime 30s ./cmd/skiplock
	$(GO) test -run '^$$' -fuzz FuzzParseRunAt -fuzztime 15s ./cmd/skiplock
	$(GO) test -run '^$$' -fuzz FuzzQuote -fuzztime 15s ./internal/sqlident
	$(GO) test -run '^$$' -fuzz FuzzRedactDSN -fuzztime 30s .

# Every module of the repository: the library and its tool modules.
# bench/compare/river is left out: linting it would download River, which
# make test and CI do not need (make bench-compare builds it).
MODULES := . internal/enginematrix internal/crdbcheck

lint:
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt wants to change:"; echo "$$out"; exit 1; fi
	@bash scripts/check-binaries.sh
	@for m in $(MODULES); do \
	  d=$$($(GO) -C $$m mod tidy -diff 2>&1) || { echo "go mod tidy would change $$m/go.mod or go.sum (run go mod tidy there):"; echo "$$d"; exit 1; }; \
	done
	@for m in $(MODULES); do $(GO) -C $$m vet ./... || exit 1; done
	$(GO) run honnef.co/go/tools/cmd/staticcheck@v0.8.2 ./...

clean:
	rm -rf bin
