# pdroute — see README.md. Every target uses the pinned Go toolchain.
export GOTOOLCHAIN := go1.24.11
GO       ?= go
BUILD    := build
WASM     := $(BUILD)/pdroute.wasm
FUZZTIME ?= 4s
# The profile for Go's profile-guided optimisation (make pgo), a profile of the token
# estimator. A plain go build ./filter applies it too (-pgo=auto: the main package's
# default.pgo); here the wasm module, tokest (PGO_CMDS), one of make unit's tokenest
# runs and the benchmarks of tokenest take it. The other commands do not run the
# estimator and are built without it.
PGO      := $(CURDIR)/filter/default.pgo
# Native commands built into build/.
CMDS := ./hostcalls/cmd/kvbridge ./hostcalls/cmd/kvbridge-load ./e2e/envoyemu/cmd/envoyemu \
        ./e2e/mocks/cmd/mockengine ./e2e/cmd/pdroute-dev ./filter/cmd/pdroute-config \
        ./e2e/envoy/oci/cmd/wasm-oci
PGO_CMDS := ./tokenest/cmd/tokest

.PHONY: all build wasm cmds test unit race fuzz lint bench pgo demo dev e2e-envoy oci soak clean help

all: build

help: ## list the targets
	@grep -E '^[a-z0-9-]+:.*## ' $(MAKEFILE_LIST) | sed 's/:.*## /\t/' | expand -t 14

build: wasm cmds ## the wasm module (build/pdroute.wasm) and every native command

wasm: ## build/pdroute.wasm with Go 1.24.11 (GOOS=wasip1 -buildmode=c-shared, filter/default.pgo)
	@mkdir -p $(BUILD)
	GOOS=wasip1 GOARCH=wasm $(GO) build -buildmode=c-shared -trimpath -pgo=$(PGO) -o $(WASM) ./filter
	@ls -l $(WASM) | awk '{print "built", $$NF, $$5, "bytes"}'

cmds:
	@mkdir -p $(BUILD)
	$(GO) build -trimpath -o $(BUILD)/ $(CMDS)
	$(GO) build -trimpath -pgo=$(PGO) -o $(BUILD)/ $(PGO_CMDS)

lint: ## gofmt, go vet (native and wasm), no local of tokenest moved to the heap in the profiled builds
	@out=$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go')); \
	  if [ -n "$$out" ]; then echo "gofmt would change:"; echo "$$out"; exit 1; fi
	$(GO) vet ./...
	GOOS=wasip1 GOARCH=wasm $(GO) vet ./filter/... ./tokenest ./lb
	@# e2e/envoy/apicheck is a module of its own, one go.mod per Envoy API version, each on its toolchain
	cd e2e/envoy/apicheck && for m in go.mod envoy-1.35.mod; do \
	  GOTOOLCHAIN=$$(awk '$$1 == "toolchain" {print $$2}' $$m) $(GO) vet -modfile=$$m . || exit 1; done
	@# the profile's inlining can move a local to the heap where the tests' builds do not
	@# (RATIONALE.md, profile-guided optimisation): the estimator allocates on every request then
	@for goos in linux wasip1; do \
	  goarch=amd64; [ $$goos = wasip1 ] && goarch=wasm; \
	  out=$$(GOOS=$$goos GOARCH=$$goarch $(GO) build -pgo=$(PGO) -gcflags='github.com/pdroute/pdroute/tokenest/...=-m' ./tokenest/ 2>&1 | grep 'moved to heap'); \
	  if [ -n "$$out" ]; then echo "tokenest, $$goos/$$goarch with the profile: a local moved to the heap:"; echo "$$out"; exit 1; fi; \
	done; echo "tokenest: no local moved to the heap (linux/amd64 and wasip1/wasm, with the profile)"

test: lint build unit race fuzz e2e-envoy ## everything CI runs (README's test command); says SKIPPED for real Envoy when there is none

unit: ## unit, dual native/wasm and e2e scenario tests; tokenest again without its amd64 kernels, and with AVX2 ones only and the profile
	$(GO) test -count=1 ./...
	$(GO) test -count=1 -tags purego ./tokenest/...
	$(GO) test -count=1 -tags noavx512 -pgo=$(PGO) ./tokenest/...

race: ## the native concurrent code under the race detector
	$(GO) test -count=1 -race ./lb/... ./hostcalls/... ./e2e/mocks/... ./e2e/envoyemu/...
	$(GO) test -count=1 -race -run Cache ./tokenest/

fuzz: ## every Fuzz target for FUZZTIME (default 4s) each
	@./.ci/fuzz-all $(FUZZTIME)

bench: build ## every benchmark area (~5 min; output in build/bench/); figures go to BENCHMARKS.md
	./.ci/bench $(BENCH_AREAS)

pgo: ## regenerate filter/default.pgo from CPU profiles of tokenest's benchmarks (~2 min)
	./.ci/pgo

demo: build ## start the stack on loopback, send three requests, print what happened
	$(BUILD)/pdroute-dev -demo

dev: build ## run the stack on loopback until interrupted (PDROUTE_DEV_MODE, PDROUTE_DEV_ADDR)
	$(BUILD)/pdroute-dev

e2e-envoy: build ## play the scenario suite against a real envoy (skips without one)
	./e2e/envoy/run-e2e-envoy

SOAK_DURATION ?= 10m
SOAK_RATE     ?= 200
soak: build ## bounded soak, not in make test: SOAK_DURATION (10m) at SOAK_RATE (200) req/s over nixl, lmcache, sglang; fails on unbounded growth
	PDROUTE_SOAK_DURATION=$(SOAK_DURATION) PDROUTE_SOAK_RATE=$(SOAK_RATE) PDROUTE_E2E_WASM=$(CURDIR)/$(WASM) \
	  PDROUTE_SOAK_KVBRIDGE=$(CURDIR)/$(BUILD)/kvbridge \
	  $(GO) test -count=1 -timeout 0 -run '^TestSoak$$' -v ./e2e/scenarios/

oci: wasm ## OCI image layout of the plugin in build/oci (+ build/pdroute-oci.tar)
	$(GO) run ./e2e/envoy/oci/cmd/wasm-oci -wasm $(WASM) -out $(BUILD)/oci -tar $(BUILD)/pdroute-oci.tar

clean:
	rm -rf $(BUILD)
