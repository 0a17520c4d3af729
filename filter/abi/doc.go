// Package abi is pdroute's proxy-wasm ABI v0.2.1 binding for the standard Go
// compiler (Go 1.24, GOOS=wasip1 GOARCH=wasm -buildmode=c-shared).
//
// Its exported functions have the names and signatures of the tetratelabs
// SDK's proxywasm package, so filter code reads like SDK code, plus the few
// the SDK lacks (CloseHttpRequest/Response, GetStatus, GetLogLevel) and
// those that spare the hot path allocations and host calls: the header
// visitors (Visit*Headers: a map in one host call, read in place),
// Get*BodyInto (the host writes into a buffer the caller keeps) and
// Get/SetSharedDataUnder (keys joined without a string per access). The
// contexts are the SDK's types.VMContext / PluginContext / HttpContext.
//
// Two builds share this file set's API and its panic recovery:
//   - wasip1: //go:wasmimport env proxy_* host calls, //go:wasmexport
//     proxy_on_* callbacks, an allocator that keeps host-filled buffers
//     reachable (or, for a read armed with a target, hands out the
//     target's room: a kept buffer, or the VM's scratch buffer for
//     transient reads), and the context table (VM → plugin roots → HTTP
//     streams, http-call tokens → calling context).
//   - everything else: the same functions delegate to the SDK's proxywasm
//     package, so filter code runs unchanged under the SDK's proxytest host.
//
// Every user callback runs behind a recovery wrapper (Guard) written once in
// plain Go, so a panic behaves the same under proxytest and in Envoy: the
// affected stream gets a 500 OpenAI-style error (or is reset if its response
// already started) and the VM keeps serving other requests.
//
// Entry point: call SetVMContext from the main package's init(). It makes no
// host call, as Envoy traps any host call other than logging during init.
//
// Imports: the standard library, the SDK's types package, abispec, and the
// SDK's proxywasm package in non-wasip1 files only.
package abi
