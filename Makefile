# pdroute — see README.md. Every target uses the pinned Go toolchain.
export GOTOOLCHAIN := go1.24.11
GO       ?= go
BUILD    := build
WASM     := $(BUILD)/pdroute.wasm
FUZZTIME ?= 5s

.PHONY: all build wasm test unit race fuzz lint bench demo dev clean

all: build

## build: the wasm module (build/pdroute.wasm) and the native binaries
build: wasm
	$(GO) build -o $(BUILD)/ ./e2e/envoyemu/cmd/...

wasm:
	@mkdir -p $(BUILD)
	GOOS=wasip1 GOARCH=wasm $(GO) build -buildmode=c-shared -trimpath -o $(WASM) ./filter

## lint: gofmt and go vet (native and wasm)
lint:
	@out=$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go')); \
	  if [ -n "$$out" ]; then echo "gofmt would change:"; echo "$$out"; exit 1; fi
	$(GO) vet ./...
	GOOS=wasip1 GOARCH=wasm $(GO) vet ./filter/... ./tokenest/... ./lb/...

## test: everything CI runs
test: lint build unit race fuzz

unit:
	$(GO) test -count=1 ./...

race:
	$(GO) test -count=1 -race ./lb/... ./hostcalls/...

fuzz:
	@./.ci/fuzz-all $(FUZZTIME)

## bench: benchmarks; figures go to BENCHMARKS.md
bench: build
	$(GO) test -run '^$$' -bench . -benchmem ./...

demo: build

dev: build

clean:
	rm -rf $(BUILD)
