# toolgate: make demo runs the example backends behind toolgate; make test
# runs every check. Both work on a fresh Debian machine with Go installed.

GO        ?= go
# bin/toolgate is the sidecar; bin/toolgate-kube holds the Kubernetes tools
# (inject, webhook), kept out of the sidecar. toolgate runs toolgate-kube
# from its own directory for `toolgate inject` and `toolgate webhook`.
BIN       := bin/toolgate
# grpcnotrace leaves gRPC's golang.org/x/net/trace (and html/template) out
# of the binaries: toolgate never serves its pages. deploy/Dockerfile builds
# with the same tags and flags.
GOTAGS    := grpcnotrace
# bash, for pipefail in the recipes that keep a log for test's summary.
SHELL     := /bin/bash
VERSION   ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
LDFLAGS   := -s -w -X main.version=$(VERSION)
FUZZTIME  ?= 10s
export TOOLGATE_REQUIRE_REDIS := 1
export TOOLGATE_REQUIRE_PROMETHEUS := 1
export TOOLGATE_REQUIRE_NODE := 1

.PHONY: all build demo test deps binaries-check bench-tools fmt-check vet staticcheck unit fuzz-short fuzz soak check tidy-check bench bench-load clean mcp-node

all: build

build:
	CGO_ENABLED=0 $(GO) build -trimpath -tags '$(GOTAGS)' -ldflags '$(LDFLAGS)' -o bin/ ./cmd/toolgate ./cmd/toolgate-kube

# DEMO_FLAGS passes flags to the demo: make demo DEMO_FLAGS='-listen
# 127.0.0.1:18080 -admin 127.0.0.1:0 -transparent' (port 0 picks a free
# port; the demo prints the ones it uses).
DEMO_FLAGS ?=
demo: build
	./$(BIN) demo $(DEMO_FLAGS)

# test runs everything a submission must pass, and ends with one line
# saying what ran: unit and fuzz-short keep their output in bin/ for it.
TEST_START := $(shell date +%s)
test: deps binaries-check fmt-check tidy-check vet staticcheck check mcp-node unit fuzz-short
	@secs=$$(( $$(date +%s) - $(TEST_START) )); \
	echo "make test: passed in $$((secs / 60))m$$((secs % 60))s:" \
	  "gofmt, go mod tidy, go vet, staticcheck;" \
	  "$$(ls examples/*.yaml | wc -l) example policies checked;" \
	  "$$(grep -c '^ok ' bin/unit.log) packages tested with -race ($$(grep -c '^? ' bin/unit.log) without tests);" \
	  "$$(grep -c '^fuzz: .* ($(FUZZTIME))$$' bin/fuzz.log) fuzz targets for $(FUZZTIME) each"

deps:
	./scripts/deps.sh

# mcp-node installs the MCP clients the tests run (test/mcp: the official
# TypeScript SDK clients 1.11, 1.17, 1.32 and 2.x, LangChain's MCP adapters
# and the conformance suite) with npm ci from the lock file, from npm's
# cache first; it does nothing while node_modules matches the lock.
mcp-node:
	bash test/mcp/ensure-deps.sh

# binaries-check fails when git tracks an ELF, Mach-O or PE file: build
# output belongs in bin/.
binaries-check:
	./scripts/check-binaries.sh

fmt-check:
	@out=$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go')); \
	if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi

tidy-check:
	$(GO) mod tidy -diff

vet:
	$(GO) vet ./...

staticcheck:
	$(GO) tool staticcheck ./...

unit:
	@mkdir -p bin
	set -o pipefail; $(GO) test -race -count=1 -timeout 12m ./... 2>&1 | tee bin/unit.log

fuzz-short:
	@mkdir -p bin
	set -o pipefail; FUZZTIME=$(FUZZTIME) ./scripts/fuzz.sh 2>&1 | tee bin/fuzz.log

fuzz:
	FUZZTIME=3m ./scripts/fuzz.sh

# soak runs the fault-injection soak (test/soak) for SOAKTIME against the
# memory store, then SOAKREDIS against Redis, and SOAKREDIS twice more
# against a Redis behind a proxy that loses and delays replies; make test
# runs 20s and 5s of it. It prints one summary line per run.
SOAKTIME  ?= 10m
SOAKREDIS ?= 2m
soak:
	$(GO) test -race -count=1 -timeout 60m -run '^TestSoak(RedisFaults|RedisFaultsActOnce)?$$' -v ./test/soak -soak.duration=$(SOAKTIME) -soak.redis-duration=$(SOAKREDIS)

# check validates every example policy, as CI or a pre-commit hook would;
# one line per file. examples/zoo.env gives zoo.yaml's ${VAR}s.
check: build
	env $$(grep -v '^#' examples/zoo.env) ./$(BIN) check examples/*.yaml

# bench runs the Go benchmarks (the core pipeline, the stores) and then the
# side-by-side load benchmark, bench/run.sh (nginx, httputil.ReverseProxy and
# toolgate under wrk; settings in the script's header). bench-load runs only
# the script. Neither is part of test: benchmarks are never timed assertions.
BENCHTIME  ?= 1s
BENCHCOUNT ?= 1
bench: deps
	$(GO) test -run '^$$' -bench . -benchmem -benchtime $(BENCHTIME) -count $(BENCHCOUNT) ./...
	bash bench/run.sh

bench-load:
	bash bench/run.sh

# bench-tools builds the bench's own programs (the bundled backend, the
# tuned httputil.ReverseProxy, the in-flight load generator) into
# bin/bench, where bench/run.sh builds them too: never into the
# repository root, where a plain go build would put them.
bench-tools:
	CGO_ENABLED=0 $(GO) build -trimpath -o bin/bench/ ./bench/backend ./bench/reverseproxy ./bench/inflight

clean:
	rm -rf bin
