# toolgate: make demo runs the example backends behind toolgate; make test
# runs every check. Both work on a fresh Debian machine with Go installed.
#
# Three test tiers (docs/development.md says what each proves):
#   make quick  gofmt, go vet and go test -short ./... without the race
#               detector: no external server (Redis, Prometheus, Node),
#               no binary built, no timing test; about two minutes on two
#               cores. Run it while you work.
#   make test   the gate, which .ci/run calls: tracked binaries, gofmt,
#               go mod tidy, go vet, staticcheck, every example policy,
#               go test -race ./... with the real servers, and every fuzz
#               target for FUZZTIME, two at a time.
#   make full   make test, then every fuzz target for FULL_FUZZTIME with
#               the targets side by side, the fault-injection soak (make
#               soak) and a bench smoke (every Go benchmark once, the bench
#               tools built).

GO        ?= go
# bin/toolgate is the sidecar; bin/toolgate-kube holds the Kubernetes tools
# (inject, webhook), kept out of the sidecar. toolgate runs toolgate-kube
# from its own directory for `toolgate inject` and `toolgate webhook`.
BIN       := bin/toolgate
# grpcnotrace leaves gRPC's golang.org/x/net/trace out of the binaries:
# toolgate never serves its pages, and their html/template would switch
# off the linker's pruning of unused methods, about 12 MB (the console's
# pages use internal/htmltemplate; TestSidecarFootprint builds
# with these tags). deploy/Dockerfile builds with the same tags and flags.
GOTAGS    := grpcnotrace
# bash, for pipefail in the recipes that keep a log for test's summary.
SHELL     := /bin/bash
VERSION   ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
LDFLAGS   := -s -w -X main.version=$(VERSION)
FUZZTIME  ?= 10s
# The gate fails, rather than skips, a test whose server is missing
# (scripts/deps.sh installs them); make quick starts none and unsets these.
export TOOLGATE_REQUIRE_REDIS := 1
export TOOLGATE_REQUIRE_PROMETHEUS := 1
export TOOLGATE_REQUIRE_NODE := 1
export TOOLGATE_REQUIRE_CHROMIUM := 1
REQUIRE_UNSET := -u TOOLGATE_REQUIRE_REDIS -u TOOLGATE_REQUIRE_PROMETHEUS -u TOOLGATE_REQUIRE_NODE -u TOOLGATE_REQUIRE_CHROMIUM

.PHONY: all build demo quick quick-unit test full e2e-kube e2e-apis deps binaries-check bench-tools bench-smoke fmt-check vet staticcheck unit fuzz-short fuzz fuzz-full soak check tidy-check bench bench-load clean mcp-node

all: build

build:
	CGO_ENABLED=0 $(GO) build -trimpath -tags '$(GOTAGS)' -ldflags '$(LDFLAGS)' -o bin/ ./cmd/toolgate ./cmd/toolgate-kube

# DEMO_FLAGS passes flags to the demo: make demo DEMO_FLAGS='-listen
# 127.0.0.1:18080 -admin 127.0.0.1:0 -transparent' (port 0 picks a free
# port; the demo prints the ones it uses).
DEMO_FLAGS ?=
demo: build
	./$(BIN) demo $(DEMO_FLAGS)

TEST_START := $(shell date +%s)

# quick is the tier to run while working: it needs nothing but Go, and
# ends with one line saying what ran and how long it took.
quick: fmt-check vet quick-unit
	@secs=$$(( $$(date +%s) - $(TEST_START) )); \
	echo "make quick: passed in $$((secs / 60))m$$((secs % 60))s: gofmt, go vet;" \
	  "$$(grep -c '^ok ' bin/quick.log) packages tested with -short, no race detector, no external servers"

quick-unit:
	@mkdir -p bin
	set -o pipefail; env $(REQUIRE_UNSET) $(GO) test -short -count=1 -timeout 5m ./... 2>&1 | tee bin/quick.log

# test runs everything a submission must pass, and ends with one line
# saying what ran: unit and fuzz-short keep their output in bin/ for it.
test: deps binaries-check fmt-check tidy-check vet staticcheck check mcp-node unit fuzz-short
	@secs=$$(( $$(date +%s) - $(TEST_START) )); \
	echo "make test: passed in $$((secs / 60))m$$((secs % 60))s:" \
	  "no tracked binaries; gofmt, go mod tidy, go vet, staticcheck;" \
	  "$$(ls examples/*.yaml | wc -l) example policies checked;" \
	  "$$(grep -c '^ok ' bin/unit.log) packages tested with -race ($$(grep -c '^? ' bin/unit.log) without tests);" \
	  "$$(grep -c '^fuzz: .* ($(FUZZTIME))$$' bin/fuzz.log) fuzz targets for $(FUZZTIME) each, $(FUZZJOBS) at a time"

# full is the gate and then what takes too long for it: longer fuzzing,
# the soak, a bench smoke.
FULL_FUZZTIME ?= 1m
full: test fuzz-full soak bench-smoke
	@secs=$$(( $$(date +%s) - $(TEST_START) )); \
	echo "make full: passed in $$((secs / 60))m$$((secs % 60))s: make test;" \
	  "every fuzz target for $(FULL_FUZZTIME); the soak ($(SOAKTIME) memory, $(SOAKREDIS) Redis, twice more through a faulty Redis); every Go benchmark once"

# e2e-kube runs toolgate's Kubernetes tools against a real kube-apiserver
# and etcd on loopback (test/kube): the injected manifests under
# server-side strict field validation, docs/kubernetes.md's kubectl
# commands, the webhook behind the API server. test/kube/build.sh builds
# kube-apiserver, kubectl and etcd through the Go module proxy into
# ~/.cache/toolgate once (about 15 minutes on two cores), and does
# nothing when they are there. Needs Go, bash and openssl (the docs'
# certificate steps). Not part of make test.
e2e-kube:
	@mkdir -p bin; bin=$$(bash test/kube/build.sh) && \
	  TOOLGATE_KUBE_BIN=$$bin $(GO) test -count=1 -v -timeout 20m -run '^TestKubernetes' ./test/kube/ 2>&1 | tee bin/e2e-kube.log; \
	  status=$${PIPESTATUS[0]}; \
	  secs=$$(( $$(date +%s) - $(TEST_START) )); \
	  echo "make e2e-kube: $$([ $$status = 0 ] && echo passed || echo FAILED) in $$((secs / 60))m$$((secs % 60))s against $$($$bin/kube-apiserver --version) and etcd $$($$bin/etcd --version | sed -n 's/^etcd Version: //p')"; \
	  exit $$status

# e2e-apis runs toolgate in front of real third-party servers (test/apis,
# a module of its own so go.mod does not grow): Mailpit, PocketBase and
# Gotify built through the Go module proxy into bin/apis (once: a second
# run builds nothing), json-server with json-server-auth and MailDev
# installed with npm ci from test/apis/package-lock.json. Each server runs
# on a free port of 127.0.0.1, seeded through its own API. Not part of
# test: make test covers the same cases against fakes (test/apifakes).
e2e-apis: build
	bash test/apis/build.sh
	bash test/apis/ensure-deps.sh
	cd test/apis && TOOLGATE_BIN=$(CURDIR)/bin APIS_BIN=$(CURDIR)/bin/apis $(GO) test -count=1 -timeout 15m -v ./... 2>&1 | tee $(CURDIR)/bin/e2e-apis.log | grep -E '^ *(--- |PASS|FAIL|ok )'; exit $${PIPESTATUS[0]}

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

# Fuzz targets run FUZZJOBS at a time with one worker each
# (scripts/fuzz.sh): on two cores, twice as fast as one after another.
FUZZJOBS ?= 2
fuzz-short:
	@mkdir -p bin
	set -o pipefail; FUZZTIME=$(FUZZTIME) FUZZJOBS=$(FUZZJOBS) ./scripts/fuzz.sh 2>&1 | tee bin/fuzz.log

fuzz:
	FUZZTIME=3m FUZZJOBS=$(FUZZJOBS) ./scripts/fuzz.sh

# fuzz-full runs a target per core, side by side.
fuzz-full:
	FUZZTIME=$(FULL_FUZZTIME) FUZZJOBS=$$(nproc) ./scripts/fuzz.sh

# soak runs the fault-injection soak (test/soak) for SOAKTIME against the
# memory store, then SOAKREDIS against Redis, and SOAKREDIS twice more
# against a Redis behind a proxy that loses and delays replies; make test
# runs 20s and 5s of it, make quick 3s against memory. It prints one
# summary line per run.
SOAKTIME  ?= 10m
SOAKREDIS ?= 2m
soak:
	$(GO) test -race -count=1 -timeout 60m -run '^TestSoak(RedisFaults|RedisFaultsActOnce)?$$' -v ./test/soak -soak.duration=$(SOAKTIME) -soak.redis-duration=$(SOAKREDIS)

# check validates every example policy, as CI or a pre-commit hook would;
# one line per file. examples/zoo.env gives zoo.yaml's ${VAR}s.
check: build
	./$(BIN) check -env-file examples/zoo.env examples/*.yaml

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

# bench-smoke runs every Go benchmark once, so none rots, and builds the
# bench tools; the load benchmark itself (bench/run.sh) needs nginx and wrk
# (bench/deps.sh installs them) and a quiet machine.
bench-smoke: bench-tools
	$(GO) test -run '^$$' -bench . -benchtime 1x ./...

# bench-tools builds the bench's own programs (the bundled backend, the
# tuned httputil.ReverseProxy, the in-flight load generator) into
# bin/bench, where bench/run.sh builds them too: never into the
# repository root, where a plain go build would put them.
bench-tools:
	CGO_ENABLED=0 $(GO) build -trimpath -o bin/bench/ ./bench/backend ./bench/reverseproxy ./bench/inflight

clean:
	rm -rf bin
