// Package stack brings up a whole pdroute deployment on loopback for the
// scenario suite, the benchmarks and `make dev`: mock engines (e2e/mocks)
// in this process, kvbridge in this process (lmcache mode), and a proxy
// running the compiled filter — the Envoy emulator (e2e/envoyemu, the
// default) or a real envoy binary — loaded from one Envoy bootstrap that
// Bootstrap.Render generates. The same generator writes the checked-in
// e2e/envoy/envoy.yaml, so the configs of tests, dev and real Envoy cannot
// drift.
//
// Everything a scenario observes goes through HTTP — the listener, the
// mocks' /mock/ API, the admin /stats and the plugin's debug_path — so one
// scenario runs unchanged on both proxies.
//
// It is native test tooling: it may import anything of the module except
// the wasm entry packages, and nothing in the filter may import it.
package stack
