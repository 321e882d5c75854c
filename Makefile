# Cairn's build. `make demo` runs the main job, `make test` passes the tests.
GO        ?= go
GOBIN     ?= $(shell $(GO) env GOPATH)/bin
BIN       := bin/cairn
VERSITYGW_VERSION   := v1.8.0
STATICCHECK_VERSION := v0.8.2
GOTESTSUM_VERSION   := v1.13.0
# AWS's Lambda Runtime Interface Emulator: a pseudo-version, as the module has no
# tag the Go module proxy serves. internal/testenv/lambda.go names it too.
RIE_VERSION         := v0.0.0-20261030222936-bef5c4ba774d
# What each fuzz target runs for (a count: Go 1.26's -fuzztime=Ns can overrun).
FUZZTIME  ?= 1000x
# Seconds `make test` gives fuzzing: its instrumented builds (one per package) and
# runs, as many as fit, starting from another package each day; `make fuzz` runs
# every target.
TEST_FUZZ_BUDGET ?= 240

export PATH := $(GOBIN):$(PATH)

.PHONY: sdk-vendor all build test test-go test-go-parallel test-go-quiet test-pgbouncer test-helm test-image test-ts fuzz fuzz-budget migration dev demo bench lint tools lambda-emulator generate openapi client ts-schema lambda-zip clean

all: build

build:
	$(GO) build -o $(BIN) ./cmd/cairn

## tools: install what tests and the demo need (the versitygw S3 server, AWS's Lambda runtime interface emulator, gotestsum, bubblewrap and pasta, PgBouncer, Chromium for the UI's browser tests, python3 and node for the function SDKs, podman with runc and mmdebstrap for the image's test) if missing.
tools: lambda-emulator
	@scripts/install-sandbox.sh
	@scripts/install-sdk-runtimes.sh
	@scripts/install-pgbouncer.sh
	@scripts/install-podman.sh
	@scripts/install-chromium.sh
	@command -v versitygw >/dev/null 2>&1 || { echo "installing versitygw $(VERSITYGW_VERSION)"; $(GO) install github.com/versity/versitygw/cmd/versitygw@$(VERSITYGW_VERSION); }
	@command -v gotestsum >/dev/null 2>&1 || { echo "installing gotestsum $(GOTESTSUM_VERSION)"; $(GO) install gotest.tools/gotestsum@$(GOTESTSUM_VERSION); }

## lambda-emulator: install AWS's Lambda Runtime Interface Emulator (aws-lambda-rie, RIE_VERSION) if missing.
lambda-emulator:
	@command -v aws-lambda-rie >/dev/null 2>&1 || { echo "installing aws-lambda-rie $(RIE_VERSION)"; $(GO) install github.com/aws/aws-lambda-runtime-interface-emulator/cmd/aws-lambda-rie@$(RIE_VERSION); }

## test: everything, with the race detector, against real PostgreSQL and S3 servers; fuzzing within TEST_FUZZ_BUDGET seconds; then the wall time of each stage.
test:
	@MAKE="$(MAKE)" scripts/test.sh

# One line per test (the blob store conformance suite against each backend, the
# catalog against PostgreSQL, the web UI in Chromium, …), then gotestsum's summary.
# Files tests keep (t.ArtifactDir: the UI's screenshots) go under TEST_OUTPUT.
TEST_OUTPUT ?= $(CURDIR)/test-output
# The rate limit's end-to-end test runs last and alone: its bounds (9 to 11 starts
# in every second) are about how promptly a dispatcher claims at each token, which
# the other packages' load on a 2-core machine disturbs.
QUIET_TESTS = ^TestRateLimitStarts$$
test-go: test-go-parallel test-go-quiet

# A package's tests may take this long (go test's default, 10m, is the whole of
# internal/e2e's or cmd/cairn's run on a loaded 2-core machine: at a load average
# of 20 both took longer and every test still running failed with the package).
GO_TEST_TIMEOUT ?= 30m

# Every package but the image's test, which has a stage of its own (test-image).
GO_TEST_PACKAGES = $(shell $(GO) list ./... | grep -v '/internal/imagetest$$')
test-go-parallel:
	@mkdir -p $(TEST_OUTPUT)
	gotestsum --format testname -- -race -count=1 -timeout $(GO_TEST_TIMEOUT) -artifacts -outputdir=$(TEST_OUTPUT) -skip '$(QUIET_TESTS)' $(GO_TEST_PACKAGES)

test-go-quiet:
	gotestsum --format testname -- -count=1 -timeout $(GO_TEST_TIMEOUT) -run '$(QUIET_TESTS)' ./internal/e2e/

# The end-to-end suite's core (runs, retries, waits, maps, limits, a short
# chaos) with a PgBouncer in transaction mode between the servers and PostgreSQL
# (internal/e2e's CAIRN_E2E_PGBOUNCER).
PGBOUNCER_TESTS = ^(TestRetryAndRerun|TestSleepSurvivesKill|TestMapSurvivesKill|TestConcurrencyChaos|TestChaos)$$
## test-pgbouncer: the end-to-end suite's core through a PgBouncer in transaction mode.
test-pgbouncer:
	CAIRN_E2E_PGBOUNCER=1 CAIRN_CHAOS_SECONDS=15 CAIRN_CHAOS_RUNS=12 gotestsum --format testname -- -count=1 -timeout $(GO_TEST_TIMEOUT) -run '$(PGBOUNCER_TESTS)' ./internal/e2e/

## test-helm: `helm lint --strict` and `helm template` of deploy/helm/cairn with Helm v4's own packages (pinned in deploy/helm/test/go.mod), for its default values and each example, every object decoded strictly into its Kubernetes type.
test-helm:
	cd deploy/helm/test && $(GO) test -count=1 ./...

## test-image: build the Dockerfile with podman (base images stood in by scripts/image-bases.sh) and run the image for real: non-root, /readyz, exec steps in the sandbox, SIGTERM (internal/imagetest).
test-image:
	gotestsum --format testname -- -count=1 -timeout 30m ./internal/imagetest/

## test-ts: the TypeScript client (clients/ts) against a fresh `cairn dev`.
test-ts: build
	scripts/ts-client-test.sh

## fuzz: every fuzz target for FUZZTIME (default 1000x), one instrumented build per package.
fuzz:
	FUZZTIME=$(FUZZTIME) scripts/fuzz.sh

# fuzz-budget: the fuzz stage of `make test`, within TEST_FUZZ_BUDGET seconds.
fuzz-budget:
	FUZZTIME=$(FUZZTIME) FUZZ_BUDGET=$(TEST_FUZZ_BUDGET) scripts/fuzz.sh

## migration: NAME=name writes the next migration from the change of catalog/sql since git HEAD (go run ./migrations/gen).
migration:
	@test -n "$(NAME)" || { echo "usage: make migration NAME=name"; exit 2; }
	$(GO) run ./migrations/gen $(NAME)

## dev: run `cairn dev` in ./.cairn.
dev: build
	./$(BIN) dev

## demo: build, start cairn dev (and the Lambda emulator) in a temporary folder, deploy and run the examples.
demo: lambda-emulator build
	@scripts/demo.sh

## bench: Cairn's numbers beside River's and the machine's floor (BENCH_QUICK=1: a 2-minute smoke run).
bench: tools
	scripts/bench.sh

## lint: go vet, staticcheck, and go.mod/go.sum as `go mod tidy` leaves them.
lint:
	$(GO) mod tidy -diff
	$(GO) vet ./...
	$(GO) run honnef.co/go/tools/cmd/staticcheck@$(STATICCHECK_VERSION) ./...

## generate: every generated file, in order: the OpenAPI document from the code, then the Go and TypeScript clients from it.
generate: openapi client ts-schema

## openapi: regenerate api/openapi.yaml from the code.
openapi:
	$(GO) run ./cmd/cairn openapi > api/openapi.yaml

## client: regenerate the Go client (client/openapi-3.0.yaml, client/client.gen.go) from the API.
client:
	$(GO) generate ./client

## ts-schema: regenerate the TypeScript client's types (clients/ts/src/schema.d.ts) from api/openapi.yaml.
ts-schema:
	cd clients/ts && { [ -d node_modules ] || npm ci --no-audit --no-fund; } && npm run generate

## lambda-zip: the lambda-hello example function for provided.al2023 (linux/amd64), zipped into bin/lambda-hello.zip.
lambda-zip:
	@mkdir -p bin/lambda-hello
	CGO_ENABLED=0 GOOS=linux GOARCH=amd64 $(GO) build -tags lambda.norpc -trimpath -ldflags='-s -w' -o bin/lambda-hello/bootstrap ./examples/lambda-hello/function
	rm -f bin/lambda-hello.zip
	cd bin/lambda-hello && zip -q -X ../lambda-hello.zip bootstrap

# Examples whose bundles carry a copy of a function SDK (a bundle holds all its
# handler needs); TestExamplesCarryTheSDK (sdk/) checks the copies are current.
SDK_PY_EXAMPLES := examples/events examples/hello examples/large-output examples/map
SDK_TS_EXAMPLES := examples/fanout

## sdk-vendor: copy the Python and TypeScript SDKs (sdk/) into the examples that use them.
sdk-vendor:
	@for d in $(SDK_PY_EXAMPLES); do rm -rf $$d/bin/cairn_fn && mkdir -p $$d/bin/cairn_fn && cp sdk/python/cairn_fn/*.py $$d/bin/cairn_fn/; done
	@for d in $(SDK_TS_EXAMPLES); do rm -rf $$d/node_modules/@cairnrun/fn && mkdir -p $$d/node_modules/@cairnrun/fn && cp sdk/ts/package.json sdk/ts/index.mjs sdk/ts/index.d.ts $$d/node_modules/@cairnrun/fn/; done

clean:
	rm -rf bin test-output
