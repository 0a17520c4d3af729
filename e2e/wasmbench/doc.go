// Package wasmbench measures pure packages inside the compiled wasm, run by
// envoyemu's VM driver exactly as Envoy runs the filter (Go 1.24 wasip1,
// strict WASI, wazero compiler). It has benchmarks only; run them with
// `go test -run '^$' -bench . ./e2e/wasmbench`.
package wasmbench
