// Package envoyemu is an Envoy-faithful proxy-wasm host built on wazero: it
// runs a compiled Go (wasip1, c-shared) proxy-wasm module the way Envoy
// 1.33+ does, so pdroute's features are tested on the real binary without an
// Envoy on the machine, and `make dev` can run the stack on loopback.
//
// It owns:
//   - the config: a subset of Envoy's v3 bootstrap YAML (listeners with one
//     HTTP connection manager, the wasm filter and the router; STATIC and
//     ORIGINAL_DST clusters; admin), validated with field-path errors
//     (ParseConfig, LoadConfig);
//   - the VMs: Envoy's load checks, WASI stub profiles (Envoy 1.33–1.38 and
//     ≥ 1.39), start sequence (base VM, canary, one VM per worker),
//     restricted callbacks, every env.proxy_* host function of ABI 0.2.1 with
//     Envoy's semantics, failure policies;
//   - the data path: an HTTP/1.1 listener whose streams follow Envoy's filter
//     manager for the chain [wasm filter, router], upstreams over loopback,
//     proxy_http_call, an admin listener with /stats (Host, Start);
//   - a VM-level Driver for unit tests in the style of proxytest.
//
// The shared/ENVOY_HOST.md checklist and the sources in
// shared/reference/envoy-wasm-notes.md are the specification; README.md lists
// what is not emulated. It imports wazero, the SDK's types and
// filter/abi/abispec (ABI tables); it must not import filter/abi or any
// plugin code: the host only ever sees a .wasm file.
package envoyemu
