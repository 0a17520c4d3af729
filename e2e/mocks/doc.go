// Package mocks runs mock inference engines that speak the real wire protocols of vLLM
// with the NixlConnector, vLLM with LMCache's NIXL push backend, and SGLang's bootstrap
// disaggregation, so pdroute's scenarios can run against them in-process, in the Envoy
// emulator and behind a real Envoy.
//
// Each [Server] serves the OpenAI-compatible API (/v1/completions, /v1/chat/completions),
// /tokenize, /metrics with live gauges, /health, SGLang's /generate, and a control and
// introspection API under /mock/ that scenarios drive over HTTP through [Control]. Extra
// loopback listeners carry the engine-to-engine traffic: the NIXL side channel (vLLM
// prefill), the KV receivers on the init and alloc ports (LMCache decode), and the
// bootstrap server (SGLang prefill). LMCache prefillers also push ZeroMQ notifications
// to the router.
//
// Output is deterministic: a toy tokenizer ([Tokenize]) shared by every mock and a
// generator whose next token depends only on the tokens so far, so a disaggregated
// request produces the same text as a direct one and tests can compare bodies.
//
// This package is native Go (it starts goroutines and listeners). It must not be
// imported by the wasm filter or by the pure packages (tokenest, lb, filter/plugin).
package mocks
