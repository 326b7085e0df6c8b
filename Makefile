# toolgate: make demo runs the example backends behind toolgate; make test
# runs every check. Both work on a fresh Debian machine with Go installed.

GO        ?= go
BIN       := bin/toolgate
VERSION   ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
LDFLAGS   := -s -w -X main.version=$(VERSION)
FUZZTIME  ?= 10s
export TOOLGATE_REQUIRE_REDIS := 1
export TOOLGATE_REQUIRE_PROMETHEUS := 1
export TOOLGATE_REQUIRE_NODE := 1

.PHONY: all build demo test deps fmt-check vet staticcheck unit fuzz-short fuzz soak check tidy-check bench bench-load clean mcp-node

all: build

build:
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags '$(LDFLAGS)' -o $(BIN) ./cmd/toolgate

demo: build
	./$(BIN) demo

# test runs everything a submission must pass.
test: deps fmt-check tidy-check vet staticcheck check mcp-node unit fuzz-short

deps:
	./scripts/deps.sh

# mcp-node installs the MCP clients the tests run (test/mcp: the official
# TypeScript SDK and conformance suite) with npm ci from the lock file; it
# does nothing while node_modules matches the lock.
mcp-node:
	bash test/mcp/ensure-deps.sh

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
	$(GO) test -race -count=1 -timeout 12m ./...

fuzz-short:
	FUZZTIME=$(FUZZTIME) ./scripts/fuzz.sh

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

# check validates every example policy, as CI or a pre-commit hook would.
check: build
	@for f in examples/*.yaml; do ./$(BIN) check -config $$f || exit 1; done

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

clean:
	rm -rf bin
