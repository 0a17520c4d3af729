// Package scenarios is pdroute's end-to-end suite: each scenario brings up
// a stack (e2e/stack: mock engines, the compiled filter in a proxy, kvbridge)
// and checks behaviour only through HTTP — the listener, the mocks' /mock/
// API, admin /stats and the plugin's debug_path — so the same tests run on
// the Envoy emulator (`go test ./e2e/scenarios`) and on a real Envoy
// (PDROUTE_E2E_PROXY=envoy, see e2e/envoy/run-e2e-envoy). With
// PDROUTE_E2E_PROXY=envoy a missing envoy binary fails the suite.
// PDROUTE_E2E_WASM names a prebuilt module to use instead of building
// stack.PluginPackage.
//
// Every scenario runs twice, as subtests body_way (the wasm filter sets
// allow_on_headers_stop_iteration) and headers_way (it does not, as Istio's
// WasmPlugin: the emulator imitates Envoy 1.34), e.g. `go test
// ./e2e/scenarios -run '/headers_way'`. A scenario that does not apply to one
// way skips there and says why.
//
// The package also holds the end-to-end benchmarks (`make bench`).
// Everything is in _test files; this file only documents the package.
package scenarios
