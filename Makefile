# pdroute — see README.md. Every target uses the pinned Go toolchain.
export GOTOOLCHAIN := go1.24.11
GO       ?= go
BUILD    := build
WASM     := $(BUILD)/pdroute.wasm
FUZZTIME ?= 2s
# Native commands built into build/.
CMDS := ./hostcalls/cmd/kvbridge ./hostcalls/cmd/kvbridge-load ./e2e/envoyemu/cmd/envoyemu \
        ./e2e/mocks/cmd/mockengine ./e2e/cmd/pdroute-dev ./filter/cmd/pdroute-config \
        ./e2e/envoy/oci/cmd/wasm-oci ./tokenest/cmd/tokest

.PHONY: all build wasm cmds test test-start unit race fuzz lint bench sim demo dev e2e-envoy oci soak clean help

all: build

help: ## list the targets
	@grep -E '^[a-z0-9-]+:.*## ' $(MAKEFILE_LIST) | sed 's/:.*## /\t/' | expand -t 14

build: wasm cmds ## the wasm module (build/pdroute.wasm) and every native command

wasm: ## build/pdroute.wasm with Go 1.24.11 (GOOS=wasip1 -buildmode=c-shared)
	@mkdir -p $(BUILD)
	GOOS=wasip1 GOARCH=wasm $(GO) build -buildmode=c-shared -trimpath -o $(WASM) ./filter
	@ls -l $(WASM) | awk '{print "built", $$NF, $$5, "bytes"}'

cmds:
	@mkdir -p $(BUILD)
	$(GO) build -trimpath -o $(BUILD)/ $(CMDS)

lint: ## gofmt, go vet (native and wasm), no assembly
	@out=$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go')); \
	  if [ -n "$$out" ]; then echo "gofmt would change:"; echo "$$out"; exit 1; fi
	$(GO) vet ./...
	GOOS=wasip1 GOARCH=wasm $(GO) vet ./filter/... ./tokenest ./lb
	@out=$$(git ls-files '*.s' '*.S' 2>/dev/null); \
	  if [ -n "$$out" ]; then echo "assembly is not allowed (RATIONALE.md, one pure-Go estimator):"; echo "$$out"; exit 1; fi
	@# e2e/envoy/apicheck is a module of its own, one go.mod per Envoy API version, each on its toolchain
	cd e2e/envoy/apicheck && for m in go.mod envoy-1.35.mod; do \
	  GOTOOLCHAIN=$$(awk '$$1 == "toolchain" {print $$2}' $$m) $(GO) vet -modfile=$$m . || exit 1; done

test: test-start lint build unit race fuzz e2e-envoy ## everything CI runs (README's test command, about 6-10 minutes); says SKIPPED for real Envoy when there is none

test-start:
	@echo "make test: lint, build, unit and e2e scenarios, race, fuzz, real Envoy if present; about 6-10 minutes on 2 cores"

unit: ## unit, dual native/wasm and e2e scenario tests
	$(GO) test -count=1 ./...

race: ## the native concurrent code under the race detector
	$(GO) test -count=1 -race ./lb/... ./hostcalls/... ./e2e/mocks/... ./e2e/engine/... ./e2e/envoyemu/...
	$(GO) test -count=1 -race -run Cache ./tokenest/
	$(GO) test -count=1 -race -short ./e2e/sim/...

# The routing simulator (docs/SIMULATOR.md): TRACE=my.jsonl runs a trace instead of the
# shipped workloads, CONFIGS="a.json b.json" compares plugin configurations instead of the
# shipped matrix, SIMFLAGS passes more flags (pdroute-sim -h).
.PHONY: sim
sim: ## routing simulator: shipped workloads (or TRACE=…, CONFIGS=…) → build/sim/ (table, JSON, plots)
	$(GO) run ./e2e/sim/cmd/pdroute-sim -out $(BUILD)/sim $(if $(TRACE),-trace $(TRACE)) $(foreach c,$(CONFIGS),-config $(c)) $(SIMFLAGS)

# The cache-aware routing studies of docs/ROUTING.md ("Cache-aware routing"): aggregated
# strategies on tenants, agentic, rag and mix, then whole-prompt against uncached thresholds.
.PHONY: sim-validate
sim-validate: ## replay a mixed trace through the dev stack in real time and compare with the simulator (idle machine, ~20 s)
	PDROUTE_SIM_VALIDATE=1 $(GO) test -count=1 -run TestReplayThroughStackAgrees -v ./e2e/sim/

.PHONY: sim-cache
sim-cache: ## cache-aware routing studies (2000 requests per load) → build/sim-cache/, build/sim-uncached/
	$(GO) run ./e2e/sim/cmd/pdroute-sim -study cache -workloads tenants,agentic,rag,mix -requests 2000 -out $(BUILD)/sim-cache
	$(GO) run ./e2e/sim/cmd/pdroute-sim -study uncached -workloads mix,agentic -requests 2000 -out $(BUILD)/sim-uncached

fuzz: ## every Fuzz target for FUZZTIME (default 2s) each
	@./.ci/fuzz-all $(FUZZTIME)

bench: build ## every benchmark area (~5 min; output in build/bench/); figures go to BENCHMARKS.md
	./.ci/bench $(BENCH_AREAS)

demo: build ## start the stack on loopback, send three requests, print what happened
	$(BUILD)/pdroute-dev -demo -module $(WASM)

dev: build ## run the stack on loopback until interrupted (PDROUTE_DEV_MODE, PDROUTE_DEV_DISCOVERY=file, PDROUTE_DEV_ADDR=127.0.0.1:10000, PDROUTE_DEV_ADMIN_PORT=9901, PDROUTE_DEV_ENGINE_PORT=8100 (to 8103), PDROUTE_DEV_KVBRIDGE_PORT=7500 (and 7501); 0 = a free port)
	$(BUILD)/pdroute-dev -module $(WASM)

e2e-envoy: build ## play the scenario suite against a real envoy (skips without one)
	./e2e/envoy/run-e2e-envoy

SOAK_DURATION ?= 10m
SOAK_RATE     ?= 200
SOAK_MODES    ?=
soak: build ## bounded soak, not in make test: SOAK_DURATION (10m) at SOAK_RATE (200) req/s over nixl, lmcache, sglang (or SOAK_MODES=sglang,...); fails on unbounded growth
	PDROUTE_SOAK_DURATION=$(SOAK_DURATION) PDROUTE_SOAK_RATE=$(SOAK_RATE) PDROUTE_SOAK_MODES=$(SOAK_MODES) PDROUTE_E2E_WASM=$(CURDIR)/$(WASM) \
	  PDROUTE_SOAK_KVBRIDGE=$(CURDIR)/$(BUILD)/kvbridge \
	  $(GO) test -count=1 -timeout 0 -run '^TestSoak$$' -v ./e2e/scenarios/

oci: wasm ## OCI image layout of the plugin in build/oci (+ build/pdroute-oci.tar)
	$(GO) run ./e2e/envoy/oci/cmd/wasm-oci -wasm $(WASM) -out $(BUILD)/oci -tar $(BUILD)/pdroute-oci.tar

clean:
	rm -rf $(BUILD)
